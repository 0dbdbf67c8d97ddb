"""The five-year measure (`make bench-five-years`, bench/measures/five_years.py) runs its whole
story at two weeks: seed, plan, run through Dagster, status/list/tick, swap, rollback, a second
plan's run, swap and release, on SQLite storage with DuckDB and on PostgreSQL storage with a
PostgreSQL warehouse.

No timing is asserted (timings are the bench's output); the figures must be there, and the
story's own checks (the rollback restores the v1 rows, the second swap publishes the same rows)
must have held, or the command fails.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.measures.five_years import GOALS, parse_args, plan_range

REPO = Path(__file__).resolve().parent.parent


def test_the_range_ends_on_a_sunday_two_weeks_back_and_has_the_days_asked() -> None:
    for offset in range(14):
        today = dt.date(2026, 12, 7) + dt.timedelta(days=offset)
        first, last = plan_range(1826, today)
        assert last.weekday() == 6
        assert 14 < (today - last).days <= 21
        assert (last - first).days + 1 == 1826


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--storage", "mysql"], "--storage takes sqlite or postgres"),
        (["--storage", ""], "--storage takes"),
        (["--days", "7"], "--days must be at least 14"),
        (["--reads", "0"], "--reads must be at least 1"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.slow
def test_the_story_runs_on_both_storages_and_reports_every_figure(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "bench.measures.five_years", "--days", "14", "--orders-per-day", "5",
        "--reads", "1", "--no-wait", "--out", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((tmp_path / "five_years.json").read_text())
    assert set(doc["storages"]) == {"sqlite", "postgres"}
    for storage, r in doc["storages"].items():
        # 14 days ending on a Sunday: two ISO weeks, one batch each.
        assert (r["batches"], r["partitions"]) == (2, 14), storage
        assert len(r["batch_s_runs"]) == 2 and r["ends"] == 1
        assert len(r["second_run"]) == 8 and r["second_run_last_over_first_run_first"] > 0
        assert r["last_over_first"] > 0
        assert set(r["phases_s"]) == {"runner", "to_step", "step", "after_step"}
        assert all(v["first"] >= 0 and v["last"] >= 0 for v in r["phases_s"].values())
        assert r["phases_s"]["step"]["first"] > 0
        assert r["events_per_batch"] > 7, "a batch records at least one event per partition"
        assert r["bytes_per_batch"] > 0
        for key in (
            "plan_s", "status_s", "list_s", "tick_s", "tick_started_s", "tick_started_first_s",
            "tick_started_gates_s",
            "cli_start_s", "swap_s", "rollback_s",
        ):  # fmt: skip
            assert r[key] > 0, (storage, key)
        assert r["swap_again_s"] > 0 and r["cli_release_s"] > 0
        assert r["load"]["noisy"] in (True, False)
        expected = {k for k in GOALS if k != "reader_wait_s" or storage == "postgres"}
        assert len(r["goals"]) == len(expected), r["goals"]
    pg = doc["storages"]["postgres"]
    assert pg["reader"]["swap"]["queries_overlapping"] > 0
    assert pg["reader_wait_s"] >= 0
    assert "reader" not in doc["storages"]["sqlite"]
    assert "five_years:" in done.stdout
