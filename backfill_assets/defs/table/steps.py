"""What every step of a table's assets and ops does with its context: reach the warehouse, read
its partitions, claim the table's writer lease, report the rows it wrote."""

import datetime as dt
from typing import Any

import dagster as dg

from backfill_assets.constants import WAREHOUSE_RESOURCE_KEY
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.lease import (
    Waiting,
    acquire_writer,
    holder_for_run,
    mark_this_process,
)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def warehouse_resource(context: Any) -> WarehouseResource:
    """The run's `backfill_warehouse` resource (its `adapter()` opens the warehouse)."""
    return getattr(context.resources, WAREHOUSE_RESOURCE_KEY)


def partition_dates(context: dg.AssetExecutionContext) -> tuple[dt.date, dt.date]:
    """The half-open date range [start, end) of the run's partitions."""
    window = context.partition_time_window
    return window.start.date(), window.end.date()


def claim_writer(
    context: Any, wh: Warehouse, table: BackfillableTable, role: str, plan_id: str = ""
) -> None:
    """Claim the table's writer lease for this run (held until the run ends)."""

    def waiting(w: Waiting) -> None:
        context.log.info(
            f"waiting for {w.table}'s writer lease, held by {w.holder.describe()} "
            f"({w.waited_s:.0f} s so far, at most {table.writer_wait_seconds:.0f} s)"
        )

    mark_this_process(context.instance, context.run)
    holder = holder_for_run(context.run_id, role=role, job_name=context.job_name, plan_id=plan_id)
    acquire_writer(
        context.instance,
        wh,
        table.key,
        holder,
        wait_s=table.writer_wait_seconds,
        on_wait=waiting,
    )


def rows_metadata(context: dg.AssetExecutionContext, counts: dict[dt.date, int]) -> dict[str, Any]:
    """The rows a run wrote. Each partition's materialization carries its own count as Dagster's
    `dagster/partition_row_count` (the UI plots it per partition); `rows` and `partitions` are
    the whole run's."""
    for day, n in counts.items():
        context.add_asset_metadata(
            {"dagster/partition_row_count": n}, partition_key=day.isoformat()
        )
    return {"rows": sum(counts.values()), "partitions": len(counts)}
