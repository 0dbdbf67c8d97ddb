"""Who else is writing a table right now, from the instance only.

The daily production runs are found by the daily job's name (and any other production job the
table declares), the same way for guards, history and contention: the user's job needs no tags.
"""

from __future__ import annotations

import dagster as dg

from backfill_assets.constants import WRITER_TAG
from backfill_assets.errors import ExecutionRefused
from backfill_assets.lib.states import IN_PROGRESS_RUN_STATUSES
from backfill_assets.lib.table import BackfillableTable


def daily_runs_in_progress(
    instance: dg.DagsterInstance, table: BackfillableTable
) -> list[dg.DagsterRun]:
    """Daily production runs of `table` that are queued or running right now."""
    runs: list[dg.DagsterRun] = []
    for job in table.production_job_names:
        runs += instance.get_runs(
            filters=dg.RunsFilter(job_name=job, statuses=list(IN_PROGRESS_RUN_STATUSES))
        )
    return runs


def writer_runs_in_progress(
    instance: dg.DagsterInstance, table: BackfillableTable
) -> list[dg.DagsterRun]:
    """Every run that writes `table` and is queued or in progress: its daily runs and the runs
    tagged as its writer (batches, swap, rollback, refresh), each once, newest first."""
    tagged = instance.get_runs(
        filters=dg.RunsFilter(tags={WRITER_TAG: table.key}, statuses=list(IN_PROGRESS_RUN_STATUSES))
    )
    seen = {r.run_id for r in tagged}
    return [*tagged, *(r for r in daily_runs_in_progress(instance, table) if r.run_id not in seen)]


def refuse_if_daily_in_progress(
    instance: dg.DagsterInstance, table: BackfillableTable, *, besides: str | None = None
) -> None:
    busy = [r for r in daily_runs_in_progress(instance, table) if r.run_id != besides]
    if busy:
        run = busy[0]
        raise ExecutionRefused(
            f"the daily production run {run.run_id[:8]} ({run.job_name}) of {table.key} is "
            f"{run.status.value.lower()}; a backfill never runs beside it: retry once it has "
            "finished"
        )
