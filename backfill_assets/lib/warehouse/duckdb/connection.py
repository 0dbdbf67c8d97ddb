"""DuckDB: opening the file (one writing process at a time), sessions, transactions, and the
hooks the shared code runs its SQL through."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb

from backfill_assets.constants import METADATA_SCHEMA
from backfill_assets.errors import WarehouseError, WarehouseMissing
from backfill_assets.lib.warehouse.shared import WarehouseBase

M = METADATA_SCHEMA


# The open connection of each file a session holds, by real path: every adapter of that file in
# this process connects through it while the session lasts.
_SESSIONS: dict[str, duckdb.DuckDBPyConnection] = {}


class DuckDBConnection(WarehouseBase):
    """Short-lived connections to one DuckDB file (DuckDB allows one writing process per file)."""

    dialect = "duckdb"
    _where = "main."

    def __init__(self, path: str | Path, lock_timeout_s: float = 30.0):
        self.path = str(path)
        self.lock_timeout_s = lock_timeout_s

    @property
    def location(self) -> str:
        return self.path

    @contextmanager
    def session(self) -> Iterator[None]:
        """Keep the file open, writable, across the calls made inside (a batch's write, then its
        gates): each connection inside is a cursor of this one, not the file opened again.

        Opening the file loads DuckDB's catalog and closing it frees its buffers, paid again for
        each call. Inside a session a `read_only`
        connection reads through the session's writable one, and each write is still its own
        transaction, checkpointed when it commits. Other processes wait for the file until the
        session ends, as they wait for a write, so keep sessions to work that does not wait on
        anything else. Nested sessions are one session, and so are sessions of other adapters
        of the same file in this process (DuckDB refuses a second, read-only opening of a file
        a process holds open).
        """
        key = os.path.realpath(self.path)
        if key in _SESSIONS:
            yield
            return
        with self.connect() as con:
            _SESSIONS[key] = con
            try:
                yield
            finally:
                del _SESSIONS[key]

    def _held(self) -> duckdb.DuckDBPyConnection | None:
        return _SESSIONS.get(os.path.realpath(self.path)) if _SESSIONS else None

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open the file, waiting up to `lock_timeout_s` while another process holds it; inside
        a `session`, a cursor of its connection."""
        held = self._held()
        if held is not None:
            cursor = held.cursor()
            try:
                yield cursor
            finally:
                cursor.close()
            return
        p = Path(self.path)
        if p.is_dir():
            raise WarehouseError(f"warehouse path {self.path} is a directory; point it at a file")
        if not p.parent.is_dir():
            raise WarehouseError(
                f"warehouse folder {p.parent} does not exist; create it or set "
                "BACKFILL_ASSETS_WAREHOUSE to a path in an existing folder"
            )
        if read_only and not p.exists():
            raise WarehouseMissing(
                f"warehouse {self.path} does not exist yet; build the target first "
                "(e.g. `make demo` or the daily job)"
            )
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(self.path, read_only=read_only)
                break
            except duckdb.IOException as e:
                msg = str(e)
                if "lock" in msg.lower() and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                if "lock" in msg.lower():
                    raise WarehouseError(
                        f"warehouse {self.path} is held by another process and stayed locked for "
                        f"{self.lock_timeout_s:.0f}s; stop that process or retry later ({msg})"
                    ) from e
                if not read_only and _unwritable_reason(msg):
                    raise self._unwritable(e) from e
                raise WarehouseError(f"cannot open warehouse {self.path}: {msg}") from e
            except duckdb.ConnectionException as e:
                if read_only and "different configuration" in str(e):
                    # This process holds the file open for writing already (DuckDB refuses a
                    # read-only opening beside it): read through a connection like it.
                    read_only = False
                    continue
                raise WarehouseError(
                    f"cannot open warehouse {self.path}: {e} (is it a DuckDB file?)"
                ) from e
            except duckdb.Error as e:
                raise WarehouseError(
                    f"cannot open warehouse {self.path}: {e} (is it a DuckDB file?)"
                ) from e
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def transaction(self, checkpoint: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction: committed whole, or rolled back whole on any error.

        A warehouse that cannot be written (a full disk, a read-only file system) raises
        WarehouseError saying so; nothing of the transaction is committed.

        `checkpoint=False` (the swap and the rollback, which only rename tables and write a few
        metadata rows): the file is not checkpointed when this connection closes. The commit is
        durable in the write-ahead log all the same; the next write checkpoints it with its own,
        and a reader opening the file before then replays it. A checkpoint rewrites the catalog,
        which grows with every week table: a good share of a swap's or a rollback's time.
        """
        in_session = self._held() is not None
        with self.connect() as con:
            if not checkpoint and not in_session:  # the pragma holds for the whole session
                con.execute("PRAGMA disable_checkpoint_on_shutdown")
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException as e:
                with suppress(duckdb.Error):  # a failed COMMIT has already rolled back
                    con.execute("ROLLBACK")
                if isinstance(e, duckdb.IOException) or (
                    isinstance(e, duckdb.Error) and _unwritable_reason(str(e))
                ):
                    raise self._unwritable(e) from e
                raise
            if checkpoint and in_session:
                # What closing the file does outside a session; as there, a checkpoint that
                # fails leaves the commit in the write-ahead log, and the next one retries.
                with suppress(duckdb.Error):
                    con.execute("CHECKPOINT")

    def _unwritable(self, e: duckdb.Error) -> WarehouseError:
        msg = str(e)
        why = _unwritable_reason(msg) or "it could not be written; fix the cause and run again"
        return WarehouseError(
            f"warehouse {self.path}: {why}. Nothing of this write was committed ({msg.strip()})"
        )

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]:
        """Run one statement in its own transaction and fetch every row (for set-up and tests)."""
        with self.connect() as con:
            return con.execute(sql, params).fetchall()

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]:
        """Read-only query in a read-only connection."""
        with self.connect(read_only=True) as con:
            return con.execute(sql, params).fetchall()

    # -- the hooks of the shared code (shared.hooks) --------------------------------------------

    def _sql(self, con: Any, sql: str, params: Mapping[str, Any]) -> list[tuple]:
        return con.execute(sql, dict(params)).fetchall()

    def _sql_named(
        self, con: Any, sql: str, params: Mapping[str, Any]
    ) -> tuple[list[str], list[tuple]]:
        cur = con.execute(sql, dict(params))
        rows = cur.fetchall()
        return [d[0] for d in cur.description or ()], rows

    @contextmanager
    def _meta_reader(self, table: str) -> Iterator[duckdb.DuckDBPyConnection | None]:
        if self._held() is None and not Path(self.path).exists():
            yield None  # no file, no metadata (and a read-only opening would not create it)
            return
        with self.connect(read_only=True) as con:
            yield con if self._has_table(con, M, table) else None

    def _has_table(self, con: duckdb.DuckDBPyConnection, schema: str, name: str) -> bool:
        return bool(
            con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE schema_name = $s AND table_name = $n",
                {"s": schema, "n": name},
            ).fetchone()[0]  # type: ignore[index]
        )

    def _relation_kind(self, con: duckdb.DuckDBPyConnection, name: str) -> str | None:
        """What `name` is in schema main: "table", "view" or None (absent). Names are
        case-insensitive in DuckDB."""
        row = con.execute(
            "SELECT 'table' FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND lower(table_name) = lower($n) UNION ALL "
            "SELECT 'view' FROM duckdb_views() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT internal AND lower(view_name) = lower($n) LIMIT 1",
            {"n": name},
        ).fetchone()
        return str(row[0]) if row else None

    def _exists(self, con: duckdb.DuckDBPyConnection, name: str) -> bool:
        return bool(
            con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' "
                "AND table_name = $n",
                {"n": name},
            ).fetchone()[0]  # type: ignore[index]
        )


def _unwritable_reason(msg: str) -> str | None:
    low = msg.lower()
    if "no space left" in low or "disk full" in low:
        return "its disk is full; free space (or move the file) and run the command again"
    if "read-only" in low or "read only" in low or "permission denied" in low:
        return "it cannot be written (read-only); make it writable and run the command again"
    return None
