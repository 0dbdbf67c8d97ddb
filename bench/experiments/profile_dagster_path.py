"""Where the time of the Dagster path (d') goes: `execute_plan` timed, or profiled, per storage.

    python -m bench.experiments.profile_dagster_path [--storage sqlite|consolidated|postgres]
        [--hold] [--sqlite-engines cached|pooled] [--orders-per-day 500] [--repeats 1]
        [--profile] [--top 25]

Four weekly batches of 500 orders a day by default, so that the warehouse work is small and what
is left is the path's own cost (`--orders-per-day 100000`: nearer the bench's own size): one
in-process run per batch, its events in an instance under a fresh DAGSTER_HOME holding the
shipped dagster.yaml. The instance's storage:

- `sqlite` (the default, the shipped embedded instance): a file per run and an index file;
- `consolidated`: Dagster's consolidated SQLite event log, one file for every run (its docstring
  says "intended for test cases only");
- `postgres`: dagster-postgres storage on a throwaway server, the warehouse on it too.

`--hold`: the instance holds its storage connections, as the CLI's `run` does
(`service.runs.hold_connections`; it changes nothing on SQLite). `--sqlite-engines` is an
experiment on Dagster's SQLite storage that the project does not ship: it patches the storage's
private `_connect`, which creates an SQLAlchemy engine and opens a new connection for every
operation, to keep one engine per file (`cached`) or one engine and its open connections per
file (`pooled`), to see what those cost.

Each repeat is a fresh instance and warehouse; prints the wall time of `execute_plan` per
repeat, its seconds per batch and the events the batch runs stored. `--profile`: the last
repeat under cProfile, and its top entries by cumulative time. Not a measure of `make bench`:
the profile behind bench/README.md's "where d' goes".
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import os
import pstats
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness.config import REPO_DIR

START, END = dt.date(2026, 1, 5), dt.date(2026, 2, 1)  # four ISO weeks, inclusive
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--storage", choices=("sqlite", "consolidated", "postgres"), default="sqlite")
    ap.add_argument("--hold", action="store_true", help="hold the instance's connections")
    ap.add_argument("--sqlite-engines", choices=("cached", "pooled"))
    ap.add_argument("--orders-per-day", type=int, default=500, metavar="N")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="profile the last repeat")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    if a.sqlite_engines:
        _patch_sqlite_engines(a.sqlite_engines)
    walls = []
    with _server(a.storage) as server:
        for i in range(a.repeats):
            profile = cProfile.Profile() if a.profile and i == a.repeats - 1 else None
            walls.append(_one(a, server, profile))
            if profile is not None:
                pstats.Stats(profile).sort_stats("cumulative").print_stats(a.top)
    if a.repeats > 1:
        print(f"median of {a.repeats}: {statistics.median(walls):.2f} s")


@contextlib.contextmanager
def _server(storage: str) -> Iterator[Any]:
    if storage != "postgres":
        yield None
        return
    from backfill_assets.testing.throwaway_postgres import throwaway_postgres

    with throwaway_postgres() as server:
        yield server


def _one(a: argparse.Namespace, server: Any, profile: cProfile.Profile | None) -> float:
    """One fresh instance and warehouse, four batches; the wall time of `execute_plan`."""
    root = Path(tempfile.mkdtemp(prefix="bench_profile_"))
    home = root / "home"
    home.mkdir()
    config = (REPO_DIR / "dagster_home" / "dagster.yaml").read_text()
    warehouse = str(root / "warehouse.duckdb")
    if a.storage == "consolidated":
        config += (
            "\nevent_log_storage:\n  module: dagster.core.storage.event_log\n"
            "  class: ConsolidatedSqliteEventLogStorage\n"
            f"  config:\n    base_dir: {home}/history/runs\n"
        )
    elif a.storage == "postgres":
        from bench.harness.pg_data import psycopg2_url

        tag = os.urandom(4).hex()
        warehouse = server.create_database(f"profile_wh_{tag}")
        url = psycopg2_url(server.create_database(f"profile_dagster_{tag}"))
        config += f"\nstorage:\n  postgres:\n    postgres_url: {url}\n"
    (home / "dagster.yaml").write_text(config)
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ["BACKFILL_ASSETS_WAREHOUSE"] = warehouse
    os.environ.setdefault("BACKFILL_ASSETS_DBT_PROJECT", str(REPO_DIR / "dbt_project"))
    try:
        return _execute(a, warehouse, profile)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _execute(a: argparse.Namespace, warehouse: str, profile: cProfile.Profile | None) -> float:
    import dagster as dg

    from backfill_assets.example.definitions import example_definitions
    from backfill_assets.example.seed import land_days, write_history
    from backfill_assets.lib.warehouse.connect import open_warehouse
    from backfill_assets.service.executor import execute_plan
    from backfill_assets.service.runs import hold_connections
    from backfill_assets.service.tables import backfill_tables
    from bench.contenders.backfill_assets import approved_plan

    defs = example_definitions()
    tables = backfill_tables(defs)
    with dg.DagsterInstance.get() as instance:
        if a.hold:
            hold_connections(instance)
        wh = open_warehouse(warehouse)
        land_days(defs, instance, START, END, a.orders_per_day)
        write_history(instance, wh, START, END)
        plan = approved_plan(defs, tables, instance, wh, START, END + dt.timedelta(days=1), NOW)
        before = _events(instance)
        t0 = time.perf_counter()
        with profile or contextlib.nullcontext():
            reports = execute_plan(
                defs,
                instance,
                wh,
                tables,
                plan.plan_id,
                clock=lambda: NOW,
                wait_s=5,
                log_level="ERROR",
            )
        wall = time.perf_counter() - t0
        events = _events(instance) - before
    print(
        f"{a.storage}{' held' if a.hold else ''}"
        f"{f' engines {a.sqlite_engines}' if a.sqlite_engines else ''}: {len(reports)} batches "
        f"({', '.join(r.status for r in reports)}) of {a.orders_per_day} orders a day in "
        f"{wall:.2f} s: {wall / len(reports):.2f} s a batch, {events} events stored "
        f"({events / len(reports):.0f} a batch)",
        flush=True,
    )
    return wall


def _events(instance: Any) -> int:
    """Events stored by every run in the instance (runless plan records not included)."""
    return sum(len(instance.all_logs(r.run_id)) for r in instance.get_runs())


def _patch_sqlite_engines(how: str) -> None:
    """The experiment behind `--sqlite-engines`: one engine per SQLite file instead of one per
    operation (`cached`), and its connections kept open between operations (`pooled`). Patches
    Dagster's private storage for this process only; the project ships no such thing."""
    import sqlalchemy as db
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
    from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
    from sqlalchemy.pool import NullPool

    engines: dict[tuple[int, str], Any] = {}
    pool: dict[str, Any] = (
        {"poolclass": NullPool} if how == "cached" else {"pool_size": 1, "max_overflow": 4}
    )

    @contextlib.contextmanager
    def _connect(self: Any, shard: str) -> Iterator[Any]:
        with self._db_lock:
            engine = engines.get((id(self), shard))
            if engine is None:
                engine = db.create_engine(
                    self.conn_string_for_shard(shard),
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
                    **pool,
                )
                engines[(id(self), shard)] = engine
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    SqliteEventLogStorage._connect = _connect  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
