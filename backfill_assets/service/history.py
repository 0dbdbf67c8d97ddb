"""Run history read from the Dagster instance, for cost and contention estimates."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import dagster as dg

from backfill_assets.constants import ROLE_BATCH, ROLE_TAG, ROWS_TAG, WRITER_TAG

HISTORY_LIMIT = 50


def _durations(records: list[dg.RunRecord]) -> list[tuple[dg.RunRecord, float]]:
    out = []
    for r in records:
        if r.start_time is not None and r.end_time is not None and r.end_time >= r.start_time:
            out.append((r, r.end_time - r.start_time))
    return out


def daily_run_durations(instance: dg.DagsterInstance, daily_job: str) -> tuple[float, ...]:
    """Seconds taken by the last successful runs of the daily production job (found by its
    name, as the guards find it)."""
    records = instance.get_run_records(
        dg.RunsFilter(job_name=daily_job, statuses=[dg.DagsterRunStatus.SUCCESS]),
        limit=HISTORY_LIMIT,
    )
    return tuple(d for _, d in _durations(list(records)))


@dataclass(frozen=True)
class BatchRates:
    seconds_per_row: float | None
    overhead_seconds: float | None


def batch_rates(instance: dg.DagsterInstance, target: str) -> BatchRates:
    """Seconds per row (and fixed overhead, when rows vary enough to fit a line) from past
    successful batch runs of this target; None when there is no history."""
    records = instance.get_run_records(
        dg.RunsFilter(
            tags={WRITER_TAG: target, ROLE_TAG: ROLE_BATCH},
            statuses=[dg.DagsterRunStatus.SUCCESS],
        ),
        limit=HISTORY_LIMIT,
    )
    points: list[tuple[int, float]] = []
    for rec, seconds in _durations(list(records)):
        rows = rec.dagster_run.tags.get(ROWS_TAG)
        if rows and rows.isdigit() and int(rows) > 0:
            points.append((int(rows), seconds))
    if not points:
        return BatchRates(None, None)
    xs = [p[0] for p in points]
    if len(points) >= 3 and max(xs) > 1.5 * min(xs):
        slope, intercept = statistics.linear_regression(xs, [p[1] for p in points])
        if slope > 0 and intercept >= 0:
            return BatchRates(slope, intercept)
    return BatchRates(statistics.median(s / r for r, s in points), None)
