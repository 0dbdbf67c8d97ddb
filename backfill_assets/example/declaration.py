"""The example's one declaration: `orders_daily` is backfillable.

Its physical description and criteria (`ORDERS_SPEC`, `ORDERS_CRITERIA`) are plain data in
`backfill_assets.example.spec`, re-exported here, so the warehouse-level path imports no Dagster.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from backfill_assets import BackfillableTable
from backfill_assets.example import orders as o
from backfill_assets.example.spec import ORDERS_CRITERIA, ORDERS_SPEC

# One partitions definition for the whole example; every module imports it from here.
DAILY = dg.DailyPartitionsDefinition(start_date="2025-01-01", timezone="UTC")
# ISO weeks (Monday start) over the same span: Dagster's day_offset=1 is Monday.
WEEKLY = dg.WeeklyPartitionsDefinition(start_date="2024-12-30", day_offset=1, timezone="UTC")

DAILY_JOB = "orders_daily_job"

# The idle window of the plan proposed when someone launches a backfill of orders_daily from the
# UI: clear of the daily run at 01:00 UTC and its margins.
BACKFILL_WINDOW = "02:15-00:00"

ORDERS = BackfillableTable(
    spec=ORDERS_SPEC,
    partitions_def=DAILY,
    build=o.ORDERS_DAILY_SQL,
    daily_job=DAILY_JOB,
    # Source data lands shortly after midnight UTC; the sensor starts the daily run then.
    daily_expected_start=dt.time(1, 0),
    criteria=ORDERS_CRITERIA,
    deps=(o.RAW_ORDERS, o.FX_RATES),
    code_version=o.ORDERS_CODE_VERSION,
    group_name="orders",
    backfill_window=BACKFILL_WINDOW,
)
