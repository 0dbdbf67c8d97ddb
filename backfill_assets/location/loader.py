"""Find and load the user's code location, as the `dagster` CLI does.

In order: `-m/--module-name` (with `-a/--attribute`), `-f/--python-file`, `-w/--workspace`
(with `-l/--location` when it has several); else `[tool.dagster] module_name` or the
`[tool.dg.project]` root module of `./pyproject.toml`. The module's `defs` (a `Definitions`, or a
function decorated with `@dg.definitions`) is loaded, or the one Definitions it defines.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import dagster as dg

# What `@dg.definitions` returns. Dagster exports the decorator but not the class of what it
# returns, and a module's `defs` may be either; this module alone imports it.
from dagster.components.definitions import LazyDefinitions

from backfill_assets.errors import InvalidInput

HINT = (
    "point backfill-assets at your code location: -m my_project.definitions, -f path/to/defs.py "
    "or -w workspace.yaml, or run it where pyproject.toml has [tool.dagster] module_name"
)


@dataclass(frozen=True)
class LocationSpec:
    """Where the definitions are: a module or a file, and the attribute to read."""

    module: str | None = None
    file: str | None = None
    attribute: str | None = None
    working_directory: str | None = None
    name: str | None = None

    def describe(self) -> str:
        where = f"module {self.module}" if self.module else f"file {self.file}"
        return where + (f" (attribute {self.attribute})" if self.attribute else "")


def _from_pyproject(cwd: Path) -> LocationSpec | None:
    path = cwd / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InvalidInput(f"{path} is not valid TOML ({e}); {HINT}") from None
    tool = data.get("tool", {})
    dagster_cfg = tool.get("dagster", {})
    if dagster_cfg.get("module_name"):
        return LocationSpec(
            module=str(dagster_cfg["module_name"]),
            attribute=dagster_cfg.get("attribute"),
            working_directory=str(dagster_cfg.get("working_directory", cwd)),
        )
    project = tool.get("dg", {}).get("project", {})
    if project.get("root_module"):
        target = project.get("code_location_target_module") or (
            f"{project['root_module']}.definitions"
        )
        src = cwd / "src"
        return LocationSpec(module=str(target), working_directory=str(src if src.is_dir() else cwd))
    return None


def _from_workspace(path: Path, location: str | None) -> LocationSpec:
    import yaml

    if not path.is_file():
        raise InvalidInput(f"workspace file {path} does not exist; {HINT}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise InvalidInput(f"workspace file {path} is not valid YAML ({e})") from None
    specs: list[LocationSpec] = []
    for entry in data.get("load_from") or []:
        if not isinstance(entry, dict):
            continue
        if "python_module" in entry:
            cfg = entry["python_module"]
            cfg = {"module_name": cfg} if isinstance(cfg, str) else cfg
            specs.append(
                LocationSpec(
                    module=cfg.get("module_name"),
                    attribute=cfg.get("attribute"),
                    working_directory=str(path.parent / cfg.get("working_directory", ".")),
                    name=cfg.get("location_name") or cfg.get("module_name"),
                )
            )
        elif "python_file" in entry:
            cfg = entry["python_file"]
            cfg = {"relative_path": cfg} if isinstance(cfg, str) else cfg
            specs.append(
                LocationSpec(
                    file=str(path.parent / cfg["relative_path"]),
                    attribute=cfg.get("attribute"),
                    working_directory=str(path.parent / cfg.get("working_directory", ".")),
                    name=cfg.get("location_name") or Path(cfg["relative_path"]).stem,
                )
            )
    if not specs:
        raise InvalidInput(f"workspace file {path} loads no python_module or python_file")
    if location is not None:
        chosen = [s for s in specs if s.name == location]
        if not chosen:
            raise InvalidInput(
                f"workspace {path} has no location {location!r}; it has "
                f"{sorted(str(s.name) for s in specs)}"
            )
        return chosen[0]
    if len(specs) > 1:
        raise InvalidInput(
            f"workspace {path} has {len(specs)} locations "
            f"{sorted(str(s.name) for s in specs)}; pick one with -l/--location"
        )
    return specs[0]


def resolve_spec(
    *,
    module: str | None,
    file: str | None,
    workspace: str | None,
    attribute: str | None,
    location: str | None,
    cwd: Path,
) -> LocationSpec:
    given = [x for x in (module, file, workspace) if x]
    if len(given) > 1:
        raise InvalidInput("give one of -m/--module-name, -f/--python-file, -w/--workspace")
    if module:
        return LocationSpec(module=module, attribute=attribute, working_directory=str(cwd))
    if file:
        return LocationSpec(file=file, attribute=attribute, working_directory=str(cwd))
    if workspace:
        return _from_workspace(Path(workspace), location)
    spec = _from_pyproject(cwd)
    if spec is None:
        raise InvalidInput(f"no code location given; {HINT}")
    return LocationSpec(
        module=spec.module,
        file=spec.file,
        attribute=attribute or spec.attribute,
        working_directory=spec.working_directory,
    )


def _import(spec: LocationSpec) -> ModuleType:
    if spec.working_directory and spec.working_directory not in sys.path:
        sys.path.insert(0, spec.working_directory)
    if spec.module:
        try:
            return importlib.import_module(spec.module)
        except ModuleNotFoundError as e:
            raise InvalidInput(f"cannot import {spec.module} ({e}); {HINT}") from None
    assert spec.file is not None
    path = Path(spec.file).resolve()
    if not path.is_file():
        raise InvalidInput(f"python file {spec.file} does not exist; {HINT}")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    name = f"__backfill_assets_location_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def _definitions(value: Any, what: str) -> dg.Definitions:
    if isinstance(value, dg.Definitions):
        return value
    if isinstance(value, LazyDefinitions):
        if value.has_context_arg:
            raise InvalidInput(
                f"{what} needs a ComponentLoadContext; give the CLI a module whose defs take "
                "no arguments"
            )
        loaded = value()
        if isinstance(loaded, dg.Definitions):
            return loaded
    raise InvalidInput(f"{what} is not a Dagster Definitions (got {type(value).__name__})")


_LOADED: dict[LocationSpec, dg.Definitions] = {}


def load_definitions(spec: LocationSpec) -> dg.Definitions:
    """The Definitions of `spec` (loaded once per process)."""
    if spec in _LOADED:
        return _LOADED[spec]
    module = _import(spec)
    if spec.attribute:
        if not hasattr(module, spec.attribute):
            raise InvalidInput(f"{spec.describe()} has no attribute {spec.attribute!r}")
        defs = _definitions(getattr(module, spec.attribute), f"{spec.describe()}")
    elif hasattr(module, "defs"):
        defs = _definitions(module.defs, f"{spec.describe()}'s defs")
    else:
        found = [
            v for v in vars(module).values() if isinstance(v, dg.Definitions | LazyDefinitions)
        ]
        if len(found) != 1:
            raise InvalidInput(
                f"{spec.describe()} defines {len(found)} Definitions; name one with -a/--attribute"
            )
        defs = _definitions(found[0], spec.describe())
    _LOADED[spec] = defs
    return defs


def load_location(spec: LocationSpec, *, snapshot_ok: bool) -> Any:
    """What the commands read from the location `spec` (a `view.LocationView`).

    `snapshot_ok`: the command needs no jobs or Definitions of its own (plan, approve, status,
    ...), so the location's snapshot serves while it is current; else, and when it is not, the
    location is imported (once per process) and its snapshot written again.
    """
    from backfill_assets.location import snapshot
    from backfill_assets.location.view import view_of

    if snapshot_ok:
        view = snapshot.load(spec)
        if view is not None:
            return view
    if spec in _LOADED:
        return view_of(_LOADED[spec])
    key = snapshot.context_key(spec)
    with snapshot.recording() as reads:
        defs = load_definitions(spec)
    view = view_of(defs)
    snapshot.store(spec, key, view, reads)
    return view
