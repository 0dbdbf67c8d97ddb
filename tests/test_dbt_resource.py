"""The example's dbt resource starts dbt and nothing else (backfill_assets/defs/dbt_resource.py).

dagster-dbt's `DbtCliResource` builds a dbt adapter in the calling process for every `cli()`
(dbt imported and its macros loaded: seconds the first time in a process) and runs `dbt
--version` once per resource object (a second dbt start-up per run). `LeanDbtCliResource`
skips both. What a real dbt invocation does is watched with an audit hook on the processes this
one starts, and dbt's own registry of adapters.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version as installed_version
from pathlib import Path

import pytest
from dbt.adapters.factory import FACTORY, reset_adapters
from packaging import version

from backfill_assets.defs.dbt_resource import LeanDbtCliResource
from backfill_assets.example.dbt import dbt_models, dbt_project_dir

STARTED: list[list[str]] | None = None  # the processes started while a test watches


def _audit(event: str, args: tuple) -> None:
    if event == "subprocess.Popen" and STARTED is not None:
        STARTED.append([os.fspath(a) for a in args[1]])


sys.addaudithook(_audit)  # hooks cannot be removed: it records only while STARTED is a list


@pytest.fixture
def started() -> Iterator[list[list[str]]]:
    global STARTED
    STARTED = []
    try:
        yield STARTED
    finally:
        STARTED = None


def _parse(resource: LeanDbtCliResource, tmp_path: Path) -> None:
    invocation = resource.cli(["parse"], target_path=tmp_path / "target", raise_on_error=False)
    invocation.wait()
    assert invocation.is_successful(), invocation.get_error()


@pytest.mark.slow
def test_a_dbt_invocation_starts_only_dbt_and_builds_no_adapter_in_this_process(
    started, tmp_path, monkeypatch
):
    monkeypatch.setenv("BACKFILL_ASSETS_WAREHOUSE", str(tmp_path / "warehouse.duckdb"))
    resource = dbt_models(dbt_project_dir()).resource
    assert isinstance(resource, LeanDbtCliResource)
    reset_adapters()
    _parse(resource, tmp_path)
    # One process: the dbt command itself, not `dbt --version` before it.
    assert [cmd[1:] for cmd in started] == [["parse"]], started
    assert not FACTORY.adapters, "dagster-dbt built a dbt adapter in this process"
    assert resource._cli_version == version.parse(installed_version("dbt-core"))


@pytest.mark.slow
def test_a_dbt_from_elsewhere_is_asked_its_version(started, tmp_path, monkeypatch):
    # A dbt that is not this environment's script may be another dbt: ask it, as dagster-dbt does.
    monkeypatch.setenv("BACKFILL_ASSETS_WAREHOUSE", str(tmp_path / "warehouse.duckdb"))
    wrapper = tmp_path / "dbt"
    wrapper.write_text(f'#!/bin/sh\nexec "{Path(sys.executable).with_name("dbt")}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    project = dbt_project_dir()
    resource = LeanDbtCliResource(
        project_dir=str(project), profiles_dir=str(project), dbt_executable=str(wrapper)
    )
    _parse(resource, tmp_path)
    assert [cmd[1:] for cmd in started] == [["--version"], ["parse"]], started
    assert resource._cli_version == version.parse(installed_version("dbt-core"))
    assert not FACTORY.adapters


def test_the_same_environments_dbt_is_this_interpreters_neighbour():
    from backfill_assets.defs.dbt_resource import same_environment_dbt

    here = str(Path(sys.executable).with_name("dbt"))
    assert same_environment_dbt(here)
    assert not same_environment_dbt("/no/such/dbt")
    assert not same_environment_dbt(sys.executable)
    out = subprocess.run([here, "--version"], capture_output=True, text=True, check=True)
    assert installed_version("dbt-core") in out.stdout + out.stderr
