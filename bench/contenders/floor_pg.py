"""(a_pg) the floor on PostgreSQL: the v2 transform as plain SQL, one DELETE+INSERT…SELECT
transaction per ISO week, into a plain (unpartitioned) table.

No orchestration, no shadow, no gates, no backup. The table is
`bench.harness.pg_data.PLAIN_TABLE` with its indexes (the key and the date); the SELECT is the
project's own v2 build, transpiled to PostgreSQL the same way the adapter does it, so every
contender computes the same rows.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, LiteralString, cast

import psycopg

from backfill_assets.example.orders import ORDERS_DAILY_COLUMNS, ORDERS_DAILY_SQL
from backfill_assets.lib.dates import iso_weeks
from backfill_assets.lib.warehouse.dialects import transpile
from backfill_assets.lib.warehouse.identifiers import column_list, quote_ident

# The measure builds it (bench.harness.pg_data) and queries it next to the partitioned target.
PLAIN_TABLE = "orders_daily_plain"
PARTITION_COLUMN = "order_date"


def run_floor_pg(url: str, start: dt.date, end: dt.date) -> dict[str, Any]:
    cols = column_list([name for name, _ in ORDERS_DAILY_COLUMNS])
    qt, pc = quote_ident(PLAIN_TABLE), quote_ident(PARTITION_COLUMN)
    where = f"{pc} >= %(start)s AND {pc} < %(end)s"
    delete = cast("LiteralString", f"DELETE FROM {qt} WHERE {where}")
    insert = cast(
        "LiteralString",
        f"INSERT INTO {qt} ({cols}) SELECT {cols} FROM "
        f"({transpile(ORDERS_DAILY_SQL, 'postgres')}) AS build WHERE {where}",
    )
    weeks = 0
    with psycopg.connect(url, autocommit=True) as con:
        for w0, w1 in iso_weeks(start, end):
            with con.transaction():
                params = {"start": w0, "end": w1}
                con.execute(delete, params)
                con.execute(insert, params)
            weeks += 1
    return {"transactions": weeks}
