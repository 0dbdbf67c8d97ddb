"""Keep the dbt manifest fresh: parse when it is missing or older than the project's files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

_SOURCES = ("models", "macros", "tests", "dbt_project.yml")


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
    code server need a current manifest too, and a stale one must never be used.
    """
    project_dir = Path(project.project_dir)
    manifest = Path(project.manifest_path)
    if manifest_is_stale(project_dir, manifest):
        cmd = [
            dbt_executable(),
            "parse",
            "--quiet",
            "--project-dir",
            str(project_dir),
            "--profiles-dir",
            str(project_dir),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not manifest.exists():
            raise RuntimeError(
                f"`dbt parse` failed for {project_dir}; fix the dbt project and retry:\n"
                f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
    return manifest
