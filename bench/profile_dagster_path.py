"""Where the time of the Dagster path (d') goes: a cProfile of `execute_plan`.

    python -m bench.profile_dagster_path [--consolidated] [--orders-per-day 500] [--top 25]

Four weekly batches of 500 orders a day by default, so that the warehouse work is small and what
is left is the path's own cost (`--orders-per-day 100000`: nearer the bench's own size): one
in-process run per batch, its events in a SQLite instance under a fresh DAGSTER_HOME holding the
shipped dagster.yaml (`--consolidated`: with Dagster's consolidated SQLite event log instead,
one file for every run). Prints the wall time, the events the batch runs stored, and the
profile's top entries by cumulative time. Not a measure of `make bench`: a profile, for
bench/README.md's "where d' goes".
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import os
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.config import REPO_DIR

START, END = dt.date(2026, 1, 5), dt.date(2026, 2, 1)  # four ISO weeks, inclusive
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--consolidated", action="store_true")
    ap.add_argument("--orders-per-day", type=int, default=500, metavar="N")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_profile_"))
    home = root / "home"
    home.mkdir()
    shutil.copy(REPO_DIR / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    if a.consolidated:
        with open(home / "dagster.yaml", "a") as f:
            f.write(
                "\nevent_log_storage:\n  module: dagster.core.storage.event_log\n"
                "  class: ConsolidatedSqliteEventLogStorage\n"
                f"  config:\n    base_dir: {home}/history/runs\n"
            )
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ["BACKFILL_ASSETS_WAREHOUSE"] = str(root / "warehouse.duckdb")
    os.environ.setdefault("BACKFILL_ASSETS_DBT_PROJECT", str(REPO_DIR / "dbt_project"))
    try:
        _profile(root, a.orders_per_day, a.top)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _profile(root: Path, orders_per_day: int, top: int) -> None:
    import dagster as dg

    from backfill_assets.example.definitions import example_definitions
    from backfill_assets.example.seed import land_days, write_history
    from backfill_assets.lib.warehouse.duckdb_adapter import DuckDBWarehouse
    from backfill_assets.service.executor import execute_plan
    from backfill_assets.service.tables import backfill_tables
    from bench.contender_backfill_assets import approved_plan

    defs = example_definitions()
    tables = backfill_tables(defs)
    instance = dg.DagsterInstance.get()
    wh = DuckDBWarehouse(root / "warehouse.duckdb")
    land_days(defs, instance, START, END, orders_per_day)
    write_history(instance, wh, START, END)
    plan = approved_plan(defs, tables, instance, wh, START, END + dt.timedelta(days=1), NOW)
    before = _events(instance)
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    reports = execute_plan(
        defs, instance, wh, tables, plan.plan_id, clock=lambda: NOW, wait_s=5, log_level="ERROR"
    )
    profile.disable()
    wall = time.perf_counter() - t0
    events = _events(instance) - before
    print(
        f"{len(reports)} batches ({', '.join(r.status for r in reports)}) of {orders_per_day} "
        f"orders a day in {wall:.2f} s: "
        f"{wall / len(reports):.2f} s a batch, {events} events stored ({events / len(reports):.0f} "
        "a batch)"
    )
    pstats.Stats(profile).sort_stats("cumulative").print_stats(top)


def _events(instance: Any) -> int:
    """Events stored by every run in the instance (runless plan records not included)."""
    return sum(len(instance.all_logs(r.run_id)) for r in instance.get_runs())


if __name__ == "__main__":
    main()
