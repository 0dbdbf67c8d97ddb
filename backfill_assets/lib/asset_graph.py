"""The asset graph as this package reads it: the lineage the impact set walks, the partitions
and partition mappings it maps a range through, the metadata and tags that say what an asset is.

Two graphs serve: Dagster's own (`Definitions.resolve_asset_graph()`, a repository's
`asset_graph`), and the code location's snapshot of it (`location/snapshot.py`'s
`SnapshotGraph`), which the plan commands read instead of importing the location. The Protocols
name what the planner, approval, the front door, the batch driver, the downstream refresh and
the shadow build of dbt models use of it, and no more; pyright checks that both graphs have it.
Dagster is imported for the types only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import dagster as dg


class AssetNodeLike(Protocol):
    """One asset of the graph (Dagster's `AssetNode`)."""

    @property
    def partitions_def(self) -> dg.PartitionsDefinition | None: ...

    @property
    def parent_keys(self) -> AbstractSet[dg.AssetKey]: ...

    @property
    def child_keys(self) -> AbstractSet[dg.AssetKey]: ...

    @property
    def partition_mappings(self) -> Mapping[dg.AssetKey, dg.PartitionMapping]: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...

    @property
    def tags(self) -> Mapping[str, str]: ...


class AssetGraphLike(Protocol):
    """The asset graph (Dagster's `AssetGraph`): its assets, by key and in topological order,
    and the partition mapping of each edge, inferred where none is explicit."""

    def get(self, key: dg.AssetKey, /) -> AssetNodeLike: ...

    def has(self, key: dg.AssetKey, /) -> bool: ...

    def get_all_asset_keys(self) -> Collection[dg.AssetKey]: ...

    def get_partition_mapping(
        self, key: dg.AssetKey, parent: dg.AssetKey, /
    ) -> dg.PartitionMapping: ...

    # Computed once, as Dagster's is: pyright does not take a cached_property for a property.
    @cached_property
    def toposorted_asset_keys(self) -> Sequence[dg.AssetKey]: ...
