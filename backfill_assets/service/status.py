"""Where a plan stands: the instance (batches, runs, gates), the warehouse (swap, writer)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import dagster as dg

from backfill_assets.constants import BATCH_TAG
from backfill_assets.errors import WarehouseError
from backfill_assets.lib.states import IN_PROGRESS_RUN_STATUSES, GateState
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.gating import gate_states, runs_of_plan
from backfill_assets.service.guards import daily_runs_in_progress
from backfill_assets.service.lease import gone_reason
from backfill_assets.service.plans import DIFF_SUMMARY, latest_plan_record
from backfill_assets.service.reconcile import current_plan
from backfill_assets.service.review import review_state
from backfill_assets.service.tables import table_for


def plan_status(
    instance: dg.DagsterInstance,
    tables: Mapping[str, BackfillableTable],
    wh: Warehouse | None,
    plan_id: str,
) -> dict[str, Any]:
    plan, status = current_plan(instance, wh, plan_id)
    table = table_for(dict(tables), plan.target, what=f"plan {plan_id}'s target")
    runs = runs_of_plan(instance, plan_id)  # newest first
    states = gate_states(instance, plan.shadow, plan.partitions, plan_id, plan.gates, runs)
    by_partition: dict[str, list[GateState]] = {}
    for s in states:
        by_partition.setdefault(s.partition, []).append(s.state)
    latest_run: dict[str, dg.DagsterRun] = {}
    for r in runs:  # newest first
        b = r.tags.get(BATCH_TAG)
        if b and b not in latest_run:
            latest_run[b] = r
    batches = []
    for b in plan.batches:
        counts = Counter(str(st) for pk in b.partitions for st in by_partition.get(pk, []))
        run = latest_run.get(str(b.index))
        if counts.get(GateState.PASSED, 0) == len(b.partitions) * len(b.gates):
            state = "passed"
        elif counts.get(GateState.FAILED):
            state = "failed"
        elif run is not None and run.status in IN_PROGRESS_RUN_STATUSES:
            state = run.status.value.lower()
        elif counts.get(GateState.STALE):
            state = "stale"
        else:
            state = "pending"
        batches.append(
            {
                "index": b.index,
                "start": b.start.isoformat(),
                "end": b.end.isoformat(),
                "state": state,
                "gates": dict(counts),
                "run_id": run.run_id if run else None,
                "slot_start": b.slot.start.isoformat(),
            }
        )
    swap_state: str | None = None
    writer: dict[str, Any] | None = None
    if wh is not None:
        try:
            swap_state = wh.swap_state(table.spec, plan_id)
            holder = wh.writer(table.key)
            if holder is not None:
                gone = gone_reason(instance, holder, reap=False)
                writer = {
                    "holder": holder.describe(),
                    "run_id": holder.run_id,
                    "free": gone is not None,
                    "why_free": gone,
                }
        except WarehouseError as e:
            swap_state = f"unknown ({e})"
    failed = [s for s in states if s.state == GateState.FAILED]
    record = latest_plan_record(instance, plan_id) or {}
    _, review = review_state(instance, table, plan, record)
    gates = list(dict.fromkeys(g for b in plan.batches for g in b.gates))
    grid: dict[str, dict[str, str]] = {pk: {} for pk in plan.partitions}
    for st in states:
        if st.gate in gates:
            grid.setdefault(st.partition, {})[st.gate] = GRID_STATE[st.state]
    return {
        "plan_id": plan_id,
        "target": plan.target,
        "range": f"{plan.start}..{plan.end}",
        "status": str(status),
        "batches_passed": sum(b["state"] == "passed" for b in batches),
        "batches_total": len(batches),
        "halted": bool(failed),
        "failed_gates": [f"{s.partition} {s.gate}" for s in failed][:50],
        "not_run": sum(s.state == GateState.NOT_RUN for s in states),
        "swap_state": swap_state,
        "review": review,
        "diff_summary": record.get(DIFF_SUMMARY),
        "writer": writer,
        "daily_runs_in_progress": [r.run_id for r in daily_runs_in_progress(instance, table)],
        "gates": gates,
        "grid": grid,
        "batches": batches,
    }


# The grid's states, as JSON spells them (no spaces).
GRID_STATE = {
    GateState.PASSED: "passed",
    GateState.FAILED: "failed",
    GateState.NOT_RUN: "not_run",
    GateState.STALE: "stale",
}
GRID_MARK = {"passed": "ok", "failed": "FAIL", "not_run": ".", "stale": "stale"}


def render_grid(s: dict[str, Any]) -> list[str]:
    """Partition x gate: ok, FAIL, stale, or `.` for not run. Consecutive partitions with the
    same row are one line (`first..last`), so a passed quarter is one line, not ninety."""
    gates: list[str] = s["gates"]
    short = [g.removesuffix("_gate") for g in gates]
    widths = [max(len(h), 5) for h in short]
    rows: list[tuple[str, str, tuple[str, ...]]] = []
    for pk, row in s["grid"].items():
        marks = tuple(GRID_MARK[row.get(g, "not_run")] for g in gates)
        if rows and rows[-1][2] == marks:
            rows[-1] = (rows[-1][0], pk, marks)
        else:
            rows.append((pk, pk, marks))
    span = 24
    head = (
        "  "
        + "partitions".ljust(span)
        + "  ".join(h.ljust(w) for h, w in zip(short, widths, strict=True))
    )
    lines = [head.rstrip()]
    for first, last, marks in rows:
        label = first if first == last else f"{first}..{last}"
        cells = "  ".join(m.ljust(w) for m, w in zip(marks, widths, strict=True))
        lines.append(("  " + label.ljust(span) + cells).rstrip())
    lines.append(
        "  (ok passed, FAIL failed, . not run, stale: passed, then the shadow was rewritten)"
    )
    return lines


def render_status(s: dict[str, Any]) -> str:
    lines = [
        f"plan {s['plan_id']} ({s['target']} {s['range']}): {s['status']}"
        + (" — HALTED" if s["halted"] else ""),
        f"batches passed: {s['batches_passed']}/{s['batches_total']}; swap: "
        f"{s['swap_state'] or 'not swapped'}",
    ]
    lines.append(f"review: {s['review']}")
    if s.get("diff_summary"):
        lines.append(f"diff (as reviewed): {s['diff_summary']}")
    elif s["status"] == "approved" and s["batches_passed"]:
        lines.append(f"diff: backfill-assets diff {s['plan_id']}")
    writer = s.get("writer")
    if writer:
        if writer["free"]:
            lines.append(
                f"writer lease of {s['target']}: left by {writer['holder']}, free to take "
                f"({writer['why_free']})"
            )
        else:
            lines.append(
                f"writer lease of {s['target']}: held by {writer['holder']}; other writers of "
                "the table wait for it. If that run is dead: backfill-assets doctor --repair"
            )
    if s["daily_runs_in_progress"]:
        busy = ", ".join(r[:8] for r in s["daily_runs_in_progress"])
        lines.append(f"daily run in progress: {busy} (batches wait for it)")
    for b in s["batches"]:
        gates = ", ".join(f"{k} {v}" for k, v in sorted(b["gates"].items())) or "no gate results"
        run = f" run {b['run_id'][:8]}" if b["run_id"] else ""
        lines.append(
            f"  batch {b['index']:>2} {b['start']}..{b['end']}  {b['state']:<8} [{gates}]{run}"
        )
    if s["gates"]:
        lines.append("gates per partition:")
        lines.extend(render_grid(s))
    if s["failed_gates"]:
        lines.append("failed: " + "; ".join(s["failed_gates"][:10]))
    return "\n".join(lines)
