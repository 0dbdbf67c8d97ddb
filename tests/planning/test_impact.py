"""The downstream impact set on real Dagster asset graphs: order, partitions through each edge's
mapping, "all" below an unpartitioned asset, and the excluded shadow."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.planning.impact import downstream_impact

DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01")
WEEKLY = dg.WeeklyPartitionsDefinition(start_date="2024-01-01", day_offset=1)


def _graph(*specs: dg.AssetSpec) -> AssetGraphLike:
    return dg.Definitions(assets=list(specs)).resolve_asset_graph()


def test_every_asset_comes_after_all_its_impacted_parents_with_the_mapped_partitions() -> None:
    # t -> a -> b -> d, and t -> d directly: d's longest path below t is 3, so it comes last
    # although t is its parent too. w is weekly under a; u is unpartitioned; v under u.
    graph = _graph(
        dg.AssetSpec("t", partitions_def=DAILY),
        dg.AssetSpec("a", deps=["t"], partitions_def=DAILY),
        dg.AssetSpec("b", deps=["a"], partitions_def=DAILY),
        dg.AssetSpec("d", deps=["b", "t"], partitions_def=DAILY),
        dg.AssetSpec("w", deps=["a"], partitions_def=WEEKLY),
        dg.AssetSpec(
            "lagged",
            deps=[dg.AssetDep("t", partition_mapping=dg.TimeWindowPartitionMapping(1, 1))],
            partitions_def=DAILY,
        ),
        dg.AssetSpec("u", deps=["b"]),
        dg.AssetSpec("v", deps=["u"], partitions_def=DAILY),
        dg.AssetSpec("elsewhere", partitions_def=DAILY),
    )
    days = [dt.date(2024, 3, 4) + dt.timedelta(days=i) for i in range(8)]  # Mon..next Mon
    impact = downstream_impact(graph, "t", days)
    order = [i.asset_key for i in impact]
    assert order == ["a", "lagged", "b", "w", "d", "u", "v"]
    by_key = {i.asset_key: i.partitions for i in impact}
    keys = tuple(d.isoformat() for d in days)
    assert by_key["a"] == by_key["b"] == by_key["d"] == keys
    assert by_key["w"] == ("2024-03-04", "2024-03-11")
    # The explicit mapping (each day reads the next day's target) is followed, not inferred.
    assert by_key["lagged"] == tuple((d - dt.timedelta(days=1)).isoformat() for d in days)
    assert by_key["u"] == by_key["v"] == "all"


def test_the_excluded_shadow_is_left_out_but_what_it_feeds_is_walked() -> None:
    graph = _graph(
        dg.AssetSpec("t", partitions_def=DAILY),
        dg.AssetSpec("t__shadow", deps=["t"], partitions_def=DAILY),
        dg.AssetSpec("check_view", deps=["t__shadow"], partitions_def=DAILY),
        dg.AssetSpec("m", deps=["t"], partitions_def=DAILY),
    )
    impact = downstream_impact(graph, "t", [dt.date(2024, 3, 4)], exclude=["t__shadow"])
    assert [(i.asset_key, i.partitions) for i in impact] == [
        ("m", ("2024-03-04",)),
        ("check_view", ()),
    ]
