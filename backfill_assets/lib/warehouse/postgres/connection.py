"""PostgreSQL: short-lived psycopg connections to one schema, transactions with a bounded lock
wait, and the hooks the shared code runs its SQL through."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, LiteralString, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import TupleRow

from backfill_assets.constants import METADATA_SCHEMA
from backfill_assets.errors import WarehouseError
from backfill_assets.lib.warehouse.dialects import transpile
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.postgres.idents import ident
from backfill_assets.lib.warehouse.shared import WarehouseBase

Connection = psycopg.Connection[TupleRow]
M = METADATA_SCHEMA


class PostgresConnection(WarehouseBase):
    """Short-lived psycopg connections to one PostgreSQL database (one schema of it)."""

    dialect = "postgres"
    # A freed lease or claim keeps its row, with no holder: a claimant locks the row, and a
    # row deleted meanwhile would leave it nothing to lock (shared.hooks).
    _frees_by_delete = False

    def __init__(
        self, url: str, lock_timeout_s: float = 30.0, *, swap_lock_wait_s: float = 0.5
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parts.query)
        schema = query.pop("schema", ["public"])[0]
        self.schema = validate_ident(schema, "warehouse schema")
        # The metadata is one per database: its keys name the schema (shared.hooks).
        self._key_prefix = f"{self.schema}."
        self._where = f"{self.schema}."
        self._conninfo = urllib.parse.urlunsplit(
            parts._replace(query=urllib.parse.urlencode(query, doseq=True))
        )
        user = f"{parts.username}@" if parts.username else ""
        port = f":{parts.port}" if parts.port else ""
        self._shown = f"postgresql://{user}{parts.hostname or ''}{port}{parts.path}"
        self.lock_timeout_s = lock_timeout_s
        self.swap_lock_wait_s = min(swap_lock_wait_s, lock_timeout_s)

    @property
    def location(self) -> str:
        """The URL without its password, and the schema."""
        return f"{self._shown} (schema {self.schema})"

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[Connection]:
        """An autocommit connection whose search_path is the warehouse schema."""
        try:
            con = psycopg.connect(
                self._conninfo,
                autocommit=True,
                connect_timeout=max(2, int(min(self.lock_timeout_s, 30))),
                options=f"-c search_path={self.schema}",
                application_name="backfill_assets",
            )
        except psycopg.OperationalError as e:
            raise WarehouseError(
                f"cannot reach warehouse {self.location}: {_msg(e)}; check that the server "
                "is up and BACKFILL_ASSETS_WAREHOUSE is right"
            ) from None
        try:
            if read_only:
                _x(con, "SET default_transaction_read_only = on")
            yield con
        finally:
            con.close()

    @contextmanager
    def session(self) -> Iterator[None]:
        """Nothing to keep open: the gates run their queries side by side, each on a connection
        of its own."""
        yield

    @contextmanager
    def transaction(self, *, lock_wait_s: float | None = None) -> Iterator[Connection]:
        """One transaction: committed whole, or rolled back whole on any error. Waits for a lock
        at most `lock_wait_s` (default `lock_timeout_s`), then raises WarehouseError."""
        wait = self.lock_timeout_s if lock_wait_s is None else lock_wait_s
        with self.connect() as con:
            try:
                with con.transaction():
                    _x(con, f"SET LOCAL lock_timeout = '{max(1, int(wait * 1000))}ms'")
                    yield con
            except pg_errors.LockNotAvailable as e:
                raise _LockWait(
                    f"warehouse {self.location}: a table this write needs stayed locked by "
                    f"another session for {wait:g}s ({_msg(e)}); nothing was changed"
                ) from None
            except (pg_errors.DiskFull, pg_errors.OutOfMemory) as e:
                raise WarehouseError(
                    f"warehouse {self.location}: the server is out of space ({_msg(e)}); "
                    "free space and run the command again. Nothing of this write was committed"
                ) from None
            except pg_errors.ReadOnlySqlTransaction as e:
                raise WarehouseError(
                    f"warehouse {self.location} cannot be written (read-only: {_msg(e)}); "
                    "nothing of this write was committed"
                ) from None
            except psycopg.OperationalError as e:
                raise WarehouseError(
                    f"warehouse {self.location}: the connection failed mid-write "
                    f"({_msg(e)}); nothing of this write was committed, run it again"
                ) from None

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]:
        """One statement (DuckDB dialect, `$name` parameters; transpiled) in its own
        transaction; every row it returns."""
        with self.transaction() as con:
            cur = _x(con, transpile(sql, "postgres"), dict(params or {}))  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]:
        """A read-only query (DuckDB dialect, `$name` parameters; transpiled)."""
        with self.connect(read_only=True) as con:
            return list(_x(con, transpile(sql, "postgres"), dict(params or {})).fetchall())  # type: ignore[arg-type]

    # -- the hooks of the shared code (shared.hooks) --------------------------------------------

    def _sql(self, con: Any, sql: str, params: Mapping[str, Any]) -> list[tuple]:
        return self._sql_named(con, sql, params)[1]

    def _sql_named(
        self, con: Any, sql: str, params: Mapping[str, Any]
    ) -> tuple[list[str], list[tuple]]:
        cur = _x(con, _PARAM.sub(r"%(\1)s", sql), dict(params))
        if cur.description is None:
            return [], []
        return [d.name for d in cur.description], list(cur.fetchall())

    def _lock_clause(self, of: str = "") -> str:
        return f" FOR UPDATE OF {of}" if of else " FOR UPDATE"

    @contextmanager
    def _meta_reader(self, table: str) -> Iterator[Connection | None]:
        with self.connect(read_only=True) as con:
            row = _x(con, "SELECT to_regclass(%(t)s) IS NOT NULL", {"t": f"{M}.{table}"})
            found = row.fetchone()
            yield con if found and found[0] else None

    def _q(self, name: str) -> str:
        return ident(self.schema, name)

    def _exists(self, con: Connection, name: str) -> bool:
        row = _x(con, "SELECT to_regclass(%(n)s) IS NOT NULL", {"n": self._q(name)}).fetchone()
        return bool(row and row[0])

    def _relation_kind(self, con: Connection, name: str) -> str | None:
        """What `name` is in the warehouse schema: "table" (plain or partitioned), another kind
        ("view", ...), or None (absent)."""
        row = _x(
            con,
            "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %(s)s AND c.relname = %(n)s",
            {"s": self.schema, "n": name},
        ).fetchone()
        if row is None:
            return None
        return _RELKINDS.get(str(row[0]), "relation")

    def _dependent_views(self, con: Connection, name: str) -> list[str]:
        """Views (and materialized views) over table `name`: they follow it by OID, not name."""
        rows = _x(
            con,
            "SELECT DISTINCT vn.nspname || '.' || v.relname FROM pg_depend d "
            "JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class "
            "JOIN pg_namespace vn ON vn.oid = v.relnamespace "
            "WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass "
            "AND d.refobjid = to_regclass(%(n)s) AND v.oid <> d.refobjid ORDER BY 1",
            {"n": self._q(name)},
        ).fetchall()
        return [str(r[0]) for r in rows]


_RELKINDS = {
    "r": "table",
    "p": "table",
    "v": "view",
    "m": "materialized view",
    "f": "foreign table",
    "S": "sequence",
    "i": "index",
    "I": "index",
    "c": "composite type",
    "t": "TOAST table",
}


class _LockWait(WarehouseError):
    """One attempt did not get its locks within its wait (retried by `_locking`)."""


# `$name` parameters (the SQL lib/warehouse/shared shares with DuckDB) as psycopg's `%(name)s`.
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def _x(con: Connection, sql: str, params: Any = None) -> psycopg.Cursor[TupleRow]:
    """`con.execute` for SQL composed here from validated identifiers (psycopg's types want a
    literal string)."""
    return con.execute(cast("LiteralString", sql), params)


def diff_session(con: Connection) -> None:
    """A diff's connection: a week of both sides hashed in memory. With the default work_mem
    (4MB) the join of a week of 20k-row days spilled to disk in batches, and sorted on disk by
    day."""
    _x(con, "SET work_mem = '64MB'")


def _xm(cur: psycopg.Cursor[TupleRow], sql: str, params: Sequence[Any]) -> None:
    cur.executemany(cast("LiteralString", sql), params)


def _msg(e: BaseException) -> str:
    """A driver error on one line."""
    return " ".join(str(e).split())
