"""What a plan's backfill changes, for the person who approves the swap: the diff of its shadow
against the live rows (lib/review/diff.py) over the days its batches have written."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg

from backfill_assets.errors import ExecutionRefused
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.review.diff import DEFAULT_TOLERANCE, DataDiff
from backfill_assets.lib.states import GateState, PlanStatus
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.gating import gate_states
from backfill_assets.service.reconcile import current_plan
from backfill_assets.service.tables import table_for


@dataclass(frozen=True)
class PlanDiff:
    plan: BackfillPlan
    status: PlanStatus
    batches_written: int  # the batches whose every day the shadow holds for this plan
    diff: DataDiff


def plan_diff(
    instance: dg.DagsterInstance,
    tables: Mapping[str, BackfillableTable],
    wh: Warehouse,
    plan_id: str,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
) -> PlanDiff:
    """The diff over the plan's first batches written so far (`run --batches 1`, then `diff`: the
    pilot week). Refused before any batch was written, and once the shadow is gone."""
    plan, status = current_plan(instance, wh, plan_id, allow_proposed=True)
    if status not in (PlanStatus.APPROVED,):
        raise ExecutionRefused(
            f"plan {plan_id} is {status}: the diff compares a plan's shadow with the live rows "
            "before its swap, and this plan has no shadow to compare"
            + ("; approve and run it first" if status == PlanStatus.PROPOSED else "")
        )
    table = table_for(dict(tables), plan.target, what=f"plan {plan_id}'s target")
    # A batch was written when its gates were evaluated on every one of its partitions (passed
    # or failed: a reviewer wants to see what a failed batch would change too).
    checked = {
        g.partition
        for g in gate_states(instance, plan.shadow, plan.partitions, plan_id)
        if g.state in (GateState.PASSED, GateState.FAILED)
    }
    written = 0
    for b in plan.batches:
        if not set(b.partitions) <= checked:
            break
        written += 1
    if not written:
        raise ExecutionRefused(
            f"plan {plan_id} has no batch written yet: run one (`backfill-assets run {plan_id} "
            "--batches 1`, the pilot week), then diff it"
        )
    last = plan.batches[written - 1].end + dt.timedelta(days=1)
    diff = wh.diff(table.spec, plan.start, last, tolerance=tolerance)
    return PlanDiff(plan, status, written, diff)
