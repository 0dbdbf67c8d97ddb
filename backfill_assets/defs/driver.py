"""Dagster wiring of the batch driver: two sensors and the jobs that start or pause a plan.

- `backfill_batch_driver` (every 15 s, in the daemon) launches the next batch of each started,
  approved plan when `service.driver.next_action` says so, and otherwise records why not as the
  tick's skip reason. It reads the Dagster instance only: DuckDB allows one process, and the
  runs (not the daemon) are the ones that write the warehouse.
- `backfill_refresh_after_swap` requests the downstream refresh runs of a plan's impact set after
  a `<table>__swap_job` or `__rollback_job` run launched through the instance succeeds (the CLI,
  which runs the swap in-process, refreshes by itself).
- `start_backfill_plan_job` (Launchpad, config `plan_id`) marks an approved plan as started for
  the driver; approving alone launches nothing. Starting again after a failed batch acknowledges
  the failure, so the driver re-runs that batch as a new attempt. `pause_backfill_plan_job` stops
  the driver from launching further batches of a plan (a running batch finishes).

Mutual exclusion with the daily run is enforced by the instance, not here: every batch, swap,
rollback, refresh and daily run carries the writer tag that dagster.yaml limits to one run at a
time, and every step that writes the warehouse uses the writer pool.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import dagster as dg

from backfill_assets.constants import (
    BATCH_TAG,
    PLAN_ID_TAG,
    ROLE_DAILY,
    ROLE_ROLLBACK,
    ROLE_SWAP,
    ROLE_TAG,
)
from backfill_assets.errors import BackfillError, ExecutionRefused
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.service.driver import (
    FAILED_GATES,
    FAILED_RUN,
    PASSED,
    PENDING,
    Decision,
    RunFact,
    batch_run_key,
    next_action,
)
from backfill_assets.service.executor import batch_done, batch_tags, shadow_job_name
from backfill_assets.service.gating import FAILED, gate_states
from backfill_assets.service.guards import daily_runs_in_progress
from backfill_assets.service.plans import (
    APPROVED,
    DRIVING,
    latest_plan_record,
    load_plan,
    plan_statuses,
    record_status,
)
from backfill_assets.service.runs import range_tags
from backfill_assets.service.swap import refresh_requests
from backfill_assets.table import BackfillableTable

DRIVER_SENSOR = "backfill_batch_driver"
REFRESH_SENSOR = "backfill_refresh_after_swap"
START_JOB = "start_backfill_plan_job"
PAUSE_JOB = "pause_backfill_plan_job"
DRIVER_INTERVAL_SECONDS = 15
REFRESH_INTERVAL_SECONDS = 15

# Fields of a plan's status record that say whether (and since when) the driver runs it. They are
# carried forward whenever the driver records the plan again (e.g. an overrun).
STARTED_AT = "started_at"
STARTED_BY = "started_by"
OVERRUN = "overrun"
_CARRIED = ("approved_by", DRIVING, STARTED_AT, STARTED_BY)

# Runs of a plan that still hold (or wait for) the writer tag. CANCELING is included: the run's
# process may still be writing.
RUN_IN_PROGRESS = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)
RUN_HISTORY_LIMIT = 500
# Without a cursor (first tick ever), swaps that finished this long ago are still followed up.
REFRESH_LOOKBACK = dt.timedelta(hours=1)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# -- starting and pausing a plan -----------------------------------------------------------------


def start_plan(
    instance: dg.DagsterInstance, plan_id: str, started_by: str, now: dt.datetime
) -> str:
    """Mark an approved plan as started for the driver; return a one-line summary.

    Also acknowledges earlier failed batch runs (the driver re-runs such a batch as a new
    attempt) and lifts a hold left by an overrun.
    """
    plan, status = load_plan(instance, plan_id)
    if status != APPROVED:
        raise ExecutionRefused(
            f"plan {plan_id} is {status}; only an approved plan can be started "
            "(approve_backfill_job or `backfill-assets approve PLAN.json` first)"
        )
    record = latest_plan_record(instance, plan_id) or {}
    extra = {k: record[k] for k in _CARRIED if k in record}
    extra.update({DRIVING: True, STARTED_AT: now.isoformat(), STARTED_BY: started_by})
    record_status(instance, plan, APPROVED, **extra)
    return (
        f"plan {plan_id} started: {DRIVER_SENSOR} launches its next batch inside the window "
        f"{plan.window.label} {plan.window.timezone}, never while {plan.contention.daily_job} "
        "runs"
    )


def pause_plan(instance: dg.DagsterInstance, plan_id: str, paused_by: str) -> str:
    """Stop the driver from launching further batches of a plan; a running batch finishes."""
    plan, status = load_plan(instance, plan_id)
    if status != APPROVED:
        raise ExecutionRefused(f"plan {plan_id} is {status}; only an approved plan runs batches")
    record = latest_plan_record(instance, plan_id) or {}
    extra = {k: record[k] for k in _CARRIED if k in record}
    extra.update({DRIVING: False, "paused_by": paused_by})
    record_status(instance, plan, APPROVED, **extra)
    return f"plan {plan_id} paused: start it again with {START_JOB} to resume"


class PlanCommandConfig(dg.Config):
    """Which approved plan, and who asks (shown in the plan's status history)."""

    plan_id: str
    requested_by: str = "dagster-ui"


@dg.op(
    description="Mark an approved plan as started: the backfill_batch_driver sensor then runs "
    "its batches inside the plan's window, around the daily run. Starting again after a failed "
    "batch re-runs that batch."
)
def start_backfill_plan(context: dg.OpExecutionContext, config: PlanCommandConfig) -> None:
    context.log.info(start_plan(context.instance, config.plan_id, config.requested_by, _utc_now()))


@dg.op(description="Stop the batch driver from launching further batches of a plan.")
def pause_backfill_plan(context: dg.OpExecutionContext, config: PlanCommandConfig) -> None:
    context.log.info(pause_plan(context.instance, config.plan_id, config.requested_by))


@dg.job(
    name=START_JOB,
    description="Start (or resume) an approved backfill plan (config: plan_id). Writes nothing "
    "to the warehouse; the batch driver sensor launches the batches.",
)
def start_backfill_plan_job() -> None:
    start_backfill_plan()


@dg.job(
    name=PAUSE_JOB,
    description="Pause an approved backfill plan (config: plan_id); start it again to resume.",
)
def pause_backfill_plan_job() -> None:
    pause_backfill_plan()


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
    instance: dg.DagsterInstance, plan: BackfillPlan, record: Mapping[str, Any]
) -> dict[str, Any]:
    """Everything `next_action` takes besides the plan and the clock, read from the instance."""
    started_at = _instant(record.get(STARTED_AT))
    records = instance.get_run_records(
        dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}), limit=RUN_HISTORY_LIMIT
    )  # newest first
    active: list[RunFact] = []
    finished: dict[int, list[dg.RunRecord]] = defaultdict(list)
    for rec in records:
        fact = _fact(rec)
        if rec.dagster_run.status in RUN_IN_PROGRESS:
            active.append(fact)
        elif fact.batch is not None:
            finished[fact.batch].append(rec)
    states: dict[int, str] = {}
    attempts: dict[int, int] = {}
    for batch in plan.batches:
        if batch_done(instance, plan, batch):
            states[batch.index] = PASSED
            continue
        runs = finished.get(batch.index, [])
        # Every finished run of a batch that is not passed failed to complete it (failed,
        # canceled, or its shadow was rewritten since), so each one used up an attempt's run key.
        attempts[batch.index] = len(runs)
        latest = runs[0] if runs else None
        if latest is None or latest.dagster_run.status == dg.DagsterRunStatus.SUCCESS:
            states[batch.index] = PENDING
        elif started_at is not None and latest.create_timestamp < started_at:
            # The plan was started again after this failure: re-run the batch.
            states[batch.index] = PENDING
        elif any(s.state == FAILED for s in gate_states(instance, plan.shadow, batch.partitions)):
            states[batch.index] = FAILED_GATES
        else:
            states[batch.index] = FAILED_RUN
        break  # batches run in order: the first one not passed decides
    daily = [
        RunFact(r.run_id, r.status.value, role=ROLE_DAILY)
        for r in daily_runs_in_progress(instance, plan.target)
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
    }


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
            job_name=shadow_job_name(plan.target),
            run_key=key,
            partition_key=batch.start.isoformat(),
            tags=tags,
        )
    return dg.RunRequest(
        job_name=shadow_job_name(plan.target),
        run_key=key,
        tags={**tags, **range_tags(batch.start, batch.end)},
    )


def record_overrun(
    instance: dg.DagsterInstance, plan: BackfillPlan, record: Mapping[str, Any], d: Decision
) -> bool:
    """Record an overrun on the plan's status once per overrunning run; True if recorded now."""
    previous = record.get(OVERRUN)
    if isinstance(previous, dict) and previous.get("run_id") == d.overrun_run_id:
        return False
    extra = {k: record[k] for k in _CARRIED if k in record}
    extra[OVERRUN] = {
        "run_id": d.overrun_run_id,
        "hold_until": d.hold_until.isoformat() if d.hold_until else None,
        "reason": d.reason,
    }
    record_status(instance, plan, APPROVED, **extra)
    return True


def drive(
    instance: dg.DagsterInstance, tables: Mapping[str, BackfillableTable], now: dt.datetime
) -> tuple[list[dg.RunRequest], list[str]]:
    """One driver tick over every approved plan: run requests, and one reason per plan."""
    requests: list[dg.RunRequest] = []
    reasons: list[str] = []
    for plan_id, (target, status) in sorted(plan_statuses(instance).items()):
        if status != APPROVED:
            continue
        if target not in tables:
            reasons.append(f"plan {plan_id}: {target} is not backfillable in this code location")
            continue
        try:
            record = latest_plan_record(instance, plan_id) or {}
            plan = BackfillPlan.from_dict(record["plan"])
            decision = next_action(plan, now, **plan_facts(instance, plan, record))
        except BackfillError as e:  # one broken plan must not stop the others
            reasons.append(f"plan {plan_id}: cannot be driven: {e}")
            continue
        if decision.overrun:
            record_overrun(instance, plan, record, decision)
        if decision.launch is not None:
            requests.append(batch_run_request(plan, decision))
        reasons.append(decision.reason)
    return requests, reasons or ["no approved plan"]


def _shadow_jobs(
    tables: Mapping[str, BackfillableTable], table_definitions: Sequence[dg.Definitions]
) -> list[Any]:
    # The sensor must name the very job objects registered with the tables' assets: Dagster
    # dedupes jobs by identity and refuses a second job definition with the same name.
    names = {shadow_job_name(key) for key in tables}
    jobs = [j for d in table_definitions for j in d.jobs or [] if j.name in names]
    missing = names - {j.name for j in jobs}
    if missing:
        raise ValueError(f"table_definitions lack the shadow jobs {sorted(missing)}")
    return jobs


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


class _GraphOnly:
    """`refresh_requests` reads only `resolve_asset_graph()` from the Definitions it is given; a
    sensor has its repository's asset graph instead."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph

    def resolve_asset_graph(self) -> Any:
        return self._graph


def refresh_run_requests(
    plan: BackfillPlan, asset_graph: Any, trigger_run_id: str
) -> list[dg.RunRequest]:
    """One run per grain of the plan's impact set, upstream grains first (the run queue starts
    runs holding the writer tag in the order they were requested)."""
    order = {k.to_user_string(): i for i, k in enumerate(asset_graph.toposorted_asset_keys)}
    reqs = refresh_requests(plan, cast(dg.Definitions, _GraphOnly(asset_graph)))
    reqs.sort(key=lambda r: min(order.get(k, 0) for k in r.asset_keys))
    return [
        dg.RunRequest(
            run_key=f"{plan.plan_id}-refresh-{trigger_run_id}-{i}",
            asset_selection=[dg.AssetKey.from_user_string(k) for k in req.asset_keys],
            tags=req.tags(plan.plan_id, plan.target),
        )
        for i, req in enumerate(reqs, start=1)
    ]


def follow_swaps(
    instance: dg.DagsterInstance, asset_graph: Any, cursor: str | None, now: dt.datetime
) -> tuple[list[dg.RunRequest], list[str], str]:
    """Refresh requests for swap/rollback runs that succeeded since the cursor (an ISO instant of
    the last run update seen); returns requests, reasons and the new cursor."""
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
        # Runs executed in-process (the backfill-assets CLI, tests) have no remote origin; the CLI
        # refreshes downstream itself right after its swap, so a second refresh would race it.
        if run.remote_job_origin is None:
            reasons.append(f"{role} run {run.run_id[:8]} ran in-process; its caller refreshes")
            continue
        plan_id = swap_plan_id(run)
        if plan_id is None:
            reasons.append(f"{role} run {run.run_id[:8]} names no plan_id")
            continue
        try:
            plan, _ = load_plan(instance, plan_id)
        except BackfillError as e:
            reasons.append(f"{role} run {run.run_id[:8]}: {e}")
            continue
        new = refresh_run_requests(plan, asset_graph, run.run_id)
        requests += new
        reasons.append(
            f"plan {plan_id}: {role} run {run.run_id[:8]} succeeded; requested {len(new)} "
            "refresh runs"
        )
    return (
        requests,
        reasons or ["no swap or rollback run succeeded since the last tick"],
        (since.isoformat()),
    )


def _refresh_selection(tables: Mapping[str, BackfillableTable]) -> dg.AssetSelection:
    targets = dg.AssetSelection.assets(*[t.key for t in tables.values()])
    shadows = dg.AssetSelection.assets(*[t.shadow_key for t in tables.values()])
    return targets.downstream(include_self=False) - shadows


# -- the factory ---------------------------------------------------------------------------------


def driver_definitions(
    tables: Mapping[str, BackfillableTable],
    table_definitions: Sequence[dg.Definitions],
    *,
    clock: Callable[[], dt.datetime] = _utc_now,
) -> dg.Definitions:
    """The batch driver and refresh sensors for `tables`.

    Args:
        tables: the backfillable tables by key.
        table_definitions: the Definitions built by each table's `definitions()`, as registered
            in the code location (the driver requests runs of their shadow jobs).
        clock: the time source (tests pass a fixed one).
    """

    @dg.sensor(
        name=DRIVER_SENSOR,
        minimum_interval_seconds=DRIVER_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        jobs=_shadow_jobs(tables, table_definitions),
        description="Launches the next batch of each started, approved backfill plan inside its "
        "window, never while the daily run is queued or running, only after every gate of the "
        "previous batches passed and only if the batch fits before the window or the daily "
        "slot. The skip reason of each tick says why nothing launched.",
    )
    def backfill_batch_driver(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        requests, reasons = drive(context.instance, tables, clock())
        for reason in reasons:
            context.log.info(reason)
        return dg.SensorResult(
            run_requests=requests, skip_reason=None if requests else "; ".join(reasons)
        )

    @dg.sensor(
        name=REFRESH_SENSOR,
        minimum_interval_seconds=REFRESH_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        asset_selection=_refresh_selection(tables),
        description="After a swap or rollback run launched from the UI succeeds, refreshes the "
        "plan's downstream impact set for the affected partitions (one run per grain).",
    )
    def backfill_refresh_after_swap(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        graph = cast(dg.RepositoryDefinition, context.repository_def).asset_graph
        requests, reasons, cursor = follow_swaps(context.instance, graph, context.cursor, clock())
        for reason in reasons:
            context.log.info(reason)
        return dg.SensorResult(
            run_requests=requests,
            cursor=cursor,
            skip_reason=None if requests else "; ".join(reasons),
        )

    return dg.Definitions(sensors=[backfill_batch_driver, backfill_refresh_after_swap])


def driver_jobs() -> Sequence[dg.JobDefinition]:
    """The Launchpad jobs that start and pause plans (registered by control_definitions)."""
    return [start_backfill_plan_job, pause_backfill_plan_job]
