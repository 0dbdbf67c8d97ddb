"""The bench harness runs end to end at its smallest size and reports every measure.

No timing is asserted: on a shared 2-core machine timings are the bench's output, not a test's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MEASURES = ("safety_overhead", "swap_scaling", "gates", "planning")


@pytest.mark.slow
def test_small_bench_run_writes_every_measure_to_json_and_markdown(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.run",
            "--size",
            "small",
            "--repeats",
            "1",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    doc = json.loads((tmp_path / "latest.json").read_text())
    for name in MEASURES:
        assert name in doc, f"{name} missing from latest.json"
    for name in MEASURES:
        assert doc[name]["status"] == "measured"
        assert doc[name]["results"], f"{name} has no results"
        assert doc[name]["results"]["goals"], f"{name} reports no goals"
    contenders = doc["safety_overhead"]["results"]["contenders"]
    for name in (
        "floor",
        "naive_dagster",
        "dbt_microbatch",
        "backfill_assets",
        "backfill_assets_dagster",
    ):
        assert contenders[name]["status"] == "measured"
    assert doc["machine"]["nproc"] >= 1
    assert (tmp_path / "latest.md").read_text().startswith("# backfill_assets bench")
