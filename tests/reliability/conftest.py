"""Figures of the fault and bad-input suite, printed once at the end of the session.

`reliability: faults injected N, bad inputs tried M, rows lost L, cases failing K`: N and M are
counted by the tests through `harness`, L is what `harness.expect_target` found missing or mixed
in the target (it must be 0), K is the number of failed tests in this folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from tests.reliability.harness import FIGURES, PROJECT_ROOT, reap_leftovers


def _ours(report: pytest.TestReport) -> bool:
    return report.nodeid.startswith("tests/reliability/")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    stats = terminalreporter.stats
    ran = [r for key in ("passed", "failed", "error") for r in stats.get(key, []) if _ours(r)]
    if not ran:
        return
    failing = {r.nodeid for key in ("failed", "error") for r in stats.get(key, []) if _ours(r)}
    terminalreporter.write_line(
        f"reliability: faults injected {FIGURES.faults_injected}, bad inputs tried "
        f"{FIGURES.bad_inputs_tried}, rows lost {FIGURES.rows_lost}, cases failing {len(failing)}"
    )
    for loss in FIGURES.losses:
        terminalreporter.write_line(f"  rows lost in {loss}")


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    """A real instance with the project's concurrency settings (dagster_home/dagster.yaml): the
    writer tag limit and the writer pool limited to one slot, as in production."""
    config = yaml.safe_load((PROJECT_ROOT / "dagster_home" / "dagster.yaml").read_text())
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(
        temp_dir=str(home), overrides={"concurrency": config["concurrency"]}
    ) as inst:
        yield inst


@pytest.fixture(autouse=True)
def _no_child_left_behind() -> Iterator[None]:
    yield
    reap_leftovers()
