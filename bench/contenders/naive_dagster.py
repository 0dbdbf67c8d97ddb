"""(b) naive Dagster: an in-place backfill with `BackfillPolicy.multi_run(7)`.

A tiny Definitions of its own (not the project's): one @asset over the example's DAILY partitions
that DELETE+INSERTs its partition range into the plain table in one transaction. No shadow, no
gates. Its chunks of 7 partitions run one after another as in-process runs against a real
DagsterInstance (SQLite storage in a temp dir), the way a backfill's runs would be recorded.

Dagster chunks a multi-run backfill from the range start, not by calendar week (see DESIGN.md),
so the chunks here are consecutive runs of `max_partitions_per_run` keys.
"""

# No `from __future__ import annotations` here: Dagster reads the real type of `context`.
import datetime as dt
import tempfile
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

from backfill_assets.constants import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from backfill_assets.example.declaration import DAILY
from bench.harness import plain

POLICY = dg.BackfillPolicy.multi_run(7)
JOB = "naive_orders_daily_backfill"


class PlainWarehouse(dg.ConfigurableResource):
    """Path of the DuckDB file holding the plain `orders_daily` table."""

    path: str


@dg.asset(name=plain.TABLE, partitions_def=DAILY, backfill_policy=POLICY)
def orders_daily(context: dg.AssetExecutionContext, warehouse: PlainWarehouse) -> None:
    # Thin on purpose: the write is the same function the floor uses, per run instead of per week.
    keys = context.partition_key_range
    start = dt.date.fromisoformat(keys.start)
    end = dt.date.fromisoformat(keys.end) + dt.timedelta(days=1)
    with duckdb.connect(warehouse.path) as con:
        plain.replace_range(con, start, end)


def build_job(path: Path) -> dg.JobDefinition:
    defs = dg.Definitions(
        assets=[orders_daily],
        jobs=[dg.define_asset_job(JOB, selection=[orders_daily], partitions_def=DAILY)],
        resources={"warehouse": PlainWarehouse(path=str(path))},
    )
    return defs.resolve_job_def(JOB)


def chunks(start: dt.date, end: dt.date, size: int) -> list[tuple[str, str]]:
    """Inclusive (first, last) partition keys of each run, consecutive from the range start."""
    days = (end - start).days
    out = []
    for i in range(0, days, size):
        first = start + dt.timedelta(days=i)
        last = start + dt.timedelta(days=min(i + size, days) - 1)
        out.append((first.isoformat(), last.isoformat()))
    return out


def run_naive_dagster(path: Path, start: dt.date, end: dt.date) -> dict[str, Any]:
    job = build_job(path)
    size = POLICY.max_partitions_per_run or 1
    runs = chunks(start, end, size)
    with (
        tempfile.TemporaryDirectory(prefix="bench-dagster-") as home,
        dg.instance_for_test(temp_dir=home) as instance,
    ):
        for first, last in runs:
            result = job.execute_in_process(
                instance=instance,
                tags={PARTITION_RANGE_START_TAG: first, PARTITION_RANGE_END_TAG: last},
            )
            if not result.success:
                raise RuntimeError(f"naive Dagster run for {first}..{last} failed")
    return {"runs": len(runs), "partitions_per_run": size}
