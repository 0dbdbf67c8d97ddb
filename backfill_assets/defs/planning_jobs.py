"""Plan and approve from the Dagster UI (Launchpad): the same planner as the CLI.

`plan_backfill_job` builds a plan from its config and records it as a *proposed* partition of
`backfill_plans`, with the Markdown a reviewer reads on the asset page; `approve_backfill_job`
approves a proposed plan by id. A proposed plan launches nothing.
"""

import datetime as dt
from collections.abc import Mapping

import dagster as dg

from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.lib.planning.build import PlanRequest
from backfill_assets.lib.planning.criteria import load_criteria_yaml
from backfill_assets.service.planner import plan_backfill
from backfill_assets.service.plans import approve_plan, load_plan, propose_plan


class PlanBackfillConfig(dg.Config):
    """The same inputs as `backfill-assets plan` (dates inclusive, YYYY-MM-DD)."""

    target: str
    start: str
    end: str
    window: str = ""
    timezone: str = ""
    rollback: str = ""
    criteria_yaml: str = ""


class ApproveConfig(dg.Config):
    plan_id: str
    approved_by: str = "dagster-ui"


def _asset_graph(context: dg.OpExecutionContext):
    """The code location's asset graph. A run launched by the webserver or daemon has its
    repository; an in-process run (`execute_in_process`) does not, so load the project's."""
    try:
        return context.repository_def.asset_graph
    except Exception:  # Dagster raises a CheckError (no public type) when it has none
        from backfill_assets.definitions import defs

        return defs.resolve_asset_graph()


def planning_definitions(tables: Mapping[str, object]) -> dg.Definitions:
    @dg.op(
        description="Build a backfill plan (no side effects on the warehouse) and record it "
        "as proposed; read it on the backfill_plans asset page."
    )
    def plan_backfill_op(
        context: dg.OpExecutionContext, config: PlanBackfillConfig, warehouse: WarehouseResource
    ) -> str:
        table = tables.get(config.target)
        criteria = None
        if config.criteria_yaml.strip():
            base = getattr(table, "criteria", None)
            criteria = load_criteria_yaml(config.criteria_yaml, base) if base else None
        request = PlanRequest(
            target=config.target,
            start=config.start,
            end=config.end,
            window=config.window or None,
            timezone=config.timezone or None,
            rollback=config.rollback or None,
            criteria=criteria,
        )
        plan = plan_backfill(
            request,
            asset_graph=_asset_graph(context),
            tables=tables,  # type: ignore[arg-type]
            instance=context.instance,
            warehouse=warehouse.adapter(),
            now=dt.datetime.now(dt.UTC),
        )
        propose_plan(context.instance, plan)
        context.log.info(
            f"plan {plan.plan_id} proposed: {len(plan.batches)} batches; approve it "
            f"with approve_backfill_job (plan_id: {plan.plan_id})"
        )
        return plan.plan_id

    @dg.op(
        description="Approve a proposed plan. Nothing runs yet: start it with "
        "start_backfill_plan_job (the daemon's batch driver) or `backfill-assets run`."
    )
    def approve_backfill_op(context: dg.OpExecutionContext, config: ApproveConfig) -> str:
        plan, _ = load_plan(context.instance, config.plan_id, allow_proposed=True)
        status = approve_plan(context.instance, plan, config.approved_by)
        context.log.info(f"plan {plan.plan_id} {status}")
        return status

    @dg.job(
        description="Plan a backfill from the Launchpad (config: target, start, end, window, "
        "timezone, rollback). The plan appears, proposed, on the backfill_plans asset."
    )
    def plan_backfill_job() -> None:
        plan_backfill_op()

    @dg.job(description="Approve a proposed backfill plan by id.")
    def approve_backfill_job() -> None:
        approve_backfill_op()

    return dg.Definitions(jobs=[plan_backfill_job, approve_backfill_job])
