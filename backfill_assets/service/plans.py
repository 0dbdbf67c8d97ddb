"""Approved plans live in the Dagster instance: one dynamic partition of the `backfill_plans`
asset per plan id, whose latest materialization carries the plan JSON, its Markdown and status.

Keeping them in the instance (not in local files or the warehouse) lets the daemon's sensors read
them without opening DuckDB, and works the same on Postgres storage and Kubernetes.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from backfill_assets.constants import PLANS_ASSET, PLANS_PARTITIONS
from backfill_assets.errors import InvalidInput
from backfill_assets.lib.planning.criteria import Criteria

PLAN_KEY = dg.AssetKey(PLANS_ASSET)
STATUS_APPROVED = "approved"
STATUS_ABANDONED = "abandoned"


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
    meta = {k: v.value for k, v in mat.metadata.items()}
    return meta


def plan_criteria(instance: dg.DagsterInstance, plan_id: str) -> Criteria | None:
    rec = latest_plan_record(instance, plan_id)
    if rec is None:
        return None
    plan = rec.get("plan")
    if not isinstance(plan, dict) or "criteria" not in plan:
        raise InvalidInput(f"stored plan {plan_id} has no criteria; approve it again")
    return Criteria.from_dict(plan["criteria"])
