"""PostgreSQL data for the `postgres` measure: one throwaway server, template databases copied
for every contender (`CREATE DATABASE x TEMPLATE t`, a file copy: byte-identical and fast), the
plain single table the floor and the reader comparison use, history built from one real week,
and a checksum that also catches duplicated rows.

The raw orders land through the example's own loader (`land_raw_orders`: an in-memory DuckDB
computes the rows, COPY loads them), so PostgreSQL holds exactly the rows DuckDB generates.
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.parse
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, LiteralString, cast

import psycopg

from backfill_assets.example import orders as o
from backfill_assets.example.spec import ORDERS_SPEC
from backfill_assets.lib.warehouse.dialects import column_type, transpile
from backfill_assets.lib.warehouse.identifiers import column_list, quote_ident
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
from backfill_assets.testing.throwaway_postgres import ThrowawayPostgres
from bench.contenders.floor_pg import PLAIN_TABLE
from bench.harness.measure import BenchError

# The plain table's indexes: the same non-unique key index the adapter gives the partitioned
# target (and each of its week partitions), plus one on the date, which is how a plain table
# answers a date filter without a full scan (the partitioned target gets that from pruning).
PLAIN_INDEXES = (("order_id",), ("order_date",))
PC = ORDERS_SPEC.partition_column
COLUMNS = ORDERS_SPEC.column_names
_COLS = column_list(COLUMNS)
# Weeks of history written per transaction while building (keeps each transaction modest).
BUILD_CHUNK_WEEKS = 13
SEED_TABLE = "bench_seed_week"
# The weeks [$start, $end) (whole ISO weeks) filled with copies of the seed week's real rows,
# shifted by whole weeks. Ids move with the date (order_id = days since 2000-01-01 * 1e6 + n),
# so keys stay unique across the copies. Native PostgreSQL: the adapter binds $start/$end once
# for the whole range (the DuckDB adapter binds them per week).
SHIFTED_WEEKS_SQL = f"""
select
    s.order_id + k.days::bigint * 1000000 as order_id,
    s.order_date + k.days as order_date,
    s.ordered_at + make_interval(days => k.days) as ordered_at,
    s.customer_id, s.country, s.currency, s.gross_amount, s.discount_amount, s.tax_amount,
    s.net_amount, s.fx_rate, s.net_revenue_usd, s.status, s.is_cancelled
from {SEED_TABLE} as s
cross join (
    select ($start::date - (select min(order_date) from {SEED_TABLE})) + 7 * w as days
    from generate_series(0, ($end::date - $start::date) / 7 - 1) as w
) as k
"""
# One row's hash, as text of the whole row; summed (not XORed: a XOR cancels a duplicated pair).
_ROW_HASH = "hashtextextended((ROW({cols}))::text, 0)::numeric"
# Set on the measure's own throwaway server. A background vacuum or analyze landing inside one
# contender's timing and not another's is noise; tables are vacuumed and analyzed explicitly
# once they are loaded.
# JIT off: PostgreSQL compiles each partition's scan of a query over many partitions, which can
# take longer than the query itself on a target of years of weeks; docs/deploy.md advises
# `jit = off` for a database with partitioned targets, and the reader measure reports the full
# scan with JIT on as well.
SERVER_SETTINGS = (("autovacuum", "off"), ("jit", "off"))
# What shapes the timings, recorded with the results.
RECORDED_SETTINGS = (
    "server_version",
    "autovacuum",
    "shared_buffers",
    "max_parallel_workers_per_gather",
    "jit",
    "fsync",
    "synchronous_commit",
)


def x(con: psycopg.Connection[Any], sql: str, params: Any = None) -> psycopg.Cursor[Any]:
    """`con.execute` for SQL composed here from validated identifiers."""
    return con.execute(cast("LiteralString", sql), params)


@dataclass
class PgServer:
    """The measure's throwaway server: database URLs, template copies, drops."""

    server: ThrowawayPostgres

    def url(self, database: str) -> str:
        return self.server.url(database)

    @contextmanager
    def admin(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.server.url(), autocommit=True) as con:
            yield con

    def configure(self) -> dict[str, str]:
        """Apply SERVER_SETTINGS; return the settings that shape the timings, as recorded."""
        with self.admin() as con:
            for name, value in SERVER_SETTINGS:
                x(con, f"ALTER SYSTEM SET {name} = '{value}'")
            x(con, "SELECT pg_reload_conf()")
        # The reload is a signal: new sessions see the settings once the server has read it.
        deadline = time.monotonic() + 10
        while self._show([n for n, _ in SERVER_SETTINGS]) != dict(SERVER_SETTINGS):
            if time.monotonic() > deadline:
                raise BenchError(f"the server did not take the settings {SERVER_SETTINGS}")
            time.sleep(0.05)
        return self._show(list(RECORDED_SETTINGS))

    def _show(self, names: list[str]) -> dict[str, str]:
        shown = {}
        with self.admin() as con:
            for name in names:
                row = x(con, f"SHOW {name}").fetchone()
                shown[name] = str(row[0]) if row else "?"
        return shown

    def create(self, name: str) -> str:
        return self.server.create_database(name)

    def copy(self, template: str, name: str) -> str:
        """A new database `name` as a copy of `template` (no session may be connected to it)."""
        with self.admin() as con:
            x(
                con,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (template,),
            )
            x(con, f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
            x(con, f"CREATE DATABASE {quote_ident(name)} TEMPLATE {quote_ident(template)}")
        return self.url(name)

    def drop(self, *names: str) -> None:
        with self.admin() as con:
            for name in names:
                x(con, f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")


def database_of(url: str) -> str:
    return urllib.parse.urlsplit(url).path.lstrip("/")


def dagster_storage_database(warehouse_url: str) -> str:
    """The database holding Dagster's storage for a warehouse database: its name + `_dagster`.
    A convention between the measure (which copies it from a template) and the contender."""
    return f"{database_of(warehouse_url)}_dagster"


def dagster_storage_url(warehouse_url: str) -> str:
    """dagster-postgres's URL of the Dagster storage database of a warehouse database."""
    parts = urllib.parse.urlsplit(warehouse_url)
    database = dagster_storage_database(warehouse_url)
    return psycopg2_url(urllib.parse.urlunsplit(parts._replace(path=f"/{database}", query="")))


def psycopg2_url(url: str) -> str:
    """A URL for dagster-postgres, naming psycopg2: SQLAlchemy 2.1 would drive `postgresql://`
    with psycopg 3, which breaks dagster-postgres (see tests/conftest.py `dagster_storage_url`)."""
    return url.replace("postgresql://", "postgresql+psycopg2://", 1)


def plain_ddl() -> str:
    cols = ", ".join(
        f"{quote_ident(n)} {column_type(t, 'postgres')}" for n, t in o.ORDERS_DAILY_COLUMNS
    )
    return f"CREATE TABLE {quote_ident(PLAIN_TABLE)} ({cols})"


def create_plain_indexes(con: psycopg.Connection[Any]) -> None:
    for cols in PLAIN_INDEXES:
        name = quote_ident(f"{PLAIN_TABLE}__{'_'.join(cols)}")
        x(con, f"CREATE INDEX {name} ON {quote_ident(PLAIN_TABLE)} ({column_list(cols)})")


def create_plain(con: psycopg.Connection[Any], start: dt.date, end: dt.date) -> None:
    """The plain table holding the partitioned target's rows of [start, end), in date order (as
    a daily-appended table holds them), its indexes built after the load."""
    x(con, plain_ddl())
    pc = quote_ident(PC)
    x(
        con,
        f"INSERT INTO {quote_ident(PLAIN_TABLE)} ({_COLS}) SELECT {_COLS} FROM "
        f"{quote_ident(ORDERS_SPEC.name)} WHERE {pc} >= %(s)s AND {pc} < %(e)s "
        f"ORDER BY {pc}, order_id",
        {"s": start, "e": end},
    )
    create_plain_indexes(con)


def land_sources(wh: PostgresWarehouse, start: dt.date, end: dt.date, rows_per_day: int) -> None:
    """FX reference tables and raw_orders for [start, end), through the example's loaders."""
    with warnings.catch_warnings():
        # Its Dagster assets (imported with the loaders) use a beta parameter: not news here.
        warnings.filterwarnings("ignore", message=".*is currently in beta")
        from backfill_assets.example.sources import land_fx_rates, land_raw_orders

    land_fx_rates(wh)
    land_raw_orders(wh, start, end, rows_per_day)


def add_history(wh: PostgresWarehouse, seed_monday: dt.date, h0: dt.date, weeks: int) -> None:
    """`weeks` whole ISO weeks of live rows from Monday h0, copied from the target's real week
    starting `seed_monday`, through the adapter's own partition writer."""
    wh.execute(
        f"CREATE TABLE {SEED_TABLE} AS SELECT * FROM {ORDERS_SPEC.name} "
        f"WHERE {PC} >= $s AND {PC} < $e",
        {"s": seed_monday, "e": seed_monday + dt.timedelta(weeks=1)},
    )
    for i in range(0, weeks, BUILD_CHUNK_WEEKS):
        c0 = h0 + dt.timedelta(weeks=i)
        c1 = h0 + dt.timedelta(weeks=min(i + BUILD_CHUNK_WEEKS, weeks))
        wh.replace_partitions(ORDERS_SPEC, c0, c1, build={"postgres": SHIFTED_WEEKS_SQL})
    wh.execute(f"DROP TABLE {SEED_TABLE}")


def vacuum_analyze(url: str) -> None:
    """What autovacuum would have done by now: visibility map and planner statistics."""
    with psycopg.connect(url, autocommit=True) as con:
        x(con, "VACUUM ANALYZE")


def _checksum(row: tuple[Any, ...] | None) -> str:
    assert row is not None
    return f"{row[0]}:{row[1]}"


def range_checksum(url: str, relation: str, start: dt.date, end: dt.date) -> str:
    """Rows and the sum of every row's hash over [start, end) of a table: order-independent,
    and a duplicated row changes it (a XOR of row hashes would cancel an identical pair)."""
    pc = quote_ident(PC)
    row_hash = _ROW_HASH.format(cols=", ".join(f"t.{quote_ident(c)}" for c in COLUMNS))
    with psycopg.connect(url, autocommit=True) as con:
        row = x(
            con,
            f"SELECT count(*), coalesce(sum({row_hash}), 0) FROM {quote_ident(relation)} AS t "
            f"WHERE t.{pc} >= %(s)s AND t.{pc} < %(e)s",
            {"s": start, "e": end},
        ).fetchone()
    return _checksum(row)


def build_checksum(
    url: str, start: dt.date, end: dt.date, build_sql: str = o.ORDERS_DAILY_SQL
) -> str:
    """The checksum a correct backfill of [start, end) must leave: the build's own output, each
    column cast to the table's type (as an INSERT would)."""
    casts = ", ".join(
        f"b.{quote_ident(n)}::{column_type(t, 'postgres')}" for n, t in o.ORDERS_DAILY_COLUMNS
    )
    pc = quote_ident(PC)
    with psycopg.connect(url, autocommit=True) as con:
        row = x(
            con,
            f"SELECT count(*), coalesce(sum({_ROW_HASH.format(cols=casts)}), 0) "
            f"FROM ({transpile(build_sql, 'postgres')}) AS b "
            f"WHERE b.{pc} >= %(start)s AND b.{pc} < %(end)s",
            {"start": start, "end": end},
        ).fetchone()
    return _checksum(row)


def table_facts(url: str, relation: str) -> Mapping[str, int]:
    with psycopg.connect(url, autocommit=True) as con:
        rows = x(con, f"SELECT count(*) FROM {quote_ident(relation)}").fetchone()
        # Leaf partitions (the weeks, under the target's ISO-year tables) and every relation's
        # size, indexes included.
        parts = x(
            con,
            "SELECT count(*) FROM pg_partition_tree(to_regclass(%s)) WHERE isleaf AND level > 0",
            (relation,),
        ).fetchone()
        # pg_partition_tree has no rows for a plain table: its own size then.
        size = x(
            con,
            "SELECT coalesce(sum(pg_total_relation_size(relid)), "
            "pg_total_relation_size(to_regclass(%(r)s))) "
            "FROM pg_partition_tree(to_regclass(%(r)s))",
            {"r": relation},
        ).fetchone()
    return {
        "rows": int(rows[0]) if rows else 0,
        "partitions": int(parts[0]) if parts else 0,
        "bytes": int(size[0]) if size else 0,
    }
