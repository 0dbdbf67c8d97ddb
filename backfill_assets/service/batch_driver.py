"""The daemon's side of a plan: start and pause it, decide each driver tick, follow swaps.

- `start_plan` marks an approved plan as started for the batch driver (approving alone launches
  nothing). Starting again after a failed batch acknowledges the failure, so the driver re-runs
  that batch as a new attempt; it also lifts a hold left by an overrun. `pause_plan` stops the
  driver from launching further batches (a running batch finishes).
- `drive` is one tick of a table's batch driver sensor: for each approved, started plan of the
  table it gathers the facts from the instance (never the warehouse) and asks
  `batch_decision.next_action` what to do.
- `follow_swaps` is one tick of the refresh sensor: after a swap or rollback run launched through
  the instance succeeds, it requests the refresh of the plan's downstream impact set.

The decorated sensors and jobs in `defs/` call these and do nothing else.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import defaultdict
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any

import dagster as dg

from backfill_assets.constants import (
    BATCH_TAG,
    PARTITION_TAG,
    PLAN_ID_TAG,
    REAPED_TAG,
    ROLE_DAILY,
    ROLE_ROLLBACK,
    ROLE_RUNNER,
    ROLE_SWAP,
    ROLE_TAG,
    START_JOB,
    WRITER_TAG,
    runner_job,
    shadow_job,
)
from backfill_assets.errors import BackfillError, ExecutionRefused
from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.states import (
    IN_PROGRESS_RUN_STATUSES,
    BatchState,
    GateState,
    PlanStatus,
)
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.batch_decision import Decision, RunFact, batch_run_key, next_action
from backfill_assets.service.executor import batch_tags, passed_batches
from backfill_assets.service.gating import gate_states
from backfill_assets.service.guards import daily_runs_in_progress
from backfill_assets.service.lease import live_runner, reap_dead_local_runs, runner_refusal
from backfill_assets.service.plans import (
    DRIVING,
    OVERRUN,
    STARTED_AT,
    STARTED_BY,
    active_plan_ids,
    latest_plan_record,
    load_plan,
    published_keys,
    record_status,
)
from backfill_assets.service.reconcile import current_plan
from backfill_assets.service.refresh import refresh_requests
from backfill_assets.service.runs import range_tags

RUN_HISTORY_LIMIT = 500
# Without a cursor (first tick ever), swaps that finished this long ago are still followed up.
REFRESH_LOOKBACK = dt.timedelta(hours=1)
# `next_action`'s facts for a plan not started for the driver: it reads none of them.
NOT_STARTED_FACTS: dict[str, Any] = {
    "batch_states": {},
    "active_runs": (),
    "daily_runs": (),
    "failed_attempts": {},
    "started": False,
}


# -- starting and pausing a plan -----------------------------------------------------------------


def start_plan(
    instance: dg.DagsterInstance,
    plan_id: str,
    started_by: str,
    now: dt.datetime,
    wh: Warehouse | None = None,
) -> str:
    """Mark an approved plan as started for the driver; return a one-line summary. With the
    warehouse `wh`, its record of the plan decides (service.reconcile), and a plan that a
    `backfill-assets run` is running is refused: one runner per plan."""
    plan, status = current_plan(instance, wh, plan_id)
    if status != PlanStatus.APPROVED:
        raise ExecutionRefused(
            f"plan {plan_id} is {status}; only an approved plan can be started "
            "(approve_backfill_job or `backfill-assets approve PLAN.json` first)"
        )
    runner = live_runner(instance, wh, plan_id) if wh is not None else None
    if runner is not None:
        raise runner_refusal(plan_id, runner)
    record_status(
        instance,
        plan,
        PlanStatus.APPROVED,
        **{DRIVING: True, STARTED_AT: now.isoformat(), STARTED_BY: started_by, OVERRUN: None},
    )
    # A `run` reads the driver's flag once it holds the runner lease: one that took the lease
    # before the flag was recorded is seen here, and the start is taken back.
    runner = live_runner(instance, wh, plan_id) if wh is not None else None
    if runner is not None:
        record_status(instance, plan, PlanStatus.APPROVED, driving=False)
        raise runner_refusal(plan_id, runner)
    return (
        f"plan {plan_id} started: the batch driver launches its next batch inside the window "
        f"{plan.window.label} {plan.window.timezone}, never while {plan.contention.daily_job} "
        "runs"
    )


def pause_plan(instance: dg.DagsterInstance, plan_id: str, paused_by: str) -> str:
    """Stop the driver from launching further batches of a plan; a running batch finishes."""
    plan, status = load_plan(instance, plan_id)
    if status != PlanStatus.APPROVED:
        raise ExecutionRefused(f"plan {plan_id} is {status}; only an approved plan runs batches")
    record_status(instance, plan, PlanStatus.APPROVED, **{DRIVING: False, "paused_by": paused_by})
    return f"plan {plan_id} paused: start it again with {START_JOB} to resume"


# -- the batch driver ----------------------------------------------------------------------------


def _fact(rec: dg.RunRecord) -> RunFact:
    run = rec.dagster_run
    batch = run.tags.get(BATCH_TAG)
    return RunFact(
        run_id=run.run_id,
        status=run.status.value,
        batch=int(batch) if batch and batch.isdigit() else None,
        role=run.tags.get(ROLE_TAG, ""),
        started_at=dt.datetime.fromtimestamp(rec.start_time, dt.UTC) if rec.start_time else None,
    )


def _instant(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def plan_facts(
    instance: dg.DagsterInstance,
    table: BackfillableTable,
    plan: BackfillPlan,
    record: Mapping[str, Any],
    *,
    ignore_run: str | None = None,
) -> dict[str, Any]:
    """Everything `next_action` takes besides the plan and the clock, read from the instance.
    `ignore_run`: the run asking (a runner run), not counted as a run of the plan in
    progress."""
    started_at = _instant(record.get(STARTED_AT))
    records = instance.get_run_records(
        dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}), limit=RUN_HISTORY_LIMIT
    )  # newest first
    # A run of the plan whose process is gone (a crash, the whole instance restarted) would
    # stay STARTED forever and hold the plan: mark it failed (reaped) and read again.
    if reap_dead_local_runs(
        instance,
        [r.dagster_run for r in records if r.dagster_run.status in IN_PROGRESS_RUN_STATUSES],
    ):
        records = instance.get_run_records(
            dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}), limit=RUN_HISTORY_LIMIT
        )
    active: list[RunFact] = []
    finished: dict[int, list[dg.RunRecord]] = defaultdict(list)
    runners: list[dg.RunRecord] = []  # finished runner runs, newest first
    for rec in records:
        fact = _fact(rec)
        if fact.run_id == ignore_run:
            continue
        if rec.dagster_run.status in IN_PROGRESS_RUN_STATUSES:
            active.append(fact)
        elif fact.batch is not None:
            finished[fact.batch].append(rec)
        elif fact.role == ROLE_RUNNER:
            runners.append(rec)
    # A runner run that failed on its own since the plan was started halts the plan as a failed
    # batch does (a failed gate in one of its batches says so first, below).
    last = runners[0] if runners else None
    failed_runner = (
        _fact(last)
        if last is not None
        and last.dagster_run.status == dg.DagsterRunStatus.FAILURE
        and REAPED_TAG not in last.dagster_run.tags
        and (started_at is None or last.create_timestamp >= started_at)
        else None
    )
    states: dict[int, BatchState] = {}
    attempts: dict[int, int] = {}
    # With a run of the plan in progress the driver waits whatever the batches' states (rule 2
    # of batch_decision): they are not read, which would cost a tick or a runner's step the
    # gates of every partition of the plan.
    passed = set() if active else _passed_since_last_tick(instance, plan, records)
    for batch in [] if active else plan.batches:
        if batch.index in passed:
            states[batch.index] = BatchState.PASSED
            continue
        runs = finished.get(batch.index, [])
        # Every finished run of a batch that is not passed failed to complete it (failed,
        # canceled, or its shadow was rewritten since), so each one used up an attempt's run key.
        attempts[batch.index] = len(runs)
        latest = runs[0] if runs else None
        if latest is None or latest.dagster_run.status == dg.DagsterRunStatus.SUCCESS:
            states[batch.index] = BatchState.PENDING
        elif REAPED_TAG in latest.dagster_run.tags:
            # Interrupted, not failed: its process died. Run the batch again (a new attempt).
            states[batch.index] = BatchState.PENDING
        elif started_at is not None and latest.create_timestamp < started_at:
            # The plan was started again after this failure: re-run the batch.
            states[batch.index] = BatchState.PENDING
        elif any(
            s.state == GateState.FAILED
            for s in gate_states(
                instance, plan.shadow, batch.partitions, plan.plan_id, gates=batch.gates
            )
        ):
            states[batch.index] = BatchState.FAILED_GATES
        else:
            states[batch.index] = BatchState.FAILED_RUN
        break  # batches run in order: the first one not passed decides
    daily = [
        RunFact(r.run_id, r.status.value, role=ROLE_DAILY)
        for r in daily_runs_in_progress(instance, table)
    ]
    overrun = record.get(OVERRUN)
    hold = _instant(overrun.get("hold_until")) if isinstance(overrun, dict) else None
    return {
        "batch_states": states,
        "active_runs": active,
        "daily_runs": daily,
        "failed_attempts": attempts,
        "started": record.get(DRIVING) is True,
        "hold_until": hold,
        "failed_runner": failed_runner,
    }


# The batches of a started plan that passed, as the last tick read them, per plan: (what they
# were read from, the batches). See `_passed_since_last_tick`.
_PASSED: dict[str, tuple[Hashable, frozenset[int]]] = {}
_PASSED_PLANS = 64  # plans remembered; the oldest is forgotten first
_PASSED_LOCK = threading.Lock()  # a code server may evaluate several tables' sensors at once


def _passed_since_last_tick(
    instance: dg.DagsterInstance, plan: BackfillPlan, records: Sequence[dg.RunRecord]
) -> set[int]:
    """`passed_batches`, read again only when what it reads may have changed. With no run of
    the plan in progress a tick reads which batches passed: between two batches, and on every
    tick from the last batch to the swap (every 15 s; on a five-year plan the gates of 1,826
    partitions, about 0.6 s). That answer changes only with a run of the plan (its gates are
    evaluated and its shadow written only by its runs) or a write of the shadow by anything
    else (a gate reads whether the shadow was rewritten since). So it is kept, in this process
    (the code server's, which evaluates every tick), with the plan's runs as this tick read them
    (their ids, statuses and last updates; the plan's number of runs beyond the page read) and
    the shadow's latest materialization: a tick that finds both as they were takes it. Both are
    read before the batches, so a write in between makes the next tick read them again."""
    shadow = instance.get_asset_records([dg.AssetKey(plan.shadow)])
    last_write = shadow[0].asset_entry.last_materialization_storage_id if shadow else None
    count = (
        instance.get_runs_count(dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}))
        if len(records) >= RUN_HISTORY_LIMIT
        else len(records)
    )
    seen = (
        last_write,
        count,
        tuple(
            (r.dagster_run.run_id, r.dagster_run.status.value, r.update_timestamp) for r in records
        ),
    )
    kept = _PASSED.get(plan.plan_id)
    if kept is not None and kept[0] == seen:
        return set(kept[1])
    passed = passed_batches(instance, plan)
    with _PASSED_LOCK:
        _PASSED.pop(plan.plan_id, None)
        if len(_PASSED) >= _PASSED_PLANS:
            _PASSED.pop(next(iter(_PASSED)))
        _PASSED[plan.plan_id] = (seen, frozenset(passed))
    return passed


def batch_run_request(plan: BackfillPlan, decision: Decision) -> dg.RunRequest:
    """The shadow job over the batch's days, tagged with the plan, the batch and the writer."""
    batch = decision.launch
    assert batch is not None
    tags = batch_tags(plan, batch)
    key = batch_run_key(plan.plan_id, batch.index, decision.attempt)
    if batch.start == batch.end:
        # A one-day batch runs as a single partition: Dagster records per-partition check results
        # natively only in single-partition runs, and a one-key "range" would record none.
        return dg.RunRequest(
            job_name=shadow_job(plan.target),
            run_key=key,
            partition_key=batch.start.isoformat(),
            tags=tags,
        )
    return dg.RunRequest(
        job_name=shadow_job(plan.target),
        run_key=key,
        tags={**tags, **range_tags(batch.start, batch.end)},
    )


def runner_run_request(instance: dg.DagsterInstance, plan: BackfillPlan) -> dg.RunRequest:
    """The runner job of the plan's table (service.plan_runner), which starts at the batch the
    driver would launch. Its run key counts the plan's runner runs so far: a restarted daemon
    re-evaluating the same tick cannot launch two, and each later one gets a new key."""
    earlier = instance.get_runs_count(
        dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id, ROLE_TAG: ROLE_RUNNER})
    )
    return dg.RunRequest(
        job_name=runner_job(plan.target),
        run_key=f"{plan.plan_id}-runner-{earlier + 1}",
        tags={PLAN_ID_TAG: plan.plan_id, WRITER_TAG: plan.target, ROLE_TAG: ROLE_RUNNER},
    )


def record_overrun(
    instance: dg.DagsterInstance, plan: BackfillPlan, record: Mapping[str, Any], d: Decision
) -> bool:
    """Record an overrun on the plan's status once per overrunning run; True if recorded now."""
    previous = record.get(OVERRUN)
    if isinstance(previous, dict) and previous.get("run_id") == d.overrun_run_id:
        return False
    record_status(
        instance,
        plan,
        PlanStatus.APPROVED,
        previous=record,
        **{
            OVERRUN: {
                "run_id": d.overrun_run_id,
                "hold_until": d.hold_until.isoformat() if d.hold_until else None,
                "reason": d.reason,
            }
        },
    )
    return True


def drive(
    instance: dg.DagsterInstance, table: BackfillableTable, now: dt.datetime, *, runner: bool
) -> tuple[list[dg.RunRequest], list[str]]:
    """One driver tick over the approved plans of `table`: run requests, one reason per plan.
    With `runner`, a plan's next batch is launched as its runner run, which carries on with the
    batches after it (service.plan_runner); else as a run of the batch alone."""
    requests: list[dg.RunRequest] = []
    reasons: list[str] = []
    for plan_id in active_plan_ids(instance):  # not every plan ever recorded
        record = latest_plan_record(instance, plan_id) or {}
        if record.get("status") != PlanStatus.APPROVED or record.get("target") != table.key:
            continue
        try:
            plan = BackfillPlan.from_dict(record["plan"])
            # A plan not started for the driver (approved only, or run by `backfill-assets
            # run`) gets the same "not started" decision whatever its runs and gates say, so
            # they are not read: on a five-year plan that read is the gates of 1,826
            # partitions, every tick.
            facts = (
                plan_facts(instance, table, plan, record)
                if record.get(DRIVING) is True
                else NOT_STARTED_FACTS
            )
            decision = next_action(plan, now, **facts)
        except BackfillError as e:  # one broken plan must not stop the others
            reasons.append(f"plan {plan_id}: cannot be driven: {e}")
            continue
        if decision.overrun:
            record_overrun(instance, plan, record, decision)
        if decision.launch is not None:
            requests.append(
                runner_run_request(instance, plan) if runner else batch_run_request(plan, decision)
            )
        reasons.append(decision.reason)
    return requests, reasons or [f"no approved plan for {table.key}"]


# -- refresh after swap --------------------------------------------------------------------------


def swap_plan_id(run: dg.DagsterRun) -> str | None:
    """The plan a swap or rollback run acted on: its plan tag, else its op config."""
    if run.tags.get(PLAN_ID_TAG):
        return run.tags[PLAN_ID_TAG]
    ops = run.run_config.get("ops")
    if isinstance(ops, Mapping):
        for op in ops.values():
            config = op.get("config") if isinstance(op, Mapping) else None
            if isinstance(config, Mapping) and config.get("plan_id"):
                return str(config["plan_id"])
    return None


def refresh_run_requests(
    plan: BackfillPlan, asset_graph: AssetGraphLike, trigger_run_id: str, skip: Collection[str] = ()
) -> list[dg.RunRequest]:
    """One run per grain of the plan's impact set (but `skip`: what the swap published with the
    target), upstream grains first (the run queue starts runs holding the writer tag in the
    order they were requested)."""
    requests = []
    for i, req in enumerate(refresh_requests(plan, asset_graph, skip=skip), start=1):
        tags = req.tags(plan.plan_id, plan.target)
        partition = tags.pop(PARTITION_TAG, None)
        requests.append(
            dg.RunRequest(
                run_key=f"{plan.plan_id}-refresh-{trigger_run_id}-{i}",
                asset_selection=[dg.AssetKey.from_user_string(k) for k in req.asset_keys],
                partition_key=partition,
                tags=tags,
            )
        )
    return requests


def follow_swaps(
    instance: dg.DagsterInstance,
    table: BackfillableTable,
    asset_graph: AssetGraphLike,
    cursor: str | None,
    now: dt.datetime,
) -> tuple[list[dg.RunRequest], list[str], str]:
    """Refresh requests for `table`'s swap/rollback runs that succeeded since the cursor (an ISO
    instant of the last run update seen); returns requests, reasons and the new cursor."""
    since = _instant(cursor) or now - REFRESH_LOOKBACK
    records = instance.get_run_records(
        dg.RunsFilter(
            tags={ROLE_TAG: [ROLE_SWAP, ROLE_ROLLBACK]},
            statuses=[dg.DagsterRunStatus.SUCCESS],
            updated_after=since.astimezone(dt.UTC),
        ),
        order_by="update_timestamp",
        ascending=True,
        limit=50,
    )
    requests: list[dg.RunRequest] = []
    reasons: list[str] = []
    for rec in records:
        run = rec.dagster_run
        role = run.tags.get(ROLE_TAG, "swap")
        since = max(since, rec.update_timestamp)
        plan_id = swap_plan_id(run)
        if plan_id is None:
            reasons.append(f"{role} run {run.run_id[:8]} names no plan_id")
            continue
        try:
            plan, _ = load_plan(instance, plan_id)
        except BackfillError as e:
            reasons.append(f"{role} run {run.run_id[:8]}: {e}")
            continue
        if plan.target != table.key:
            continue
        # Runs executed in-process (the backfill-assets CLI, tests) have no remote origin; the CLI
        # refreshes downstream itself right after its swap, so a second refresh would race it.
        if run.remote_job_origin is None:
            reasons.append(f"{role} run {run.run_id[:8]} ran in-process; its caller refreshes")
            continue
        new = refresh_run_requests(
            plan, asset_graph, run.run_id, skip=published_keys(instance, plan_id)
        )
        requests += new
        reasons.append(
            f"plan {plan_id}: {role} run {run.run_id[:8]} succeeded; requested {len(new)} "
            "refresh runs"
        )
    return (
        requests,
        reasons or ["no swap or rollback run succeeded since the last tick"],
        since.isoformat(),
    )
