"""Gather the planner's read-only inputs (definitions, warehouse stats, run history) and plan."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping

import dagster as dg

from backfill_assets.errors import BackfillError, WarehouseMissing
from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.dates import days, parse_day
from backfill_assets.lib.planning.build import PlanInputs, PlanRequest, build_plan
from backfill_assets.lib.planning.impact import downstream_impact
from backfill_assets.lib.planning.plan import BackfillPlan, ImpactedAsset
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.history import batch_rates, daily_run_durations
from backfill_assets.service.stale import StaleScan, find_stale
from backfill_assets.service.tables import table_for


def plan_backfill(
    request: PlanRequest,
    *,
    asset_graph: AssetGraphLike,
    tables: Mapping[str, BackfillableTable],
    instance: dg.DagsterInstance,
    warehouse: Warehouse,
    now: dt.datetime,
) -> BackfillPlan:
    """Build a plan; raises PlanRefused (or InvalidInput) and writes nothing.

    `asset_graph` is `Definitions.resolve_asset_graph()` (or a repository's `asset_graph`).
    """
    graph = asset_graph
    known = frozenset(k.to_user_string() for k in graph.get_all_asset_keys())
    table = tables.get(request.target)
    impact: tuple = ()
    rows: dict[dt.date, int] = {}
    spr = overhead = None
    daily: tuple[float, ...] = ()
    if table is not None:
        try:
            start, end = parse_day(request.start, "start"), parse_day(request.end, "end")
        except BackfillError:
            start = end = None  # build_plan refuses with the precise message
        # Only a range build_plan could accept: it refuses the rest with the precise message
        # (a range past today, up to 9999-12-31, would overflow the dates computed here).
        if start and end and start <= end <= now.date() + dt.timedelta(days=1):
            impact = impact_of(graph, table, start, end)
            try:
                rows = warehouse.partition_stats(table.spec, start, end + dt.timedelta(days=1)).rows
            except WarehouseMissing:
                # Nothing built yet: the planner falls back to its documented default and says
                # so. A locked or unreadable warehouse is an error, not a reason to guess.
                rows = {}
        rates = batch_rates(instance, table.key)
        spr, overhead = rates.seconds_per_row, rates.overhead_seconds
        daily = daily_run_durations(instance, table.daily_job)
    inputs = PlanInputs(
        targets={k: t.target_info() for k, t in tables.items()},
        known_assets=known,
        impact=impact,
        partition_rows=rows,
        seconds_per_row=spr,
        batch_overhead_seconds=overhead,
        daily_durations_seconds=daily,
        now=now,
    )
    return build_plan(request, inputs)


def impact_of(
    asset_graph: AssetGraphLike, table: BackfillableTable, start: dt.date, end: dt.date
) -> tuple[ImpactedAsset, ...]:
    """Step 2 of a plan: what the asset lineage puts downstream of `table` for [start, end]
    (inclusive), the shadow left out; nothing for a range before the table's partitions (the
    plan is refused for it). The planner writes it into the plan; approve checks it again."""
    if table.partitions_def.start.date() > start:
        return ()
    span = days(start, end + dt.timedelta(days=1))
    return downstream_impact(asset_graph, table.key, span, exclude=[table.shadow_key])


def plan_stale(
    request: PlanRequest,
    *,
    asset_graph: AssetGraphLike,
    tables: Mapping[str, BackfillableTable],
    instance: dg.DagsterInstance,
    warehouse: Warehouse,
    now: dt.datetime,
    built_by: str | None = None,
) -> tuple[StaleScan, list[BackfillPlan]]:
    """Plan what is stale (`plan --stale`): find the target's stale partitions in Dagster's
    materialization history, then one plan per range of consecutive stale days, each saying why
    each of its partitions is in it. `request`'s start and end are ignored. Every plan is built
    before any is returned, so a refusal of one (the daily run's overlap, no window) refuses
    them all; nothing stale gives no plans.
    """
    table = table_for(dict(tables), request.target, what="target")
    scan = find_stale(instance, table, now=now, built_by=built_by)
    plans = [
        plan_backfill(
            dataclasses.replace(
                request, start=start.isoformat(), end=end.isoformat(), why=scan.why(start, end)
            ),
            asset_graph=asset_graph,
            tables=tables,
            instance=instance,
            warehouse=warehouse,
            now=now,
        )
        for start, end in scan.ranges
    ]
    return scan, plans
