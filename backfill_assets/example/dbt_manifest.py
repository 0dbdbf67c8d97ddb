"""Keep the dbt manifest fresh: parse when it is missing or older than the project's files."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_SOURCES = ("models", "macros", "tests", "dbt_project.yml")
PARTIAL_PARSE = "partial_parse.msgpack"


def dbt_executable() -> str:
    """The dbt next to this interpreter (the project's venv), else whatever is on PATH."""
    here = Path(sys.executable).with_name("dbt")
    return str(here) if here.exists() else "dbt"


def manifest_is_stale(project_dir: Path, manifest: Path) -> bool:
    if not manifest.exists():
        return True
    built = manifest.stat().st_mtime
    for name in _SOURCES:
        p = project_dir / name
        files = [p] if p.is_file() else list(p.rglob("*")) if p.exists() else []
        if any(f.is_file() and f.stat().st_mtime > built for f in files):
            return True
    return False


def ensure_manifest(project: Any) -> Path:
    """Run `dbt parse` if the manifest is missing or stale; return its path.

    `DbtProject.prepare_if_dev()` only acts under `dagster dev`; tests, the CLI and the daemon's
    code server need a current manifest too, and a stale one must never be used. Processes that
    start together (test workers, a code server and the CLI) parse one at a time under a file
    lock, and the manifest is replaced whole (dbt writes it into a scratch target directory),
    so no reader ever sees half of one: two parses writing the same file at once once left a
    manifest that could not be read, and every later load failed on it.
    """
    project_dir = Path(project.project_dir)
    manifest = Path(project.manifest_path)
    if not manifest_is_stale(project_dir, manifest):
        return manifest
    manifest.parent.mkdir(parents=True, exist_ok=True)
    with open(manifest.parent / ".manifest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if manifest_is_stale(project_dir, manifest):  # another process may have parsed meanwhile
            with tempfile.TemporaryDirectory(dir=manifest.parent, prefix=".parse-") as scratch:
                cmd = [
                    dbt_executable(),
                    "parse",
                    "--quiet",
                    "--project-dir",
                    str(project_dir),
                    "--profiles-dir",
                    str(project_dir),
                    "--target-path",
                    scratch,
                ]
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
                parsed = Path(scratch) / "manifest.json"
                if done.returncode != 0 or not parsed.exists():
                    raise RuntimeError(
                        f"`dbt parse` failed for {project_dir}; fix the dbt project and retry:\n"
                        f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
                    )
                # dbt's partial-parse state goes beside the manifest, where dagster-dbt looks
                # for it and copies it into each invocation's target path. dbt checks it (file
                # hashes, cli vars, target, dbt version) and parses in full when it does not
                # match, so an invocation without --vars skips most of the parse.
                state = Path(scratch) / PARTIAL_PARSE
                if state.exists():
                    os.replace(state, manifest.parent / PARTIAL_PARSE)
                os.replace(parsed, manifest)
    return manifest
