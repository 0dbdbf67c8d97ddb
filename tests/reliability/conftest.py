"""Fixtures of the fault and bad-input suite. Its figures are counted by `harness` and printed
at the end of the session by tests/conftest.py (which the xdist controller loads too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from tests.conftest import REMOTE_LAUNCHER, seed_home
from tests.reliability.harness import PROJECT_ROOT, reap_leftovers


@pytest.fixture
def instance(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dg.DagsterInstance]:
    """A real instance with the project's concurrency settings (dagster_home/dagster.yaml): the
    writer tag limit and the writer pool limited to one slot, as in production."""
    config = yaml.safe_load((PROJECT_ROOT / "dagster_home" / "dagster.yaml").read_text())
    home = tmp_path / "dagster_home"
    home.mkdir()
    seed_home(request, home)
    overrides = {"concurrency": config["concurrency"]}
    if request.node.get_closest_marker("remote_launcher"):
        overrides["run_launcher"] = REMOTE_LAUNCHER
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as inst:
        yield inst


@pytest.fixture(autouse=True)
def _no_child_left_behind() -> Iterator[None]:
    yield
    reap_leftovers()
