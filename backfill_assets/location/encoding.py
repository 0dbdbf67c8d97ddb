"""A code location's view written down as JSON, and read back: the tables, the lineage downstream
of them (each asset's partitions and each edge's partition mapping), the daily-job check and the
warehouse resource's configuration. `SnapshotGraph` answers what the impact set asks of an asset
graph (lib/asset_graph.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import dagster as dg

    from backfill_assets.lib.table import BackfillableTable


from backfill_assets.location.view import LocationView, NotCacheable

# Asset metadata and tags the impact set reads (lib/planning/impact.py).
_KIND_TAG_PREFIX = "dagster/kind/"


# -- writing the location down -----------------------------------------------------------------


def describe(view: LocationView) -> dict[str, Any]:
    import dagster as dg

    graph = view.graph
    keys = [dg.AssetKey.from_user_string(k) for k in view.tables]
    # The tables and everything downstream of them: what the impact set walks.
    nodes: dict[Any, Any] = {}
    stack = list(keys)
    while stack:
        key = stack.pop()
        if key in nodes:
            continue
        nodes[key] = graph.get(key)
        stack.extend(nodes[key].child_keys)
    graph_out: dict[str, Any] = {}
    for key, node in nodes.items():
        pd = node.partitions_def
        mappings = {}
        for parent in node.parent_keys:
            if parent in nodes and pd is not None and graph.get(parent).partitions_def is not None:
                mappings[parent.to_user_string()] = _mapping(
                    graph.get_partition_mapping(key, parent), key
                )
        graph_out[key.to_user_string()] = {
            "partitions": _partitions(pd, key),
            "parents": sorted(p.to_user_string() for p in node.parent_keys if p in nodes),
            "children": sorted(c.to_user_string() for c in node.child_keys),
            "mappings": mappings,
            "metadata": _json_metadata(node.metadata or {}),
            "tags": {k: v for k, v in (node.tags or {}).items() if k.startswith(_KIND_TAG_PREFIX)},
        }
    return {
        "tables": {name: _table(t) for name, t in view.tables.items()},
        "all_assets": sorted(k.to_user_string() for k in graph.get_all_asset_keys()),
        "graph": graph_out,
        "daily_job_problems": list(view.daily_job_problems),
        "warehouse": _warehouse(view.warehouse),
    }


def _json_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata the impact set reads (lib/planning/impact.py), as JSON values."""
    from backfill_assets.constants import DOWNSTREAM_DBT_METADATA_KEY
    from backfill_assets.lib.planning.impact import DBT_MATERIALIZATION

    out = {}
    for name in (DOWNSTREAM_DBT_METADATA_KEY, DBT_MATERIALIZATION):
        if name in metadata:
            value = getattr(metadata[name], "value", metadata[name])
            if not isinstance(value, str | bool | int | float):
                raise NotCacheable(f"metadata {name} is {type(value).__name__}")
            out[name] = value
    return out


def _partitions(pd: Any, key: Any) -> Any:
    import dagster as dg

    if pd is None:
        return None
    if isinstance(pd, dg.TimeWindowPartitionsDefinition):
        return {"time_window": dg.serialize_value(_time_window(pd))}
    if isinstance(pd, dg.StaticPartitionsDefinition):
        return {"static": list(pd.get_partition_keys())}
    raise NotCacheable(f"{key.to_user_string()} has {type(pd).__name__}")


def _time_window(pd: Any) -> Any:
    """A time-window partitions definition as its base class, which Dagster serializes (the
    daily/weekly/monthly subclasses are equal to it, field by field)."""
    import dagster as dg

    return dg.TimeWindowPartitionsDefinition(
        start=pd.start,
        end=pd.end,
        cron_schedule=pd.cron_schedule,
        fmt=pd.fmt,
        timezone=pd.timezone,
        end_offset=pd.end_offset,
        exclusions=pd.exclusions,
    )


def _mapping(mapping: Any, key: Any) -> str:
    import dagster as dg

    try:
        return dg.serialize_value(mapping)
    except Exception as e:
        raise NotCacheable(f"{key.to_user_string()}'s partition mapping: {e}") from None


def _warehouse(resource: Any) -> dict[str, Any] | None:
    import dagster as dg

    from backfill_assets.defs.resources import WarehouseResource

    if resource is None:
        return None
    if type(resource) is not WarehouseResource:
        raise NotCacheable(f"the warehouse resource is a {type(resource).__name__}")
    out: dict[str, Any] = {}
    for name in ("url", "lock_timeout_s"):
        value = getattr(resource, name)
        out[name] = {"env": value.env_var_name} if isinstance(value, dg.EnvVar) else value
    return out


def _table(table: BackfillableTable) -> dict[str, Any]:
    pd = table.partitions_def
    spec = table.spec
    build: dict[str, Any]
    if isinstance(table.build, str):
        build = {"sql": table.build}
    elif isinstance(table.build, Mapping):
        build = {"per_dialect": dict(table.build)}
    else:
        build = {"python": f"{getattr(table.build, '__module__', '?')}."
                           f"{getattr(table.build, '__qualname__', '?')}"}  # fmt: skip
    return {
        "spec": {
            "name": spec.name,
            "columns": [[c.name, c.sql_type] for c in spec.columns],
            "partition_column": spec.partition_column,
            "primary_key": list(spec.primary_key),
            "source": [spec.source.table, spec.source.partition_column] if spec.source else None,
        },
        "partitions": _partitions(pd, _Named(spec.name)),
        "build": build,
        "daily_job": table.daily_job,
        "daily_expected_start": table.daily_expected_start.isoformat(),
        "criteria": table.criteria.to_dict(),
        "deps": list(table.deps),
        "code_version": table.code_version,
        "group_name": table.group_name,
        "production_jobs": list(table.production_jobs),
        "daily_lookback_days": table.daily_lookback_days,
        "backfill_window": table.backfill_window,
        "writer_wait_seconds": table.writer_wait_seconds,
        "backfill_budget": [table.backfill_budget.max_seconds, table.backfill_budget.max_rows]
        if table.backfill_budget
        else None,
        "swap_requires_review": table.swap_requires_review,
        "reviewer_must_differ": table.reviewer_must_differ,
        "description": table.description,
    }


@dataclass(frozen=True)
class _Named:
    name: str

    def to_user_string(self) -> str:
        return self.name


# -- reading it back -----------------------------------------------------------------------------


class _NotLoaded:
    """The Python build of a table read from a snapshot: the plan commands never build rows."""

    def __init__(self, name: str, table: str) -> None:
        self.__name__ = self.__qualname__ = name
        self._table = table

    def __call__(self, *args: Any) -> Any:
        from backfill_assets.errors import BackfillError

        raise BackfillError(
            f"{self._table}'s build {self.__name__} was not imported: this command read the "
            "code location's snapshot (backfill_assets/location/snapshot.py)"
        )


def view_from(data: Mapping[str, Any]) -> LocationView:
    from backfill_assets.defs.resources import WarehouseResource

    wh = data["warehouse"]
    resource = None
    if wh is not None:
        import dagster as dg

        args: dict[str, Any] = {
            k: dg.EnvVar(v["env"]) if isinstance(v, dict) else v
            for k, v in wh.items()
            if v is not None
        }
        resource = WarehouseResource(**args)
    return LocationView(
        tables={name: _table_from(t) for name, t in data["tables"].items()},
        graph=SnapshotGraph(data["graph"], data["all_assets"]),
        daily_job_problems=list(data["daily_job_problems"]),
        warehouse=resource,
    )


def _partitions_from(data: Any) -> Any:
    import dagster as dg

    if data is None:
        return None
    if "static" in data:
        return dg.StaticPartitionsDefinition(data["static"])
    return dg.deserialize_value(data["time_window"], dg.TimeWindowPartitionsDefinition)


def _table_from(data: Mapping[str, Any]) -> BackfillableTable:
    import dagster as dg

    from backfill_assets.lib.planning.batches import Budget
    from backfill_assets.lib.planning.criteria import Criteria
    from backfill_assets.lib.spec import Column, SourceRef, TableSpec
    from backfill_assets.lib.table import BackfillableTable
    from backfill_assets.lib.warehouse.predicates import mark_validated

    s = data["spec"]
    spec = TableSpec(
        name=s["name"],
        columns=tuple(Column(n, t) for n, t in s["columns"]),
        partition_column=s["partition_column"],
        primary_key=tuple(s["primary_key"]),
        source=SourceRef(*s["source"]) if s["source"] else None,
    )
    tw = _partitions_from(data["partitions"])
    minute, hour = (int(x) for x in tw.cron_schedule.split()[:2])
    daily = dg.DailyPartitionsDefinition(
        start_date=tw.start,
        end_date=tw.end,
        minute_offset=minute,
        hour_offset=hour,
        timezone=tw.timezone,
        fmt=tw.fmt,
        end_offset=tw.end_offset,
        exclusions=tw.exclusions,
    )
    build = data["build"]
    criteria = Criteria.from_dict(data["criteria"])
    # Validated when the location was imported and the snapshot written from the same inputs:
    # not parsed again (sqlglot's import alone is about 0.1 s of a command).
    for predicate in criteria.predicates:
        mark_validated(predicate, spec.column_names)
    return BackfillableTable(
        spec=spec,
        partitions_def=daily,
        build=build.get("sql")
        or build.get("per_dialect")
        or _NotLoaded(build["python"], s["name"]),
        daily_job=data["daily_job"],
        daily_expected_start=dt.time.fromisoformat(data["daily_expected_start"]),
        criteria=criteria,
        deps=tuple(data["deps"]),
        code_version=data["code_version"],
        group_name=data["group_name"],
        production_jobs=tuple(data["production_jobs"]),
        daily_lookback_days=data["daily_lookback_days"],
        backfill_window=data["backfill_window"],
        writer_wait_seconds=data["writer_wait_seconds"],
        backfill_budget=Budget(*budget) if (budget := data.get("backfill_budget")) else None,
        swap_requires_review=bool(data.get("swap_requires_review", False)),
        reviewer_must_differ=bool(data.get("reviewer_must_differ", False)),
        description=data["description"],
    )


@dataclass(frozen=True)
class _Node:
    key: dg.AssetKey
    partitions_def: dg.PartitionsDefinition | None
    parent_keys: frozenset[dg.AssetKey]
    child_keys: frozenset[dg.AssetKey]
    partition_mappings: Mapping[dg.AssetKey, dg.PartitionMapping]
    metadata: Mapping[str, Any]
    tags: Mapping[str, str]


class SnapshotGraph:
    """The part of an asset graph the impact set reads (`lib/planning/impact.py`): the tables
    and everything downstream of them, with each edge's partition mapping as Dagster resolved
    it when the location was imported. An `AssetGraphLike` (lib/asset_graph.py), as Dagster's
    own graph is."""

    def __init__(self, nodes: Mapping[str, Any], all_assets: list[str]) -> None:
        import dagster as dg

        key = dg.AssetKey.from_user_string
        self._all = [key(k) for k in all_assets]
        self._nodes: dict[dg.AssetKey, _Node] = {}
        for name, n in nodes.items():
            self._nodes[key(name)] = _Node(
                key=key(name),
                partitions_def=_partitions_from(n["partitions"]),
                parent_keys=frozenset(key(p) for p in n["parents"]),
                child_keys=frozenset(key(c) for c in n["children"]),
                partition_mappings={  # each serialized from a PartitionMapping (`_mapping`)
                    key(p): cast("dg.PartitionMapping", dg.deserialize_value(m))
                    for p, m in n["mappings"].items()
                },
                metadata=dict(n["metadata"]),
                tags=dict(n["tags"]),
            )

    def get_all_asset_keys(self) -> list[dg.AssetKey]:
        return list(self._all)

    def has(self, key: dg.AssetKey) -> bool:
        return key in self._nodes

    def get(self, key: dg.AssetKey) -> _Node:
        return self._nodes[key]

    def get_partition_mapping(self, key: dg.AssetKey, parent: dg.AssetKey) -> dg.PartitionMapping:
        return self._nodes[key].partition_mappings[parent]

    @cached_property
    def toposorted_asset_keys(self) -> list[dg.AssetKey]:
        """The assets it holds, parents first: level by level from those with no parent here,
        each level by key, as Dagster orders a whole graph (an asset's dependency on its own
        earlier partitions is no edge)."""
        waiting = {k: len(n.parent_keys & self._nodes.keys() - {k}) for k, n in self._nodes.items()}
        level = sorted(k for k, n in waiting.items() if n == 0)
        order: list[dg.AssetKey] = []
        while level:
            order.extend(level)
            ready = []
            for key in level:
                for child in self._nodes[key].child_keys - {key}:
                    if child in waiting:
                        waiting[child] -= 1
                        if waiting[child] == 0:
                            ready.append(child)
            level = sorted(ready)
        return order
