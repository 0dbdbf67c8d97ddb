"""Swap a validated plan into its target, roll it back, release its backup, refresh downstream.

The swap refuses (SwapRefused, nothing changed) unless every planned partition has a passing
latest evaluation of every gate, newer than that partition's latest shadow write (read from
the instance), and the warehouse confirms in the same transaction as the swap that every shadow
partition was built by this plan against the live version still in place.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

import dagster as dg

from backfill_assets.constants import (
    PLAN_ID_TAG,
    ROLE_REFRESH,
    ROLE_TAG,
    WRITER_TAG,
)
from backfill_assets.errors import SwapRefused
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.warehouse.base import SwapResult
from backfill_assets.lib.warehouse.duckdb_adapter import DuckDBWarehouse
from backfill_assets.service.gating import blockers, describe_blockers, gate_states
from backfill_assets.service.plans import (
    ABANDONED,
    APPROVED,
    RELEASED,
    ROLLED_BACK,
    SWAPPED,
    load_plan,
    record_status,
)
from backfill_assets.service.runs import range_tags
from backfill_assets.table import BackfillableTable


def _days(plan: BackfillPlan) -> list[dt.date]:
    return [dt.date.fromisoformat(p) for p in plan.partitions]


def perform_swap(
    instance: dg.DagsterInstance, table: BackfillableTable, wh: DuckDBWarehouse, plan_id: str
) -> SwapResult:
    plan, status = load_plan(instance, plan_id)
    if status == SWAPPED:
        return SwapResult(plan_id, "already_swapped", {}, 0, 0.0)
    if status != APPROVED:
        raise SwapRefused(f"plan {plan_id} is {status}; only an approved plan can be swapped")
    if plan.target != table.key:
        raise SwapRefused(f"plan {plan_id} targets {plan.target}, not {table.key}")
    bad = blockers(gate_states(instance, plan.shadow, plan.partitions))
    if bad:
        raise SwapRefused(
            f"plan {plan_id} cannot be swapped: {len(bad)} gate results are not passing and "
            f"current ({describe_blockers(bad)}); run the plan until every batch passes "
            f"(start_backfill_plan_job in the UI, or `backfill-assets run {plan_id}`; see "
            f"`backfill-assets status {plan_id}`), then swap again"
        )
    result = wh.swap(table.spec, plan_id, _days(plan))
    record_status(
        instance, plan, SWAPPED, swap_seconds=round(result.seconds, 4), swapped_weeks=result.weeks
    )
    return result


def perform_rollback(
    instance: dg.DagsterInstance, table: BackfillableTable, wh: DuckDBWarehouse, plan_id: str
) -> SwapResult:
    plan, status = load_plan(instance, plan_id)
    if status == ROLLED_BACK:
        return SwapResult(plan_id, "already_rolled_back", {}, 0, 0.0)
    if status != SWAPPED:
        raise SwapRefused(
            f"plan {plan_id} is {status}; only a swapped plan whose backup was not released can "
            "be rolled back"
        )
    result = wh.rollback(table.spec, plan_id)
    record_status(instance, plan, ROLLED_BACK, rollback_seconds=round(result.seconds, 4))
    return result


def release_backup(
    instance: dg.DagsterInstance, table: BackfillableTable, wh: DuckDBWarehouse, plan_id: str
) -> int:
    plan, status = load_plan(instance, plan_id)
    if status != SWAPPED:
        raise SwapRefused(
            f"plan {plan_id} is {status}; only a swapped plan has a backup to release"
        )
    dropped = wh.release_backup(table.spec, plan_id)
    record_status(instance, plan, RELEASED, released_weeks=dropped)
    return dropped


def abandon_plan(
    instance: dg.DagsterInstance, table: BackfillableTable, wh: DuckDBWarehouse, plan_id: str
) -> int:
    """Give up an approved (not swapped) plan: drop its shadow weeks, free the target."""
    plan, status = load_plan(instance, plan_id)
    if status != APPROVED:
        raise SwapRefused(
            f"plan {plan_id} is {status}; only an approved, unswapped plan can be abandoned"
        )
    dropped = wh.drop_shadow(table.spec)
    record_status(instance, plan, ABANDONED, dropped_shadow_weeks=dropped)
    return dropped


def swap_materializations(
    table: BackfillableTable, result: SwapResult, action: str
) -> list[dg.AssetMaterialization]:
    """One materialization of the target per swapped partition, with rows and checksums."""
    return [
        dg.AssetMaterialization(
            asset_key=table.key,
            partition=day.isoformat(),
            metadata={
                "action": action,
                "plan_id": result.plan_id,
                "rows_in": info["rows_in"],
                "rows_out": info["rows_out"],
                "checksum_in": info["checksum_in"],
                "checksum_out": info["checksum_out"],
            },
        )
        for day, info in sorted(result.partitions.items())
    ]


@dataclass(frozen=True)
class RefreshRequest:
    """One run refreshing impacted assets of one grain over a partition range (or all)."""

    asset_keys: tuple[str, ...]
    start: str | None
    end: str | None  # inclusive partition keys

    def tags(self, plan_id: str, target: str) -> dict[str, str]:
        tags = {PLAN_ID_TAG: plan_id, ROLE_TAG: ROLE_REFRESH, WRITER_TAG: target}
        if self.start and self.end:
            if self.start == self.end:
                tags["dagster/partition"] = self.start
            else:
                tags.update(
                    range_tags(dt.date.fromisoformat(self.start), dt.date.fromisoformat(self.end))
                )
        return tags


def refresh_requests(plan: BackfillPlan, defs: dg.Definitions) -> list[RefreshRequest]:
    """Group the plan's impact set by partitions definition: one refresh run per grain."""
    graph = defs.resolve_asset_graph()
    groups: dict[object, list[str]] = defaultdict(list)
    ranges: dict[object, tuple[str, str] | None] = {}
    for item in plan.impact:
        pd = graph.get(dg.AssetKey.from_user_string(item.asset_key)).partitions_def
        group = id(pd) if pd is not None else None
        groups[group].append(item.asset_key)
        if item.partitions != "all" and item.partitions:
            lo, hi = item.partitions[0], item.partitions[-1]
            cur = ranges.get(group)
            ranges[group] = (min(lo, cur[0]), max(hi, cur[1])) if cur else (lo, hi)
    out = []
    for group, keys in groups.items():
        rng = ranges.get(group)
        out.append(RefreshRequest(tuple(keys), rng[0] if rng else None, rng[1] if rng else None))
    # Partitioned grains first (daily, then weekly), unpartitioned last, in a stable order.
    return sorted(out, key=lambda r: (r.start is None, r.start or "", r.asset_keys))


def refresh_downstream(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    plan: BackfillPlan,
    log_level: str | None = None,
) -> list[tuple[RefreshRequest, bool]]:
    """Rebuild the impacted assets for the affected partitions, in this process."""
    job = defs.resolve_implicit_global_asset_job_def()
    results = []
    for req in sorted(refresh_requests(plan, defs), key=_topo_key(defs)):
        res = job.execute_in_process(
            instance=instance,
            asset_selection=[dg.AssetKey.from_user_string(k) for k in req.asset_keys],
            tags=req.tags(plan.plan_id, plan.target),
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}}
            if log_level
            else None,
        )
        results.append((req, res.success))
    return results


def _topo_key(defs: dg.Definitions):
    order = {
        k.to_user_string(): i
        for i, k in enumerate(defs.resolve_asset_graph().toposorted_asset_keys)
    }
    return lambda r: min(order.get(k, 0) for k in r.asset_keys)
