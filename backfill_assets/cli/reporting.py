"""`status`, `list`, `doctor`, `runbook` and `diff`: where a plan stands, the plans there are,
what is wrong, a table's runbook, and what a plan's backfill changes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from backfill_assets.cli.common import EXIT_OK
from backfill_assets.cli.context import _context, _instance
from backfill_assets.cli.options import _plan_id_arg
from backfill_assets.errors import BackfillError, InvalidInput

if TYPE_CHECKING:
    import argparse


def cmd_status(a: argparse.Namespace) -> int:
    from backfill_assets.service.status import plan_status, render_status

    c = _context(a)
    status = plan_status(c.instance, c.tables, c.wh, _plan_id_arg(a.plan))
    if a.format != "json":
        print(render_status(status))
        return EXIT_OK
    # Only here: building the output models costs 0.1 s of a command meant to answer in 1.5 s.
    from backfill_assets.cli.output import StatusOut, dump

    print(dump(StatusOut(**status)))
    return EXIT_OK


def cmd_list(a: argparse.Namespace) -> int:
    from backfill_assets.cli.output import PlanEntry, PlanList, dump
    from backfill_assets.service.plans import plan_statuses
    from backfill_assets.service.reconcile import reconcile

    instance = _instance()
    statuses = {
        pid: (target, str(status)) for pid, (target, status) in plan_statuses(instance).items()
    }
    try:
        wh = _context(a, instance=instance).wh
    except BackfillError as e:
        # The instance alone still lists what it recorded; the warehouse's word is missing.
        print(f"listing the instance's records only (the warehouse was not read: {e})",
              file=sys.stderr)  # fmt: skip
    else:
        # The warehouse's record of each plan it keeps is the truth, and the instance is told
        # (a record erased in the UI, say).
        for rec in wh.plan_records():
            if statuses.get(rec.plan_id, (None, None))[1] != rec.status:
                reconcile(instance, wh, rec)
            statuses[rec.plan_id] = (rec.table, rec.status)
    rows = [
        {"plan_id": pid, "target": target, "status": status}
        for pid, (target, status) in sorted(statuses.items())
        if a.target is None or target == a.target
    ]
    if a.format == "json":
        print(dump(PlanList([PlanEntry(**r) for r in rows])))
    elif not rows:
        print("no plans in this instance")
    else:
        for r in rows:
            print(f"{r['plan_id']}  {r['target']:<30} {r['status']}")
    return EXIT_OK


def cmd_doctor(a: argparse.Namespace) -> int:
    from backfill_assets.service.doctor import diagnose

    c = _context(a, reconcile=False)  # it reports what the instance was not told
    findings = diagnose(c.instance, c.wh, c.tables, repair=a.repair)
    for f in findings:
        print(f.line())
    open_ = [f for f in findings if not f.repaired]
    if not findings:
        print(
            "doctor: nothing wrong found (pools, dead runs, writer leases, plan records, plan "
            "claims, run queue)"
        )
    elif open_ and not a.repair:
        print(f"doctor: {len(open_)} problems; `backfill-assets doctor --repair` fixes them")
    return EXIT_OK


def cmd_runbook(a: argparse.Namespace) -> int:
    from backfill_assets.lib.runbook import render_runbook
    from backfill_assets.service.history import daily_run_durations
    from backfill_assets.service.tables import table_for

    c = _context(a)
    table = table_for(c.tables, a.table)
    print(render_runbook(table, daily_run_durations(c.instance, table.daily_job)), end="")
    return EXIT_OK


def cmd_diff(a: argparse.Namespace) -> int:
    from backfill_assets.lib.review.render import render_markdown, render_text
    from backfill_assets.service.review import plan_diff

    c = _context(a)
    got = plan_diff(c.instance, c.tables, c.wh, _plan_id_arg(a.plan), tolerance=a.tolerance)
    title = (
        f"diff of plan {got.plan.plan_id} ({got.plan.target}), {got.batches_written} of "
        f"{len(got.plan.batches)} batches written: the shadow against the live rows"
    )
    if a.chart:
        from pathlib import Path

        from backfill_assets.lib.review.chart import render_svg

        try:
            Path(a.chart).write_text(render_svg(got.diff))
        except OSError as e:
            raise InvalidInput(f"cannot write the chart to {a.chart}: {e.strerror}") from None
        print(f"chart written to {a.chart}", file=sys.stderr)
    if a.format == "text":
        print(render_text(got.diff, title=title))
    elif a.format == "markdown":
        print(render_markdown(got.diff, title=title), end="")
    else:
        from backfill_assets.cli.output import DiffOut, dump

        print(dump(DiffOut.of(got)))
    return EXIT_OK


def cmd_review(a: argparse.Namespace) -> int:
    from backfill_assets.cli.options import _who
    from backfill_assets.lib.review.render import headline
    from backfill_assets.service.review import record_review

    c = _context(a)
    got = record_review(c.instance, c.tables, c.wh, _plan_id_arg(a.plan), _who(a))
    print(f"plan {got.plan.plan_id} reviewed by {_who(a)}: {headline(got.diff)}")
    return EXIT_OK
