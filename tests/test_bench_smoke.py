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
MEASURES = ("safety_overhead", "swap_scaling", "gates", "planning", "postgres")
PG_CONTENDERS = ("floor_pg", "backfill_assets_pg", "backfill_assets_dagster_pg")
PG_SHAPES = (
    "revenue_by_day_90d",
    "one_day_count",
    "key_lookup",
    "full_scan_aggregate",
    "week_self_join",
)


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
    assert_postgres_entries(doc["postgres"]["results"])
    assert doc["machine"]["nproc"] >= 1
    md = (tmp_path / "latest.md").read_text()
    assert md.startswith("# backfill_assets bench")
    assert "### reader queries: partitioned target vs. plain table" in md


def assert_postgres_entries(pg: dict) -> None:
    """The postgres measure ran its three contenders on a real server and reported every part:
    backfill ratios, swap/rollback at both history sizes, readers during swaps, query shapes."""
    backfill = pg["backfill"]
    for name in PG_CONTENDERS:
        assert backfill["contenders"][name]["status"] == "measured", name
    assert set(backfill["ratios"]) == {
        "backfill_assets_pg/floor_pg",
        "backfill_assets_dagster_pg/floor_pg",
    }
    variants = pg["swap"]["variants"]
    assert set(variants) == {"1x", "10x"}
    assert variants["10x"]["live_partitions"] > variants["1x"]["live_partitions"]
    readers = pg["blocked_readers"]
    assert readers["swap"]["queries_overlapping"] + readers["rollback"]["queries_overlapping"] > 0
    assert "longest_wait_ms" in readers
    shapes = pg["reader_queries"]["shapes"]
    assert set(shapes) == set(PG_SHAPES)
    assert pg["reader_queries"]["history"]["rows"] > 0
    goal_names = " ".join(g["goal"] for g in pg["goals"])
    for part in ("backfill_assets_pg/floor_pg", "swap 10x/1x", "reader wait", "one_day_count"):
        assert part in goal_names, part
