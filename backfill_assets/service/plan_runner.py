"""The daemon's run of a started plan: the batch driver's decisions, carried out one batch after
another in one run, until a decision says wait.

Launching one run per batch from the driver sensor cost a batch a sensor tick (at least 5 s, the
daemon's loop; 15 s by default), the run queue's dequeue and a run worker importing the code
location: 15-16 s a batch for a fraction of a second of warehouse work (issue #46). A runner run
is launched once, by the sensor, and then runs the plan's batches here, each as a run of its own
in this process (`executor.run_batch`, as `backfill-assets run` does): each batch is still
recorded per partition, gated, shown in the UI and resumable, and a failed gate still stops the
next batch. Before each batch the runner asks `batch_decision.next_action` again, with the facts
read from the instance as the sensor reads them: the window, the daily run's slot, a daily run
queued or running, an overrun's hold, a pause. The runner run carries the table's writer tag, so
a daily run launched meanwhile waits in the queue, and the runner ends before the next batch:
the daily run then starts, and the sensor launches a new runner when it may.

Only where runs execute on this machine (the default run launcher): a runner's batches run in
its process, and only there can a dead one be told from a slow one and reaped. With another
launcher the sensor launches one run per batch, as before.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import dagster as dg

from backfill_assets.errors import ExecutionRefused
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.states import PlanStatus
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.batch_decision import next_action
from backfill_assets.service.batch_driver import plan_facts, record_overrun
from backfill_assets.service.executor import BatchReport, run_batch
from backfill_assets.service.plans import latest_plan_record
from backfill_assets.service.runs import Location


def run_started_plan(
    location: Location,
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    plan_id: str,
    *,
    clock: Callable[[], dt.datetime],
    runner_run_id: str,
    log: Callable[[str], None],
) -> list[BatchReport]:
    """Run the started plan's batches while the driver's rules let the next one go; return what
    ran. Raises GateFailed when a batch fails (the plan halts there, as the driver says on its
    next tick); a refusal before a batch (a daily run came, the table is held) ends the runner
    quietly, and the driver launches another when it may."""
    reports: list[BatchReport] = []
    launched: set[int] = set()
    while True:
        record = latest_plan_record(instance, plan_id) or {}
        if record.get("status") != PlanStatus.APPROVED or record.get("target") != table.key:
            log(f"plan {plan_id} is {record.get('status') or 'not recorded'}: no batch to run")
            return reports
        plan = BackfillPlan.from_dict(record["plan"])
        # This run is the plan's run in progress; the rules are about any other.
        facts = plan_facts(instance, table, plan, record, ignore_run=runner_run_id)
        decision = next_action(plan, clock(), **facts)
        if decision.overrun:
            record_overrun(instance, plan, record, decision)
        log(decision.reason)
        batch = decision.launch
        if batch is None:
            return reports
        if batch.index in launched:  # it ran here and is still not passed: never loop on it
            raise ExecutionRefused(
                f"plan {plan_id}: batch {batch.index} ran in this run and is still not passed; "
                "see its run in the UI"
            )
        launched.add(batch.index)
        try:
            report = run_batch(
                location, instance, wh, table, plan, batch, wait_s=table.writer_wait_seconds
            )
        except ExecutionRefused as e:  # not a verdict on the batch: not now
            log(f"batch {batch.index} did not start: {e}")
            return reports
        reports.append(report)
        log(
            f"batch {batch.index} ({batch.start}..{batch.end}) {report.status}"
            + (f" in {report.seconds:.1f} s, run {report.run_id}" if report.run_id else "")
        )
