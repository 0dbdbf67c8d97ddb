"""`make demo`'s main job, on tiny data: the story and the corruption scenario end to end."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_demo_tells_the_whole_story_and_exits_0(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "BACKFILL_ASSETS_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
    }
    exe = Path(sys.executable).with_name("backfill-assets-example")
    done = subprocess.run(
        [str(exe), "demo", "--rows-per-day", "150"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "[swap] 90 partitions moved into orders_daily atomically" in out
    assert "-> 0;" in out  # no order left with a wrong FX rate
    assert "[halted]" in out and "sample_gate" in out
    assert "[swap] REFUSED" in out
    assert "unchanged: True" in out
    assert "equal to the pre-swap checksum: True" in out
