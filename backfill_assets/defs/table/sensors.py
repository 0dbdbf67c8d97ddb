"""A table's sensors: its batch driver, and its refresh after a swap or rollback from the UI.

The decisions are service.batch_driver's (`drive`, `follow_swaps`); the sensors hand them the
instance and the time, and report why nothing launched in each tick's skip reason.
"""

import datetime as dt
from collections.abc import Callable
from typing import Any

import dagster as dg

from backfill_assets.constants import driver_sensor, refresh_sensor
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.service.batch_driver import drive, follow_swaps
from backfill_assets.service.executor import runs_batches_here
from backfill_assets.service.tables import daily_job_problems

# The least seconds between two evaluations of a table's batch driver and refresh sensors
# (backfill_definitions' `sensor_interval_s`, or BACKFILL_ASSETS_SENSOR_INTERVAL_S).
DEFAULT_SENSOR_INTERVAL_S = 15


def build_batch_driver(
    table: BackfillableTable,
    batch_job: Any,  # shadow.build_batch_job's asset job: Dagster exports no name for its type
    runner: dg.JobDefinition,
    clock: Callable[[], dt.datetime],
    interval_s: int,
) -> dg.SensorDefinition:
    """The sensor that launches the next batch of each started plan: as the plan's `runner` run,
    which carries on with the batches after it, where runs execute on this machine; else as a
    run of `batch_job` for that batch alone."""
    spec = table.spec

    @dg.sensor(
        name=driver_sensor(spec.name),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        jobs=[batch_job, runner],
        description=f"Launches the next batch of each started, approved plan of {spec.name} "
        "inside its window, never while its daily run is queued or running, only after every "
        "gate of the previous batches passed and only if the batch fits before the window or "
        "the daily slot. The skip reason of each tick says why nothing launched.",
    )
    def batch_driver(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        # The guards find the daily runs by the daily job's name: with a job the code location
        # does not have (or one that does not write the table), batches could run beside the
        # real daily run. The CLI refuses it when it loads the location; a plan approved and
        # started from the UI meets it here.
        repo = context.repository_def
        problems = daily_job_problems(repo, {table.key: table}) if repo is not None else []
        if problems:
            reason = "launching nothing: " + "; ".join(problems)
            context.log.warning(reason)
            return dg.SensorResult(run_requests=[], skip_reason=reason)
        here = runs_batches_here(context.instance)
        requests, reasons = drive(context.instance, table, clock(), runner=here)
        for reason in reasons:
            context.log.info(reason)
        return dg.SensorResult(
            run_requests=requests, skip_reason=None if requests else "; ".join(reasons)
        )

    return batch_driver


def build_refresh_sensor(
    table: BackfillableTable, clock: Callable[[], dt.datetime], interval_s: int
) -> dg.SensorDefinition:
    """The sensor that refreshes the downstream impact set after a swap or rollback launched
    from the UI."""
    spec = table.spec
    downstream_assets = dg.AssetSelection.assets(spec.name).downstream(include_self=False)

    @dg.sensor(
        name=refresh_sensor(spec.name),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        asset_selection=downstream_assets - dg.AssetSelection.assets(spec.shadow_name),
        description=f"After a swap or rollback of {spec.name} launched from the UI succeeds, "
        "refreshes the plan's downstream impact set for the affected partitions (one run per "
        "grain).",
    )
    def refresh_after_swap(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        graph = context.repository_def.asset_graph  # type: ignore[union-attr]
        requests, reasons, cursor = follow_swaps(
            context.instance, table, graph, context.cursor, clock()
        )
        for reason in reasons:
            context.log.info(reason)
        return dg.SensorResult(
            run_requests=requests,
            cursor=cursor,
            skip_reason=None if requests else "; ".join(reasons),
        )

    return refresh_after_swap
