"""The example table's physical description and correctness criteria: plain data, no Dagster.

Used by `backfill_assets.example.declaration` (which makes the table backfillable) and by
everything that works at the warehouse level only (the bench's warehouse contenders, seeding).
"""

from __future__ import annotations

from backfill_assets.example import orders as o
from backfill_assets.lib.planning.criteria import (
    ChangedColumn,
    Criteria,
    Invariant,
    RowCountCriterion,
    SampleCriterion,
)
from backfill_assets.lib.spec import Column, SourceRef, TableSpec

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
