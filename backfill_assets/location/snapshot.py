"""What `plan`, `approve`, `status` and the other plan commands need from a code location, kept
between commands so that they need not import it again.

Importing a code location is most of a command's time: the example's takes 1.7-2.6 s in a fresh
process (Dagster, dagster-dbt and dbt, then its dbt manifest), against about 1 s for Dagster and
the instance alone. Those commands read only a little of it: the backfillable tables, the asset
lineage downstream of them (each asset's partitions and each edge's partition mapping, for the
impact set), whether each table's daily job is a job of the location that writes it, and the
warehouse resource's configuration. The first command that imports the location writes that
here; the next ones read it instead, as long as nothing it was built from has changed.

It is a cache, never a source of truth. It is used only when all of these are as they were:
- the location's spec (module or file, attribute, working directory), the interpreter, the
  working directory, `sys.path`, this package's version and the day (UTC): definitions computed
  from the date are read again each day;
- the environment, but for the shell's own bookkeeping variables (`PWD`, `SHLVL`, ...);
- every module the process had imported (path, mtime, size), every file opened for reading while
  the location loaded (a dbt manifest, YAML), and the entries of every folder it listed then
  outside the interpreter's own folders (a dbt project's models), each by mtime and size.

Anything else makes the command import the location as before, and write the snapshot again.
Definitions whose lineage cannot be written down (partitions other than time windows or static
ones, a custom partition mapping, a warehouse resource of another class) are never cached.
`BACKFILL_ASSETS_LOCATION_CACHE=0` turns it off; `BACKFILL_ASSETS_CACHE_DIR` moves it (default:
`$DAGSTER_HOME/.backfill_assets/locations`). The commands that execute runs (`run`, `swap`,
`rollback`) always import the location: they need its jobs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import dagster as dg

    from backfill_assets.lib.asset_graph import AssetGraphLike
    from backfill_assets.lib.table import BackfillableTable
    from backfill_assets.location.loader import LocationSpec

FORMAT = 1
CACHE_ENV = "BACKFILL_ASSETS_CACHE_DIR"
SWITCH_ENV = "BACKFILL_ASSETS_LOCATION_CACHE"
# The shell's own bookkeeping: these change between two commands of one session and say
# nothing about the definitions.
_VOLATILE_ENV = frozenset(
    {"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES", "PS1", "PS2", "PS3", "PS4",
     "PROMPT_COMMAND", "HISTFILE", "HISTSIZE", "HISTCONTROL", "HISTFILESIZE", "TERM",
     "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID", "WINDOWID", "SSH_CLIENT",
     "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "TMUX_PANE", "STY", "XDG_SESSION_ID"}
)  # fmt: skip
# Asset metadata and tags the impact set reads (lib/planning/impact.py).
_KIND_TAG_PREFIX = "dagster/kind/"


class NotCacheable(Exception):
    """The definitions hold something a snapshot cannot write down; the location is imported."""


# -- what the commands read --------------------------------------------------------------------


@dataclass
class LocationView:
    """What the plan commands read from a code location, imported or from its snapshot.

    `graph` is the asset graph (`Definitions.resolve_asset_graph()`), or a `SnapshotGraph` that
    answers what the impact set asks of one. `defs` is None when it came from the snapshot.
    """

    tables: dict[str, BackfillableTable]
    graph: AssetGraphLike
    daily_job_problems: list[str]
    warehouse: Any  # the `backfill_warehouse` resource, or None
    defs: dg.Definitions | None = None


def view_of(defs: dg.Definitions) -> LocationView:
    """The view of an imported location."""
    from backfill_assets.constants import WAREHOUSE_RESOURCE_KEY
    from backfill_assets.service.tables import backfill_tables, daily_job_problems

    tables = backfill_tables(defs)
    return LocationView(
        tables=tables,
        graph=defs.resolve_asset_graph(),
        daily_job_problems=daily_job_problems(defs, tables),
        warehouse=(defs.resources or {}).get(WAREHOUSE_RESOURCE_KEY),
        defs=defs,
    )


# -- recording what a load reads -----------------------------------------------------------------


@dataclass
class Reads:
    """Files opened for reading and folders listed while a code location loaded."""

    files: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)


_RECORDING: list[Reads] = []
_IMPORTLIB = re.compile(r"^<frozen importlib|[/\\]importlib[/\\]")
_HOOKED = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _RECORDING or event not in ("open", "os.listdir", "os.scandir"):
        return
    # The import system (and importlib.metadata's search for distributions) lists every folder
    # on sys.path and opens every module's file: the modules are fingerprinted one by one, and
    # those folders are not what the location read.
    if _IMPORTLIB.search(sys._getframe(1).f_code.co_filename):
        return
    if event == "open":
        path, mode, flags = (*args, None, None)[:3]
        writing = (
            any(c in mode for c in "wax+")
            if isinstance(mode, str)
            else isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR) != 0
        )
        if isinstance(path, str | bytes | os.PathLike) and not writing:
            _RECORDING[-1].files.add(os.path.abspath(os.fsdecode(path)))
    elif event in ("os.listdir", "os.scandir") and args and args[0] is not None:
        path = args[0]
        if isinstance(path, str | bytes | os.PathLike):
            _RECORDING[-1].folders.add(os.path.abspath(os.fsdecode(path)))


@contextlib.contextmanager
def recording() -> Iterator[Reads]:
    """Record what the code inside reads (Python's audit hooks: `open`, `os.listdir`,
    `os.scandir`). The hook stays installed for the process, idle outside this block."""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True
    reads = Reads()
    _RECORDING.append(reads)
    try:
        yield reads
    finally:
        _RECORDING.pop()


# -- the fingerprint -----------------------------------------------------------------------------


def _system_folders() -> tuple[str, ...]:
    """The interpreter's own folders (the standard library, site-packages): their modules are
    fingerprinted one by one; listing them is the import system's business, not the location's."""
    import site
    import sysconfig

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    paths.update(p for p in sysconfig.get_paths().values() if p)
    return tuple(sorted(os.path.realpath(p) + os.sep for p in paths))


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def _environment() -> str:
    items = sorted((k, v) for k, v in os.environ.items() if k not in _VOLATILE_ENV)
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()


def context_key(spec: LocationSpec) -> dict[str, Any]:
    """What must be the same for a snapshot to apply, besides the files. Taken before the
    location is imported (importing it may add its folder to `sys.path`)."""
    from backfill_assets import __version__

    return {
        "format": FORMAT,
        "package": __version__,
        "spec": [spec.module, spec.file, spec.attribute, spec.working_directory, spec.name],
        "cwd": os.getcwd(),
        "python": [sys.executable, sys.version],
        "sys_path": [p for p in sys.path if p],
        "environment": _environment(),
        "day": dt.datetime.now(dt.UTC).date().isoformat(),
    }


def _files_read(reads: Reads) -> dict[str, list[int] | None]:
    """Every imported module's file, every file the load opened, and the entries of every
    folder it listed outside the interpreter's folders, with their mtime and size (None: the
    file did not exist)."""
    system = _system_folders()
    paths: set[str] = set(reads.files)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            paths.add(os.path.abspath(path))
    for folder in reads.folders:
        if (os.path.realpath(folder) + os.sep).startswith(system):
            continue
        paths.add(folder)
        with contextlib.suppress(OSError):
            paths.update(os.path.join(folder, name) for name in os.listdir(folder))
    paths = {p for p in paths if not p.startswith(("/proc/", "/dev/", "/sys/"))}
    return {p: _stat(p) for p in sorted(paths)}


def _unchanged(files: Mapping[str, Any]) -> bool:
    return all(_stat(path) == seen for path, seen in files.items())


# -- where snapshots live --------------------------------------------------------------------


def _enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def cache_dir() -> Path | None:
    """Where snapshots are kept: BACKFILL_ASSETS_CACHE_DIR, else under DAGSTER_HOME."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    home = os.environ.get("DAGSTER_HOME")
    return Path(home) / ".backfill_assets" / "locations" if home else None


def _snapshot_path(spec: LocationSpec) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    who = json.dumps([spec.module, spec.file, spec.attribute, spec.working_directory, spec.name,
                      os.getcwd(), sys.executable])  # fmt: skip
    return folder / f"location-{hashlib.sha256(who.encode()).hexdigest()[:20]}.json"


def load(spec: LocationSpec) -> LocationView | None:
    """The view from the snapshot of `spec`, if there is one and nothing it was built from has
    changed; else None (the caller imports the location)."""
    path = _snapshot_path(spec) if _enabled() else None
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != context_key(spec):
        return None
    if not _unchanged(data.get("files") or {}):
        return None
    try:
        return _view_from(data["location"])
    except Exception:  # written by another version, or damaged: import the location instead
        return None


def store(spec: LocationSpec, key: dict[str, Any], view: LocationView, reads: Reads) -> Path | None:
    """Write the snapshot of a location just imported (`key`: its `context_key` from before the
    import; `reads`: what the import read). Best effort: a folder that cannot be written, or
    definitions a snapshot cannot hold, leave none and change nothing else."""
    path = _snapshot_path(spec) if _enabled() else None
    if path is None:
        return None
    try:
        location = _describe(view)
    except NotCacheable:
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    data = {"key": key, "files": _files_read(reads), "location": location}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Another command may write the same snapshot at once: each writes a file of its own
        # and moves it into place whole. Owner-only: it may hold a warehouse URL from the code.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".snapshot-")
    except OSError:
        return None
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return path


# -- writing the location down -----------------------------------------------------------------


def _describe(view: LocationView) -> dict[str, Any]:
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


def _view_from(data: Mapping[str, Any]) -> LocationView:
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

    from backfill_assets.lib.planning.criteria import Criteria
    from backfill_assets.lib.spec import Column, SourceRef, TableSpec
    from backfill_assets.lib.table import BackfillableTable

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
    return BackfillableTable(
        spec=spec,
        partitions_def=daily,
        build=build.get("sql")
        or build.get("per_dialect")
        or _NotLoaded(build["python"], s["name"]),
        daily_job=data["daily_job"],
        daily_expected_start=dt.time.fromisoformat(data["daily_expected_start"]),
        criteria=Criteria.from_dict(data["criteria"]),
        deps=tuple(data["deps"]),
        code_version=data["code_version"],
        group_name=data["group_name"],
        production_jobs=tuple(data["production_jobs"]),
        daily_lookback_days=data["daily_lookback_days"],
        backfill_window=data["backfill_window"],
        writer_wait_seconds=data["writer_wait_seconds"],
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
