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

from backfill_assets.lib.planning.plan import ImpactedAsset

ALL: Literal["all"] = "all"


def _kind(node: Any) -> str:
    kinds = {
        k.removeprefix("dagster/kind/") for k in (node.tags or {}) if k.startswith("dagster/kind/")
    }
    return "dbt" if "dbt" in kinds else "asset"


def downstream_impact(
    asset_graph: Any,
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
    downstream = (
        dg.AssetSelection.assets(target_key).downstream(include_self=False).resolve(asset_graph)
        - excluded
    )
    target_pd = asset_graph.get(target_key).partitions_def
    affected: dict[dg.AssetKey, Any] = {
        target_key: target_pd.subset_with_partition_keys([d.isoformat() for d in days])
        if target_pd
        else ALL
    }
    out: list[ImpactedAsset] = []
    for key in asset_graph.toposorted_asset_keys:
        if key not in downstream:
            continue
        node = asset_graph.get(key)
        pd = node.partitions_def
        result: Any = pd.empty_subset() if pd else ALL
        for parent in node.parent_keys:
            if parent not in affected:
                continue
            up = affected[parent]
            if pd is None or up is ALL:
                result = ALL
                break
            mapping = asset_graph.get_partition_mapping(key, parent)
            sub = mapping.get_downstream_partitions_for_partitions(
                up, asset_graph.get(parent).partitions_def, pd
            )
            result = result | sub
        affected[key] = result
        partitions = ALL if result is ALL else tuple(sorted(result.get_partition_keys()))
        out.append(ImpactedAsset(key.to_user_string(), partitions, _kind(node)))
    return tuple(out)
