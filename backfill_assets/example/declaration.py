"""The example's one declaration: `orders_daily` is backfillable."""

from __future__ import annotations

import datetime as dt

import dagster as dg

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
from backfill_assets.example import orders as o

# One partitions definition for the whole example; every module imports it from here.
DAILY = dg.DailyPartitionsDefinition(start_date="2025-01-01", timezone="UTC")
# ISO weeks (Monday start) over the same span: Dagster's day_offset=1 is Monday.
WEEKLY = dg.WeeklyPartitionsDefinition(start_date="2024-12-30", day_offset=1, timezone="UTC")

DAILY_JOB = "orders_daily_job"

ORDERS_SPEC = TableSpec(
    name="orders_daily",
    columns=tuple(Column(n, t) for n, t in o.ORDERS_DAILY_COLUMNS),
    partition_column="order_date",
    primary_key=("order_id",),
    source=SourceRef(o.RAW_ORDERS, "order_date"),
)

ORDERS_CRITERIA = Criteria(
    row_count=RowCountCriterion(compare_to=("source", "target"), tolerance_pct=0.0),
    sample=SampleCriterion(
        size=200,
        unchanged_columns=(
            "order_date",
            "ordered_at",
            "customer_id",
            "country",
            "currency",
            "gross_amount",
            "discount_amount",
            "tax_amount",
            "net_amount",
            "status",
            "is_cancelled",
        ),
        changed_columns=(
            ChangedColumn("fx_rate", "fx_rate > 0"),
            ChangedColumn("net_revenue_usd", "net_revenue_usd = round(net_amount * fx_rate, 2)"),
        ),
    ),
    invariants=(
        Invariant("order_id_not_null", "order_id is not null"),
        Invariant("net_amount_non_negative", "net_amount >= 0"),
        Invariant("revenue_non_negative", "net_revenue_usd >= 0"),
        Invariant("known_status", "status in ('placed', 'shipped', 'cancelled', 'refunded')"),
    ),
)

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
