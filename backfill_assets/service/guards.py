"""Preconditions checked before any backfill run starts, from the instance only."""

from __future__ import annotations

import dagster as dg

from backfill_assets.constants import ROLE_DAILY, ROLE_TAG, WRITER_TAG
from backfill_assets.errors import ExecutionRefused

IN_PROGRESS = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def daily_runs_in_progress(instance: dg.DagsterInstance, target: str) -> list[dg.DagsterRun]:
    """Daily production runs of `target` that are queued or running right now."""
    return list(
        instance.get_runs(
            filters=dg.RunsFilter(
                tags={WRITER_TAG: target, ROLE_TAG: ROLE_DAILY}, statuses=IN_PROGRESS
            ),
            limit=10,
        )
    )


def writer_runs_in_progress(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """Every run holding (or waiting for) the writer tag."""
    return [
        r
        for r in instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS), limit=50)
        if WRITER_TAG in r.tags
    ]


def refuse_if_daily_in_progress(instance: dg.DagsterInstance, target: str) -> None:
    busy = daily_runs_in_progress(instance, target)
    if busy:
        run = busy[0]
        raise ExecutionRefused(
            f"the daily production run {run.run_id[:8]} of {target} is {run.status.value.lower()}"
            f"; a backfill batch never overlaps it: retry once it has finished"
        )
