"""`backfill-assets-example`: the example's own helpers, apart from the framework's commands.

    backfill-assets-example land --start 2026-01-01 --end 2026-01-31   # the shop's daily drops
    backfill-assets-example daily 2026-11-29                            # the daily run, now
    backfill-assets-example demo                                        # the whole story

Run from the repository root, it defaults to the project-local instance (`dagster_home/`),
warehouse (`data/warehouse.duckdb`) and dbt project (`dbt_project/`); the environment wins.
Exit codes as `backfill-assets`: 0 done, 1 failed, 2 refused (nothing written).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

from backfill_assets.cli import (
    EXIT_OK,
    QUIET,
    _quiet_dagster_warnings,
    _runs_output_to_log,
    run_command,
)
from backfill_assets.errors import BackfillError
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV


def defaults() -> None:
    """Project-local defaults for the embedded setup; explicit environment always wins."""
    from backfill_assets.example.dbt import DBT_PROJECT_ENV

    root = Path.cwd()
    os.environ.setdefault("DAGSTER_HOME", str(root / "dagster_home"))
    os.environ.setdefault(WAREHOUSE_ENV, str(root / "data" / "warehouse.duckdb"))
    os.environ.setdefault(DBT_PROJECT_ENV, str(root / "dbt_project"))
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)


def _example() -> tuple[Any, Any, Any]:
    import dagster as dg

    from backfill_assets.example.definitions import example_definitions
    from backfill_assets.lib.warehouse.connect import open_warehouse

    return (
        example_definitions(),
        dg.DagsterInstance.get(),
        open_warehouse(os.environ[WAREHOUSE_ENV], _lock_timeout()),
    )


def _lock_timeout() -> float:
    from backfill_assets.lib.warehouse.connect import LOCK_TIMEOUT_ENV, lock_timeout_from

    return lock_timeout_from(os.environ.get(LOCK_TIMEOUT_ENV))


def _refuse_outside_partitions(defs: Any, job_name: str, *days: dt.date) -> None:
    """Refuse days that are not partitions of the job (before the first, or not over yet).

    Without this, Dagster raised a bare error (a traceback, not exit 2; `land` even recorded a
    failed run), and `land` wrote days in the future as if they had landed.
    """
    pdef = defs.resolve_job_def(job_name).partitions_def
    for day in days:
        if pdef is not None and not pdef.has_partition_key(day.isoformat()):
            raise BackfillError(
                f"{day} is not a partition of {job_name} ({pdef.get_first_partition_key()}.."
                f"{pdef.get_last_partition_key()}): days before the first partition do not exist "
                "and days from today on have not happened yet"
            )


def cmd_land(a: argparse.Namespace) -> int:
    from backfill_assets.example.seed import land_days
    from backfill_assets.example.sources import LAND_JOB
    from backfill_assets.lib.dates import parse_day

    start, end = parse_day(a.start, "start"), parse_day(a.end, "end")
    if end < start:
        raise BackfillError(f"end {end} is before start {start}")
    if a.rows_per_day < 1:  # 0 or fewer rows landed empty days and recorded them as landed
        raise BackfillError(f"--rows-per-day {a.rows_per_day} must be 1 or more")
    defs, instance, _ = _example()
    _refuse_outside_partitions(defs, LAND_JOB, start, end)
    with _runs_output_to_log():
        land_days(defs, instance, start, end, a.rows_per_day)
    print(f"landed raw_orders {start}..{end} ({a.rows_per_day} orders/day)")
    return EXIT_OK


def cmd_daily(a: argparse.Namespace) -> int:
    from backfill_assets.constants import ROLE_DAILY
    from backfill_assets.example.declaration import ORDERS
    from backfill_assets.lib.dates import parse_day
    from backfill_assets.service.frontdoor import daily_path_refusal
    from backfill_assets.service.runs import run_as_writer

    day = parse_day(a.day, "partition")
    defs, instance, wh = _example()
    _refuse_outside_partitions(defs, ORDERS.daily_job, day)
    refusal = daily_path_refusal(ORDERS, ORDERS.daily_job, day, day, dt.datetime.now(dt.UTC))
    if refusal is not None:
        raise BackfillError(f"{refusal}: plan a backfill of it instead (backfill-assets plan)")
    # The daily run claims orders_daily's writer lease before it starts: a batch, swap or
    # rollback of the table already writing makes it wait (bounded) and then refuse, and one
    # that starts now waits for it. Started in the same instant, exactly one goes first.
    with _runs_output_to_log():
        result = run_as_writer(
            defs,
            ORDERS.daily_job,
            instance,
            wh,
            ORDERS,
            role=ROLE_DAILY,
            wait_s=_lock_timeout(),
            partition_key=day.isoformat(),
            raise_on_error=False,
            log_level=QUIET,
        )
    print(f"daily run {result.run_id[:8]} for {day}: {'success' if result.success else 'FAILED'}")
    return EXIT_OK if result.success else 1


def cmd_demo(a: argparse.Namespace) -> int:
    from backfill_assets.example.demo import run_demo

    return run_demo(
        days=a.days, rows_per_day=a.rows_per_day, scenario=a.scenario, warehouse=a.warehouse
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="backfill-assets-example",
        description="The example's helpers: land synthetic orders, run the daily job, the demo.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("land", help="simulate the source landing days of orders")
    s.add_argument("--start", required=True, help="first day, YYYY-MM-DD")
    s.add_argument("--end", required=True, help="last day, YYYY-MM-DD (inclusive)")
    s.add_argument("--rows-per-day", type=int, default=2000, help="orders per day")
    s.set_defaults(func=cmd_land)
    s = sub.add_parser("daily", help="run the daily production job for one day, now")
    s.add_argument("day", help="the partition, YYYY-MM-DD (within the daily lookback)")
    s.set_defaults(func=cmd_daily)
    s = sub.add_parser("demo", help="the whole story, end to end (resets demo state)")
    s.add_argument("--days", type=int, default=120, help="days of history to build")
    s.add_argument("--rows-per-day", type=int, default=20_000, help="orders per day")
    s.add_argument("--scenario", choices=["story", "corruption", "all"], default="all")
    s.add_argument(
        "--warehouse",
        choices=["duckdb", "postgres"],
        default="duckdb",
        help="duckdb: the embedded file; postgres: BACKFILL_ASSETS_WAREHOUSE if it is a "
        "postgresql:// URL (schema backfill_assets_demo), else a throwaway server",
    )
    s.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    defaults()
    _quiet_dagster_warnings()
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
