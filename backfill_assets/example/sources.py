"""The example's upstream data: synthetic orders landing daily, and FX reference rates."""

import dagster as dg

from backfill_assets import WarehouseResource
from backfill_assets.example import orders as o
from backfill_assets.example.declaration import DAILY

LAND_JOB = "land_raw_orders_job"


class LandingConfig(dg.Config):
    """How many orders a day the synthetic source produces (deterministic per day)."""

    rows_per_day: int = 2_000


@dg.asset(
    name=o.RAW_ORDERS,
    partitions_def=DAILY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="sources",
    kinds={"duckdb"},
    description="Orders as they land from the shop each day (synthetic, seeded by the date). "
    "A materialization of a partition means that day's data has landed.",
)
def raw_orders(
    context: dg.AssetExecutionContext, config: LandingConfig, backfill_warehouse: WarehouseResource
) -> dg.MaterializeResult:
    window = context.partition_time_window
    rows = backfill_warehouse.adapter().replace_plain_partitions(  # type: ignore[attr-defined]
        o.RAW_ORDERS,
        o.RAW_ORDER_COLUMNS,
        "order_date",
        o.RAW_ORDERS_SQL,
        window.start.date(),
        window.end.date(),
        {"n": config.rows_per_day},
    )
    return dg.MaterializeResult(metadata={"rows": rows, "dagster/row_count": rows})


@dg.asset(
    name=o.FX_RATES,
    group_name="sources",
    kinds={"duckdb"},
    description="FX rates to USD per currency, and each country's home currency.",
)
def fx_rates(backfill_warehouse: WarehouseResource) -> dg.MaterializeResult:
    wh = backfill_warehouse.adapter()
    wh.replace_reference_table(  # type: ignore[attr-defined]
        o.FX_RATES, [("currency", "VARCHAR"), ("rate_to_usd", "DOUBLE")], o.RATES_TO_USD
    )
    wh.replace_reference_table(  # type: ignore[attr-defined]
        o.COUNTRY_CURRENCY, [("country", "VARCHAR"), ("currency", "VARCHAR")], o.COUNTRIES
    )
    return dg.MaterializeResult(metadata={"currencies": len(o.RATES_TO_USD)})


land_orders_job = dg.define_asset_job(
    LAND_JOB,
    selection=[o.RAW_ORDERS, o.FX_RATES],
    partitions_def=DAILY,
    description="Simulates the shop's daily drop of orders (what the daily sensor waits for).",
)
