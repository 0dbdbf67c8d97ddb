"""A table's runner job: the batch driver's run of a started plan (service.plan_runner)."""

import datetime as dt
from collections.abc import Callable

import dagster as dg

from backfill_assets.constants import (
    PLAN_ID_TAG,
    ROLE_RUNNER,
    ROLE_TAG,
    WAREHOUSE_RESOURCE_KEY,
    WRITER_TAG,
    runner_job,
)
from backfill_assets.defs.table.steps import warehouse_resource
from backfill_assets.errors import ExecutionRefused
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.service.lease import mark_this_process
from backfill_assets.service.plan_runner import run_started_plan
from backfill_assets.service.runs import (
    RepositoryLocation,
    code_location_repository,
    hold_connections,
)


def build_runner_job(
    table: BackfillableTable, clock: Callable[[], dt.datetime]
) -> dg.JobDefinition:
    """The job the batch driver launches for a started plan of `table` (tag: the plan's id)."""
    spec = table.spec

    @dg.op(
        name=f"{spec.name}__run_plan",
        required_resource_keys={WAREHOUSE_RESOURCE_KEY},
        description=f"Run the next batches of a started plan of {spec.name}, each a run of its "
        "own, while the batch driver's rules let the next one go.",
    )
    def run_plan(context: dg.OpExecutionContext) -> None:
        plan_id = context.run.tags.get(PLAN_ID_TAG, "")
        repository = code_location_repository(context)
        if not plan_id or repository is None:
            raise ExecutionRefused(
                f"{runner_job(spec.name)} runs a plan that was started for the batch driver "
                f"(tag {PLAN_ID_TAG}), launched by the driver from its code location. Start the "
                "plan instead (start_backfill_plan_job, or `backfill-assets start PLAN_ID`)"
            )
        # Its batches run in this process: if it dies, the driver reaps this run and them.
        mark_this_process(context.instance, context.run)
        # And store their events: the storages keep their connections, as the CLI's `run` does.
        hold_connections(context.instance)
        reports = run_started_plan(
            RepositoryLocation(repository),
            context.instance,
            warehouse_resource(context).adapter(),
            table,
            plan_id,
            clock=clock,
            runner_run_id=context.run_id,
            log=context.log.info,
        )
        passed = sum(r.status == "passed" for r in reports)
        context.log.info(f"plan {plan_id}: {passed} batches passed in this run")

    @dg.job(
        name=runner_job(spec.name),
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_RUNNER},
        description=f"The batch driver's run of a started plan of {spec.name}: its batches one "
        "after another, each a run of its own, until the window closes, the daily run comes, a "
        "gate fails or the plan is done.",
    )
    def runner() -> None:
        run_plan()

    return runner
