"""What readers pay for the partitioned target: five query shapes on years of daily history,
on the partitioned target (one partition per ISO week) and on a plain table with the same rows.

The history is `pg_reader_weeks` ISO weeks (261 = 5 years at default size) of
`pg_reader_rows_per_day` orders: one real week landed and built by v1, the other weeks copies of
it with shifted dates and ids written through the adapter (13 weeks per transaction); the plain
table is then filled from the target in date order, its indexes built (the key, as the target
has, and the date: see bench.harness.pg_data.PLAIN_INDEXES), and both are vacuumed and analyzed.

Each shape has `pg_query_reps` parameter sets, timed as bench.measures.reader_shapes says:
every round measures the steady state of a session (a pooled dashboard or dbt connection) that
has read those weeks before. Queries are planned each time (not prepared), as ad-hoc and
dashboard queries are: planning over the partitions is part of what a reader pays.

The first query of a new session pays once for opening the relations it reads; on the target
that is the target, the day's ISO year and week tables and their indexes. `NEW_SESSION`
reports that case next to a plain table's first query in a new session (no goal: it is paid
once per session and relation, not per query).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, LiteralString, cast

import psycopg

from backfill_assets.example import orders as o
from backfill_assets.example.spec import ORDERS_SPEC
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
from bench.harness.config import BenchContext
from bench.harness.measure import BenchError
from bench.harness.pg_data import (
    PLAIN_INDEXES,
    PLAIN_TABLE,
    PgServer,
    add_history,
    create_plain,
    land_sources,
    table_facts,
    vacuum_analyze,
)
from bench.measures import reader_shapes

DB = "bench_readers"
NEW_SESSION = "one_day_count_new_session"
MAX_TIMES_NEW_SESSION = 8  # each opens a connection
# The performance issue's shapes, and two reported without a goal.
SHAPES: dict[str, tuple[str, str, bool]] = {
    **reader_shapes.SHAPES,
    # Every partition's index is probed: the PostgreSQL issue asks for its cost next to a plain
    # table's, without a goal.
    "key_lookup": (*reader_shapes.SHAPES["key_lookup"][:2], False),
    # One day's count as a new session's first query: each run opens its own connection.
    NEW_SESSION: (
        "one day's count, first query of a new session",
        reader_shapes.SHAPES["one_day_count"][1],
        False,
    ),
    # The same query with PostgreSQL's JIT on (its default; the server here has it off, as
    # docs/deploy.md advises for partitioned tables): JIT compiles each partition's scan.
    "full_scan_aggregate_jit_on": (
        "full-scan aggregate by country, jit = on",
        reader_shapes.SHAPES["full_scan_aggregate"][1],
        False,
    ),
}
TABLES = {"partitioned": ORDERS_SPEC.name, "plain": PLAIN_TABLE}


def build(ctx: BenchContext, pg: PgServer) -> tuple[str, dict[str, Any]]:
    """The reader database: the target's history and the plain copy; how long loading took."""
    size = ctx.size
    last_monday = size.start
    first_monday = last_monday - dt.timedelta(weeks=size.pg_reader_weeks - 1)
    end = last_monday + dt.timedelta(weeks=1)
    t0 = time.perf_counter()
    url = pg.create(DB)
    wh = PostgresWarehouse(url)
    land_sources(wh, last_monday, end, size.pg_reader_rows_per_day)
    wh.replace_partitions(ORDERS_SPEC, last_monday, end, build=o.ORDERS_DAILY_SQL_V1)
    add_history(wh, last_monday, first_monday, size.pg_reader_weeks - 1)
    t1 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as con:
        create_plain(con, first_monday, end)
    t2 = time.perf_counter()
    vacuum_analyze(url)
    t3 = time.perf_counter()
    target, plain = table_facts(url, ORDERS_SPEC.name), table_facts(url, PLAIN_TABLE)
    if target["rows"] != plain["rows"]:
        raise BenchError(f"the plain table holds {plain['rows']} rows, the target {target}")
    facts = {
        "first_day": first_monday.isoformat(),
        "last_day": (end - dt.timedelta(days=1)).isoformat(),
        "weeks": size.pg_reader_weeks,
        "rows_per_day": size.pg_reader_rows_per_day,
        "rows": target["rows"],
        "partitions": target["partitions"],
        "partitioned_mib": target["bytes"] / 2**20,
        "plain_mib": plain["bytes"] / 2**20,
        "plain_indexes": [list(cols) for cols in PLAIN_INDEXES],
        "load_target_s": t1 - t0,
        "load_plain_s": t2 - t1,
        "vacuum_analyze_s": t3 - t2,
        "load_s": t3 - t0,
    }
    return url, facts


def _jit(shape: str) -> bool:
    return shape.endswith("_jit_on")


def _time(con: psycopg.Connection[Any], sql: str, params: dict) -> float:
    t0 = time.perf_counter()
    rows = con.execute(cast("LiteralString", sql), params).fetchall()
    elapsed = time.perf_counter() - t0
    if not rows:
        raise BenchError(f"reader query returned nothing: {sql} {params}")
    return elapsed


def _time_new_session(url: str, sql: str, params: dict) -> float:
    """The first query of a new connection (the connection itself not counted)."""
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as con:
        return _time(con, sql, params)


def run(ctx: BenchContext, pg: PgServer) -> dict[str, Any]:
    size = ctx.size
    url, facts = build(ctx, pg)
    print(
        f"  postgres readers: {facts['rows']:,} rows in {facts['partitions']} partitions "
        f"loaded in {facts['load_s']:.1f} s",
        flush=True,
    )
    parameter_sets = reader_shapes.parameter_sets(
        SHAPES, facts, size.pg_reader_rows_per_day, size.pg_query_reps
    )
    # The JIT shape runs in a session of its own: in the same session, the self-join timed right
    # after it ran slower on the target (its parallel plan), and that shape's ratio changed from
    # one run to the next.
    with (
        psycopg.connect(url, autocommit=True, prepare_threshold=None) as con,
        psycopg.connect(url, autocommit=True, prepare_threshold=None) as jit_con,
    ):
        jit_con.execute("SET jit = on")

        def time_query(shape: str, table: str, p: dict) -> float:
            sql = reader_shapes.render(SHAPES[shape][1], table, lambda name: f"%({name})s")
            if shape == NEW_SESSION:
                return _time_new_session(url, sql, p)
            return _time(jit_con if _jit(shape) else con, sql, p)

        out = reader_shapes.measure(
            ctx,
            SHAPES,
            TABLES,
            parameter_sets,
            time_query,
            "postgres reader queries",
            caps={NEW_SESSION: MAX_TIMES_NEW_SESSION},
        )
    pg.drop(DB)
    return {"history": facts, **out}
