"""`run`, `start` and `pause`: run an approved plan's batches here, or let the daemon's batch
driver run them in the plan's window, or stop it from launching more."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from backfill_assets.cli import common
from backfill_assets.cli.common import EXIT_OK, QUIET, _runs_output_to_log, _say_waiting
from backfill_assets.cli.context import _context, _instance
from backfill_assets.cli.options import _plan_id_arg, _who
from backfill_assets.errors import GateFailed

if TYPE_CHECKING:
    import argparse


def cmd_run(a: argparse.Namespace) -> int:
    from backfill_assets.cli.output import BatchRun, GateFailureOut, RunOut, dump
    from backfill_assets.cli.progress import PlanProgress
    from backfill_assets.service.executor import BatchReport, execute_plan
    from backfill_assets.service.reconcile import current_plan

    c = _context(a, jobs=True)
    plan_id = _plan_id_arg(a.plan)
    plan, _ = current_plan(c.instance, c.wh, plan_id)
    reports: list[BatchReport] = []
    shown = PlanProgress(plan, sys.stderr)
    waiting = _say_waiting()

    def progress(event: Any) -> None:
        if event.report is not None:
            reports.append(event.report)
        shown(event)

    def output(outcome: str) -> str:
        next_ = {
            "done": f"backfill-assets swap {plan_id}",
            "partial": f"backfill-assets run {plan_id}",
            "halted": f"fix the cause, then backfill-assets run {plan_id}",
        }[outcome]
        return dump(
            RunOut(
                plan_id=plan_id,
                target=plan.target,
                outcome=outcome,  # type: ignore[arg-type]
                batches_total=len(plan.batches),
                batches=[
                    BatchRun(
                        index=r.index,
                        start=r.start.isoformat(),
                        end=r.end.isoformat(),
                        status="skipped" if r.status.startswith("skipped") else r.status,  # type: ignore[arg-type]
                        run_id=r.run_id,
                        seconds=round(r.seconds, 3),
                        failures=[
                            GateFailureOut(
                                partition=f.partition, gate=f.gate, description=f.description
                            )
                            for f in r.failures
                        ],
                    )
                    for r in reports
                ],
                next=next_,
            )
        )

    try:
        with shown, _runs_output_to_log():
            execute_plan(
                c.definitions,
                c.instance,
                c.wh,
                c.tables,
                plan_id,
                clock=common._now,
                ignore_window=a.ignore_window,
                progress=progress,
                max_batches=a.batches,
                log_level=QUIET,
                wait_s=c.wait_s,
                on_wait=waiting,
            )
    except GateFailed:
        if a.format == "json":
            print(output("halted"))
        raise
    ran = sum(r.status == "passed" for r in reports)
    outcome = "done" if len(reports) == len(plan.batches) else "partial"
    if a.format == "json":
        print(output(outcome))
        return EXIT_OK
    skipped = sum(r.status.startswith("skipped") for r in reports)
    left = len(plan.batches) - len(reports)
    print(
        f"plan {plan_id}: {ran} batches ran and passed, {skipped} already passed"
        + (
            f", {left} left. Next: backfill-assets run {plan_id}"
            if left
            else f". Next: backfill-assets swap {plan_id}"
        )
    )
    return EXIT_OK


def cmd_start(a: argparse.Namespace) -> int:
    from backfill_assets.service.batch_driver import start_plan

    # The code location too (or its snapshot): its daily jobs are checked (_context) before the
    # daemon may launch batches that the guards keep clear of them by name.
    c = _context(a)
    print(start_plan(c.instance, _plan_id_arg(a.plan), _who(a), common._now(), c.wh))
    return EXIT_OK


def cmd_pause(a: argparse.Namespace) -> int:
    from backfill_assets.errors import ExecutionRefused
    from backfill_assets.service.batch_driver import pause_plan
    from backfill_assets.service.reconcile import current_plan

    # The instance alone: pausing must work while the code location does not load.
    instance = _instance()
    plan_id = _plan_id_arg(a.plan)
    try:
        print(pause_plan(instance, plan_id, _who(a)))
    except ExecutionRefused:
        # The instance may have lost its record of the plan (erased in the UI): the
        # warehouse's record restores it, then the plan is paused.
        c = _context(a, instance=instance)
        if c.wh.plan_record(plan_id) is None:
            raise
        current_plan(instance, c.wh, plan_id)
        print(pause_plan(instance, plan_id, _who(a)))
    return EXIT_OK
