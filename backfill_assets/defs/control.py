"""The control plane shared by every backfillable table: the plans asset and the Launchpad jobs.

- `plan_backfill_job` builds a plan from its config (the same inputs as `backfill-assets plan`)
  and records it as *proposed* on `backfill_plans`, with the Markdown a reviewer reads there.
- `approve_backfill_job` approves a proposed plan by id (atomically per table).
- `start_backfill_plan_job` hands an approved plan to its table's batch driver;
  `pause_backfill_plan_job` stops the driver from launching further batches.
- `adopt_table_job` adopts a table that already exists, as `backfill-assets adopt` does.
- `review_backfill_plan_job` records that a named person reviewed a plan's diff (a table with
  `swap_requires_review` needs it before the swap), as `backfill-assets review` does.

These are module-level objects, identical for every `backfill_definitions` call, so merging the
results of two calls does not conflict. The tables come from the run's code location.
"""

import datetime as dt
from typing import Any

import dagster as dg

from backfill_assets.constants import (
    ADOPT_JOB,
    ADOPT_OP,
    APPROVE_JOB,
    APPROVE_OP,
    PAUSE_JOB,
    PAUSE_OP,
    PLAN_JOB,
    PLAN_OP,
    PLANS_ASSET,
    PLANS_PARTITIONS,
    REVIEW_JOB,
    REVIEW_OP,
    START_JOB,
    START_OP,
    WAREHOUSE_RESOURCE_KEY,
)
from backfill_assets.errors import AdoptionRefused, ExecutionRefused, InvalidInput
from backfill_assets.lib.planning.build import PlanRequest
from backfill_assets.lib.planning.criteria import load_criteria_yaml
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.service.adopt import (
    DEFAULT_CHUNK_DAYS,
    DEFAULT_CODE_VERSION,
    adopt_table,
    check_adoption,
)
from backfill_assets.service.approval import approve_plan, propose_plan
from backfill_assets.service.batch_driver import pause_plan, start_plan
from backfill_assets.service.planner import plan_backfill, plan_stale
from backfill_assets.service.reconcile import current_plan, reconcile_untold
from backfill_assets.service.runs import code_location_repository
from backfill_assets.service.tables import backfill_tables, refuse_bad_daily_jobs, table_for

PLANS_PARTITIONS_DEF = dg.DynamicPartitionsDefinition(name=PLANS_PARTITIONS)

plans_spec = dg.AssetSpec(
    PLANS_ASSET,
    partitions_def=PLANS_PARTITIONS_DEF,
    group_name="backfill_control",
    description="Backfill plans, one partition per plan id. Each materialization's metadata "
    "holds the plan (JSON), its Markdown for review, and its status (proposed, approved, "
    "swapped, rolled_back, released, abandoned). Recorded by the planning and approval jobs and "
    "by backfill-assets; there is nothing to materialize by hand.",
)

_RESOURCES = {WAREHOUSE_RESOURCE_KEY}


class PlanBackfillConfig(dg.Config):
    """The same inputs as `backfill-assets plan` (dates inclusive, YYYY-MM-DD). With `stale`
    the range is found instead (leave start and end empty): one plan per range of consecutive
    partitions built by another code version (or by `built_by`)."""

    target: str
    start: str = ""
    end: str = ""
    stale: bool = False
    built_by: str = ""
    window: str = ""
    timezone: str = ""
    rollback: str = ""
    criteria_yaml: str = ""


class ApproveConfig(dg.Config):
    plan_id: str
    approved_by: str = "dagster-ui"


class PlanCommandConfig(dg.Config):
    """Which approved plan, and who asks (shown in the plan's status history)."""

    plan_id: str
    requested_by: str = "dagster-ui"


class ReviewConfig(dg.Config):
    """The plan whose diff was reviewed, and who reviewed it (recorded on backfill_plans)."""

    plan_id: str
    reviewed_by: str


class AdoptConfig(dg.Config):
    """The same inputs as `backfill-assets adopt` (`check_only`: its --check)."""

    target: str
    check_only: bool = False
    allow_duplicates: bool = False
    code_version: str = DEFAULT_CODE_VERSION
    chunk_days: int = DEFAULT_CHUNK_DAYS


def _location(context: dg.OpExecutionContext) -> tuple[Any, dict[str, BackfillableTable], Any]:
    """The asset graph, tables and repository of the run's code location."""
    repository = code_location_repository(context)
    if repository is None:
        raise ExecutionRefused(
            "this job needs its code location (the asset lineage and the declared tables); "
            "launch it from the Dagster UI, or use the backfill-assets command line"
        )
    return repository.asset_graph, backfill_tables(repository.asset_graph), repository


def _refuse_bad_daily_job(repository: Any, table: BackfillableTable) -> None:
    """As every CLI command that loads the code location: a daily job the guards cannot find
    by name would let batches run beside the real daily run."""
    refuse_bad_daily_jobs(repository, {table.key: table})


@dg.op(
    name=PLAN_OP,
    required_resource_keys=_RESOURCES,
    description="Build a backfill plan (no side effects on the warehouse) and record it as "
    "proposed; read it on the backfill_plans asset page.",
)
def plan_backfill_op(context: dg.OpExecutionContext, config: PlanBackfillConfig) -> str:
    graph, tables, repository = _location(context)
    table = table_for(tables, config.target, what="target")
    criteria = None
    if config.criteria_yaml.strip():
        criteria = load_criteria_yaml(config.criteria_yaml, table.criteria)
    _refuse_bad_daily_job(repository, table)
    stale = config.stale or bool(config.built_by)
    if stale and (config.start or config.end):
        raise InvalidInput(
            "stale: true finds the range from what is stale: leave start and end empty, or set "
            "stale: false to plan the range you name"
        )
    if not stale and not (config.start and config.end):
        raise InvalidInput(
            "set start and end (YYYY-MM-DD, inclusive), or stale: true to plan the partitions "
            "built by an older code version"
        )
    request = PlanRequest(
        target=config.target,
        start=config.start,
        end=config.end,
        window=config.window or None,
        timezone=config.timezone or None,
        rollback=config.rollback or None,
        criteria=criteria,
    )
    wh = getattr(context.resources, WAREHOUSE_RESOURCE_KEY).adapter()
    inputs: dict[str, Any] = {
        "asset_graph": graph,
        "tables": tables,
        "instance": context.instance,
        "warehouse": wh,
        "now": dt.datetime.now(dt.UTC),
    }
    if not stale:
        plans = [plan_backfill(request, **inputs)]
    else:
        # What is stale is read from the target's materializations: those of a swap or
        # rollback the instance was not told about (a crash) are recorded first.
        for said in reconcile_untold(context.instance, wh):
            context.log.info(said)
        scan, plans = plan_stale(request, built_by=config.built_by or None, **inputs)
        context.log.info("\n".join(scan.summary()))
        if not plans:
            context.log.info(f"nothing to backfill: no partition of {config.target} is {scan.rule}")
    for plan in plans:  # every plan was built before any is proposed
        status = propose_plan(context.instance, plan, wh)
        context.log.info(
            f"plan {plan.plan_id} ({plan.start}..{plan.end}) {status}: {len(plan.batches)} "
            f"batches; approve it with {APPROVE_JOB} (plan_id: {plan.plan_id})"
        )
    return ",".join(p.plan_id for p in plans)


@dg.op(
    name=APPROVE_OP,
    required_resource_keys=_RESOURCES,
    description=f"Approve a proposed plan. Nothing runs yet: start it with {START_JOB} (the "
    "table's batch driver) or `backfill-assets run`.",
)
def approve_backfill_op(context: dg.OpExecutionContext, config: ApproveConfig) -> str:
    graph, tables, repository = _location(context)
    wh = getattr(context.resources, WAREHOUSE_RESOURCE_KEY).adapter()
    plan, _ = current_plan(context.instance, wh, config.plan_id, allow_proposed=True)
    table = table_for(tables, plan.target, what=f"plan {plan.plan_id}'s target")
    _refuse_bad_daily_job(repository, table)
    status = approve_plan(context.instance, wh, table, plan, config.approved_by, asset_graph=graph)
    context.log.info(f"plan {plan.plan_id} {status}")
    return str(status)


@dg.op(
    name=START_OP,
    required_resource_keys=_RESOURCES,
    description="Mark an approved plan as started: its table's batch driver sensor then runs its "
    "batches inside the plan's window, around the daily run. Starting again after a failed "
    "batch re-runs that batch.",
)
def start_backfill_plan_op(context: dg.OpExecutionContext, config: PlanCommandConfig) -> None:
    now = dt.datetime.now(dt.UTC)
    wh = getattr(context.resources, WAREHOUSE_RESOURCE_KEY).adapter()
    context.log.info(start_plan(context.instance, config.plan_id, config.requested_by, now, wh))


@dg.op(name=PAUSE_OP, description="Stop the batch driver from launching further batches.")
def pause_backfill_plan_op(context: dg.OpExecutionContext, config: PlanCommandConfig) -> None:
    context.log.info(pause_plan(context.instance, config.plan_id, config.requested_by))


@dg.op(
    name=ADOPT_OP,
    required_resource_keys=_RESOURCES,
    description="Adopt a table that already exists: check it against its declaration (with "
    "check_only, that is all), then record each day's rows and checksum in place and give each "
    "partition without a materialization one (docs/adopt.md).",
)
def adopt_table_op(context: dg.OpExecutionContext, config: AdoptConfig) -> None:
    _, tables, repository = _location(context)
    table = table_for(tables, config.target, what="target")
    _refuse_bad_daily_job(repository, table)
    wh = getattr(context.resources, WAREHOUSE_RESOURCE_KEY).adapter()
    check = check_adoption(context.instance, wh, table, allow_duplicates=config.allow_duplicates)
    context.log.info("\n".join(check.lines()))
    if check.refusals:
        raise AdoptionRefused("; ".join(check.refusals) + ". Nothing was written")
    if config.check_only:
        return

    result = adopt_table(
        context.instance,
        wh,
        table,
        check=check,
        code_version=config.code_version,
        allow_duplicates=config.allow_duplicates,
        chunk_days=config.chunk_days,
        wait_s=table.writer_wait_seconds,
        on_chunk=lambda chunk: context.log.info(chunk.describe()),
    )
    context.log.info(result.describe())


@dg.op(
    name=REVIEW_OP,
    required_resource_keys=_RESOURCES,
    description="Record that reviewed_by reviewed the plan's diff (the shadow against the live "
    "rows, shown as diff_markdown on backfill_plans). A shadow written after it voids it.",
)
def review_backfill_plan_op(context: dg.OpExecutionContext, config: ReviewConfig) -> None:
    from backfill_assets.lib.review.render import headline
    from backfill_assets.service.review import record_review

    _, tables, _ = _location(context)
    wh = getattr(context.resources, WAREHOUSE_RESOURCE_KEY).adapter()
    got = record_review(context.instance, tables, wh, config.plan_id, config.reviewed_by)
    context.log.info(
        f"plan {config.plan_id} reviewed by {config.reviewed_by}: {headline(got.diff)}"
    )


@dg.job(
    name=REVIEW_JOB,
    description="Record a review of an approved plan's diff (config: plan_id, reviewed_by); a "
    "table with swap_requires_review refuses the swap without one.",
)
def review_backfill_plan_job() -> None:
    review_backfill_plan_op()


@dg.job(
    name=PLAN_JOB,
    description="Plan a backfill from the Launchpad (config: target, start, end, window, "
    "timezone, rollback). The plan appears, proposed, on the backfill_plans asset.",
)
def plan_backfill_job() -> None:
    plan_backfill_op()


@dg.job(name=APPROVE_JOB, description="Approve a proposed backfill plan by id.")
def approve_backfill_job() -> None:
    approve_backfill_op()


@dg.job(
    name=START_JOB,
    description="Start (or resume) an approved backfill plan (config: plan_id). Writes nothing "
    "to the warehouse; the table's batch driver sensor launches the batches.",
)
def start_backfill_plan_job() -> None:
    start_backfill_plan_op()


@dg.job(
    name=ADOPT_JOB,
    description="Adopt a table that already exists, with its history (config: target; "
    "check_only to only report). Its rows stay where they are.",
)
def adopt_table_job() -> None:
    adopt_table_op()


@dg.job(
    name=PAUSE_JOB,
    description="Pause an approved backfill plan (config: plan_id); start it again to resume.",
)
def pause_backfill_plan_job() -> None:
    pause_backfill_plan_op()


CONTROL_DEFINITIONS = dg.Definitions(
    assets=[plans_spec],
    jobs=[
        plan_backfill_job,
        approve_backfill_job,
        start_backfill_plan_job,
        pause_backfill_plan_job,
        adopt_table_job,
        review_backfill_plan_job,
    ],
)
