"""Approving a plan (the warehouse claims its table and keeps it, then the instance records
it) and proposing one (the instance alone: nothing is claimed yet).

Which plan holds a table is decided in the warehouse (`Warehouse.claim_plan`, a compare-and-set),
so two approvals racing for one table cannot both win; the warehouse keeps the approved plan in
the same transaction, its state of record (service.reconcile), and the instance records it.
"""

from __future__ import annotations

import dagster as dg

from backfill_assets.constants import PLANS_PARTITIONS
from backfill_assets.errors import ExecutionRefused
from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.planning.plan import BackfillPlan, verify_integrity
from backfill_assets.lib.states import ACTIVE_PLAN_STATUSES, PlanStatus
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.adopt import adoption_blocker
from backfill_assets.service.plans import latest_plan_record, record_status
from backfill_assets.service.reconcile import reconcile, settle


def _check_plan_for(table: BackfillableTable, plan: BackfillPlan) -> None:
    verify_integrity(plan)
    if plan.target != table.key:
        raise ExecutionRefused(f"plan {plan.plan_id} targets {plan.target}, not {table.key}")
    # The plan's criteria reach SQL in the gates; a hand-made plan with a consistent id but an
    # unsafe predicate was once approved and failed only after its batch had written the shadow.
    plan.criteria.validate(table.spec.column_names)


def _status_of(instance: dg.DagsterInstance, plan_id: str) -> PlanStatus | None:
    rec = latest_plan_record(instance, plan_id)
    return PlanStatus(str(rec["status"])) if rec and rec.get("status") else None


def _check_impact(
    table: BackfillableTable, plan: BackfillPlan, asset_graph: AssetGraphLike
) -> None:
    """The plan's downstream impact is what the asset lineage gives for its range now. The plan
    id does not cover it, and an emptied impact would leave every downstream model stale after
    the swap; lineage that changed since planning needs a new plan too."""
    from backfill_assets.service.planner import impact_of

    now = impact_of(asset_graph, table, plan.start, plan.end)
    if tuple(now) != tuple(plan.impact):
        raise ExecutionRefused(
            f"plan {plan.plan_id} lists {len(plan.impact)} impacted downstream assets, but the "
            f"asset lineage gives {len(now)} for its range now: the plan was edited, or the "
            "lineage changed since it was made; plan again with backfill-assets plan"
        )


def approve_plan(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    plan: BackfillPlan,
    approved_by: str,
    asset_graph: AssetGraphLike | None = None,
) -> PlanStatus:
    """Record an approved plan. Idempotent for the same plan.

    Only one plan holds a table at a time (it would write the same shadow, and a second swap
    over a swapped plan would be undone by the first one's rollback). The warehouse decides
    which, atomically: of two approvals racing for one table, exactly one wins; and it keeps the
    plan, as approved, in the same transaction (its state of record, service.reconcile). With
    the code location's `asset_graph`, the plan's impact must be the lineage's
    (`_check_impact`).
    """
    _check_plan_for(table, plan)
    if asset_graph is not None:
        _check_impact(table, plan, asset_graph)
    current = latest_plan_record(instance, plan.plan_id)
    kept = wh.plan_record(plan.plan_id)
    if kept is not None:  # the warehouse's word, whatever the instance says
        reconcile(instance, wh, kept, seen=current)
        status = PlanStatus(kept.status)
    else:
        status = PlanStatus(str(current["status"])) if current else None
    if status in ACTIVE_PLAN_STATUSES:
        return status  # type: ignore[return-value]
    if status is not None and status != PlanStatus.PROPOSED:
        raise ExecutionRefused(
            f"plan {plan.plan_id} was already {status}; plan again with a different range or "
            "criteria to backfill this range once more"
        )
    blocker = adoption_blocker(wh, table)
    if blocker is not None:
        raise ExecutionRefused(blocker + "; nothing was approved")
    claim = {"plan_json": plan.to_json(), "approved_by": approved_by}
    holder = wh.claim_plan(table.key, plan.plan_id, **claim)
    holder_status = _holder_status(instance, wh, table, holder, plan.plan_id)
    if holder_status is not None and holder_status not in ACTIVE_PLAN_STATUSES:
        # The claim outlived its plan (a crash between the warehouse and the instance, before
        # the warehouse kept plans).
        wh.release_plan(table.key, holder)
        holder = wh.claim_plan(table.key, plan.plan_id, **claim)
        holder_status = _holder_status(instance, wh, table, holder, plan.plan_id)
    if holder != plan.plan_id:
        state = (
            f"still {holder_status}"
            if holder_status
            else "being approved right now (or was left half-approved by a crash)"
        )
        raise ExecutionRefused(
            f"plan {holder} for {table.key} is {state}; swap and release it, roll it back, or "
            f"abandon it (`backfill-assets abandon {holder}`) before approving another"
        )
    instance.add_dynamic_partitions(PLANS_PARTITIONS, [plan.plan_id])
    record_status(
        instance, plan, PlanStatus.APPROVED, previous=current or {}, approved_by=approved_by
    )
    settle(wh, plan.plan_id, PlanStatus.APPROVED)
    return PlanStatus.APPROVED


def _holder_status(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    holder: str,
    plan_id: str,
) -> PlanStatus | None:
    """The status of the plan holding the table (None: it is `plan_id`, or no one has a record
    of it): the warehouse's, else the instance's. A holder with a live backup in the warehouse
    is swapped whatever the instance says: freeing its claim would let another plan swap over
    it and leave its backup with nothing to restore it."""
    if holder == plan_id:
        return None
    kept = wh.plan_record(holder)
    if kept is not None:
        return PlanStatus(kept.status)
    if wh.swap_state(table.spec, holder) == PlanStatus.SWAPPED:
        return PlanStatus.SWAPPED
    return _status_of(instance, holder)


def propose_plan(
    instance: dg.DagsterInstance, plan: BackfillPlan, wh: Warehouse | None = None
) -> PlanStatus:
    """Record a plan for review (the UI's planning job, a refused launch on the target).
    Launches nothing; never downgrades a plan that was already approved or further along (in
    the warehouse, `wh`, or the instance)."""
    verify_integrity(plan)
    current = latest_plan_record(instance, plan.plan_id)
    kept = wh.plan_record(plan.plan_id) if wh is not None else None
    if kept is not None and wh is not None:
        reconcile(instance, wh, kept, seen=current)
        return PlanStatus(kept.status)
    if current is not None and current.get("status") != PlanStatus.PROPOSED:
        return PlanStatus(str(current["status"]))
    instance.add_dynamic_partitions(PLANS_PARTITIONS, [plan.plan_id])
    record_status(instance, plan, PlanStatus.PROPOSED, previous={})
    return PlanStatus.PROPOSED
