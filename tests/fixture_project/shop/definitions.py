"""The shop's code location: its own sources and daily jobs, merged with what backfill_assets
contributes for its tables (two declared in Python, one in YAML under defs/)."""

from pathlib import Path

import dagster as dg

from backfill_assets import WarehouseResource, backfill_definitions
from shop.tables import EVENTS, NEW_YORK, RAW_EVENT_COLUMNS, RAW_EVENTS, RAW_EVENTS_SQL, STORES


@dg.asset(
    name=RAW_EVENTS,
    partitions_def=NEW_YORK,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="shop",
)
def raw_events(context: dg.AssetExecutionContext, backfill_warehouse: WarehouseResource) -> None:
    window = context.partition_time_window
    backfill_warehouse.adapter().replace_plain_partitions(
        RAW_EVENTS,
        RAW_EVENT_COLUMNS,
        "event_date",
        RAW_EVENTS_SQL,
        window.start.date(),
        window.end.date(),
        {"n": 20},
    )


# The daily jobs, as the shop writes them: no tags of the framework's.
events_daily = dg.define_asset_job("events_daily", selection=[RAW_EVENTS, EVENTS.key])
stores_daily = dg.define_asset_job("stores_daily", selection=[STORES.key])


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions.merge(
        backfill_definitions([EVENTS, STORES]),
        dg.Definitions(assets=[raw_events], jobs=[events_daily, stores_daily]),
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
    )
