"""The example's upstream data: synthetic orders landing daily, and FX reference rates."""

import dagster as dg

from backfill_assets.constants import WRITER_POOL
from backfill_assets.defs.backfillable import partition_dates
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.example import orders as o
from backfill_assets.example.declaration import DAILY
from backfill_assets.lib.warehouse.duckdb_adapter import load_plain_partitions, replace_table


class LandingConfig(dg.Config):
    """How many orders a day the synthetic source produces (deterministic per day)."""

    rows_per_day: int = 2_000


@dg.asset(
    name=o.RAW_ORDERS,
    partitions_def=DAILY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool=WRITER_POOL,
    group_name="sources",
    kinds={"duckdb"},
    description="Orders as they land from the shop each day (synthetic, seeded by the date). "
    "A materialization of a partition means that day's data has landed.",
)
def raw_orders(
    context: dg.AssetExecutionContext, config: LandingConfig, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    start, end = partition_dates(context)
    rows = load_plain_partitions(
        warehouse.adapter(),
        o.RAW_ORDERS,
        o.RAW_ORDER_COLUMNS,
        "order_date",
        o.RAW_ORDERS_SQL,
        start,
        end,
        {"n": config.rows_per_day},
    )
    return dg.MaterializeResult(metadata={"rows": rows})


@dg.asset(
    name=o.FX_RATES,
    pool=WRITER_POOL,
    group_name="sources",
    kinds={"duckdb"},
    description="FX rates to USD per currency, and each country's home currency.",
)
def fx_rates(warehouse: WarehouseResource) -> dg.MaterializeResult:
    wh = warehouse.adapter()
    replace_table(
        wh, o.FX_RATES, [("currency", "VARCHAR"), ("rate_to_usd", "DOUBLE")], o.RATES_TO_USD
    )
    replace_table(
        wh, o.COUNTRY_CURRENCY, [("country", "VARCHAR"), ("currency", "VARCHAR")], o.COUNTRIES
    )
    return dg.MaterializeResult(metadata={"currencies": len(o.RATES_TO_USD)})


land_orders_job = dg.define_asset_job(
    "land_raw_orders_job",
    selection=[o.RAW_ORDERS, o.FX_RATES],
    partitions_def=DAILY,
    description="Simulates the shop's daily drop of orders (what the daily sensor waits for).",
)
