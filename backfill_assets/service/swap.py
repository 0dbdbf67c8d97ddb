"""Swap a validated plan into its target, roll it back, release its backup, abandon it, and
refresh downstream.

The swap refuses (SwapRefused, nothing changed) unless every planned partition has a passing
latest evaluation of every gate, on shadow data this plan wrote, newer than that partition's
latest shadow write (read from the instance); for a table with `swap_requires_review`, unless a
review of the plan's diff is recorded and no shadow write came after it (service.review); and
the warehouse confirms in the same transaction as the swap that the plan holds the table and
that every shadow partition was built by it against the live version still in place.

The callers hold the table's writer lease around each of these (see service.lease).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from backfill_assets.errors import ExecutionRefused, SwapRefused
from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.states import PlanStatus
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import SwapResult, Warehouse
from backfill_assets.service.downstream import (
    DbtDownstream,
    ShadowBuild,
    build_in_shadow,
    refuse_failed,
)
from backfill_assets.service.gating import blockers, describe_blockers, gate_states
from backfill_assets.service.plans import (
    CODE_VERSIONS,
    PUBLISHED,
    PUBLISHED_PARTITIONS,
    record_status,
)
from backfill_assets.service.reconcile import current_plan, settle
from backfill_assets.service.review import review_state
from backfill_assets.service.stale import latest_builds
from backfill_assets.service.tables import table_for


def _days(plan: BackfillPlan) -> list[dt.date]:
    return [dt.date.fromisoformat(p) for p in plan.partitions]


def swap_blockers(
    instance: dg.DagsterInstance, table: BackfillableTable, plan: BackfillPlan
) -> str | None:
    """Why the plan cannot be swapped yet, from its gates and (a table with
    `swap_requires_review`) its review in the instance; None if it can."""
    bad = blockers(gate_states(instance, plan.shadow, plan.partitions, plan.plan_id, plan.gates))
    if not bad:
        return review_state(instance, table, plan)[0] if table.swap_requires_review else None
    return (
        f"plan {plan.plan_id} cannot be swapped: {len(bad)} gate results are not passing and "
        f"current ({describe_blockers(bad)}); run the plan until every batch passes "
        f"(start_backfill_plan_job in the UI, or `backfill-assets run {plan.plan_id}`; see "
        f"`backfill-assets status {plan.plan_id}`), then swap again"
    )


def prepare_downstream(
    instance: dg.DagsterInstance,
    table: BackfillableTable,
    graph: AssetGraphLike,
    wh: Warehouse,
    dbt: Any,
    config: DbtDownstream,
    url: str,
    plan_id: str,
    log: Callable[[str], None],
) -> ShadowBuild | None:
    """Before the swap of an approved plan whose gates all passed: build its impacted dbt models
    in shadow and run their tests there. None when the swap has nothing to build (already
    swapped). Raises SwapRefused, having dropped what it built, when a model or a test fails."""
    plan, status = current_plan(instance, wh, plan_id)
    if status != PlanStatus.APPROVED or plan.target != table.key:
        return None  # perform_swap answers (already swapped, or why not)
    why = swap_blockers(instance, table, plan)
    if why:
        raise SwapRefused(why)
    build = build_in_shadow(plan, table, graph, wh, dbt, config, url, log)
    log(build.summary())
    if not build.passed:
        # Recorded before refusing: the gate's failure is what the UI shows.
        instance.report_runless_asset_event(build.evaluation(table.spec.shadow_name))
        refuse_failed(build, plan)
    return build


def perform_swap(
    instance: dg.DagsterInstance,
    table: BackfillableTable,
    wh: Warehouse,
    plan_id: str,
    downstream: ShadowBuild | None = None,
) -> SwapResult:
    """Swap the plan's validated shadow into the target; with `downstream` (a passing shadow
    build of its dbt models), publish those models in the same warehouse transaction.

    The warehouse records the plan swapped, with its code versions and published models, in
    the swap's transaction; then the instance is told. The caller logs the swap's
    materializations (service.published) and then `settle`s the record (service.reconcile); a
    process that dies before that leaves it to the next command."""
    plan, status = current_plan(instance, wh, plan_id)
    if status == PlanStatus.SWAPPED:
        return SwapResult(plan_id, "already_swapped", {}, 0, 0.0)
    if status != PlanStatus.APPROVED:
        raise SwapRefused(f"plan {plan_id} is {status}; only an approved plan can be swapped")
    if plan.target != table.key:
        raise SwapRefused(f"plan {plan_id} targets {plan.target}, not {table.key}")
    why = swap_blockers(instance, table, plan)
    if why:
        raise SwapRefused(why)
    companions = downstream.companions if downstream is not None and downstream.passed else []
    details = {
        CODE_VERSIONS: _code_versions(instance, plan),  # read before the swap records anything
        PUBLISHED: downstream.published_keys if downstream else [],
        PUBLISHED_PARTITIONS: downstream.rebuilt_partitions if downstream else {},
    }
    result = wh.swap(table.spec, plan_id, _days(plan), companions, details)
    record_status(
        instance,
        plan,
        PlanStatus.SWAPPED,
        swap_seconds=round(result.seconds, 4),
        swapped_weeks=result.weeks,
        driving=False,
        **details,
    )
    return result


def _code_versions(instance: dg.DagsterInstance, plan: BackfillPlan) -> dict[str, Any]:
    """Per partition, the code version that built the shadow ("in") and the one that built
    what the swap replaces ("out"), from their latest materializations. The swap's and the
    rollback's materializations of the target carry them, so that `plan --stale` reads what
    built each partition of the target whichever path wrote it."""

    def versions(key: str) -> dict[str, str | None]:
        builds = latest_builds(instance, dg.AssetKey.from_user_string(key), plan.partitions)
        return {p: (builds[p].code_version if p in builds else None) for p in plan.partitions}

    return {"in": versions(plan.shadow), "out": versions(plan.target)}


def perform_rollback(
    instance: dg.DagsterInstance, table: BackfillableTable, wh: Warehouse, plan_id: str
) -> SwapResult:
    """Put back what the plan's swap replaced. As the swap: the warehouse records it in the
    rollback's transaction, then the instance is told; the caller logs the materializations
    and `settle`s the record."""
    plan, status = current_plan(instance, wh, plan_id)
    if status == PlanStatus.ROLLED_BACK:
        return SwapResult(plan_id, "already_rolled_back", {}, 0, 0.0)
    if status != PlanStatus.SWAPPED:
        raise SwapRefused(
            f"plan {plan_id} is {status}; only a swapped plan whose backup was not released can "
            "be rolled back"
        )
    if plan.target != table.key:
        raise SwapRefused(f"plan {plan_id} targets {plan.target}, not {table.key}")
    result = wh.rollback(table.spec, plan_id)
    record_status(instance, plan, PlanStatus.ROLLED_BACK, rollback_seconds=round(result.seconds, 4))
    return result


def release_backup(
    instance: dg.DagsterInstance,
    tables: Mapping[str, BackfillableTable],
    wh: Warehouse,
    plan_id: str,
) -> tuple[BackfillPlan, int]:
    """Drop a swapped plan's backup (then it cannot be rolled back) and free its table.

    The status is the warehouse's: a plan the instance has as swapped but the warehouse as
    rolled back (a process died between the two) is recorded rolled back, and refused."""
    plan, status = current_plan(instance, wh, plan_id)
    if status != PlanStatus.SWAPPED:
        raise SwapRefused(
            f"plan {plan_id} is {status}; only a swapped plan has a backup to release"
        )
    table = table_for(dict(tables), plan.target, what=f"plan {plan_id}'s target")
    dropped = wh.release_backup(table.spec, plan_id)
    record_status(instance, plan, PlanStatus.RELEASED, released_weeks=dropped)
    settle(wh, plan_id, PlanStatus.RELEASED)
    return plan, dropped


def abandon_plan(
    instance: dg.DagsterInstance,
    tables: Mapping[str, BackfillableTable],
    wh: Warehouse,
    plan_id: str,
) -> tuple[str, int]:
    """Give up an approved (not swapped) plan: drop its shadow weeks and free the target.

    The warehouse decides, in the transaction that drops and frees: a plan it has as swapped is
    refused whatever the instance says (roll it back or release it instead). A plan that holds
    a table in the warehouse but was never recorded as approved (an approval cut short by a
    crash, before the warehouse kept plans) is freed too. Returns the target and the shadow
    weeks dropped.
    """
    try:
        plan, status = current_plan(instance, wh, plan_id, allow_proposed=True)
    except ExecutionRefused:
        for name in tables:
            if wh.active_plan(name) == plan_id:
                wh.release_plan(name, plan_id)
                return name, 0
        raise
    if status not in (PlanStatus.APPROVED, PlanStatus.PROPOSED):
        hint = (
            f"; roll it back (`backfill-assets rollback {plan_id}`) or release its backup "
            f"(`backfill-assets release {plan_id}`) instead"
            if status == PlanStatus.SWAPPED
            else ""
        )
        raise SwapRefused(
            f"plan {plan_id} is {status}; only an approved, unswapped plan can be abandoned{hint}"
        )
    table = table_for(dict(tables), plan.target, what=f"plan {plan_id}'s target")
    dropped = wh.abandon(table.spec, plan_id)
    record_status(instance, plan, PlanStatus.ABANDONED, dropped_shadow_weeks=dropped, driving=False)
    settle(wh, plan_id, PlanStatus.ABANDONED)
    return table.key, dropped
