"""Downstream impact from Dagster's asset lineage graph (dbt models included).

Read-only over the asset graph passed in: every asset downstream of the target, with the
partitions the backfilled range affects through each edge's partition mapping (so a weekly
model lists the ISO weeks touched), or "all" for an unpartitioned asset (a full refresh) and
for anything downstream of one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Literal

import dagster as dg

from backfill_assets.constants import DOWNSTREAM_DBT_METADATA_KEY
from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.planning.plan import ImpactedAsset

ALL: Literal["all"] = "all"
# dagster-dbt's metadata of a model's materialization ("table", "incremental", "view", ...).
DBT_MATERIALIZATION = "dagster-dbt/materialization_type"


def _kind(node: Any, published: bool) -> str:
    """ "dbt" or "asset"; for a dbt model that the target's swap builds in shadow and publishes
    (the table declares downstream_dbt), "dbt <materialization>": "dbt table", "dbt
    incremental" (published with the target), "dbt view" (follows it)."""
    kinds = {
        k.removeprefix("dagster/kind/") for k in (node.tags or {}) if k.startswith("dagster/kind/")
    }
    if "dbt" not in kinds:
        return "asset"
    materialized = (node.metadata or {}).get(DBT_MATERIALIZATION) if published else None
    return f"dbt {materialized}" if materialized else "dbt"


def _downstream_in_order(asset_graph: AssetGraphLike, target_key: Any) -> list[Any]:
    """The target's downstream assets in topological order: by depth below the target (the
    longest path), then by key. Walks only the downstream subgraph: Dagster's
    `toposorted_asset_keys` sorts the whole graph, most of a plan's time at 10,000 assets."""
    children: dict[Any, list[Any]] = {}
    seen = {target_key}
    stack = [target_key]
    while stack:
        key = stack.pop()
        kids = list(asset_graph.get(key).child_keys)
        children[key] = kids
        for c in kids:
            if c not in seen:
                seen.add(c)
                stack.append(c)
    waiting = dict.fromkeys(seen, 0)
    for kids in children.values():
        for c in kids:
            waiting[c] += 1
    out: list[Any] = []
    level = [target_key]
    while level:
        nxt: list[Any] = []
        for key in level:
            for c in children[key]:
                waiting[c] -= 1
                if waiting[c] == 0:
                    nxt.append(c)
        level = sorted(nxt)
        out.extend(level)
    return out


def downstream_impact(
    asset_graph: AssetGraphLike,
    target: str,
    days: Iterable[dt.date],
    exclude: Iterable[str] = (),
) -> tuple[ImpactedAsset, ...]:
    """Impacted assets in topological order, with affected partition keys or "all".

    Args:
        asset_graph: `Definitions.resolve_asset_graph()` (read only).
        target: the backfilled asset's key (slash-joined string).
        days: the backfilled partitions.
        exclude: keys to leave out (the target's own shadow).
    """
    target_key = dg.AssetKey.from_user_string(target)
    excluded = {dg.AssetKey.from_user_string(e) for e in exclude}
    target_node = asset_graph.get(target_key)
    target_pd = target_node.partitions_def
    published = bool((target_node.metadata or {}).get(DOWNSTREAM_DBT_METADATA_KEY))
    affected: dict[dg.AssetKey, Any] = {
        target_key: target_pd.subset_with_partition_keys([d.isoformat() for d in days])
        if target_pd
        else ALL
    }
    out: list[ImpactedAsset] = []
    same_grain = (dg.IdentityPartitionMapping(), dg.TimeWindowPartitionMapping())
    mapped: dict[tuple[Any, ...], Any] = {}
    # Subsets are shared by every asset of the same grain: list each one's keys once. (Every
    # subset stays referenced from `affected`, so its id is stable for the whole call.)
    keys_of: dict[int, tuple[str, ...]] = {}
    inferred: dict[tuple[int, int], Any] = {}
    for key in _downstream_in_order(asset_graph, target_key):
        if key in excluded:
            continue
        node = asset_graph.get(key)
        pd = node.partitions_def
        result: Any = None
        explicit: Any = None  # the node's own partition mappings, read once (a dict is built)
        for parent in node.parent_keys:
            if parent not in affected:
                continue
            up = affected[parent]
            if pd is None or up is ALL:
                result = ALL
                break
            parent_pd = asset_graph.get(parent).partitions_def
            if explicit is None:
                explicit = node.partition_mappings
            mapping = explicit.get(parent)
            if mapping is None:  # Dagster's inference depends on the two grains only: once each
                pair = (id(pd), id(parent_pd))
                if pair not in inferred:
                    inferred[pair] = asset_graph.get_partition_mapping(key, parent)
                mapping = inferred[pair]
            if parent_pd == pd and mapping in same_grain:
                sub = up  # same grain, default mapping: the same partitions
            else:
                # Many assets share a parent subset and grain (a weekly mart under a daily
                # model): map each distinct (subset, mapping, grains) once.
                cache_key = (id(up), repr(mapping), id(parent_pd), id(pd))
                if cache_key not in mapped:
                    mapped[cache_key] = mapping.get_downstream_partitions_for_partitions(
                        up, parent_pd, pd
                    )
                sub = mapped[cache_key]
            result = sub if result is None or result is sub else result | sub
        if result is None:
            result = pd.empty_subset() if pd is not None else ALL
        affected[key] = result
        if result is ALL:
            partitions: Any = ALL
        else:
            if id(result) not in keys_of:
                keys_of[id(result)] = tuple(sorted(result.get_partition_keys()))
            partitions = keys_of[id(result)]
        out.append(ImpactedAsset.built(key.to_user_string(), partitions, _kind(node, published)))
    return tuple(out)
