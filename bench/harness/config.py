"""Sizes and the run context shared by every measure.

Sizes are parameters, not constants scattered through the measures: `small` is the smoke test
(it checks the harness, not the numbers), `default` the real measurement.
"""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.load import LoadMonitor

BENCH_DIR = Path(__file__).resolve().parents[1]  # bench/, this file being bench/harness/config.py
REPO_DIR = BENCH_DIR.parent
DEFAULT_OUT = BENCH_DIR / "results"
# The interpreter running the bench also runs the contenders, so they see the same packages.
PYTHON = sys.executable
# dbt's console script sits next to the interpreter of the virtualenv.
DBT = str(Path(sys.executable).with_name("dbt"))

# A Monday, so the backfill's ISO-week batches are whole weeks except possibly the last one.
RANGE_START = dt.date(2025, 1, 6)
NOT_YET_MEASURED = "not yet measured"


@dataclass(frozen=True)
class Size:
    """Every knob that makes a run bigger or smaller."""

    name: str
    # safety_overhead and gates: orders per day and days in the backfilled range.
    rows_per_day: int
    days: int
    # swap_scaling: orders per day, weeks in the swapped range, history multiples to compare.
    swap_rows_per_day: int
    swap_weeks: int
    swap_history_factors: tuple[int, int]
    # Timed swaps take milliseconds, so a few more rounds than --repeats are cheap and steady the
    # median (each round's untimed shadow rebuild is what costs).
    swap_rounds_min: int
    # gates: batches (ISO weeks) timed for the gate/write share, and seeds per corruption kind.
    gate_timing_weeks: int
    detection_seeds: int
    # planning: assets in the synthetic graph (the range is always 5 years of days).
    planning_assets: int = 10_000
    # postgres: orders per day of the backfilled range (the same `days` as safety_overhead; raw
    # rows land through the example's loader, slower than DuckDB's, so fewer of them), of the
    # swapped range (`swap_weeks`, with `swap_history_factors`), and of the reader comparison's
    # history: `pg_reader_weeks` ISO weeks (261 = 5 years) in the partitioned target and in a
    # plain table, each query shape timed `pg_query_reps` times per table and round.
    pg_rows_per_day: int = 20_000
    pg_swap_rows_per_day: int = 5_000
    pg_reader_weeks: int = 261
    pg_reader_rows_per_day: int = 5_000
    pg_query_reps: int = 5
    # readers (DuckDB): `reader_weeks` ISO weeks of `reader_rows_per_day` orders in the target
    # and in a plain table (the performance issue's 10k rows/day x 5 years), each shape with
    # `reader_query_reps` parameter sets.
    reader_weeks: int = 261
    reader_rows_per_day: int = 10_000
    reader_query_reps: int = 5
    # driver: past plans in the instance (each recorded proposed, approved, swapped, released),
    # and the driver sensor's ticks per instance and round.
    driver_past_plans: int = 1_000
    driver_ticks: int = 10
    # cli: rounds at least (each round runs every command in a fresh process: seconds each).
    cli_rounds_min: int = 3
    # dbt_refresh: orders a day and days of history (from a Monday) with their marts, and the
    # days of the executed plan whose impacted models are built (from the history's 2nd Monday).
    dbt_rows_per_day: int = 20_000
    dbt_history_days: int = 28
    dbt_plan_days: int = 10
    # adoption: days (from a Monday; 1,826 = 5 years) of orders a day in the existing table.
    adopt_days: int = 1_826
    adopt_rows_per_day: int = 10_000
    # daemon: the ISO weeks (batches) of the plan started for the batch driver, per storage, and
    # the sensors' interval (None: the default 15 s; shorter only brings the first tick sooner).
    daemon_batches: int = 10
    daemon_sensor_interval_s: int | None = None

    @property
    def start(self) -> dt.date:
        return RANGE_START

    @property
    def end(self) -> dt.date:
        """Exclusive end of the backfilled range."""
        return RANGE_START + dt.timedelta(days=self.days)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "start": self.start.isoformat(), "end": self.end.isoformat()}


SIZES: dict[str, Size] = {
    "small": Size(
        name="small",
        rows_per_day=2_000,
        days=21,
        swap_rows_per_day=2_000,
        swap_weeks=2,
        swap_history_factors=(1, 10),
        swap_rounds_min=1,
        gate_timing_weeks=3,
        detection_seeds=3,
        planning_assets=500,
        pg_rows_per_day=1_000,
        pg_swap_rows_per_day=200,
        pg_reader_weeks=26,
        pg_reader_rows_per_day=200,
        pg_query_reps=3,
        reader_weeks=26,
        reader_rows_per_day=200,
        reader_query_reps=3,
        driver_past_plans=20,
        driver_ticks=3,
        cli_rounds_min=1,
        dbt_rows_per_day=500,
        adopt_days=28,
        adopt_rows_per_day=200,
        daemon_batches=2,
        daemon_sensor_interval_s=5,
    ),
    "default": Size(
        name="default",
        rows_per_day=200_000,
        days=90,
        swap_rows_per_day=50_000,
        swap_weeks=13,
        swap_history_factors=(1, 10),
        swap_rounds_min=7,
        gate_timing_weeks=4,
        detection_seeds=20,
        pg_rows_per_day=20_000,
        pg_swap_rows_per_day=5_000,
        pg_reader_weeks=261,
        pg_reader_rows_per_day=5_000,
        pg_query_reps=5,
    ),
}


@dataclass(frozen=True)
class BenchContext:
    """What a measure gets: the size, how often to repeat, a scratch folder it may fill, and the
    load monitor that waits for quiet before each timed round and measures the others' CPU."""

    size: Size
    repeats: int
    workdir: Path
    load: LoadMonitor = field(default_factory=LoadMonitor)
