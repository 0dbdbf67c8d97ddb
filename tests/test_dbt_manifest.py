"""The example's dbt manifest is parsed by one process at a time and replaced whole, so that
processes starting together (test workers, a code server, the CLI) never read half of one."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

ENSURE = (
    "import sys; from pathlib import Path; from types import SimpleNamespace as P; "
    "from backfill_assets.example.dbt_manifest import ensure_manifest; "
    "d = Path(sys.argv[1]); ensure_manifest(P(project_dir=d, manifest_path=d / 'target' / "
    "'manifest.json'))"
)


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "dbt_project"
    shutil.copytree(
        REPO / "dbt_project", project, ignore=shutil.ignore_patterns("target", "logs", "*.duckdb")
    )
    return project


def test_a_parse_waits_for_the_one_running_and_replaces_the_manifest_whole(tmp_path):
    project = _project(tmp_path)
    target = project / "target"
    target.mkdir()
    manifest = target / "manifest.json"
    manifest.write_text('{"stale": true}')
    os.utime(manifest, (0, 0))  # older than every model: stale
    old_inode = manifest.stat().st_ino
    with open(target / ".manifest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a parse in another process holds it
        child = subprocess.Popen([sys.executable, "-c", ENSURE, str(project)])
        time.sleep(3)
        assert child.poll() is None, "the second parse did not wait for the first"
        assert manifest.read_text() == '{"stale": true}'
    assert child.wait(timeout=240) == 0
    parsed = json.loads(manifest.read_text())
    assert any(k.endswith(".fct_daily_revenue") for k in parsed["nodes"])
    # Replaced by a rename, not rewritten in place: a reader never sees a partial file.
    assert manifest.stat().st_ino != old_inode
    assert not list(target.glob(".parse-*"))


def test_processes_that_start_together_leave_one_readable_manifest(tmp_path):
    project = _project(tmp_path)
    children = [subprocess.Popen([sys.executable, "-c", ENSURE, str(project)]) for _ in range(3)]
    assert [c.wait(timeout=300) for c in children] == [0, 0, 0]
    json.loads((project / "target" / "manifest.json").read_text())
