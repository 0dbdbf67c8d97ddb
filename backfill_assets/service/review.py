"""What a plan's backfill changes, for the person who approves the swap: the diff of its shadow
against the live rows (lib/review/diff.py) over the days its batches have written."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from backfill_assets.errors import ExecutionRefused, InvalidInput
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.review.diff import DEFAULT_TOLERANCE, DataDiff
from backfill_assets.lib.states import GateState, PlanStatus
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.gating import gate_states
from backfill_assets.service.plans import (
    APPROVED_BY,
    DIFF_SUMMARY,
    REVIEWED_AT,
    REVIEWED_BY,
    REVIEWED_WRITE,
    latest_plan_record,
    record_status,
)
from backfill_assets.service.reconcile import current_plan
from backfill_assets.service.tables import table_for


@dataclass(frozen=True)
class PlanDiff:
    plan: BackfillPlan
    status: PlanStatus
    batches_written: int  # the first batches whose gates ran (passed or failed) on every day
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
        for g in gate_states(instance, plan.shadow, plan.partitions, plan_id, plan.gates)
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


# -- review as a step before the swap (BackfillableTable.swap_requires_review) --------------------


def shadow_high_water(instance: dg.DagsterInstance, plan: BackfillPlan) -> int:
    """The storage id of the newest materialization of the plan's shadow partitions (0: none)."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(plan.shadow), asset_partitions=plan.partitions),
        limit=1,
    )
    return result.records[0].storage_id if result.records else 0


def record_review(
    instance: dg.DagsterInstance,
    tables: Mapping[str, BackfillableTable],
    wh: Warehouse,
    plan_id: str,
    by: str,
) -> PlanDiff:
    """Record that `by` reviewed the plan's diff, over every batch (written and gated); the
    diff reviewed. Refused (nothing recorded) before every batch is written, and, under the
    table's two-person rule, for the plan's approver."""
    from backfill_assets.lib.review.chart import markdown_image
    from backfill_assets.lib.review.render import headline, render_markdown

    if not by.strip():
        raise InvalidInput("review needs the reviewer's name: --by NAME")
    got = plan_diff(instance, tables, wh, plan_id)
    plan = got.plan
    if got.batches_written < len(plan.batches):
        raise ExecutionRefused(
            f"plan {plan_id} has {got.batches_written} of {len(plan.batches)} batches written: a "
            f"review covers the whole plan. Run the rest (`backfill-assets run {plan_id}`), then "
            "review its diff"
        )
    table = table_for(dict(tables), plan.target, what=f"plan {plan_id}'s target")
    record = latest_plan_record(instance, plan_id) or {}
    approver = str(record.get(APPROVED_BY) or "")
    if table.reviewer_must_differ and by == approver:
        raise ExecutionRefused(
            f"{by} approved plan {plan_id}, and {table.key} requires a reviewer other than the "
            "approver (reviewer_must_differ): another person reviews its diff"
        )
    record_status(
        instance,
        plan,
        PlanStatus.APPROVED,
        previous=record,
        **{
            REVIEWED_BY: by,
            REVIEWED_AT: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            REVIEWED_WRITE: shadow_high_water(instance, plan),
            DIFF_SUMMARY: headline(got.diff),
            # The picture a reviewer reads at a glance, inlined: before and after per day.
            "diff_markdown": dg.MetadataValue.md(
                render_markdown(got.diff) + "\n" + markdown_image(got.diff) + "\n"
            ),
        },
    )
    return got


def review_state(
    instance: dg.DagsterInstance,
    table: BackfillableTable,
    plan: BackfillPlan,
    record: Mapping[str, Any] | None = None,
) -> tuple[str | None, str]:
    """(why the swap must wait for a review, or None; one line for `status`). `record`: the
    plan's latest record, when the caller read it already."""
    if record is None:
        record = latest_plan_record(instance, plan.plan_id) or {}
    by, at = record.get(REVIEWED_BY), record.get(REVIEWED_AT)
    current = by is not None and record.get(REVIEWED_WRITE) == shadow_high_water(instance, plan)
    if by is not None and current:
        line = f"reviewed by {by} at {at}"
    elif by is not None:
        line = f"{by}'s review at {at} is void: the shadow was written after it"
    else:
        line = "not reviewed"
    if not table.swap_requires_review:
        return None, line + " (no review required)"
    if by is None:
        why = (
            f"{table.key} requires a review of the plan's diff before its swap: `backfill-assets "
            f"diff {plan.plan_id}`, then `backfill-assets review {plan.plan_id} --by NAME` (or "
            "review_backfill_plan_job in the Launchpad)"
        )
    elif not current:
        why = (
            f"the shadow of plan {plan.plan_id} was written after {by}'s review at {at}, which "
            f"is void: review its diff again (`backfill-assets review {plan.plan_id} --by NAME`)"
        )
    else:
        why = None
    return why, line
