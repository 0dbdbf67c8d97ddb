"""Run a job of the definitions in this process, against a real instance.

In-process runs are recorded in the instance like any other (the UI shows them, their tags count
toward the instance's run concurrency limits for queued runs), but they do not pass through the
run queue themselves; callers that must not overlap the daily run check for it first
(see service.guards).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import dagster as dg

from backfill_assets.constants import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG


def range_tags(start: dt.date, end_inclusive: dt.date) -> dict[str, str]:
    """Dagster's tags for one run over a partition range (inclusive keys)."""
    return {
        PARTITION_RANGE_START_TAG: start.isoformat(),
        PARTITION_RANGE_END_TAG: end_inclusive.isoformat(),
    }


def run_job(
    defs: dg.Definitions,
    job_name: str,
    instance: dg.DagsterInstance,
    *,
    start: dt.date | None = None,
    end_inclusive: dt.date | None = None,
    partition_key: str | None = None,
    tags: Mapping[str, str] | None = None,
    run_config: Mapping[str, Any] | None = None,
    raise_on_error: bool = True,
    log_level: str | None = None,
) -> dg.ExecuteInProcessResult:
    """Execute one job in-process: a single partition, a partition range, or unpartitioned.

    `log_level` (e.g. "WARNING") quiets the run's console logger for command-line use; the
    instance's event log keeps every event either way.
    """
    job = defs.resolve_job_def(job_name)
    all_tags = dict(tags or {})
    config = dict(run_config or {})
    if log_level:
        config["loggers"] = {"console": {"config": {"log_level": log_level}}}
    if start is not None and end_inclusive is not None:
        if start == end_inclusive:
            partition_key = start.isoformat()
        else:
            all_tags.update(range_tags(start, end_inclusive))
    return job.execute_in_process(
        instance=instance,
        partition_key=partition_key,
        tags=all_tags,
        run_config=config,
        raise_on_error=raise_on_error,
    )
