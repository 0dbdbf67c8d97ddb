"""PostgreSQL sessions for the fault tests: another session that holds locks (as a long reader
would), the backends waiting for a lock, and whether a killed client's backend is gone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from backfill_assets.lib.warehouse.connect import open_warehouse
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
from backfill_assets.testing.waiting import poll


@contextmanager
def session(url: str) -> Iterator[psycopg.Connection[Any]]:
    """Another session on the warehouse, in the warehouse's schema, in a transaction."""
    wh = open_warehouse(url)
    assert isinstance(wh, PostgresWarehouse)
    with wh.connect() as con:
        con.autocommit = False
        try:
            yield con
        finally:
            con.rollback()


def waiting_backends(url: str) -> list[int]:
    """Backends of backfill_assets waiting for a lock."""
    with psycopg.connect(url.split("?")[0], autocommit=True) as con:
        rows = con.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'backfill_assets' "
            "AND wait_event_type = 'Lock'"
        ).fetchall()
    return [r[0] for r in rows]


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    value = poll(check, timeout, 0.05)
    if not value:
        raise AssertionError(f"timed out waiting for {what}")
    return value


def backend_alive(url: str, pid: int) -> bool:
    with psycopg.connect(url.split("?")[0], autocommit=True) as con:
        row = con.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return bool(row and row[0])
