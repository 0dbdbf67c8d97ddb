"""Refresh what a swap or rollback changed downstream: the plan's impact set, one run per grain.

After a swap launched from the UI, the table's refresh sensor requests these runs
(`batch_driver.follow_swaps`); the CLI runs them in its own process right after its swap.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import dagster as dg

from backfill_assets.constants import (
    PARTITION_TAG,
    PLAN_ID_TAG,
    ROLE_REFRESH,
    ROLE_TAG,
    WRITER_TAG,
)
from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.runs import range_tags, run_as_writer


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
                tags[PARTITION_TAG] = self.start
            else:
                tags.update(
                    range_tags(dt.date.fromisoformat(self.start), dt.date.fromisoformat(self.end))
                )
        return tags


def refresh_requests(
    plan: BackfillPlan,
    asset_graph: AssetGraphLike,
    *,
    only: Collection[str] | None = None,
    skip: Collection[str] = (),
) -> list[RefreshRequest]:
    """Group the plan's impact set (the keys in `only`, if given, but none in `skip`) by
    partitions definition: one refresh run per grain, upstream grains first."""
    groups: dict[object, list[str]] = defaultdict(list)
    ranges: dict[object, tuple[str, str] | None] = {}
    for item in plan.impact:
        if (only is not None and item.asset_key not in only) or item.asset_key in skip:
            continue
        pd = asset_graph.get(dg.AssetKey.from_user_string(item.asset_key)).partitions_def
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
    order = {k.to_user_string(): i for i, k in enumerate(asset_graph.toposorted_asset_keys)}
    return sorted(out, key=lambda r: min(order.get(k, 0) for k in r.asset_keys))


def refresh_downstream(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    plan: BackfillPlan,
    *,
    wait_s: float,
    log_level: str | None = None,
    skip: Collection[str] = (),
) -> list[tuple[Any, bool]]:
    """Rebuild a plan's impacted assets (but `skip`: what its swap published with the target)
    for the affected partitions, in this process: one run per grain, upstream grains first,
    each under the table's writer lease."""
    results = []
    for req in refresh_requests(plan, defs.resolve_asset_graph(), skip=skip):
        tags = req.tags(plan.plan_id, plan.target)
        partition = tags.pop(PARTITION_TAG, None)
        res = run_as_writer(
            defs,
            "",
            instance,
            wh,
            table,
            role=ROLE_REFRESH,
            plan_id=plan.plan_id,
            wait_s=wait_s,
            asset_selection=[dg.AssetKey.from_user_string(k) for k in req.asset_keys],
            partition_key=partition,
            tags=tags,
            raise_on_error=False,
            log_level=log_level,
        )
        results.append((req, res.success))
    return results
