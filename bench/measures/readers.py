"""Measure: what readers of the DuckDB target pay for its layout, on years of daily history.

The target is what the adapter's live writes leave: one table (a swap overlays it with week
tables only until its release; docs/architecture.md). The history
is `reader_weeks` ISO weeks (261 = 5 years at default size) of `reader_rows_per_day` orders:
one real week landed and built by v1, the other weeks copies of it with shifted dates and ids
written through the adapter (bench.measures.swap_scaling.add_history). The plain table holds
the same rows in date order (so DuckDB's zone maps prune it by date), without indexes, as DuckDB
tables usually are. The shapes and their timing are bench.measures.reader_shapes'; goal: each
within 1.2x of the plain table.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import duckdb

from backfill_assets.example import orders as o
from backfill_assets.example.spec import ORDERS_SPEC
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from bench.harness.config import BenchContext
from bench.harness.data import checkpoint, load_sources
from bench.harness.measure import BenchError
from bench.measures import reader_shapes
from bench.measures.swap_scaling import add_history

PLAIN_TABLE = "orders_daily_plain"
TABLES = {"target": ORDERS_SPEC.name, "plain": PLAIN_TABLE}


def build(ctx: BenchContext) -> tuple[Path, dict[str, Any]]:
    """The reader file: the target's history and the plain copy; how long loading took."""
    size = ctx.size
    last_monday = size.start
    end = last_monday + dt.timedelta(weeks=1)
    first_monday = last_monday - dt.timedelta(weeks=size.reader_weeks - 1)
    path = ctx.workdir / "readers.duckdb"
    t0 = time.perf_counter()
    load_sources(path, last_monday, end, size.reader_rows_per_day)
    wh = DuckDBWarehouse(path)
    wh.replace_partitions(ORDERS_SPEC, last_monday, end, build=o.ORDERS_DAILY_SQL_V1)
    add_history(path, last_monday, size.reader_weeks - 1)
    t1 = time.perf_counter()
    with duckdb.connect(str(path)) as con:
        con.execute(
            f"CREATE OR REPLACE TABLE {PLAIN_TABLE} AS SELECT * FROM {ORDERS_SPEC.name} "
            "ORDER BY order_date, order_id"
        )
    checkpoint(path)
    t2 = time.perf_counter()
    with duckdb.connect(str(path), read_only=True) as con:
        rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES.values()}  # type: ignore[index]
    if len(set(rows.values())) != 1:
        raise BenchError(f"the plain table and the target hold different rows: {rows}")
    facts = {
        "first_day": first_monday.isoformat(),
        "last_day": (end - dt.timedelta(days=1)).isoformat(),
        "weeks": size.reader_weeks,
        "week_tables": wh.live_week_count(ORDERS_SPEC),
        "target_kind": _kind(path),
        "rows_per_day": size.reader_rows_per_day,
        "rows": rows[PLAIN_TABLE],
        "file_mib": path.stat().st_size / 2**20,
        "load_target_s": t1 - t0,
        "load_plain_s": t2 - t1,
        "load_s": t2 - t0,
    }
    return path, facts


def _kind(path: Path) -> str:
    with duckdb.connect(str(path), read_only=True) as con:
        row = con.execute(
            "SELECT 'table' FROM duckdb_tables() WHERE table_name = $n "
            "UNION ALL SELECT 'view' FROM duckdb_views() WHERE view_name = $n",
            {"n": ORDERS_SPEC.name},
        ).fetchone()
    return str(row[0]) if row else "missing"


def run(ctx: BenchContext) -> dict[str, Any]:
    size = ctx.size
    path, facts = build(ctx)
    print(
        f"  readers: {facts['rows']:,} rows in {facts['week_tables']} week tables "
        f"loaded in {facts['load_s']:.1f} s",
        flush=True,
    )
    parameter_sets = reader_shapes.parameter_sets(
        reader_shapes.SHAPES, facts, size.reader_rows_per_day, size.reader_query_reps
    )
    with duckdb.connect(str(path), read_only=True) as con:

        def time_query(shape: str, table: str, p: dict) -> float:
            sql = reader_shapes.render(reader_shapes.SHAPES[shape][1], table, lambda n: f"${n}")
            t0 = time.perf_counter()
            rows = con.execute(sql, p).fetchall()
            elapsed = time.perf_counter() - t0
            if not rows:
                raise BenchError(f"reader query returned nothing: {sql} {p}")
            return elapsed

        out = reader_shapes.measure(
            ctx, reader_shapes.SHAPES, TABLES, parameter_sets, time_query, "readers"
        )
    path.unlink()
    return {"history": facts, **out}
