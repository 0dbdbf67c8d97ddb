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

import pytest

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_processes_that_start_together_leave_one_readable_manifest(tmp_path):
    project = _project(tmp_path)
    children = [subprocess.Popen([sys.executable, "-c", ENSURE, str(project)]) for _ in range(3)]
    assert [c.wait(timeout=300) for c in children] == [0, 0, 0]
    json.loads((project / "target" / "manifest.json").read_text())


VARS = '{"min_date": "2026-01-05", "max_date": "2026-01-12"}'


def _parse_events(project: Path, tmp_path: Path, *args: str) -> list[str]:
    """dbt's parse events of `dbt ls` through the example's resource on `project`."""
    from backfill_assets.example.dbt import dbt_models

    resource = dbt_models(project).resource
    invocation = resource.cli(["ls", *args], target_path=tmp_path / "t", raise_on_error=False)
    names = [e.raw_event["info"]["name"] for e in invocation.stream_raw_events()]
    assert invocation.is_successful(), invocation.get_error()
    return [n for n in names if "PartialPars" in n]


@pytest.mark.slow
def test_the_parse_keeps_dbts_partial_parse_state_so_an_invocation_without_vars_reuses_it(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("BACKFILL_ASSETS_WAREHOUSE", str(tmp_path / "warehouse.duckdb"))
    project = _project(tmp_path)
    # dbt_models() parses (no manifest yet) and keeps the state beside the manifest, where
    # dagster-dbt copies it into each invocation's target path.
    assert _parse_events(project, tmp_path / "a") == []
    assert (project / "target" / "partial_parse.msgpack").is_file()
    # dbt folds cli vars into the state it checks: with --vars it parses in full (and says so,
    # as every invocation did before the state was kept).
    with_vars = _parse_events(project, tmp_path / "b", "--vars", VARS)
    assert with_vars == ["UnableToPartialParse"]
