"""The plain (single-table) `orders_daily` that the floor, naive Dagster and dbt write in place.

The transform is the project's own v2 SELECT, so every contender computes exactly the same rows;
only how the write is orchestrated and made safe differs.
"""

from __future__ import annotations

import datetime as dt

import duckdb

from backfill_assets.example.orders import ORDERS_DAILY_COLUMNS, ORDERS_DAILY_SQL
from backfill_assets.lib.warehouse.identifiers import column_list, quote_ident

TABLE = "orders_daily"
PARTITION_COLUMN = "order_date"
COLUMN_NAMES = tuple(name for name, _ in ORDERS_DAILY_COLUMNS)
_COLS = column_list(COLUMN_NAMES)
_PC = quote_ident(PARTITION_COLUMN)


def create_table(con: duckdb.DuckDBPyConnection, table: str = TABLE) -> None:
    ddl = ", ".join(f"{quote_ident(n)} {t}" for n, t in ORDERS_DAILY_COLUMNS)
    con.execute(f"CREATE TABLE IF NOT EXISTS {quote_ident(table)} ({ddl})")


def replace_range(
    con: duckdb.DuckDBPyConnection,
    start: dt.date,
    end: dt.date,
    build_sql: str = ORDERS_DAILY_SQL,
    table: str = TABLE,
) -> None:
    """DELETE + INSERT…SELECT of days [start, end) in one transaction: the cheapest safe-ish write.

    One transaction so a reader never sees the range half-empty; nothing more (no shadow, no
    gates, no backup).
    """
    qt = quote_ident(table)
    params = {"start": start, "end": end}
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(f"DELETE FROM {qt} WHERE {_PC} >= $start AND {_PC} < $end", params)
        con.execute(
            f"INSERT INTO {qt} ({_COLS}) SELECT {_COLS} FROM ({build_sql}) AS build "
            f"WHERE {_PC} >= $start AND {_PC} < $end",
            params,
        )
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


# Every row's hash, summed exactly (HUGEINT): order-independent, and a duplicated row adds its
# hash again. A XOR of row hashes (bit_xor) would cancel an identical pair: a backfill that
# wrote one row twice in place of another pair would pass the check.
_HASH_SUM = f"sum(hash({_COLS})::HUGEINT)"


def _checksum(row: tuple | None) -> str:
    assert row is not None
    return f"{row[0]}:{row[1] or 0:x}"


def range_checksum(
    con: duckdb.DuckDBPyConnection, relation: str, start: dt.date, end: dt.date
) -> str:
    """Rows and the sum of every row's hash (all columns) over [start, end) of a table or view:
    order-independent, and changed by a duplicated row."""
    row = con.execute(
        f"SELECT count(*), {_HASH_SUM} FROM {quote_ident(relation)} "
        f"WHERE {_PC} >= $start AND {_PC} < $end",
        {"start": start, "end": end},
    ).fetchone()
    return _checksum(row)


def build_checksum(
    con: duckdb.DuckDBPyConnection, start: dt.date, end: dt.date, build_sql: str = ORDERS_DAILY_SQL
) -> str:
    """The checksum a correct backfill of [start, end) must leave: the build's own output."""
    row = con.execute(
        f"SELECT count(*), {_HASH_SUM} FROM ({build_sql}) AS build",
        {"start": start, "end": end},
    ).fetchone()
    return _checksum(row)
