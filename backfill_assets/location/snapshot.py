"""What `plan`, `approve`, `status` and the other plan commands need from a code location, kept
between commands so that they need not import it again.

Importing a code location is most of a command's time: the example's brings Dagster, dagster-dbt
and dbt, then its dbt manifest, where Dagster and the instance alone take about half as long
(docs/performance.md). Those commands read only a little of it: the backfillable tables, the asset
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backfill_assets.location.encoding import describe, view_from
from backfill_assets.location.view import LocationView, NotCacheable

if TYPE_CHECKING:
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
    # Not the kernel's files and devices; but a tmpfs under /dev/shm holds files like any other.
    paths = {
        p
        for p in paths
        if p.startswith("/dev/shm/") or not p.startswith(("/proc/", "/dev/", "/sys/"))
    }
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
        return view_from(data["location"])
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
        location = describe(view)
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
