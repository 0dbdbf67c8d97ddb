"""`make demo`'s main job, on tiny data: the story and the corruption scenario end to end.

The demo resets its own state, so it runs again and again in the same DAGSTER_HOME (the
project's dagster.yaml) and warehouse: here a first demo is killed half-way, mid-batch, and a
second one runs to the end in the same place.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXE = Path(sys.executable).with_name("backfill-assets-example")
DEMO = [str(EXE), "demo", "--rows-per-day", "150"]
# Mid-plan: batch 2 passed and batch 3's run in flight, the plan approved and claimed. (The
# plan's 90 days touch 13 or 14 ISO weeks by the weekday, so the line is matched without its
# total.)
KILL_AT = "batch  2/"
BOUND_S = 600


@pytest.fixture
def demo_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "BACKFILL_ASSETS_WAREHOUSE": str(tmp_path / "data" / "warehouse.duckdb"),
    }


def kill_half_way(env: dict[str, str]) -> str:
    """Start the demo, SIGKILL it once it is in the middle of the plan's batches."""
    proc = subprocess.Popen(
        DEMO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + BOUND_S
    try:
        for line in proc.stdout:
            seen.append(line)
            if KILL_AT in line or time.monotonic() > deadline:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    out = "".join(seen)
    assert KILL_AT in out, out
    return out


@pytest.mark.slow
def test_the_demo_killed_half_way_then_run_again_tells_the_whole_story_and_exits_0(demo_env):
    first = kill_half_way(demo_env)
    assert "[swap]" not in first  # killed before anything was swapped

    done = subprocess.run(DEMO, capture_output=True, text=True, env=demo_env, timeout=BOUND_S)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "(demo state was reset" in out
    assert "[swap] 90 partitions moved into orders_daily atomically" in out
    assert "-> 0;" in out  # no order left with a wrong FX rate
    # The diff before the swap, and what the swap then did to the same sum.
    said = re.search(r"the diff said ([-+][\d,.]+), the swap moved it by ([-+][\d,.]+)", out)
    assert said and said[1] == said[2], out
    assert re.search(r"\[diff\] [\d,]+ of [\d,]+ rows change over .*: fx_rate", out), out
    # What `plan --stale` finds: every day built by v1 before, all but the 90 swapped after.
    found = r"\[stale\] {}, .* finds orders_daily: (\d+) of (\d+) built partitions built by a"
    before = re.search(found.format("before the backfill"), out)
    after = re.search(found.format("after the swap"), out)
    assert before and after, out
    assert int(before[1]) == int(before[2]) == int(after[2])
    assert int(after[1]) == int(before[1]) - 90
    assert "[halted]" in out and "sample_gate" in out
    assert "[swap] REFUSED" in out
    assert "unchanged: True" in out
    assert "equal to the pre-swap checksum: True" in out
    # The marts: built in shadow and tested, published with the target, restored by the rollback.
    assert re.search(r"\[shadow\] .* built in shadow; dbt tests (\d+)/\1 passed", out), out
    assert "in the same transaction as the marts fct_daily_revenue, dim_customers" in out
    assert (
        "[consistent] fct_daily_revenue equals the sum over orders_daily for every day: True" in out
    )
    assert "marts equal to their pre-swap rows: True" in out


@pytest.mark.slow
def test_the_demo_on_postgres_tells_the_same_story_on_a_throwaway_server(demo_env):
    # `make demo WAREHOUSE=postgres` with no server given: the demo starts its own, puts the
    # warehouse and the Dagster instance on it, and stops it.
    done = subprocess.run(
        [*DEMO, "--warehouse", "postgres"],
        capture_output=True,
        text=True,
        env=demo_env,
        timeout=BOUND_S,
        cwd=Path(demo_env["BACKFILL_ASSETS_WAREHOUSE"]).parent.parent,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "starting a throwaway server" in out
    assert "warehouse postgresql://postgres@127.0.0.1:" in out
    assert "[swap] 90 partitions moved into orders_daily atomically" in out
    assert "-> 0;" in out
    said = re.search(r"the diff said ([-+][\d,.]+), the swap moved it by ([-+][\d,.]+)", out)
    assert said and said[1] == said[2], out
    assert "[halted]" in out and "[swap] REFUSED" in out
    assert "equal to the pre-swap checksum: True" in out
    assert (
        "[consistent] fct_daily_revenue equals the sum over orders_daily for every day: True" in out
    )
    assert "marts equal to their pre-swap rows: True" in out
    # The server is stopped when the demo ends.
    port = int(re.search(r"warehouse postgresql://postgres@127\.0\.0\.1:(\d+)/", out).group(1))  # type: ignore[union-attr]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
