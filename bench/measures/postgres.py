"""Measure: the same questions on PostgreSQL, on one throwaway server started for the measure.

1. backfill: the range of safety_overhead, v1 -> v2, done four ways, each from a copy of one
   template database (`CREATE DATABASE x TEMPLATE t`), each in a fresh interpreter, the order
   rotating between rounds:
   - a_pg `floor_pg`: plain SQL, one DELETE+INSERT…SELECT transaction per ISO week, into a plain
     (unpartitioned) table;
   - d_pg `backfill_assets_pg`: shadow write + gates per ISO week, one DETACH/ATTACH swap;
   - d'_pg `backfill_assets_dagster_pg`: plan, approve, one Dagster run per batch, the swap job
     publishing the target alone, with the instance on Dagster's PostgreSQL storage (a copy of a
     template database too); `backfill_assets_dagster_downstream_pg`, the same with the swap
     building and publishing the impacted dbt models (reported, no goal).
   Each result is checked against the v2 build's rows (count and sum of row hashes). Each run
   waits for quiet and is measured; a round with a noisy run is left out (bench.harness.load).
   The server's CPU (postmaster and backends) is attributed to the bench.
2. swap: swap and rollback timed at 1x and 10x history outside the range
   (bench.measures.pg_swap), and readers' waits while swaps and rollbacks run.
3. readers: five query shapes on the partitioned target vs. a plain table holding the same
   years of rows (bench.measures.pg_readers).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import psycopg

from backfill_assets.example import orders as o
from backfill_assets.example.spec import ORDERS_SPEC
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
from backfill_assets.testing.throwaway_postgres import (
    PostgresUnavailable,
    binaries_dir,
    throwaway_postgres,
)
from bench.harness.config import BenchContext
from bench.harness.data import Templates
from bench.harness.load import note, print_noisy, round_load
from bench.harness.measure import BenchError, goal, run_contender
from bench.harness.pg_data import (
    PLAIN_TABLE,
    PgServer,
    build_checksum,
    create_plain,
    dagster_storage_database,
    database_of,
    land_sources,
    psycopg2_url,
    range_checksum,
    vacuum_analyze,
)
from bench.measures import pg_readers, pg_swap
from bench.measures.safety_overhead import Goals, summarise

NOT_RUN = "not run"
# (name, what it is); a_pg, d_pg and d'_pg in the issue's words.
CONTENDERS: list[tuple[str, str]] = [
    ("floor_pg", "a_pg: plain SQL, one DELETE+INSERT…SELECT transaction per ISO week, plain table"),
    (
        "backfill_assets_pg",
        "d_pg: shadow per ISO week + gates, one DETACH/ATTACH swap (warehouse level)",
    ),
    (
        "backfill_assets_dagster_pg",
        "d'_pg: through the Dagster executor, instance on Dagster's PostgreSQL storage, the "
        "target published alone",
    ),
    (
        "backfill_assets_dagster_downstream_pg",
        "d'_pg with the impacted dbt models built in shadow and published by the swap",
    ),
]
FLOOR = "floor_pg"
DOWNSTREAM = "backfill_assets_dagster_downstream_pg"
SUBJECTS = ("backfill_assets_pg", "backfill_assets_dagster_pg", DOWNSTREAM)
GOALS: Goals = {
    "backfill_assets_pg": [(FLOOR, "<=", 1.3)],
    "backfill_assets_dagster_pg": [(FLOOR, "<=", 1.3)],
    DOWNSTREAM: [(FLOOR, "", None)],  # work the floor does not do: reported, no goal
}
TEMPLATE_DB = "bench_backfill_template"
DAGSTER_TEMPLATE_DB = "bench_dagster_template"


def run(ctx: BenchContext, _templates: Templates | None = None) -> dict[str, Any]:
    try:
        binaries_dir()
    except PostgresUnavailable as e:
        # Recorded, not failed: the other measures' results still count (`make postgres`).
        return {"status": NOT_RUN, "reason": str(e)}
    t0 = time.perf_counter()
    with throwaway_postgres() as server:
        pg = PgServer(server)
        settings = pg.configure()
        print(f"  postgres: server {settings['server_version']} up", flush=True)
        # pg_ctl daemonizes the server, so it is not the bench's descendant: its CPU (and its
        # backends') is the bench's own, not the others'.
        pid = server.pid()
        ctx.load.attribute(pid, "postgresql server")
        try:
            backfill = measure_backfill(ctx, pg)
            swap = pg_swap.run(ctx, pg)
            readers = pg_readers.run(ctx, pg)
        finally:
            ctx.load.forget(pid)
    phases = backfill.get("contenders", {}).get("backfill_assets_pg", {}).get("phases_s")
    if phases and phases.get("shadow_write_s"):
        # The gates read the diff with their other queries, side by side (`gates_and_diff`):
        # the two together, and the diff gate alone, run again after each batch's gates and
        # timed apart, against the shadow write, over every batch of d_pg's rounds.
        write = phases["shadow_write_s"]
        noisy = bool(backfill.get("load", {}).get("verdict"))
        backfill["goals"] += [
            goal("pg diff time (alone) / shadow write time",
                 100 * phases["diff_alone_s"] / write, 25.0, unit="%", no_verdict=noisy),
            goal("pg gates and diff time / shadow write time",
                 100 * phases["gates_and_diff_s"] / write, 35.0, unit="%", no_verdict=noisy),
        ]  # fmt: skip
    return {
        "server": settings,
        "backfill": backfill,
        "swap": swap["swap"],
        "blocked_readers": swap["blocked_readers"],
        "reader_queries": readers,
        "goals": backfill["goals"] + swap["goals"] + readers["goals"],
        "wall_s": time.perf_counter() - t0,
    }


# -- 1. the backfill, four ways -----------------------------------------------------------------


def build_template(ctx: BenchContext, pg: PgServer) -> tuple[str, dict[str, Any]]:
    """raw orders for the range, the partitioned target and the plain table both built by v1,
    vacuumed and analyzed; the checksum a correct v2 backfill must leave."""
    size = ctx.size
    t0 = time.perf_counter()
    url = pg.create(TEMPLATE_DB)
    wh = PostgresWarehouse(url)
    land_sources(wh, size.start, size.end, size.pg_rows_per_day)
    t1 = time.perf_counter()
    wh.replace_partitions(ORDERS_SPEC, size.start, size.end, build=o.ORDERS_DAILY_SQL_V1)
    with psycopg.connect(url, autocommit=True) as con:
        create_plain(con, size.start, size.end)
    vacuum_analyze(url)
    t2 = time.perf_counter()
    expected = build_checksum(url, size.start, size.end)
    if range_checksum(url, PLAIN_TABLE, size.start, size.end) == expected:
        raise BenchError("the v1 history already equals the v2 build: nothing to backfill")
    facts = {
        "rows_per_day": size.pg_rows_per_day,
        "rows": int(expected.split(":")[0]),
        "land_raw_s": t1 - t0,
        "build_targets_s": t2 - t1,
        "expected_checksum": expected,
    }
    return expected, facts


def build_dagster_template(pg: PgServer) -> None:
    """Dagster's PostgreSQL storage, its schema created once; each d'_pg run gets a copy, as a
    deployment's instance exists before a backfill starts."""
    import dagster as dg

    storage = psycopg2_url(pg.url(DAGSTER_TEMPLATE_DB))
    pg.create(DAGSTER_TEMPLATE_DB)
    with (
        tempfile.TemporaryDirectory(prefix="bench-dagster-") as home,
        dg.instance_for_test(
            temp_dir=home, overrides={"storage": {"postgres": {"postgres_url": storage}}}
        ),
    ):
        pass


def measure_backfill(ctx: BenchContext, pg: PgServer) -> dict[str, Any]:
    size = ctx.size
    logs = ctx.workdir / "logs"
    logs.mkdir(exist_ok=True)
    expected, facts = build_template(ctx, pg)
    build_dagster_template(pg)
    print(f"  postgres backfill: template of {facts['rows']:,} rows ready", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in CONTENDERS}
    rounds: list[dict[str, Any]] = []
    for rnd in range(ctx.repeats):
        k = rnd % len(CONTENDERS)
        spans: list[dict[str, Any]] = []
        for name, _ in CONTENDERS[k:] + CONTENDERS[:k]:
            url = pg.copy(TEMPLATE_DB, f"bench_{name}_r{rnd}")
            storage = dagster_storage_database(url)
            if name.startswith("backfill_assets_dagster"):
                pg.copy(DAGSTER_TEMPLATE_DB, storage)
            # As in safety_overhead: wait for quiet before each run, measure the others during it.
            with ctx.load.span() as span:
                result = run_contender(name, url, size.start, size.end, logs)
            relation = PLAIN_TABLE if name == FLOOR else ORDERS_SPEC.name
            got = range_checksum(url, relation, size.start, size.end)
            if got != expected:
                raise BenchError(
                    f"{name} left {got} in {relation}, expected {expected}: the backfill is wrong"
                )
            runs[name].append({**result, "round": rnd, "load": span})
            spans.append(span)
            print(
                f"  postgres round {rnd + 1}: {name} {result['wall_s']:.2f}s "
                f"(imports {result['import_s']:.2f}s){note(span)}",
                flush=True,
            )
            pg.drop(database_of(url), storage)
        rounds.append(round_load(rnd, spans))
        print_noisy(f"postgres backfill round {rnd + 1}", rounds[-1])
    out = summarise(runs, {}, rounds, described=CONTENDERS, subjects=SUBJECTS, goals_on=GOALS)
    out["range"] = {
        "start": size.start.isoformat(),
        "end": size.end.isoformat(),
        "days": (size.end - size.start).days,
        **facts,
    }
    out["check"] = (
        "after each contender the range holds exactly the v2 build's rows: count and the sum "
        "of hashtextextended(row::text) (a sum, so a duplicated row changes it)"
    )
    return out
