"""Publishing a plan: the swap and rollback jobs, and the downstream dbt check that gates the swap.

The swap moves a validated plan's shadow partitions into the target in one transaction (with the
impacted dbt models built in shadow, gated on their dbt tests, when the table declares
`downstream_dbt`); the rollback moves them back. Neither runs the target asset.
"""

import dagster as dg
from pydantic import Field

from backfill_assets.constants import (
    DOWNSTREAM_CHECK,
    ROLE_ROLLBACK,
    ROLE_SWAP,
    ROLE_TAG,
    WAREHOUSE_RESOURCE_KEY,
    WRITER_TAG,
    rollback_job,
    rollback_op,
    swap_job,
    swap_op,
)
from backfill_assets.defs.table.steps import claim_writer, warehouse_resource
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import SwapResult, Warehouse
from backfill_assets.service.downstream import DbtDownstream, build_in_shadow, drop_shadows
from backfill_assets.service.plans import latest_plan_record
from backfill_assets.service.published import (
    ROLLBACK_ACTION,
    SWAP_ACTION,
    code_versions_of,
    model_materializations,
    swap_materializations,
)
from backfill_assets.service.reconcile import current_plan, settle
from backfill_assets.service.runs import code_location
from backfill_assets.service.swap import perform_rollback, perform_swap, prepare_downstream


class PlanIdConfig(dg.Config):
    """Which approved plan to act on."""

    plan_id: str


class SwapConfig(PlanIdConfig):
    """Which approved plan to swap, and whether its downstream dbt models are published with it."""

    downstream: bool = Field(
        default=True,
        description="Build the impacted dbt models in shadow, gate them on their dbt tests and "
        "publish them with the target (the table declares how: downstream_dbt). False: publish "
        "the target alone and leave the models stale (the CLI's --no-refresh).",
    )


def _swap_resources(downstream: DbtDownstream | None) -> set[str]:
    # The swap and the downstream gate run dbt through the code location's DbtCliResource.
    return {WAREHOUSE_RESOURCE_KEY} | ({downstream.resource_key} if downstream else set())


def build_downstream_check(
    table: BackfillableTable, downstream: DbtDownstream | None
) -> dg.AssetChecksDefinition:
    """The shadow's `downstream_dbt_tests` check: the swap evaluates it; run alone, a dry run."""
    spec = table.spec

    @dg.asset_check(
        asset=dg.AssetKey(spec.shadow_name),
        name=DOWNSTREAM_CHECK,
        blocking=True,  # it gates the swap, as the batch gates do
        required_resource_keys=_swap_resources(downstream),
        description="The impacted dbt models built in shadow from this shadow, and their dbt "
        "tests run there. The swap evaluates it (and refuses on failure) before it publishes the "
        "target with those models; executing it here builds and tests them for the plan that "
        "holds the table, then drops what it built.",
    )
    def downstream_check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        # Dagster finds the context by the parameter's name: any other name makes it an input,
        # loaded from the shadow asset's IO manager, and the check failed before it ran.
        op = context.op_execution_context
        wh = warehouse_resource(op).adapter()
        plan_id = wh.active_plan(spec.name)
        if plan_id is None or downstream is None:
            return dg.AssetCheckResult(
                passed=True,
                description="nothing to check: "
                + ("no plan holds the table" if downstream else "no downstream_dbt declared"),
            )
        claim_writer(op, wh, table, ROLE_SWAP, plan_id)
        plan, _ = current_plan(op.instance, wh, plan_id)
        graph = code_location(op)
        build = build_in_shadow(
            plan,
            table,
            graph,
            wh,
            getattr(op.resources, downstream.resource_key),
            downstream,
            warehouse_resource(op).url,
            op.log.info,
        )
        drop_shadows(wh, build)  # a dry run: the rest was dropped by the build itself
        ev = build.evaluation(spec.shadow_name)
        return dg.AssetCheckResult(
            passed=ev.passed,
            description=ev.description,
            metadata=ev.metadata,
            severity=ev.severity,
        )

    return downstream_check


def build_swap_job(table: BackfillableTable, downstream: DbtDownstream | None) -> dg.JobDefinition:
    """The table's swap job: one op, configured with the plan to swap."""
    spec = table.spec

    @dg.op(
        name=swap_op(spec.name),
        required_resource_keys=_swap_resources(downstream),
        description=f"Swap a validated plan's shadow partitions into {spec.name} atomically, "
        "keeping the replaced rows as a backup; with downstream dbt models declared, build them "
        "in shadow first, gate them on their dbt tests, and publish them in the same transaction.",
    )
    def do_swap(context: dg.OpExecutionContext, config: SwapConfig) -> None:
        wh = warehouse_resource(context).adapter()
        claim_writer(context, wh, table, ROLE_SWAP, config.plan_id)
        build = None
        if downstream is not None and config.downstream:
            build = prepare_downstream(
                context.instance,
                table,
                code_location(context),
                wh,
                getattr(context.resources, downstream.resource_key),
                downstream,
                warehouse_resource(context).url,
                config.plan_id,
                context.log.info,
            )
            if build is not None:
                context.log_event(build.evaluation(spec.shadow_name))  # type: ignore[arg-type]
        try:
            result = perform_swap(context.instance, table, wh, config.plan_id, build)
        except Exception:
            if build is not None:  # refused or failed: the models built in shadow go too
                drop_shadows(wh, build)
            raise
        _log_moves(context, wh, table, result, SWAP_ACTION)
        context.log.info(
            f"{result.action}: {len(result.partitions)} partitions in "
            f"{result.weeks} weeks, {result.seconds * 1000:.1f} ms"
        )

    @dg.job(
        name=swap_job(spec.name),
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_SWAP},
        description=f"Swap a plan into {spec.name} (config: plan_id).",
    )
    def swap() -> None:
        do_swap()

    return swap


def build_rollback_job(table: BackfillableTable) -> dg.JobDefinition:
    """The table's rollback job: one op, configured with the swapped plan to roll back."""
    spec = table.spec

    @dg.op(
        name=rollback_op(spec.name),
        required_resource_keys={WAREHOUSE_RESOURCE_KEY},
        description=f"Restore the rows a plan's swap replaced in {spec.name}, atomically.",
    )
    def do_rollback(context: dg.OpExecutionContext, config: PlanIdConfig) -> None:
        wh = warehouse_resource(context).adapter()
        claim_writer(context, wh, table, ROLE_ROLLBACK, config.plan_id)
        result = perform_rollback(context.instance, table, wh, config.plan_id)
        _log_moves(context, wh, table, result, ROLLBACK_ACTION)
        context.log.info(
            f"{result.action}: {len(result.partitions)} partitions restored in "
            f"{result.seconds * 1000:.1f} ms"
        )

    @dg.job(
        name=rollback_job(spec.name),
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_ROLLBACK},
        description=f"Roll a swapped plan of {spec.name} back (config: plan_id).",
    )
    def rollback() -> None:
        do_rollback()

    return rollback


def _log_moves(
    context: dg.OpExecutionContext,
    wh: Warehouse,
    table: BackfillableTable,
    result: SwapResult,
    action: str,
) -> None:
    """Log what the swap or rollback moved (the target's partitions, the models published or
    restored with it), then settle the plan's record: the instance has been told everything."""
    record = latest_plan_record(context.instance, result.plan_id) or {}
    versions = code_versions_of(record, action)
    rows = wh.table_rows(table.spec)
    for event in swap_materializations(table.key, result, action, rows, versions):
        context.log_event(event)
    if result.partitions and isinstance(record.get("plan"), dict):  # not when already done
        for event in model_materializations(BackfillPlan.from_dict(record["plan"]), record, action):
            context.log_event(event)
    if record.get("status"):
        settle(wh, result.plan_id, str(record["status"]))
