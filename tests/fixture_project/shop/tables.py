"""Two backfillable tables of the shop, declared with the public API alone.

- `events`: a composite primary key, daily partitions in New York time, built by SQL from the
  landed `raw_events`.
- `stores`: built by a Python function that returns a pandas DataFrame.

Each has its own daily job (below, in definitions.py), which carries no tags of the framework.
History was built by a buggy v1 of each build (`*_V1`), which the tests write as "the past".
"""

from __future__ import annotations

import datetime as dt
import threading

import dagster as dg
import pandas as pd

from backfill_assets import (
    BackfillableTable,
    ChangedColumn,
    Column,
    Criteria,
    Invariant,
    RowCountCriterion,
    SampleCriterion,
    SourceRef,
    TableSpec,
)

NEW_YORK = dg.DailyPartitionsDefinition(start_date="2025-01-01", timezone="America/New_York")

RAW_EVENTS = "raw_events"
RAW_EVENT_COLUMNS = [
    ("event_date", "DATE"),
    ("user_id", "BIGINT"),
    ("seq", "INTEGER"),
    ("country", "VARCHAR"),
    ("amount", "DOUBLE"),
]
# One day of raw events, seeded by the day ($day); $n users with 3 events each.
RAW_EVENTS_SQL = """
select $day::date as event_date, (u.i % $n)::bigint as user_id, (s.j)::integer as seq,
       ['US', 'DE', 'JP'][1 + (hash(u.i, $day::date) % 3)::int] as country,
       round(((hash(u.i, s.j, $day::date) % 10000) / 100.0)::double, 2) as amount
from range($n) u(i), range(3) s(j)
"""

_EVENTS_SELECT = """
select event_date, user_id, seq, country, amount, {amount_usd} as amount_usd
from raw_events where event_date >= $start and event_date < $end
"""
EVENTS_SQL = _EVENTS_SELECT.format(amount_usd="round(amount * 1.1, 2)")
EVENTS_SQL_V1 = _EVENTS_SELECT.format(amount_usd="amount")  # the bug: no conversion

EVENTS = BackfillableTable(
    spec=TableSpec(
        name="events",
        columns=(
            Column("event_date", "DATE"),
            Column("user_id", "BIGINT"),
            Column("seq", "INTEGER"),
            Column("country", "VARCHAR"),
            Column("amount", "DOUBLE"),
            Column("amount_usd", "DOUBLE"),
        ),
        partition_column="event_date",
        primary_key=("event_date", "user_id", "seq"),
        source=SourceRef(RAW_EVENTS, "event_date"),
    ),
    partitions_def=NEW_YORK,
    build=EVENTS_SQL,
    daily_job="events_daily",
    daily_expected_start=dt.time(1, 0),
    criteria=Criteria(
        row_count=RowCountCriterion(compare_to=("source", "target")),
        sample=SampleCriterion(
            size=50,
            unchanged_columns=("country", "amount"),
            changed_columns=(ChangedColumn("amount_usd", "amount_usd = round(amount * 1.1, 2)"),),
        ),
        invariants=(Invariant("amount_non_negative", "amount >= 0"),),
    ),
    deps=(RAW_EVENTS,),
    code_version="2",
    group_name="shop",
)

STORES_COLUMNS = ("store_id", "day", "visitors", "revenue")
# Tests hold a daily run of `stores` inside its build to see who else may write meanwhile.
BUILD_GATE = threading.Event()
BUILD_GATE.set()
ENTERED_BUILD = threading.Event()


def _stores(start: dt.date, end: dt.date, price: float) -> pd.DataFrame:
    rows = []
    day = start
    while day < end:
        for store in range(1, 6):
            visitors = (day.toordinal() * 31 + store * 17) % 500 + 20
            rows.append((store, day, visitors, round(visitors * price, 2)))
        day += dt.timedelta(days=1)
    frame = pd.DataFrame(rows, columns=list(STORES_COLUMNS))
    frame["day"] = pd.to_datetime(frame["day"])
    return frame


def build_stores(start: dt.date, end: dt.date) -> pd.DataFrame:
    """Visitors and revenue per store and day (revenue at 2.50 a visitor)."""
    ENTERED_BUILD.set()
    BUILD_GATE.wait(timeout=120)
    return _stores(start, end, 2.5)


def build_stores_v1(start: dt.date, end: dt.date) -> pd.DataFrame:
    """The bug history was built with: 2.00 a visitor."""
    return _stores(start, end, 2.0)


STORES = BackfillableTable(
    spec=TableSpec(
        name="stores",
        columns=(
            Column("store_id", "BIGINT"),
            Column("day", "DATE"),
            Column("visitors", "BIGINT"),
            Column("revenue", "DOUBLE"),
        ),
        partition_column="day",
        primary_key=("store_id", "day"),
    ),
    partitions_def=dg.DailyPartitionsDefinition(start_date="2025-01-01"),
    build=build_stores,
    daily_job="stores_daily",
    daily_expected_start=dt.time(2, 0),
    criteria=Criteria(
        row_count=RowCountCriterion(compare_to=("target",)),
        sample=SampleCriterion(
            size=5,
            unchanged_columns=("visitors",),
            changed_columns=(ChangedColumn("revenue", "revenue = round(visitors * 2.5, 2)"),),
        ),
    ),
    code_version="2",
    group_name="shop",
)
