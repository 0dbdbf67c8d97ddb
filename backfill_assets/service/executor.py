"""Execute an approved plan batch by batch, in this process, against the real instance.

Each batch is one run of the shadow job over the batch's ISO week: it writes the shadow's
partitions in one transaction and evaluates every gate per partition as blocking checks. The
next batch starts only if every gate of every partition of the previous one passed. A failure
halts the plan with the partitions, gates and reasons. Re-running a halted plan skips batches
whose gates all passed on shadow data written by this plan, and redoes the rest.

Each batch run holds the table's writer lease for its whole run, claimed before the run starts;
with the lease held it checks that no daily run of the table is queued or running (the lease
alone would let a batch go first while a daily run waits in the queue).

This runs outside the run queue and the run launcher. It is for an instance whose runs execute on
this machine (the default run launcher): with another launcher (Kubernetes, ECS, Docker), runs
execute elsewhere and a dead one cannot be told from a slow one here, so `run` refuses and points
to `start`, which hands the plan to the daemon's batch driver.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from zoneinfo import ZoneInfo

import dagster as dg

from backfill_assets.constants import (
    BATCH_TAG,
    PLAN_ID_TAG,
    ROLE_BATCH,
    ROLE_TAG,
    ROWS_TAG,
    WRITER_TAG,
    shadow_job,
)
from backfill_assets.errors import (
    ExecutionRefused,
    GateFailed,
    InvalidInput,
    WarehouseError,
    WriterBusy,
)
from backfill_assets.lib.planning.plan import BackfillPlan, Batch
from backfill_assets.lib.planning.windows import parse_window
from backfill_assets.lib.states import IN_PROGRESS_RUN_STATUSES, GateState, PlanStatus
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.gating import gate_states
from backfill_assets.service.guards import refuse_if_daily_in_progress
from backfill_assets.service.lease import Waiting, plan_runner, reap_dead_local_runs
from backfill_assets.service.plans import DRIVING, latest_plan_record
from backfill_assets.service.progress import ProgressCallback, RunWatcher, report_event
from backfill_assets.service.reconcile import current_plan
from backfill_assets.service.runs import Location, run_as_writer
from backfill_assets.service.tables import table_for

# Errors raised inside a run that mean "not now" or "bad input" rather than a failed gate; the
# executor re-raises them as what they are (exit 2), not as a halted plan (exit 1).
_REFUSALS: dict[str, type[Exception]] = {
    "WarehouseError": WarehouseError,
    "WarehouseMissing": WarehouseError,
    "WriterBusy": WriterBusy,
    "ExecutionRefused": ExecutionRefused,
    "InvalidInput": InvalidInput,
}


def batch_tags(plan: BackfillPlan, batch: Batch) -> dict[str, str]:
    """Tags of a batch run: which plan and batch, and the table's writer tag (the instance
    runs one run per writer value at a time)."""
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
    window = parse_window(plan.window.label)
    local = now.astimezone(ZoneInfo(plan.window.timezone)).time()
    if window.start <= window.end:
        return window.start <= local < window.end
    return local >= window.start or local < window.end


def batch_done(instance: dg.DagsterInstance, plan: BackfillPlan, batch: Batch) -> bool:
    """Every gate of every partition passed, on shadow data that this plan wrote."""
    return batch.index in _passed(instance, plan, [batch])


def passed_batches(instance: dg.DagsterInstance, plan: BackfillPlan) -> set[int]:
    """The indexes of the plan's batches that are done (`batch_done`), read at once: one read
    of the gates of all the plan's partitions per set of gates, where a batch at a time read
    the plan's runs again for each batch (a five-year plan has 262)."""
    return _passed(instance, plan, plan.batches)


def _passed(instance: dg.DagsterInstance, plan: BackfillPlan, batches: Sequence[Batch]) -> set[int]:
    """Of `batches`, those whose every gate of every partition passed: one read of the gates per
    set of gates the batches name."""
    by_gates: dict[tuple[str, ...], list[Batch]] = {}
    for batch in batches:
        by_gates.setdefault(tuple(batch.gates), []).append(batch)
    passed: set[int] = set()
    for gates, group in by_gates.items():
        partitions = [p for b in group for p in b.partitions]
        states = gate_states(instance, plan.shadow, partitions, plan.plan_id, gates)
        not_passed = {s.partition for s in states if s.state != GateState.PASSED}
        passed |= {b.index for b in group if not_passed.isdisjoint(b.partitions)}
    return passed


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


def run_error(result: dg.ExecuteInProcessResult) -> tuple[str, str] | None:
    """The class name and message of this package's error that failed a run, if any."""
    for event in result.all_events:
        if event.event_type_value != "STEP_FAILURE":
            continue
        err = event.event_specific_data.error  # type: ignore[union-attr]
        while err is not None:
            if err.cls_name in (*_REFUSALS, "SwapRefused", "TargetWriteRefused", "PlanRefused"):
                return err.cls_name, err.message.split(": ", 1)[-1].strip()
            err = err.cause
    return None


def describe_failures(failures: tuple[GateFailure, ...]) -> str:
    lines = [f"  {f.partition} {f.gate}: {f.description}" for f in failures[:20]]
    if len(failures) > 20:
        lines.append(f"  ... and {len(failures) - 20} more")
    return "\n".join(lines)


def runs_batches_here(instance: dg.DagsterInstance) -> bool:
    """Whether this instance's runs execute on this machine (Dagster's default run launcher), so
    that a process here may run batches and tell a dead one from a slow one: `run`, and the
    daemon's runner run (service.plan_runner)."""
    return type(instance.run_launcher).__name__ == "DefaultRunLauncher"


def refuse_unless_local(instance: dg.DagsterInstance, command: str) -> None:
    """`run` executes runs in this process; refuse on an instance whose runs execute elsewhere."""
    if not runs_batches_here(instance):
        launcher = type(instance.run_launcher).__name__
        raise ExecutionRefused(
            f"this instance launches runs with {launcher}, so they execute on other machines; "
            f"`{command}` runs batches in this process and could not see or reap them there. "
            "Start the plan instead (`backfill-assets start PLAN_ID`, or start_backfill_plan_job "
            "in the UI): the daemon's batch driver launches each batch through the run launcher"
        )


def execute_plan(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    wh: Warehouse,
    tables: Mapping[str, BackfillableTable],
    plan_id: str,
    *,
    clock: Callable[[], dt.datetime],
    ignore_window: bool = False,
    progress: ProgressCallback | None = None,
    max_batches: int | None = None,
    log_level: str | None = None,
    wait_s: float = 30.0,
    on_wait: Callable[[Waiting], None] | None = None,
) -> list[BatchReport]:
    """Run the plan's remaining batches in order; raise GateFailed when one fails (halted).

    `clock` is the time source (tests pass a fixed one). Outside the plan's window, while a
    daily run of the target is queued or running, or while another writer holds the table for
    longer than `wait_s`, raise ExecutionRefused (or WriterBusy) before the next batch.
    `on_wait` hears, at once and every 30 s, while a batch waits for the table's writer lease.
    `progress` gets every ProgressEvent (service.progress) as it happens, from this thread or
    from the thread that follows a batch's run.
    """
    plan, status = current_plan(instance, wh, plan_id)
    if status != PlanStatus.APPROVED:
        raise ExecutionRefused(f"plan {plan_id} is {status}; only an approved plan can run")
    table = table_for(dict(tables), plan.target, what=f"plan {plan_id}'s target")
    refuse_unless_local(instance, "backfill-assets run")
    with plan_runner(instance, wh, plan_id):
        return _run_batches(
            defs, instance, wh, table, plan,
            clock=clock, ignore_window=ignore_window, progress=progress,
            max_batches=max_batches, log_level=log_level, wait_s=wait_s, on_wait=on_wait,
        )  # fmt: skip


class _AlreadyPassed(Exception):
    """A batch passed while this runner waited for the table (another launch ran it)."""


def _run_batches(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    plan: BackfillPlan,
    *,
    clock: Callable[[], dt.datetime],
    ignore_window: bool,
    progress: ProgressCallback | None,
    max_batches: int | None,
    log_level: str | None,
    wait_s: float,
    on_wait: Callable[[Waiting], None] | None,
) -> list[BatchReport]:
    """`execute_plan`'s batches, by the plan's one runner."""
    plan_id = plan.plan_id
    # Read with the runner lease held: `start` records the driver first and then looks for a
    # runner, so of a `start` and a `run` racing, one always sees the other.
    if (latest_plan_record(instance, plan_id) or {}).get(DRIVING):
        raise ExecutionRefused(
            f"plan {plan_id} is being driven by the daemon's batch driver; pause it "
            f"(`backfill-assets pause {plan_id}`) before running batches from here"
        )
    busy = instance.get_runs(
        filters=dg.RunsFilter(tags={PLAN_ID_TAG: plan_id}, statuses=list(IN_PROGRESS_RUN_STATUSES))
    )
    reaped = set(reap_dead_local_runs(instance, list(busy)))
    busy = [r for r in busy if r.run_id not in reaped]
    if busy:
        raise ExecutionRefused(
            f"run {busy[0].run_id[:8]} of plan {plan_id} is still {busy[0].status.value.lower()}"
            "; wait for it to finish (a plan runs one batch at a time)"
        )
    reports: list[BatchReport] = []
    ran = 0
    total = len(plan.batches)

    def emit(kind: Literal["finished", "skipped"], batch: Batch, report: BatchReport) -> None:
        if progress:
            progress(report_event(kind, batch, total, report))

    passed = passed_batches(instance, plan)
    for batch in plan.batches:
        if batch.index in passed:
            reports.append(
                BatchReport(batch.index, batch.start, batch.end, "skipped (already passed)")
            )
            emit("skipped", batch, reports[-1])
            continue
        if max_batches is not None and ran >= max_batches:
            break
        now = clock()
        if not ignore_window and not in_window(plan, now):
            raise ExecutionRefused(
                f"{now.isoformat(timespec='minutes')} is outside plan {plan_id}'s window "
                f"{plan.window.label} {plan.window.timezone}; run it inside the window (or let "
                "the batch driver do it: backfill-assets start)"
            )
        report = run_batch(
            defs, instance, wh, table, plan, batch,
            progress=progress, log_level=log_level, wait_s=wait_s, on_wait=on_wait,
        )  # fmt: skip
        reports.append(report)
        if report.status == "passed":
            ran += 1
    return reports


def run_batch(
    defs: Location,
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    plan: BackfillPlan,
    batch: Batch,
    *,
    progress: ProgressCallback | None = None,
    log_level: str | None = None,
    wait_s: float = 30.0,
    on_wait: Callable[[Waiting], None] | None = None,
) -> BatchReport:
    """One batch of `plan` as a run of its own in this process, under the table's writer lease;
    its report ("passed", or "skipped (already passed)" when it passed while this waited for the
    table). Raises GateFailed when it fails (the plan halts there), or the refusal that kept it
    from running (a daily run queued or running, the table held, a build refused)."""
    plan_id = plan.plan_id
    total = len(plan.batches)
    t0 = dt.datetime.now(dt.UTC)
    watcher = RunWatcher(instance, batch, total, progress) if progress else None
    waited: list[Waiting] = []

    def emit(kind: Literal["finished", "skipped"], report: BatchReport) -> BatchReport:
        if progress:
            progress(report_event(kind, batch, total, report))
        return report

    def waiting(w: Waiting) -> None:
        waited.append(w)
        if on_wait is not None:
            on_wait(w)

    def before(run_id: str) -> None:
        refuse_if_daily_in_progress(instance, table)
        # With the table's lease held: a batch that passed while this waited for the table (a
        # launch from the UI ran it) is not run again.
        if waited and batch_done(instance, plan, batch):
            raise _AlreadyPassed
        if watcher is not None:
            watcher.follow(run_id)

    try:
        result = run_as_writer(
            defs,
            shadow_job(plan.target),
            instance,
            wh,
            table,
            role=ROLE_BATCH,
            plan_id=plan_id,
            wait_s=wait_s,
            before=before,
            on_wait=waiting,
            start=batch.start,
            end_inclusive=batch.end,
            tags=batch_tags(plan, batch),
            raise_on_error=False,
            log_level=log_level,
        )
    except _AlreadyPassed:
        return emit(
            "skipped", BatchReport(batch.index, batch.start, batch.end, "skipped (already passed)")
        )
    finally:
        if watcher is not None:
            watcher.stop()
    seconds = (dt.datetime.now(dt.UTC) - t0).total_seconds()
    if result.success:
        return emit(
            "finished",
            BatchReport(batch.index, batch.start, batch.end, "passed", result.run_id, seconds),
        )
    failures = run_failures(instance, result.run_id)
    failed = BatchReport(
        batch.index, batch.start, batch.end, "failed", result.run_id, seconds, failures
    )
    emit("finished", failed)
    refusal = run_error(result)
    if not failures and refusal is not None and refusal[0] in _REFUSALS:
        # The warehouse was held, another writer kept the table, a build was refused: not a
        # gate verdict, nothing to halt on; say what it was.
        raise _REFUSALS[refusal[0]](
            f"batch {batch.index} of plan {plan_id} did not run: {refusal[1]}"
        )
    reason = (
        describe_failures(failures)
        if failures
        else (f"  the run failed before its gates ran; see run {result.run_id} in the UI")
    )
    raise GateFailed(
        f"plan {plan_id} halted at batch {batch.index} ({batch.start}..{batch.end}); the next "
        f"batch will not start and the swap is refused:\n{reason}\n"
        "Fix the cause, then run the plan again: passed batches are skipped."
    )
