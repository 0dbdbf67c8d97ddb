"""Approved plans live in the Dagster instance: one dynamic partition of the `backfill_plans`
asset per plan id, whose latest materialization carries the plan JSON, its Markdown and status.

Keeping them in the instance (not in local files or the warehouse) lets the daemon's sensors read
them without opening DuckDB, and works the same on Postgres storage and Kubernetes. A plan file
alone launches nothing: approving is the explicit step that records it here.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from backfill_assets.constants import PLANS_ASSET, PLANS_PARTITIONS
from backfill_assets.errors import ExecutionRefused, InvalidInput
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.planning.markdown import render_markdown
from backfill_assets.lib.planning.plan import BackfillPlan, verify_integrity

PLAN_KEY = dg.AssetKey(PLANS_ASSET)

# Plan lifecycle. A plan is "active" (it holds its target) until swapped-and-released, rolled
# back or abandoned; only one active plan per target at a time.
PROPOSED = "proposed"
APPROVED = "approved"
SWAPPED = "swapped"
ROLLED_BACK = "rolled_back"
RELEASED = "released"
ABANDONED = "abandoned"
ACTIVE_STATUSES = frozenset({APPROVED, SWAPPED})
# Set on an approved plan's record while the daemon's batch driver runs it (start/pause).
DRIVING = "driving"


def latest_plan_record(instance: dg.DagsterInstance, plan_id: str) -> dict[str, Any] | None:
    """The latest stored metadata of a plan: {"plan": dict, "status": str, ...} or None."""
    if plan_id not in instance.get_dynamic_partitions(PLANS_PARTITIONS):
        return None
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=PLAN_KEY, asset_partitions=[plan_id]), limit=1
    )
    if not result.records:
        return None
    mat = result.records[0].asset_materialization
    if mat is None:
        return None
    return {k: v.value for k, v in mat.metadata.items()}


def load_plan(
    instance: dg.DagsterInstance, plan_id: str, allow_proposed: bool = False
) -> tuple[BackfillPlan, str]:
    """The stored plan and its status; ExecutionRefused if it was never approved."""
    rec = latest_plan_record(instance, plan_id)
    status = str(rec.get("status", APPROVED)) if rec else None
    if (
        rec is None
        or not isinstance(rec.get("plan"), dict)
        or (status == PROPOSED and not allow_proposed)
    ):
        raise ExecutionRefused(
            f"plan {plan_id} is not approved in this Dagster instance; approve it first "
            "(`backfill-assets approve PLAN.json`, or approve_backfill_job in the UI)"
        )
    return BackfillPlan.from_dict(rec["plan"]), str(status)


def plan_criteria(instance: dg.DagsterInstance, plan_id: str) -> Criteria | None:
    rec = latest_plan_record(instance, plan_id)
    if rec is None:
        return None
    plan = rec.get("plan")
    if not isinstance(plan, dict) or "criteria" not in plan:
        raise InvalidInput(f"stored plan {plan_id} has no criteria; approve it again")
    return Criteria.from_dict(plan["criteria"])


def plan_statuses(instance: dg.DagsterInstance) -> dict[str, tuple[str, str]]:
    """plan id -> (target, status) for every plan ever approved."""
    out: dict[str, tuple[str, str]] = {}
    for pid in instance.get_dynamic_partitions(PLANS_PARTITIONS):
        rec = latest_plan_record(instance, pid)
        if rec and isinstance(rec.get("plan"), dict):
            out[pid] = (str(rec["plan"].get("target")), str(rec.get("status")))
    return out


def record_status(
    instance: dg.DagsterInstance, plan: BackfillPlan, status: str, **extra: Any
) -> None:
    """Append a new record of the plan with a new status (history stays in the event log)."""
    metadata: dict[str, Any] = {
        "plan": dg.MetadataValue.json(plan.to_dict()),
        "plan_markdown": dg.MetadataValue.md(render_markdown(plan)),
        "status": status,
        "target": plan.target,
        "range": f"{plan.start.isoformat()}..{plan.end.isoformat()}",
        "batches": len(plan.batches),
    }
    for k, v in extra.items():
        metadata[k] = dg.MetadataValue.json(v) if isinstance(v, dict | list) else v
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=PLAN_KEY, partition=plan.plan_id, metadata=metadata)
    )


def approve_plan(instance: dg.DagsterInstance, plan: BackfillPlan, approved_by: str) -> str:
    """Record an approved plan. Idempotent for the same plan; refuses a second active plan for
    the same target (it would write the same shadow)."""
    verify_integrity(plan)
    existing = plan_statuses(instance)
    if plan.plan_id in existing and existing[plan.plan_id][1] in ACTIVE_STATUSES:
        return existing[plan.plan_id][1]
    for pid, (target, status) in existing.items():
        if target == plan.target and status in ACTIVE_STATUSES and pid != plan.plan_id:
            raise ExecutionRefused(
                f"plan {pid} for {target} is still {status}; swap and release it, roll it back, "
                f"or abandon it (`backfill-assets abandon {pid}`) before approving another"
            )
    if plan.plan_id in existing and existing[plan.plan_id][1] != PROPOSED:
        raise ExecutionRefused(
            f"plan {plan.plan_id} was already {existing[plan.plan_id][1]}; plan again with a "
            "different range or criteria to backfill this range once more"
        )
    instance.add_dynamic_partitions(PLANS_PARTITIONS, [plan.plan_id])
    record_status(instance, plan, APPROVED, approved_by=approved_by)
    return APPROVED


def propose_plan(instance: dg.DagsterInstance, plan: BackfillPlan) -> str:
    """Record a plan for review (the UI's planning job). Launches nothing; never downgrades a
    plan that was already approved or further along."""
    verify_integrity(plan)
    existing = plan_statuses(instance)
    if plan.plan_id in existing and existing[plan.plan_id][1] != PROPOSED:
        return existing[plan.plan_id][1]
    instance.add_dynamic_partitions(PLANS_PARTITIONS, [plan.plan_id])
    record_status(instance, plan, PROPOSED)
    return PROPOSED
