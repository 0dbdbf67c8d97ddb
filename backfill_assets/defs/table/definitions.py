"""`table_definitions`: everything one BackfillableTable contributes, composed from the modules
that build each part (target.py, shadow.py, publish.py, sensors.py)."""

import datetime as dt
from collections.abc import Callable
from functools import cache

import dagster as dg

from backfill_assets.defs.table.publish import (
    build_downstream_check,
    build_rollback_job,
    build_swap_job,
)
from backfill_assets.defs.table.runner import build_runner_job
from backfill_assets.defs.table.sensors import (
    DEFAULT_SENSOR_INTERVAL_S,
    build_batch_driver,
    build_refresh_sensor,
)
from backfill_assets.defs.table.shadow import build_batch_job, build_shadow_asset
from backfill_assets.defs.table.steps import utc_now
from backfill_assets.defs.table.target import build_target_asset
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.service.downstream import DbtDownstream


@cache
def table_definitions(
    table: BackfillableTable,
    clock: Callable[[], dt.datetime] = utc_now,
    downstream: DbtDownstream | None = None,
    sensor_interval_s: int = DEFAULT_SENSOR_INTERVAL_S,
) -> dg.Definitions:
    """Everything one table contributes. Cached per declaration: calling `backfill_definitions`
    twice with the same table yields the very same objects, which Definitions.merge accepts.

    `clock` is the sensors' time source (tests pass a fixed one). `downstream`: how the swap
    builds the impacted dbt models in shadow and publishes them with the target (None: they are
    refreshed after the swap). `sensor_interval_s`: the least time between two evaluations of
    the table's batch driver and of its refresh sensor.
    """
    batch_job = build_batch_job(table)  # the batch driver launches these very jobs
    runner = build_runner_job(table, clock)
    return dg.Definitions(
        assets=[build_target_asset(table, downstream), build_shadow_asset(table)],
        asset_checks=[build_downstream_check(table, downstream)],
        jobs=[batch_job, runner, build_swap_job(table, downstream), build_rollback_job(table)],
        sensors=[
            build_batch_driver(table, batch_job, runner, clock, sensor_interval_s),
            build_refresh_sensor(table, clock, sensor_interval_s),
        ],
    )
