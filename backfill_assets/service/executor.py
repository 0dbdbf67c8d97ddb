"""Execute an approved plan batch by batch, in this process, against the real instance.

Each batch is one run of the shadow job over the batch's ISO week: it writes the shadow's
partitions in one transaction and evaluates every gate per partition as blocking checks. The
next batch starts only if every gate of every partition of the previous one passed. A failure
halts the plan with the partitions, gates and reasons. Re-running a halted plan skips batches
whose gates all passed on shadow data written by this plan, and redoes the rest.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from backfill_assets.constants import (
    BATCH_TAG,
    PLAN_ID_TAG,
    ROLE_BATCH,
    ROLE_TAG,
    WRITER_TAG,
)
from backfill_assets.errors import ExecutionRefused, GateFailed
from backfill_assets.lib.planning.plan import BackfillPlan, Batch
from backfill_assets.lib.planning.windows import parse_window
from backfill_assets.service.gating import PASSED, gate_states
from backfill_assets.service.guards import refuse_if_daily_in_progress
from backfill_assets.service.history import ROWS_TAG
from backfill_assets.service.plans import APPROVED, DRIVING, latest_plan_record, load_plan
from backfill_assets.service.runs import run_job
from backfill_assets.table import BackfillableTable

# Set on batch runs this process executes itself, so a later invocation can tell a run whose
# process died (SIGKILL, OOM) from one that is still going.
PID_TAG = "backfill_assets/pid"
HOST_TAG = "backfill_assets/host"
_UNFINISHED = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_dead_runs(instance: dg.DagsterInstance, plan_id: str) -> list[str]:
    """Mark this plan's in-process batch runs whose process is gone as failed, and free the
    writer-pool slots they hold.

    A killed in-process run stays STARTED forever and keeps its pool slot; Dagster's run
    monitoring only watches runs launched through a run launcher. Without this, the next
    `backfill-assets run` would wait for that slot indefinitely.
    """
    reaped = []
    here = socket.gethostname()
    runs = instance.get_runs(
        filters=dg.RunsFilter(tags={PLAN_ID_TAG: plan_id}, statuses=_UNFINISHED), limit=100
    )
    for run in runs:
        pid = run.tags.get(PID_TAG, "")
        if run.tags.get(HOST_TAG) != here or not pid.isdigit() or _alive(int(pid)):
            continue
        instance.report_run_failed(run, message=f"its process {pid} on {here} no longer exists")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        reaped.append(run.run_id)
    return reaped


def shadow_job_name(table_key: str) -> str:
    return f"{table_key}__shadow_job"


def batch_tags(plan: BackfillPlan, batch: Batch) -> dict[str, str]:
    """Tags of a batch run: which plan and batch, and the writer tag shared with the daily run
    (the instance never runs two runs with it at once)."""
    return {
        PLAN_ID_TAG: plan.plan_id,
        BATCH_TAG: str(batch.index),
        WRITER_TAG: plan.target,
        ROLE_TAG: ROLE_BATCH,
        ROWS_TAG: str(batch.estimated_rows),
    }


@dataclass(frozen=True)
class GateFailure:
    partition: str
    gate: str
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchReport:
    index: int
    start: dt.date
    end: dt.date
    status: str  # "passed", "skipped (already passed)", "failed"
    run_id: str | None = None
    seconds: float = 0.0
    failures: tuple[GateFailure, ...] = ()


def in_window(plan: BackfillPlan, now: dt.datetime) -> bool:
    """Is `now` inside the plan's idle window (local time; windows may cross midnight)?"""
    from zoneinfo import ZoneInfo

    window = parse_window(plan.window.label)
    local = now.astimezone(ZoneInfo(plan.window.timezone)).time()
    if window.start <= window.end:
        return window.start <= local < window.end
    return local >= window.start or local < window.end


def batch_done(instance: dg.DagsterInstance, plan: BackfillPlan, batch: Batch) -> bool:
    """Every gate of every partition passed, on shadow data that this plan wrote."""
    states = gate_states(instance, plan.shadow, batch.partitions)
    if any(s.state != PASSED for s in states):
        return False
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(plan.shadow), asset_partitions=list(batch.partitions)
        ),
        limit=len(batch.partitions) * 4,
    ).records
    latest: dict[str, str] = {}
    for r in records:  # newest first
        if r.partition_key and r.partition_key not in latest:
            latest[r.partition_key] = r.run_id
    if set(latest) != set(batch.partitions):
        return False
    for run_id in set(latest.values()):
        run = instance.get_run_by_id(run_id)
        if run is None or run.tags.get(PLAN_ID_TAG) != plan.plan_id:
            return False
    return True


def run_failures(instance: dg.DagsterInstance, run_id: str) -> tuple[GateFailure, ...]:
    """Failed per-partition gate evaluations recorded by a batch run."""
    out = []
    for rec in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        ev = rec.dagster_event
        data = ev.event_specific_data if ev else None
        if not isinstance(data, dg.AssetCheckEvaluation) or data.passed or not data.partition:
            continue
        meta = {k: v.value for k, v in data.metadata.items()}
        out.append(GateFailure(data.partition, data.check_name, data.description or "", meta))
    return tuple(out)


def describe_failures(failures: tuple[GateFailure, ...]) -> str:
    lines = [f"  {f.partition} {f.gate}: {f.description}" for f in failures[:20]]
    if len(failures) > 20:
        lines.append(f"  ... and {len(failures) - 20} more")
    return "\n".join(lines)


def execute_plan(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    tables: Mapping[str, BackfillableTable],
    plan_id: str,
    *,
    clock: Callable[[], dt.datetime],
    ignore_window: bool = False,
    progress: Callable[[BatchReport, int], None] | None = None,
    max_batches: int | None = None,
    log_level: str | None = None,
) -> list[BatchReport]:
    """Run the plan's remaining batches in order; raise GateFailed when one fails (halted).

    `clock` is the time source (tests pass a fixed one). Outside the plan's window, or while a
    daily run of the target is queued or running, raise ExecutionRefused before the next batch.
    """
    plan, status = load_plan(instance, plan_id)
    if status != APPROVED:
        raise ExecutionRefused(f"plan {plan_id} is {status}; only an approved plan can run")
    if plan.target not in tables:
        raise ExecutionRefused(
            f"plan {plan_id} targets {plan.target}, which this code location "
            "does not declare backfillable"
        )
    if (latest_plan_record(instance, plan_id) or {}).get(DRIVING):
        raise ExecutionRefused(
            f"plan {plan_id} is being driven by the daemon's batch driver; pause it "
            f"(`backfill-assets pause {plan_id}`) before running batches from here"
        )
    reap_dead_runs(instance, plan_id)
    busy = instance.get_runs(
        filters=dg.RunsFilter(
            tags={PLAN_ID_TAG: plan_id},
            statuses=[*_UNFINISHED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.CANCELING],
        ),
        limit=1,
    )
    if busy:
        raise ExecutionRefused(
            f"run {busy[0].run_id[:8]} of plan {plan_id} is still {busy[0].status.value.lower()}"
            "; wait for it to finish (a plan runs one batch at a time)"
        )
    reports: list[BatchReport] = []
    ran = 0
    here = {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
    for batch in plan.batches:
        if batch_done(instance, plan, batch):
            reports.append(
                BatchReport(batch.index, batch.start, batch.end, "skipped (already passed)")
            )
            if progress:
                progress(reports[-1], len(plan.batches))
            continue
        if max_batches is not None and ran >= max_batches:
            break
        now = clock()
        if not ignore_window and not in_window(plan, now):
            raise ExecutionRefused(
                f"{now.isoformat(timespec='minutes')} is outside plan {plan_id}'s window "
                f"{plan.window.label} {plan.window.timezone}; run it inside the window (or let "
                "the batch sensor do it)"
            )
        refuse_if_daily_in_progress(instance, plan.target)
        t0 = dt.datetime.now(dt.UTC)
        result = run_job(
            defs,
            shadow_job_name(plan.target),
            instance,
            start=batch.start,
            end_inclusive=batch.end,
            tags={**batch_tags(plan, batch), **here},
            raise_on_error=False,
            log_level=log_level,
        )
        seconds = (dt.datetime.now(dt.UTC) - t0).total_seconds()
        ran += 1
        if not result.success:
            failures = run_failures(instance, result.run_id)
            reports.append(
                BatchReport(
                    batch.index, batch.start, batch.end, "failed", result.run_id, seconds, failures
                )
            )
            if progress:
                progress(reports[-1], len(plan.batches))
            reason = (
                describe_failures(failures)
                if failures
                else (f"  the run failed before its gates ran; see run {result.run_id} in the UI")
            )
            raise GateFailed(
                f"plan {plan_id} halted at batch {batch.index} ({batch.start}..{batch.end}); "
                f"the next batch will not start and the swap is refused:\n{reason}\n"
                f"Fix the cause, then run the plan again: passed batches are skipped."
            )
        reports.append(
            BatchReport(batch.index, batch.start, batch.end, "passed", result.run_id, seconds)
        )
        if progress:
            progress(reports[-1], len(plan.batches))
    return reports
