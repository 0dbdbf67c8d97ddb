"""`plan` and `approve`: build a reviewable plan (no side effects), then approve it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from backfill_assets.cli import common
from backfill_assets.cli.common import EXIT_OK
from backfill_assets.cli.context import _context
from backfill_assets.cli.options import _read_plan, _who, read_input_file
from backfill_assets.errors import InvalidInput

if TYPE_CHECKING:
    import argparse


def cmd_plan(a: argparse.Namespace) -> int:
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.lib.planning.criteria import Criteria, load_criteria_yaml
    from backfill_assets.lib.planning.markdown import render_markdown
    from backfill_assets.service.planner import plan_backfill, plan_stale

    stale = a.stale or a.built_by is not None
    if a.timezone is not None and not a.timezone.strip():
        raise InvalidInput(
            "--timezone is empty; name an IANA timezone (e.g. UTC or Europe/Berlin), or leave "
            "the option out to use the partitions' timezone"
        )
    if a.out:
        _refuse_unwritable_out(Path(a.out))
    if stale and (a.start or a.end):
        raise InvalidInput(
            "--stale finds the range from what is stale: leave out --start and --end, or leave "
            "out --stale to plan the range you name"
        )
    if not stale and not (a.start and a.end):
        raise InvalidInput(
            "plan needs --start and --end (YYYY-MM-DD, inclusive), or --stale to plan the "
            "partitions built by an older code version"
        )
    c = _context(a)
    criteria = None
    if a.criteria:
        text = read_input_file(a.criteria, "criteria file")
        base = c.tables[a.target].criteria if a.target in c.tables else Criteria()
        criteria = load_criteria_yaml(text, base)
    request = PlanRequest(
        target=a.target,
        start=a.start or "",
        end=a.end or "",
        window=a.window,
        timezone=a.timezone,
        rollback=a.rollback,
        criteria=criteria,
    )
    inputs = {
        "asset_graph": c.graph,
        "tables": c.tables,
        "instance": c.instance,
        "warehouse": c.wh,
        "now": common._now(),
    }
    if not stale:
        plans = [plan_backfill(request, **inputs)]
    else:
        scan, plans = plan_stale(request, built_by=a.built_by, **inputs)
        for line in scan.summary():
            print(line, file=sys.stderr)
        if not plans:
            print(
                f"nothing to backfill: no partition of {a.target} is {scan.rule}", file=sys.stderr
            )
            return EXIT_OK
        if len(plans) > 1 and a.format == "json" and not a.out:
            raise InvalidInput(
                f"{len(plans)} stale ranges make {len(plans)} plans, one per range; pass --out "
                "FILE.json to write FILE-1.json ... (or --format markdown to read them here)"
            )
    for i, plan in enumerate(plans, start=1):
        text = plan.to_json() if a.format == "json" else render_markdown(plan)
        if a.out:
            out = _numbered(Path(a.out), i) if len(plans) > 1 else Path(a.out)
            try:
                out.write_text(text + "\n")
            except OSError as e:
                raise InvalidInput(f"cannot write the plan to {out}: {e.strerror or e}") from None
            print(
                f"plan {plan.plan_id}: {plan.start}..{plan.end}, {len(plan.batches)} batches, "
                f"{len(plan.partitions)} partitions -> {out}",
                file=sys.stderr,
            )
        else:
            print(text)
    if len(plans) > 1:
        print(
            f"{len(plans)} plans, one per stale range, in date order. A table holds one plan's "
            "shadow and backup at a time: approve the next once the one before it is swapped "
            "and its backup released (`backfill-assets release PLAN`), or abandoned",
            file=sys.stderr,
        )
    return EXIT_OK


def _refuse_unwritable_out(out: Path) -> None:
    """Refuse an --out the plan could not be written to, before anything is planned."""
    folder = out.parent
    if not folder.is_dir():
        raise InvalidInput(
            f"--out {out}: the folder {folder} does not exist; create it first (mkdir -p "
            f"{folder}) or write the plan somewhere else"
        )
    if out.is_dir():
        raise InvalidInput(f"--out {out} is a folder; name a file, e.g. {out / 'plan.json'}")
    target = out if out.exists() else folder
    if not os.access(target, os.W_OK):
        raise InvalidInput(
            f"--out {out} cannot be written ({'the file' if out.exists() else 'its folder'} "
            "is read-only); write the plan somewhere else"
        )


def _numbered(path: Path, i: int) -> Path:
    """plan.json -> plan-1.json: one file per plan when --stale finds several ranges."""
    return path.with_name(f"{path.stem}-{i}{path.suffix}")


def cmd_approve(a: argparse.Namespace) -> int:
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.reconcile import current_plan
    from backfill_assets.service.tables import table_for

    p = Path(a.plan)
    if p.suffix == ".json" or p.exists():
        plan = _read_plan(a.plan)
        c = _context(a)
    else:
        c = _context(a)
        plan, _ = current_plan(c.instance, c.wh, a.plan, allow_proposed=True)
    table = table_for(c.tables, plan.target, what=f"plan {plan.plan_id}'s target")
    status = approve_plan(c.instance, c.wh, table, plan, _who(a), asset_graph=c.graph)
    print(
        f"plan {plan.plan_id} {status}: {plan.target} {plan.start}..{plan.end}, "
        f"{len(plan.batches)} batches. Next: backfill-assets run {plan.plan_id} (or start it "
        "for the daemon's batch driver)"
    )
    return EXIT_OK
