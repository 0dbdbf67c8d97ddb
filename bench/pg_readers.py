"""What readers pay for the partitioned target: five query shapes on years of daily history,
on the partitioned target (one partition per ISO week) and on a plain table with the same rows.

The history is `pg_reader_weeks` ISO weeks (261 = 5 years at default size) of
`pg_reader_rows_per_day` orders: one real week landed and built by v1, the other weeks copies of
it with shifted dates and ids written through the adapter (13 weeks per transaction); the plain
table is then filled from the target in date order, its indexes built (the key, as the target
has, and the date: see bench.pg_data.PLAIN_INDEXES), and both are vacuumed and analyzed.

Each shape has `pg_query_reps` parameter sets (days, keys) spread over the history, the same
for both tables and in every round. One session reads them all once, untimed, then each round
times every one on each table, alternating which table goes first: every round measures the
same steady state, that of a session (a pooled dashboard or dbt connection) that has read
those weeks before. A query is timed as often as it takes to spend MIN_TIMED_S on it (at most
MAX_TIMES), so sub-millisecond shapes get enough timings. A shape's figure per round is the
median of its timings, its ratio the median over the clean rounds of partitioned/plain (each
round waits for quiet and is measured; noisy rounds are left out: bench.load). Queries are
planned each time (not prepared), as ad-hoc and dashboard queries are: planning over the
partitions is part of what a reader pays.

The first query of a new session pays once for opening the relations it reads; on the target
that is the target, the day's ISO year and week tables and their indexes. `NEW_SESSION`
reports that case next to a plain table's first query in a new session (no goal: it is paid
once per session and relation, not per query).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from typing import Any, LiteralString, cast

import psycopg

from backfill_assets.example import orders as o
from backfill_assets.example.spec import ORDERS_SPEC
from backfill_assets.lib.warehouse.postgres_adapter import PostgresWarehouse
from bench.config import BenchContext
from bench.load import (
    agree,
    agreement,
    all_noisy,
    clean_values,
    kept,
    print_noisy,
    round_load,
    summary,
)
from bench.measure import BenchError, goal, median
from bench.pg_data import (
    PLAIN_INDEXES,
    PLAIN_TABLE,
    PgServer,
    add_history,
    create_plain,
    land_sources,
    table_facts,
    vacuum_analyze,
)

DB = "bench_readers"
RATIO_GOAL = 1.2
# key -> (what it asks, SQL over {t}, has a goal). Parameters are filled per run by _params.
SHAPES: dict[str, tuple[str, str, bool]] = {
    "revenue_by_day_90d": (
        "last 90 days' revenue by day",
        "SELECT order_date, sum(net_revenue_usd) FROM {t} WHERE order_date >= %(s)s "
        "AND order_date < %(e)s AND NOT is_cancelled GROUP BY order_date ORDER BY order_date",
        True,
    ),
    "one_day_count": (
        "one day's count",
        "SELECT count(*) FROM {t} WHERE order_date = %(d)s",
        True,
    ),
    "key_lookup": (
        "point lookup by key, no date",
        "SELECT * FROM {t} WHERE order_id = %(id)s",
        False,  # reported next to the plain table's cost: every partition's index is probed
    ),
    "full_scan_aggregate": (
        "full-scan aggregate by country",
        "SELECT country, count(*), sum(net_revenue_usd) FROM {t} GROUP BY country",
        True,
    ),
    # One day's count as a new session's first query: each run opens its own connection.
    "one_day_count_new_session": (
        "one day's count, first query of a new session",
        "SELECT count(*) FROM {t} WHERE order_date = %(d)s",
        False,
    ),
    # The same query with PostgreSQL's JIT on (its default; the server here has it off, as
    # docs/deploy.md advises for partitioned tables): JIT compiles each partition's scan.
    "full_scan_aggregate_jit_on": (
        "full-scan aggregate by country, jit = on",
        "SELECT country, count(*), sum(net_revenue_usd) FROM {t} GROUP BY country",
        False,
    ),
    "week_self_join": (
        "one week joined to itself (customers ordering on consecutive days)",
        "SELECT count(*) FROM {t} AS a JOIN {t} AS b ON b.customer_id = a.customer_id "
        "AND b.order_date = a.order_date + 1 WHERE a.order_date >= %(s)s "
        "AND a.order_date < %(e)s AND b.order_date >= %(s)s AND b.order_date < %(e)s",
        True,
    ),
}
TABLES = {"partitioned": ORDERS_SPEC.name, "plain": PLAIN_TABLE}
NEW_SESSION = "one_day_count_new_session"
MIN_TIMED_S = 0.02  # per query and table, per round
MAX_TIMES = 40
MAX_TIMES_NEW_SESSION = 8  # each opens a connection


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


def _params(shape: str, run: int, first: dt.date, last: dt.date, rows_per_day: int) -> dict:
    """Run `run`'s parameters: days and keys spread over the history, the same for both
    tables. Keys are real: order_id = days since 2000-01-01 * 1e6 + n, n < rows_per_day."""
    span = (last - first).days
    day = first + dt.timedelta(days=(span * (2 * run + 1)) // 11 % (span + 1))
    monday = day - dt.timedelta(days=day.weekday())
    monday = max(monday, first)
    if shape == "revenue_by_day_90d":
        return {"s": last - dt.timedelta(days=89), "e": last + dt.timedelta(days=1)}
    if shape in ("one_day_count", NEW_SESSION):
        return {"d": day}
    if shape == "key_lookup":
        n = (run * 7919) % rows_per_day
        return {"id": (day - dt.date(2000, 1, 1)).days * 1_000_000 + n}
    if shape == "week_self_join":
        return {"s": monday, "e": monday + dt.timedelta(days=7)}
    return {}


def _jit(shape: str) -> bool:
    return shape.endswith("_jit_on")


def _time(con: psycopg.Connection[Any], sql: str, params: dict, jit: bool = False) -> float:
    if jit:
        con.execute("SET jit = on")
    t0 = time.perf_counter()
    rows = con.execute(cast("LiteralString", sql), params).fetchall()
    elapsed = time.perf_counter() - t0
    if jit:
        con.execute("RESET jit")
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
    first = dt.date.fromisoformat(facts["first_day"])
    last = dt.date.fromisoformat(facts["last_day"])
    rounds = ctx.repeats
    per_round: dict[str, dict[str, list[float]]] = {s: {t: [] for t in TABLES} for s in SHAPES}
    loads: list[dict[str, Any]] = []
    reps = size.pg_query_reps
    params = {
        shape: [
            _params(shape, rep, first, last, size.pg_reader_rows_per_day) for rep in range(reps)
        ]
        for shape in SHAPES
    }
    # How often each query is timed per round: enough for MIN_TIMED_S, so that a query of a
    # fraction of a millisecond is not judged on five timings (its rounds spread 17% so).
    times_per_query: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as con:
        for shape, (_, sql, _) in SHAPES.items():  # the session reads every query's weeks once
            warm = [
                _time(con, sql.format(t=table), p, _jit(shape))
                for table in TABLES.values()
                for p in params[shape]
            ]
            most = MAX_TIMES_NEW_SESSION if shape == NEW_SESSION else MAX_TIMES
            times_per_query[shape] = max(1, min(most, math.ceil(MIN_TIMED_S / median(warm))))
        for rnd in range(rounds):
            with ctx.load.span() as span:
                for shape, (_, sql, _) in SHAPES.items():
                    times: dict[str, list[float]] = {t: [] for t in TABLES}
                    for rep, p in enumerate(params[shape]):
                        for i in range(times_per_query[shape]):
                            flip = (rnd + rep + i) % 2
                            for name in list(TABLES)[:: -1 if flip else 1]:
                                query = sql.format(t=TABLES[name])
                                if shape == NEW_SESSION:
                                    times[name].append(_time_new_session(url, query, p))
                                else:
                                    times[name].append(_time(con, query, p, _jit(shape)))
                    for name in TABLES:
                        per_round[shape][name].append(median(times[name]))
            loads.append(round_load(rnd, [span]))
            print_noisy(f"postgres reader queries round {rnd + 1}", loads[-1])
    use = kept(loads)
    no_verdict = all_noisy(loads)
    shapes: dict[str, Any] = {}
    goals, agreements = [], {}
    for shape, (what, _, has_goal) in SHAPES.items():
        part, plain = per_round[shape]["partitioned"], per_round[shape]["plain"]
        ratios = {i: part[i] / plain[i] for i in range(rounds)}
        ratio = median([ratios[i] for i in use])
        shapes[shape] = {
            "what": what,
            "partitioned_ms": median([part[i] for i in use]) * 1000,
            "plain_ms": median([plain[i] for i in use]) * 1000,
            "ratio": ratio,
            "ratio_runs": list(ratios.values()),
            "times_per_query": times_per_query[shape],
            "has_goal": has_goal,
        }
        if has_goal:
            agreements[shape] = agreement(clean_values(ratios, loads))
            goals.append(
                goal(f"reader {shape} partitioned/plain", ratio, RATIO_GOAL, no_verdict=no_verdict)
            )
    pg.drop(DB)
    return {
        "history": facts,
        "rounds": rounds,
        "reps": size.pg_query_reps,
        "shapes": shapes,
        "goals": goals,
        "load": summary(loads, "measured per round (every shape on both tables)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
    }
