"""DuckDB adapter: the target is one plain table; a swap publishes week tables over it.

Layout for a table `orders_daily` (all in schema main):

- `orders_daily`: a table holding every live row, what readers query, while no swap of an
  unreleased plan overrides a week. The daily write appends each day in key order.
- After a swap, until its release or rollback: `orders_daily` is a view over `orders_daily__base`
  (the table above, renamed) without the rows of the swapped weeks, UNION ALL the week tables
  `orders_daily__w2026w03` the swap published (explicit column list).
- `orders_daily__template`: empty, holds the schema.
- `orders_daily__shadow__w2026w03` and view `orders_daily__shadow`: what a backfill writes.
- `orders_daily__backup__<plan>__w2026w03`: a week table a swap replaced (a week that already had
  one), until released.
- `<companion>__bfb_<plan>`: a downstream relation (companion) the swap replaced with its shadow,
  in the same transaction, until released (`base.companion_backup`).

A swap renames shadow -> live for every week of the plan in one transaction (pointer moves, no
row copies except the few days of a partial first/last week that lie outside the plan): the
replaced rows stay in the base table, hidden by the view, as the backup. Rollback drops the
published week tables. Neither reads the rows it moves: each write records the rows and
checksum of every day it wrote, and the swap reports those. Release folds the plan's week tables
into the base table, which takes the target's name again. `backfill_meta` holds per-partition
write versions (with those rows and checksums), the shadow's build log and the swap log, so a
swap can refuse when the live partition changed after its shadow was built; and the writer lease
and plan claim of each table, changed by compare-and-set in one transaction (DuckDB lets one
process write the file at a time, so each transaction is atomic across processes).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from backfill_assets.constants import (
    BACKUP_INFIX,
    BASE_SUFFIX,
    METADATA_SCHEMA,
    TEMPLATE_SUFFIX,
    WEEK_INFIX,
)
from backfill_assets.errors import SwapRefused, WarehouseError, WarehouseMissing
from backfill_assets.lib.dates import iso_weeks, parse_day, week_id
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import (
    ABANDONED,
    EMPTY,
    RELEASED,
    ROLLED_BACK,
    SWAPPED,
    Companion,
    GateInputs,
    LeaseHolder,
    PartitionMove,
    PartitionStats,
    SwapResult,
    check_companions,
    lease_holder_from,
    lease_name,
    plan_companions,
    refuse_abandon,
    rows_of,
    swap_move,
)
from backfill_assets.lib.warehouse.dialects import SQL, sql_for
from backfill_assets.lib.warehouse.identifiers import (
    column_list,
    quote_ident,
    validate_ident,
)
from backfill_assets.lib.warehouse.records import PlanBook

if TYPE_CHECKING:
    import pandas as pd

M = METADATA_SCHEMA
_BUILD_VIEW = "__backfill_build"
_WEEK_RE = re.compile(r"([0-9]{4})w([0-9]{2})", re.ASCII)

# The metadata tables and their columns, in order. A table is created with every column; one from
# before a column (a file an earlier version wrote) is given it at the end, where it was added.
_COORDINATION_TABLES: dict[str, tuple[str, ...]] = {
    "writer_lease": (
        "table_name VARCHAR PRIMARY KEY", "holder_id VARCHAR", "role VARCHAR", "job_name VARCHAR",
        "plan_id VARCHAR", "host VARCHAR", "pid BIGINT", "claimed_at TIMESTAMP",
        "process VARCHAR",
    ),
    "plan_claims": ("table_name VARCHAR PRIMARY KEY", "plan_id VARCHAR", "claimed_at TIMESTAMP"),
    # The state of record of each plan (lib/warehouse/records.py).
    "plans": (
        "plan_id VARCHAR", "table_name VARCHAR", "status VARCHAR", "plan_json VARCHAR",
        "approved_by VARCHAR", "details VARCHAR", "changed_at TIMESTAMP", "recorded VARCHAR",
    ),
}  # fmt: skip
_META_TABLES: dict[str, tuple[str, ...]] = {
    "partition_versions": (
        "table_name VARCHAR", "partition_date DATE", "version BIGINT", "written_at TIMESTAMP",
        "checksum VARCHAR", "row_count BIGINT", "fingerprint HUGEINT", "fingerprint_of VARCHAR",
    ),
    "shadow_log": (
        "table_name VARCHAR", "partition_date DATE", "plan_id VARCHAR", "base_version BIGINT",
        "row_count BIGINT", "written_at TIMESTAMP", "checksum VARCHAR",
    ),
    "swap_log": (
        "table_name VARCHAR", "plan_id VARCHAR", "week VARCHAR", "range_start DATE",
        "range_end DATE", "had_live BOOLEAN", "state VARCHAR", "changed_at TIMESTAMP",
    ),
    "swap_days": (
        "table_name VARCHAR", "plan_id VARCHAR", "partition_date DATE", "checksum_in VARCHAR",
        "checksum_out VARCHAR",
    ),
    # The downstream relations a swap published with the target, and their backups.
    "swap_companions": (
        "table_name VARCHAR", "plan_id VARCHAR", "live VARCHAR", "shadow VARCHAR",
        "backup VARCHAR", "had_live BOOLEAN",
    ),
    **_COORDINATION_TABLES,
}  # fmt: skip
_SEQUENCES = "<sequences>"  # the catalog query's name for the schema's sequences


def _monday_of(week: str) -> dt.date:
    m = _WEEK_RE.fullmatch(week)
    if not m:
        raise WarehouseError(f"unexpected week id {week!r}")
    return dt.date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)


# The open connection of each file a session holds, by real path: every adapter of that file in
# this process connects through it while the session lasts.
_SESSIONS: dict[str, duckdb.DuckDBPyConnection] = {}


class DuckDBWarehouse(PlanBook):
    """Short-lived connections to one DuckDB file (DuckDB allows one writing process per file)."""

    dialect = "duckdb"

    def __init__(self, path: str | Path, lock_timeout_s: float = 30.0):
        self.path = str(path)
        self.lock_timeout_s = lock_timeout_s

    @property
    def location(self) -> str:
        return self.path

    # -- connections -------------------------------------------------------------------------

    @contextmanager
    def session(self) -> Iterator[None]:
        """Keep the file open, writable, across the calls made inside (a batch's write, then its
        gates): each connection inside is a cursor of this one, not the file opened again.

        Opening the file loads DuckDB's catalog and closing it frees its buffers: about 18 and
        11 ms of a week's gates, paid again for each call. Inside a session a `read_only`
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
        which grows with every week table, so it was 7-25 ms of a 35-60 ms swap or rollback.
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

    # -- the hooks of the plans table (records.PlanBook) ----------------------------------------

    def _sql(self, con: Any, sql: str, params: Mapping[str, Any]) -> list[tuple]:
        return con.execute(sql, dict(params)).fetchall()

    @contextmanager
    def _meta_reader(self) -> Iterator[duckdb.DuckDBPyConnection | None]:
        if self._held() is None and not Path(self.path).exists():
            yield None  # no file, no plans (and a read-only opening would not create it)
            return
        with self.connect(read_only=True) as con:
            yield con if self._has_table(con, M, "plans") else None

    @contextmanager
    def _meta_transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.transaction() as con:
            self._ensure_meta(con)
            yield con

    # -- names -------------------------------------------------------------------------------

    @staticmethod
    def _week_table(base: str, day: dt.date) -> str:
        return validate_ident(f"{base}{WEEK_INFIX}{week_id(day)}", "week table")

    @staticmethod
    def _backup_base(spec: TableSpec, plan_id: str) -> str:
        return f"{spec.name}{BACKUP_INFIX}{validate_ident(plan_id, 'plan id')}"

    def _week_tables(self, con: duckdb.DuckDBPyConnection, base: str) -> dict[str, str]:
        """Existing week tables of `base` (live or shadow name) keyed by week id."""
        return self._week_tables_of(con, base)[base]

    def _week_tables_of(
        self, con: duckdb.DuckDBPyConnection, *bases: str
    ) -> dict[str, dict[str, str]]:
        """The week tables of each of `bases`, keyed by week id, from one scan of the catalog
        (each scan lists every table of the file, and a swap needs several bases). The names
        are filtered here: in SQL, `starts_with(table_name, ...)` doubled the scan's cost (1.0
        against 2.2 ms with 150 tables), and it grows with every week of history."""
        rows = con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
        ).fetchall()
        out: dict[str, dict[str, str]] = {b: {} for b in bases}
        for base in bases:
            prefix = f"{base}{WEEK_INFIX}"
            for (name,) in rows:
                rest = name[len(prefix) :]
                if name.startswith(prefix) and _WEEK_RE.fullmatch(rest):
                    out[base][rest] = name
        return out

    def _exists(self, con: duckdb.DuckDBPyConnection, name: str) -> bool:
        return bool(
            con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' "
                "AND table_name = $n",
                {"n": name},
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

    def relation_exists(self, name: str) -> bool:
        """Whether a table or view `name` exists in the file's schema main."""
        validate_ident(name, "relation")
        try:
            with self.connect(read_only=True) as con:
                return self._relation_kind(con, name) is not None
        except WarehouseMissing:
            return False

    # -- DDL ---------------------------------------------------------------------------------

    def ensure_table(self, spec: TableSpec) -> None:
        """Create metadata, template and the live/shadow views if missing (idempotent)."""
        with self.transaction() as con:
            self._ensure(con, spec)

    def _ensure(self, con: duckdb.DuckDBPyConnection, spec: TableSpec) -> str:
        """Create what is missing; the table holding the target's rows that no week table
        overrides: the target itself while it is a plain table, else the base table under its
        view."""
        self._ensure_meta(con, _META_TABLES, ("version_seq",))
        template = f"{spec.name}{TEMPLATE_SUFFIX}"
        cols = ", ".join(f"{quote_ident(c.name)} {c.sql_type}" for c in spec.columns)
        found = set(
            con.execute(
                "SELECT 'view', view_name FROM duckdb_views() WHERE schema_name = 'main' "
                "AND NOT internal AND view_name IN ($a, $b) UNION ALL SELECT 'table', table_name "
                "FROM duckdb_tables() WHERE schema_name = 'main' AND table_name IN ($a, $c, $d)",
                {"a": spec.name, "b": spec.shadow_name, "c": _base_table(spec), "d": template},
            ).fetchall()
        )
        if ("table", template) not in found:
            con.execute(f"CREATE TABLE IF NOT EXISTS {quote_ident(template)} ({cols})")
        has_base, has_view = ("table", _base_table(spec)) in found, ("view", spec.name) in found
        rows_table = _base_table(spec)
        if ("table", spec.name) in found:
            rows_table = spec.name
        elif has_base and has_view:
            pass
        elif not has_base and not has_view and not self._week_tables(con, spec.name):
            # A new target: one plain table, until a swap publishes week tables over it.
            con.execute(f"CREATE TABLE {quote_ident(spec.name)} ({cols})")
            rows_table = spec.name
        else:
            # A file from before the base table (a view over week tables only), or a view
            # dropped by hand: the view over the base table and the live week tables.
            if not has_base:
                con.execute(f"CREATE TABLE {quote_ident(_base_table(spec))} ({cols})")
            self._recreate_view(con, spec, spec.name)
        if ("view", spec.shadow_name) not in found:
            self._recreate_view(con, spec, spec.shadow_name)
        return rows_table

    def _settle(
        self, con: duckdb.DuckDBPyConnection, spec: TableSpec, weeks: Mapping[str, str]
    ) -> None:
        """After a rollback or a release: the target's view over its live week tables `weeks`,
        or, when none is left, its base table renamed to the target's name, so that readers
        query one plain table again."""
        if weeks:
            self._recreate_view(con, spec, spec.name, weeks)
            return
        con.execute(f"DROP VIEW {quote_ident(spec.name)}")
        con.execute(
            f"ALTER TABLE {quote_ident(_base_table(spec))} RENAME TO {quote_ident(spec.name)}"
        )

    def _ensure_meta(
        self,
        con: duckdb.DuckDBPyConnection,
        tables: Mapping[str, tuple[str, ...]] = _COORDINATION_TABLES,
        sequences: tuple[str, ...] = (),
    ) -> None:
        """Create the metadata tables of `tables` and the `sequences` that are missing, and give
        a table from before a column that column. When nothing is missing (every call but a
        file's first) that is one catalog query, in place of a CREATE or ALTER ... IF NOT EXISTS
        statement per table and added column."""
        have: dict[str, set[str]] = {}
        for table, column in con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = $s "
            "UNION ALL SELECT $seq, sequence_name FROM duckdb_sequences() WHERE schema_name = $s",
            {"s": M, "seq": _SEQUENCES},
        ).fetchall():
            have.setdefault(table, set()).add(column)
        if not have:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {M}")
        for seq in sequences:
            if seq not in have.get(_SEQUENCES, ()):
                con.execute(f"CREATE SEQUENCE IF NOT EXISTS {M}.{seq} START 1")
        for table, columns in tables.items():
            if table not in have:
                con.execute(f"CREATE TABLE IF NOT EXISTS {M}.{table} ({', '.join(columns)})")
                continue
            for column in columns:
                if column.split()[0] not in have[table]:
                    con.execute(f"ALTER TABLE {M}.{table} ADD COLUMN IF NOT EXISTS {column}")

    def _recreate_view(
        self,
        con: duckdb.DuckDBPyConnection,
        spec: TableSpec,
        base: str,
        weeks: Mapping[str, str] | None = None,
    ) -> None:
        """The view `base` over its week tables (`weeks`, when the caller knows them; else read
        from the catalog): the target's over its base table too, without the rows of the weeks
        that have a week table; the shadow's over the template."""
        found = self._week_tables(con, base) if weeks is None else weeks
        tables = [table for _, table in sorted(found.items())]
        if base == spec.name:
            body = live_union(spec, tables, hide=sorted(found))
        else:
            body = week_union(spec, [spec.name + TEMPLATE_SUFFIX, *tables])
        con.execute(f"CREATE OR REPLACE VIEW {quote_ident(base)} AS {body}")

    def _create_week(self, con: duckdb.DuckDBPyConnection, spec: TableSpec, name: str) -> None:
        cols = ", ".join(f"{quote_ident(c.name)} {c.sql_type}" for c in spec.columns)
        con.execute(f"CREATE TABLE {quote_ident(name)} ({cols})")

    # -- writes ------------------------------------------------------------------------------

    def replace_partitions(
        self,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        *,
        build: SQL | pd.DataFrame,
        shadow: bool = False,
        plan_id: str | None = None,
        fingerprint: Sequence[str] = (),
    ) -> dict[dt.date, int]:
        """Replace the rows of days [start, end) with the build's output, in one transaction.

        `build` is one SELECT over [$start, $end) or a DataFrame already checked against the
        spec (`lib.frames.check_frame`). Live writes bump each partition's version; shadow
        writes record the live version they were built against, so the swap can tell when the
        live partition changed since. Each write records every day's rows and checksum, and a
        live write with `fingerprint` (the unchanged columns of the table's criteria) the day's
        fingerprint of the key and those columns (`fingerprint_sql`), all from one scan of what
        it wrote: the gates of a later backfill read the target's from there instead of
        scanning it. A shadow is always scanned by its gates.
        """
        # A partition key is parsed as a date before it reaches SQL: a malformed one used to fail
        # with a bare TypeError/AttributeError instead of saying what is wrong.
        start, end = parse_day(start, "start"), parse_day(end, "end")
        if end <= start:
            return {}
        base = spec.shadow_name if shadow else spec.name
        pc = quote_ident(spec.partition_column)
        cols = column_list(spec.column_names)
        is_sql = isinstance(build, str | Mapping)
        source = f"({sql_for(build, 'duckdb')})" if is_sql else _BUILD_VIEW  # type: ignore[arg-type]
        with self.transaction() as con:
            if not is_sql:
                con.register(_BUILD_VIEW, build)
            rows_table = self._ensure(con, spec)
            existing = self._week_tables(con, base)
            weeks = dict(existing)  # with the ones created below: what the view is over
            # Each week goes to its week table: always for the shadow; for the target only
            # when the week has one (a swap published it), else to the table of its other rows
            # (the target itself, or the base table under its view), one piece per run of
            # such weeks.
            pieces: list[tuple[str, dt.date, dt.date]] = []
            for w0, w1 in iso_weeks(start, end):
                if not shadow and week_id(w0) not in existing:
                    table = rows_table
                    if pieces and pieces[-1][0] == table and pieces[-1][2] == w0:
                        pieces[-1] = (table, pieces[-1][1], w1)
                        continue
                else:
                    table = self._week_table(base, w0)
                    if week_id(w0) not in existing:
                        self._create_week(con, spec, table)
                        weeks[week_id(w0)] = table
                pieces.append((table, w0, w1))
            for table, w0, w1 in pieces:
                qt = quote_ident(table)
                # Rows enter that table in key order, so that its zone maps prune a reader's day
                # or key to a row group or two, as in a table loaded in that order.
                order = _key_order(spec) if table == rows_table else ""
                con.execute(f"DELETE FROM {qt} WHERE {pc} >= $s AND {pc} < $e", {"s": w0, "e": w1})
                con.execute(
                    f"INSERT INTO {qt} ({cols}) SELECT {cols} FROM {source} AS build "
                    f"WHERE {pc} >= $start AND {pc} < $end{order}",
                    {"start": w0, "end": w1},
                )
            if weeks != existing:
                self._recreate_view(con, spec, base, weeks)
            # From the tables just written, not the view: planning a view grows with its tables
            # (one day's checksums took 11 ms at 26 week tables and 42 ms at 143).
            written = " UNION ALL ".join(
                f"SELECT {cols} FROM {quote_ident(t)} "
                f"WHERE {pc} >= DATE '{w0}' AND {pc} < DATE '{w1}'"
                for t, w0, w1 in pieces
            )
            days = _days(start, end)
            stats = self._day_stats(
                con, f"({written})", spec, start, end, () if shadow else fingerprint
            )
            sums = {d: stats[d][0] if d in stats else None for d in days}
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            if shadow:
                con.execute(
                    f"DELETE FROM {M}.shadow_log WHERE table_name = $t AND partition_date >= $s "
                    "AND partition_date < $e",
                    {"t": spec.name, "s": start, "e": end},
                )
                # One statement for every day (executemany runs one per row, ~1.5 ms each).
                con.execute(
                    f"INSERT INTO {M}.shadow_log (table_name, partition_date, plan_id, "
                    "base_version, row_count, written_at, checksum) SELECT $t, u.d, $plan, "
                    "coalesce(v.version, 0), u.n, $now, u.c FROM (SELECT unnest($d::DATE[]) AS d, "
                    "unnest($n::BIGINT[]) AS n, unnest($c::VARCHAR[]) AS c) u LEFT JOIN "
                    f"(SELECT partition_date, max(version) AS version FROM {M}.partition_versions "
                    "WHERE table_name = $t GROUP BY ALL) v ON v.partition_date = u.d",
                    {"t": spec.name, "plan": plan_id or "", "now": now, "d": days,
                     "n": [rows_of(sums[d]) for d in days],
                     "c": [sums[d] or EMPTY for d in days]},
                )  # fmt: skip
            else:
                fps = Fingerprints(fingerprint_of(fingerprint), {d: v[1] for d, v in stats.items()})
                self._bump_versions(con, spec, sums, now, fps)
        return {d: rows_of(sums[d]) for d in days}

    def _bump_versions(
        self,
        con: duckdb.DuckDBPyConnection,
        spec: TableSpec,
        sums: Mapping[dt.date, str | None],
        now: dt.datetime,
        fingerprints: Fingerprints | None = None,
    ) -> None:
        """A new version for each day of `sums`, with the rows and checksum it now holds, and
        its fingerprint when `fingerprints` has one (else none is recorded: the gates compute
        it from the rows)."""
        if not sums:
            return
        days = sorted(sums)
        fps = fingerprints or Fingerprints("", {})
        con.execute(
            f"DELETE FROM {M}.partition_versions WHERE table_name = $t "
            "AND partition_date IN (SELECT unnest($days::DATE[]))",
            {"t": spec.name, "days": days},
        )
        # One statement for every day (executemany runs one per row, ~1.5 ms each).
        con.execute(
            f"INSERT INTO {M}.partition_versions (table_name, partition_date, version, "
            "written_at, checksum, row_count, fingerprint, fingerprint_of) SELECT $t, d, "
            f"nextval('{M}.version_seq'), $now, c, n, f::HUGEINT, $of FROM (SELECT "
            "unnest($d::DATE[]) AS d, unnest($c::VARCHAR[]) AS c, unnest($n::BIGINT[]) AS n, "
            "unnest($f::VARCHAR[]) AS f)",
            {"t": spec.name, "now": now, "d": days, "c": [sums[d] or EMPTY for d in days],
             "n": [rows_of(sums[d]) for d in days], **fps.params(days)},
        )  # fmt: skip

    def _counts(
        self,
        con: duckdb.DuckDBPyConnection,
        base: str,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
    ) -> dict[dt.date, int]:
        pc = quote_ident(spec.partition_column)
        out = {d0 + dt.timedelta(days=i): 0 for d0 in [start] for i in range((end - start).days)}
        rows = con.execute(
            f"SELECT {pc}, count(*) FROM {quote_ident(base)} WHERE {pc} >= $s AND {pc} < $e "
            "GROUP BY ALL",
            {"s": start, "e": end},
        ).fetchall()
        for day, n in rows:
            out[day] = n
        return out

    # -- reads for planning and gates ----------------------------------------------------------

    def partition_stats(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> PartitionStats:
        base = spec.shadow_name if shadow else spec.name
        with self.connect(read_only=True) as con:
            exists = self._relation_kind(con, base) is not None
            rows = self._counts(con, base, spec, start, end) if exists else {}
        return PartitionStats(rows=rows, bytes_per_row=spec.bytes_per_row)

    def gate_inputs(self, spec: TableSpec, start: dt.date, end: dt.date, **kw: Any) -> GateInputs:
        """Everything a batch's gates need, in a few set-based queries (see duckdb_gates)."""
        from backfill_assets.lib.warehouse.duckdb_gates import gate_inputs

        return gate_inputs(self, spec, start, end, **kw)

    def checksums(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> dict[dt.date, str]:
        """An order-independent checksum of every column, per partition (hex)."""
        with self.connect(read_only=True) as con:
            base = spec.shadow_name if shadow else spec.name
            return self._checksums(con, quote_ident(base), spec, start, end)

    def _checksums(
        self,
        con: duckdb.DuckDBPyConnection,
        relation: str,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
    ) -> dict[dt.date, str]:
        """Rows and checksum per day of `relation` (SQL: a quoted name or a subquery)."""
        return {d: c for d, (c, _) in self._day_stats(con, relation, spec, start, end).items()}

    def _day_stats(
        self,
        con: duckdb.DuckDBPyConnection,
        relation: str,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        fingerprint: Sequence[str] = (),
    ) -> dict[dt.date, tuple[str, int | None]]:
        """Per day of `relation` that has rows: its rows and checksum ("rows:hex"), and its
        fingerprint of the key and the `fingerprint` columns (None without them), in one scan."""
        pc = quote_ident(spec.partition_column)
        for c in fingerprint:
            if c not in spec.column_names:
                raise WarehouseError(f"fingerprint column {c!r} is not a column of {spec.name}")
        fp = fingerprint_sql(spec, fingerprint) if fingerprint else "NULL"
        rows = con.execute(
            f"SELECT {pc}, count(*), bit_xor(hash({column_list(spec.column_names)})), {fp} "
            f"FROM {relation} WHERE {pc} >= $s AND {pc} < $e GROUP BY ALL",
            {"s": start, "e": end},
        ).fetchall()
        return {day: (f"{n}:{h:016x}", f) for day, n, h, f in rows}

    def partition_versions(
        self, spec: TableSpec, start: dt.date, end: dt.date
    ) -> dict[dt.date, int]:
        with self.connect(read_only=True) as con:
            rows = con.execute(
                f"SELECT partition_date, version FROM {M}.partition_versions WHERE table_name=$t "
                "AND partition_date >= $s AND partition_date < $e",
                {"t": spec.name, "s": start, "e": end},
            ).fetchall()
        return dict(rows)

    def table_rows(self, spec: TableSpec) -> int:
        with self.connect(read_only=True) as con:
            row = con.execute(
                f"SELECT coalesce(sum(row_count), 0) FROM {M}.partition_versions "
                "WHERE table_name = $t",
                {"t": spec.name},
            ).fetchone()
        return int(row[0]) if row else 0

    def shadow_log(self, spec: TableSpec, start: dt.date, end: dt.date) -> dict[dt.date, dict]:
        with self.connect(read_only=True) as con:
            rows = con.execute(
                f"SELECT partition_date, plan_id, base_version, row_count, written_at "
                f"FROM {M}.shadow_log WHERE table_name=$t AND partition_date >= $s "
                "AND partition_date < $e",
                {"t": spec.name, "s": start, "e": end},
            ).fetchall()
        return {
            r[0]: {"plan_id": r[1], "base_version": r[2], "rows": r[3], "written_at": r[4]}
            for r in rows
        }

    # -- swap and rollback ---------------------------------------------------------------------

    def swap_state(self, spec: TableSpec, plan_id: str) -> str | None:
        with self.connect(read_only=True) as con:
            if self._relation_kind(con, spec.name) is None:
                return None
            row = con.execute(
                f"SELECT min(state) FROM {M}.swap_log WHERE table_name=$t AND plan_id=$p",
                {"t": spec.name, "p": plan_id},
            ).fetchone()
        return row[0] if row else None

    def swap(
        self,
        spec: TableSpec,
        plan_id: str,
        days: list[dt.date],
        companions: Sequence[Companion] = (),
        details: Mapping[str, Any] | None = None,
    ) -> SwapResult:
        """Move the plan's shadow weeks into the target, keeping the replaced weeks as backup,
        and publish each companion (its shadow renamed to its live, the old live kept as the
        plan's backup) in the same transaction, which also records the plan swapped (with
        `details`, what the caller keeps with the swap)."""
        validate_ident(plan_id, "plan id")
        companions = check_companions(spec, companions)
        t0 = time.perf_counter()
        if not days:
            raise SwapRefused("the plan has no partitions to swap")
        days = sorted({parse_day(d, "partition") for d in days})
        with self.transaction(checkpoint=False) as con:
            rows_table = self._ensure(con, spec)
            state = self._swap_log_state(con, spec.name, plan_id)
            if state == "swapped":
                return SwapResult(plan_id, "already_swapped", {}, 0, time.perf_counter() - t0)
            if state is not None:
                raise SwapRefused(
                    f"plan {plan_id} was already swapped and then {state}; plan a new backfill "
                    "to write this range again"
                )
            holder = self._active_plan(con, spec.name)
            if holder != plan_id:
                raise SwapRefused(
                    f"plan {plan_id} does not hold {spec.name}"
                    + (f" (plan {holder} does)" if holder else " (no plan does)")
                    + "; approve it first, and only one plan per table at a time"
                )
            ins = self._check_versions(con, spec, plan_id, days)
            outs = self._recorded(con, spec, days)
            by_week: dict[str, list[dt.date]] = defaultdict(list)
            for d in days:
                by_week[week_id(d)].append(d)
            weeks = self._week_tables_of(con, spec.name, spec.shadow_name)
            live, shadow = weeks[spec.name], weeks[spec.shadow_name]
            if rows_table == spec.name:
                # The target becomes a view over its rows, now the base table, and the week
                # tables renamed in below; the view hides the base table's rows of those weeks.
                con.execute(
                    f"ALTER TABLE {quote_ident(spec.name)} RENAME TO "
                    f"{quote_ident(_base_table(spec))}"
                )
            backup_base = self._backup_base(spec, plan_id)
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            result: dict[dt.date, PartitionMove] = {}
            logged: list[tuple[str, dt.date, dt.date, bool]] = []  # swap_log rows
            for week, wdays in sorted(by_week.items()):
                r0, r1 = wdays[0], wdays[-1] + dt.timedelta(days=1)
                if (r1 - r0).days != len(wdays):
                    raise SwapRefused(f"plan days in week {week} are not contiguous: {wdays}")
                if week not in shadow:
                    raise SwapRefused(
                        f"shadow week {week} of {spec.name} does not exist; run the plan's batch "
                        "for it first"
                    )
                sh = quote_ident(shadow[week])
                # A week without a week table lives in the base table: the view hides its rows
                # there once the shadow is renamed in, and they are the week's backup.
                # Checksums were recorded when the rows were written; a file written before
                # that have them computed here, once.
                week_live = live.get(week, _base_table(spec))
                self._fill(con, ins, shadow[week], spec, wdays)
                self._fill(con, outs, week_live, spec, wdays)
                if len(wdays) < 7:
                    # Only the plan's days come from the shadow; the rest of a partial week
                    # stays as live.
                    self._carry_outside(con, spec, shadow[week], week_live, week, r0, r1)
                if week in live:
                    backup = self._week_table(backup_base, r0)
                    con.execute(
                        f"ALTER TABLE {quote_ident(live[week])} RENAME TO {quote_ident(backup)}"
                    )
                con.execute(
                    f"ALTER TABLE {sh} RENAME TO {quote_ident(self._week_table(spec.name, r0))}"
                )
                logged.append((week, r0, r1, week in live))
                for d in wdays:
                    result[d] = swap_move(ins.get(d), outs.get(d))
            # One statement each (executemany runs one per row, ~1.5 ms each).
            weeks, starts, ends, had = (list(c) for c in zip(*logged, strict=True))
            con.execute(
                f"INSERT INTO {M}.swap_log SELECT $t, $p, unnest($w::VARCHAR[]), "
                "unnest($s::DATE[]), unnest($e::DATE[]), unnest($h::BOOLEAN[]), 'swapped', $now",
                {"t": spec.name, "p": plan_id, "w": weeks, "s": starts, "e": ends, "h": had,
                 "now": now},
            )  # fmt: skip
            moves = sorted(result.items())
            con.execute(
                f"INSERT INTO {M}.swap_days SELECT $t, $p, unnest($d::DATE[]), "
                "unnest($ci::VARCHAR[]), unnest($co::VARCHAR[])",
                {"t": spec.name, "p": plan_id, "d": [d for d, _ in moves],
                 "ci": [m.checksum_in for _, m in moves], "co": [m.checksum_out for _, m in moves]},
            )  # fmt: skip
            # No fingerprints: the gates of a later plan over these days scan them.
            self._bump_versions(con, spec, {d: m.checksum_in for d, m in result.items()}, now)
            # The target's view names its week tables: it changes only when a week gets one
            # (each replaced week's name now holds its shadow). Recreating it binds every
            # table it names.
            if any(week not in live for week in by_week):
                self._recreate_view(con, spec, spec.name)
            left = {w: name for w, name in shadow.items() if w not in by_week}
            self._recreate_view(con, spec, spec.shadow_name, left)
            published = self._publish_companions(con, spec, plan_id, companions)
            self._set_status(con, spec.name, plan_id, SWAPPED, details)
        return SwapResult(
            plan_id, "swapped", result, len(by_week), time.perf_counter() - t0, published
        )

    def _publish_companions(
        self,
        con: duckdb.DuckDBPyConnection,
        spec: TableSpec,
        plan_id: str,
        companions: Sequence[Companion],
    ) -> tuple[str, ...]:
        """In the swap's transaction: each companion's live (if any) renamed to its backup, its
        shadow renamed to live, recorded in swap_companions. Refuses before renaming anything
        when a shadow is missing."""
        if not companions:
            return ()
        moves = plan_companions(plan_id, companions, lambda n: self._relation_kind(con, n), "main.")
        for c, backup, had_live in moves:
            if had_live:
                con.execute(f"ALTER TABLE {quote_ident(c.live)} RENAME TO {quote_ident(backup)}")
            con.execute(f"ALTER TABLE {quote_ident(c.shadow)} RENAME TO {quote_ident(c.live)}")
        con.execute(
            f"INSERT INTO {M}.swap_companions SELECT $t, $p, unnest($l::VARCHAR[]), "
            "unnest($s::VARCHAR[]), unnest($b::VARCHAR[]), unnest($h::BOOLEAN[])",
            {"t": spec.name, "p": plan_id, "l": [c.live for c, _, _ in moves],
             "s": [c.shadow for c, _, _ in moves], "b": [b for _, b, _ in moves],
             "h": [h for _, _, h in moves]},
        )  # fmt: skip
        return tuple(c.live for c, _, _ in moves)

    def _companion_moves(
        self, con: duckdb.DuckDBPyConnection, spec: TableSpec, plan_id: str
    ) -> list[tuple[str, str, bool]]:
        """The companions a plan's swap published, (live, backup, had_live); refuses, before the
        rollback changes anything, when a backup it needs is missing."""
        rows = con.execute(
            f"SELECT live, backup, had_live FROM {M}.swap_companions "
            "WHERE table_name = $t AND plan_id = $p ORDER BY live",
            {"t": spec.name, "p": plan_id},
        ).fetchall()
        for live, backup, had_live in rows:
            if had_live and self._relation_kind(con, backup) != "table":
                raise SwapRefused(
                    f"backup main.{backup} of companion {live} for plan {plan_id} is missing; "
                    "nothing was rolled back"
                )
            kind = self._relation_kind(con, live)
            if kind not in (None, "table"):
                raise SwapRefused(
                    f"companion main.{live} is now a {kind}, not the table plan {plan_id} "
                    "published; nothing was rolled back"
                )
        return [(live, backup, bool(had_live)) for live, backup, had_live in rows]

    def _restore_companions(
        self, con: duckdb.DuckDBPyConnection, moves: list[tuple[str, str, bool]]
    ) -> tuple[str, ...]:
        for live, backup, had_live in moves:
            con.execute(f"DROP TABLE IF EXISTS {quote_ident(live)}")
            if had_live:
                con.execute(f"ALTER TABLE {quote_ident(backup)} RENAME TO {quote_ident(live)}")
        return tuple(live for live, _, _ in moves)

    def _carry_outside(
        self,
        con: duckdb.DuckDBPyConnection,
        spec: TableSpec,
        into: str,
        source: str | None,
        week: str,
        r0: dt.date,
        r1: dt.date,
    ) -> None:
        """Replace the days of `week` outside [r0, r1) in table `into` with those of `source`
        (or with none): the only rows a swap or a rollback copies, at most 12 days."""
        pc = quote_ident(spec.partition_column)
        cols = column_list(spec.column_names)
        monday = _monday_of(week)
        outside = f"NOT ({pc} >= $s AND {pc} < $e) AND {pc} >= $m AND {pc} < $n"
        bounds = {"s": r0, "e": r1, "m": monday, "n": monday + _WEEK}
        con.execute(f"DELETE FROM {quote_ident(into)} WHERE {outside}", bounds)
        if source is not None:
            con.execute(
                f"INSERT INTO {quote_ident(into)} ({cols}) SELECT {cols} FROM "
                f"{quote_ident(source)} WHERE {outside}",
                bounds,
            )

    def _check_versions(
        self, con: duckdb.DuckDBPyConnection, spec: TableSpec, plan_id: str, days: list[dt.date]
    ) -> dict[dt.date, str]:
        """Refuse unless every day's shadow was built by the plan against the live version still
        in place; return the checksum each day's shadow was recorded with (if it was)."""
        rows = con.execute(
            f"SELECT s.partition_date, s.plan_id, s.base_version, coalesce(v.version, 0), "
            f"s.checksum FROM {M}.shadow_log s LEFT JOIN {M}.partition_versions v "
            "ON v.table_name = s.table_name AND v.partition_date = s.partition_date "
            "WHERE s.table_name = $t AND s.partition_date >= $a AND s.partition_date <= $b",
            {"t": spec.name, "a": days[0], "b": days[-1]},
        ).fetchall()
        seen = {r[0]: r for r in rows}
        missing = [d.isoformat() for d in days if d not in seen or seen[d][1] != plan_id]
        if missing:
            raise SwapRefused(
                f"the shadow of {spec.name} was not built by plan {plan_id} for "
                f"{_fmt_days(missing)}; run those batches of the plan, then swap again"
            )
        stale = [d.isoformat() for d in days if seen[d][2] != seen[d][3]]
        if stale:
            raise SwapRefused(
                f"{spec.name} was written after its shadow was built for {_fmt_days(stale)} "
                "(e.g. by the daily run); re-run those batches so the gates see the newer data, "
                "then swap again"
            )
        return {d: seen[d][4] for d in days if seen[d][4]}

    def _recorded(
        self, con: duckdb.DuckDBPyConnection, spec: TableSpec, days: list[dt.date]
    ) -> dict[dt.date, str]:
        """The checksum each live day was recorded with when it was written (if it was)."""
        rows = con.execute(
            f"SELECT partition_date, checksum FROM {M}.partition_versions WHERE table_name = $t "
            "AND partition_date IN (SELECT unnest($days::DATE[])) AND checksum IS NOT NULL",
            {"t": spec.name, "days": days},
        ).fetchall()
        return dict(rows)

    def _fill(
        self,
        con: duckdb.DuckDBPyConnection,
        recorded: dict[dt.date, str],
        relation: str,
        spec: TableSpec,
        days: list[dt.date],
    ) -> None:
        """Compute the checksums `recorded` lacks for `days` from `relation` (rows written by a
        version of this package that did not record them)."""
        lacking = [d for d in days if d not in recorded]
        if lacking:
            sums = self._checksums(con, quote_ident(relation), spec, lacking[0], lacking[-1] + _DAY)
            recorded.update({d: sums.get(d, EMPTY) for d in lacking})

    def rollback(self, spec: TableSpec, plan_id: str) -> SwapResult:
        """Put the backed-up weeks back; days of those weeks outside the plan keep live data."""
        validate_ident(plan_id, "plan id")
        t0 = time.perf_counter()
        with self.transaction(checkpoint=False) as con:
            self._ensure(con, spec)
            log = con.execute(
                f"SELECT week, range_start, range_end, had_live, state FROM {M}.swap_log "
                "WHERE table_name=$t AND plan_id=$p ORDER BY week",
                {"t": spec.name, "p": plan_id},
            ).fetchall()
            if not log:
                raise SwapRefused(
                    f"plan {plan_id} was never swapped into {spec.name}; nothing to roll back"
                )
            states = {r[4] for r in log}
            if states == {"rolled_back"}:
                return SwapResult(plan_id, "already_rolled_back", {}, 0, time.perf_counter() - t0)
            if states != {"swapped"}:
                raise SwapRefused(
                    f"plan {plan_id} cannot be rolled back: its backup is {sorted(states)}"
                )
            later = con.execute(
                f"SELECT DISTINCT o.plan_id FROM {M}.swap_log o JOIN {M}.swap_log m "
                "ON o.table_name = m.table_name AND o.week = m.week "
                "WHERE m.table_name = $t AND m.plan_id = $p AND o.plan_id <> $p "
                "AND o.changed_at >= m.changed_at AND o.state IN ('swapped', 'released') "
                "ORDER BY 1",
                {"t": spec.name, "p": plan_id},
            ).fetchall()
            if later:
                # Restoring this backup would undo the later swap's rows and bring back rows
                # the later plan replaced: the target would match neither state.
                others = ", ".join(r[0] for r in later)
                raise SwapRefused(
                    f"plan {plan_id} cannot be rolled back: plan {others} swapped the same weeks "
                    f"of {spec.name} after it; roll that plan back first (rollbacks go in reverse "
                    "swap order)"
                )
            companion_moves = self._companion_moves(con, spec, plan_id)
            backup_base = self._backup_base(spec, plan_id)
            weeks = self._week_tables_of(con, spec.name, backup_base)
            live, backup = weeks[spec.name], weeks[backup_base]
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            result: dict[dt.date, PartitionMove] = {}
            dropped = False
            days = [d for _, r0, r1, _, _ in log for d in _days(r0, r1)]
            # What each day held before the swap (recorded by it) and holds now (recorded by
            # its last write); computed only for files from before they were recorded.
            restored = dict(
                con.execute(
                    f"SELECT partition_date, checksum_out FROM {M}.swap_days "
                    "WHERE table_name = $t AND plan_id = $p AND checksum_out IS NOT NULL",
                    {"t": spec.name, "p": plan_id},
                ).fetchall()
            )
            current = self._recorded(con, spec, days)
            for week, r0, r1, had_live, _ in log:
                if had_live and week not in backup:
                    raise SwapRefused(f"backup of week {week} for plan {plan_id} is missing")
                wdays = _days(r0, r1)
                cur = live.get(week)
                if cur:
                    self._fill(con, current, cur, spec, wdays)
                if had_live:
                    bk = quote_ident(backup[week])
                    self._fill(con, restored, backup[week], spec, wdays)
                    # Days of the week outside the plan may have been written since the swap.
                    if len(wdays) < 7:
                        self._carry_outside(con, spec, backup[week], cur, week, r0, r1)
                    if cur:
                        con.execute(f"DROP TABLE {quote_ident(cur)}")
                    con.execute(
                        f"ALTER TABLE {bk} RENAME TO "
                        f"{quote_ident(self._week_table(spec.name, _monday_of(week)))}"
                    )
                elif cur:
                    # The week lived in the base table (or nowhere): its rows there, hidden
                    # since the swap, come back when its week table goes. Days outside the plan
                    # are carried into the base table first, as they are now.
                    self._fill(con, restored, _base_table(spec), spec, wdays)
                    if len(wdays) < 7:
                        self._carry_outside(con, spec, _base_table(spec), cur, week, r0, r1)
                    con.execute(f"DROP TABLE {quote_ident(cur)}")
                    dropped = True
                for d in wdays:
                    result[d] = swap_move(restored.get(d), current.get(d))
            self._bump_versions(con, spec, {d: m.checksum_in for d, m in result.items()}, now)
            con.execute(
                f"UPDATE {M}.swap_log SET state='rolled_back', changed_at=$now "
                "WHERE table_name=$t AND plan_id=$p",
                {"t": spec.name, "p": plan_id, "now": now},
            )
            self._free_plan(con, spec.name, plan_id)
            self._set_status(con, spec.name, plan_id, ROLLED_BACK)
            # A backup takes its week's name, so the view changes only when a week table went.
            if dropped:
                self._settle(con, spec, self._week_tables(con, spec.name))
            restored = self._restore_companions(con, companion_moves)
        return SwapResult(
            plan_id, "rolled_back", result, len(log), time.perf_counter() - t0, restored=restored
        )

    # -- coordination: the writer lease and the plan that holds each table ---------------------

    def _lease_row(self, con: duckdb.DuckDBPyConnection, table: str) -> LeaseHolder | None:
        cur = con.execute(
            f"SELECT * FROM {M}.writer_lease WHERE table_name = $t AND holder_id IS NOT NULL",
            {"t": table},
        )
        row = cur.fetchone()
        if row is None:
            return None
        return lease_holder_from([d[0] for d in cur.description or ()], row)

    def claim_writer(
        self, table: str, holder: LeaseHolder, *, takeover: str | None = None
    ) -> LeaseHolder:
        """Take `table`'s writer lease (or another lease: base.lease_name) if it is free,
        already ours, or held by `takeover` (a holder the caller found dead); return whoever
        holds it afterwards."""
        lease_name(table)
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        with self.transaction() as con:
            self._ensure_meta(con)
            current = self._lease_row(con, table)
            if current is not None and current.holder_id not in (holder.holder_id, takeover):
                return current
            con.execute(
                f"INSERT OR REPLACE INTO {M}.writer_lease VALUES ($t, $h, $r, $j, $p, $host, "
                "$pid, $at, $process)",
                {
                    "process": holder.process,
                    "t": table,
                    "h": holder.holder_id,
                    "r": holder.role,
                    "j": holder.job_name,
                    "p": holder.plan_id,
                    "host": holder.host,
                    "pid": holder.pid,
                    "at": current.claimed_at
                    if current is not None and current.holder_id == holder.holder_id
                    else now,
                },
            )
            return self._lease_row(con, table) or holder

    def release_writer(self, table: str, holder_id: str) -> bool:
        """Free `table`'s writer lease if `holder_id` holds it; True if it did."""
        with self.transaction() as con:
            self._ensure_meta(con)
            done = con.execute(
                f"DELETE FROM {M}.writer_lease WHERE table_name = $t AND holder_id = $h "
                "RETURNING 1",
                {"t": table, "h": holder_id},
            ).fetchall()
        return bool(done)

    def writer(self, table: str) -> LeaseHolder | None:
        """Who holds `table`'s writer lease, if anyone."""
        try:
            with self.connect(read_only=True) as con:
                if not self._has_table(con, M, "writer_lease"):
                    return None
                return self._lease_row(con, table)
        except WarehouseMissing:
            return None

    def _active_plan(self, con: duckdb.DuckDBPyConnection, table: str) -> str | None:
        """The plan holding `table`; the caller has ensured the metadata (`_ensure_meta`, or
        `_ensure`, which covers it), once per transaction."""
        row = con.execute(
            f"SELECT plan_id FROM {M}.plan_claims WHERE table_name = $t AND plan_id IS NOT NULL",
            {"t": table},
        ).fetchone()
        return row[0] if row else None

    def claim_plan(
        self, table: str, plan_id: str, *, plan_json: str | None = None, approved_by: str = ""
    ) -> str:
        """Make `plan_id` the plan that holds `table`, if none does (compare-and-set); return
        the plan that holds it afterwards. Approvals racing for one table: exactly one wins.
        With `plan_json`, the plan is kept as approved in the same transaction (the state of
        record, records.PlanBook); a plan the warehouse saw through is refused."""
        validate_ident(plan_id, "plan id")
        validate_ident(table, "table name")
        with self.transaction() as con:
            if plan_json is None:
                self._ensure_meta(con)
            else:  # the swap log too: a plan claimed before it was kept may have been swapped
                self._ensure_meta(con, _META_TABLES, ("version_seq",))
                self._refuse_closed(con, plan_id)
            holder = self._active_plan(con, table)
            if holder is None:
                con.execute(
                    f"INSERT OR REPLACE INTO {M}.plan_claims VALUES ($t, $p, $at)",
                    {"t": table, "p": plan_id, "at": dt.datetime.now(dt.UTC).replace(tzinfo=None)},
                )
                holder = plan_id
            if holder == plan_id and plan_json is not None:
                swapped = self._swap_log_state(con, table, plan_id) == SWAPPED
                self._record_plan(con, table, plan_id, plan_json, approved_by, swapped)
            return holder

    def _swap_log_state(self, con: duckdb.DuckDBPyConnection, table: str, plan_id: str) -> Any:
        """The plan's state in the swap log (None: never swapped)."""
        return con.execute(
            f"SELECT min(state) FROM {M}.swap_log WHERE table_name=$t AND plan_id=$p",
            {"t": table, "p": plan_id},
        ).fetchone()[0]  # type: ignore[index]

    def release_plan(self, table: str, plan_id: str) -> bool:
        """Free `table` if `plan_id` holds it (rolled back, released or abandoned)."""
        with self.transaction() as con:
            self._ensure_meta(con)
            return self._free_plan(con, table, plan_id)

    def _free_plan(self, con: duckdb.DuckDBPyConnection, table: str, plan_id: str) -> bool:
        """Free `table` if `plan_id` holds it; the caller has ensured the metadata."""
        done = con.execute(
            f"DELETE FROM {M}.plan_claims WHERE table_name = $t AND plan_id = $p RETURNING 1",
            {"t": table, "p": plan_id},
        ).fetchall()
        return bool(done)

    def active_plan(self, table: str) -> str | None:
        try:
            with self.connect(read_only=True) as con:
                if not self._has_table(con, M, "plan_claims"):
                    return None
                row = con.execute(
                    f"SELECT plan_id FROM {M}.plan_claims WHERE table_name = $t",
                    {"t": table},
                ).fetchone()
        except WarehouseMissing:
            return None
        return row[0] if row else None

    def _has_table(self, con: duckdb.DuckDBPyConnection, schema: str, name: str) -> bool:
        return bool(
            con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE schema_name = $s AND table_name = $n",
                {"s": schema, "n": name},
            ).fetchone()[0]  # type: ignore[index]
        )

    # -- plain tables: sources and reference data (not backfillable, no shadow) ----------------

    def replace_plain_partitions(
        self,
        table: str,
        columns: list[tuple[str, str]],
        partition_column: str,
        select_sql: str | pd.DataFrame,
        start: dt.date,
        end: dt.date,
        params: Mapping[str, Any] | None = None,
    ) -> int:
        """Replace days [start, end) of a plain table (e.g. a landed source) atomically: a
        SELECT run once per day with `$day` bound, or a DataFrame of those days."""
        qt, pc = quote_ident(table), quote_ident(partition_column)
        ddl = ", ".join(f"{quote_ident(n)} {t}" for n, t in columns)
        names = column_list([n for n, _ in columns])
        with self.transaction() as con:
            con.execute(f"CREATE TABLE IF NOT EXISTS {qt} ({ddl})")
            con.execute(f"DELETE FROM {qt} WHERE {pc} >= $s AND {pc} < $e", {"s": start, "e": end})
            if isinstance(select_sql, str):
                for i in range((end - start).days):
                    day = start + dt.timedelta(days=i)
                    con.execute(
                        f"INSERT INTO {qt} ({names}) SELECT {names} FROM ({select_sql}) AS src",
                        {**(params or {}), "day": day},
                    )
            else:
                con.register(_BUILD_VIEW, select_sql)
                con.execute(f"INSERT INTO {qt} ({names}) SELECT {names} FROM {_BUILD_VIEW}")
            row = con.execute(
                f"SELECT count(*) FROM {qt} WHERE {pc} >= $s AND {pc} < $e",
                {"s": start, "e": end},
            ).fetchone()
        return int(row[0]) if row else 0

    def replace_reference_table(
        self, table: str, columns: list[tuple[str, str]], rows: list[tuple]
    ) -> None:
        """Replace a small reference table (e.g. FX rates) in one transaction."""
        qt = quote_ident(table)
        ddl = ", ".join(f"{quote_ident(n)} {t}" for n, t in columns)
        marks = ", ".join("?" for _ in columns)
        with self.transaction() as con:
            con.execute(f"CREATE OR REPLACE TABLE {qt} ({ddl})")
            if rows:
                con.executemany(f"INSERT INTO {qt} VALUES ({marks})", rows)

    def release_backup(self, spec: TableSpec, plan_id: str) -> int:
        """Drop a swapped plan's backup weeks; after this the plan can no longer roll back.

        The plan's weeks then move from their week tables into the base table (its rows of
        them, the swap's backup, go), in the same transaction: readers of the view see the same
        rows, through one table again. This copies the plan's range, once, outside the swap."""
        validate_ident(plan_id, "plan id")
        with self.transaction() as con:
            self._ensure(con, spec)
            state = self._swap_log_state(con, spec.name, plan_id)
            if state is None:
                raise SwapRefused(
                    f"plan {plan_id} has no backup in {spec.name}: it was never swapped"
                )
            backup = self._week_tables(con, self._backup_base(spec, plan_id))
            for name in backup.values():
                con.execute(f"DROP TABLE {quote_ident(name)}")
            released = len(backup)
            self._free_plan(con, spec.name, plan_id)
            if state == "swapped":
                # The companions' backups (a rolled-back plan's were renamed back to live).
                for (name,) in con.execute(
                    f"SELECT backup FROM {M}.swap_companions WHERE table_name=$t AND plan_id=$p "
                    "AND had_live",
                    {"t": spec.name, "p": plan_id},
                ).fetchall():
                    con.execute(f"DROP TABLE IF EXISTS {quote_ident(name)}")
                con.execute(
                    f"UPDATE {M}.swap_log SET state='released', changed_at=$now "
                    "WHERE table_name=$t AND plan_id=$p",
                    {
                        "t": spec.name,
                        "p": plan_id,
                        "now": dt.datetime.now(dt.UTC).replace(tzinfo=None),
                    },
                )
                released += self._fold(con, spec, plan_id)
                self._set_status(con, spec.name, plan_id, RELEASED)
        with self.connect() as con:
            con.execute("CHECKPOINT")
        return released

    def _fold(self, con: duckdb.DuckDBPyConnection, spec: TableSpec, plan_id: str) -> int:
        """Move the live week tables of a released plan's weeks into the base table; the number
        of weeks whose backup was there (rows the view hid since the swap, now deleted)."""
        weeks = {
            w
            for (w,) in con.execute(
                f"SELECT week FROM {M}.swap_log WHERE table_name = $t AND plan_id = $p",
                {"t": spec.name, "p": plan_id},
            ).fetchall()
        }
        live = self._week_tables(con, spec.name)
        folded = sorted(w for w in weeks if w in live)
        if not folded:
            return 0
        backups = 0
        base = quote_ident(_base_table(spec))
        pc = quote_ident(spec.partition_column)
        cols = column_list(spec.column_names)
        for week in folded:
            monday = _monday_of(week)
            (deleted,) = con.execute(
                f"DELETE FROM {base} WHERE {pc} >= $m AND {pc} < $n",
                {"m": monday, "n": monday + _WEEK},
            ).fetchone()  # type: ignore[misc]
            backups += deleted > 0
            con.execute(
                f"INSERT INTO {base} ({cols}) SELECT {cols} FROM {quote_ident(live[week])}"
                + _key_order(spec)
            )
            con.execute(f"DROP TABLE {quote_ident(live[week])}")
        self._settle(con, spec, {w: t for w, t in live.items() if w not in folded})
        return backups

    def drop_shadow(self, spec: TableSpec, plan_id: str | None = None) -> int:
        """Drop every shadow week and its build log; with `plan_id` (an abandoned plan), free
        the table from that plan in the same transaction."""
        with self.transaction() as con:
            self._ensure(con, spec)
            if plan_id is not None:
                self._free_plan(con, spec.name, plan_id)
            return self._drop_shadow(con, spec)

    def _drop_shadow(self, con: duckdb.DuckDBPyConnection, spec: TableSpec) -> int:
        tables = self._week_tables(con, spec.shadow_name)
        for name in tables.values():
            con.execute(f"DROP TABLE {quote_ident(name)}")
        con.execute(f"DELETE FROM {M}.shadow_log WHERE table_name=$t", {"t": spec.name})
        self._recreate_view(con, spec, spec.shadow_name)
        return len(tables)

    def abandon(self, spec: TableSpec, plan_id: str) -> int:
        """Give up a plan that was not swapped, in one transaction: its shadow weeks dropped
        (if it holds the table), the table freed, the plan recorded abandoned. Refuses
        (SwapRefused, nothing changed) a plan that was swapped or is over. The shadow weeks
        dropped."""
        validate_ident(plan_id, "plan id")
        with self.transaction() as con:
            self._ensure(con, spec)
            refuse_abandon(plan_id, spec.name, self._swap_log_state(con, spec.name, plan_id),
                           self._plan_row(con, plan_id))  # fmt: skip
            dropped = 0
            if self._active_plan(con, spec.name) == plan_id:
                self._free_plan(con, spec.name, plan_id)
                dropped = self._drop_shadow(con, spec)
            self._set_status(con, spec.name, plan_id, ABANDONED)
        return dropped

    def swap_moves(self, table: str, plan_id: str) -> dict[dt.date, PartitionMove]:
        """What the plan's swap put into each partition and took out (rows and checksums), as
        it recorded them; empty if it was never swapped."""
        validate_ident(plan_id, "plan id")
        with self._meta_reader() as con:
            if con is None:
                return {}
            rows = con.execute(
                f"SELECT partition_date, checksum_in, checksum_out FROM {M}.swap_days "
                "WHERE table_name = $t AND plan_id = $p ORDER BY 1",
                {"t": table, "p": plan_id},
            ).fetchall()
        return {d: swap_move(ci, co) for d, ci, co in rows}

    def build_problem(self, spec: TableSpec, build: SQL) -> str | None:
        """Builds are written in DuckDB's dialect: only SQL given for another dialect alone can
        fail to transpile (raised by `sql_for`). Nothing is opened: the file may be held."""
        sql_for(build, "duckdb")
        return None

    def live_week_count(self, spec: TableSpec) -> int:
        with self.connect(read_only=True) as con:
            return len(self._week_tables(con, spec.name))


def _unwritable_reason(msg: str) -> str | None:
    low = msg.lower()
    if "no space left" in low or "disk full" in low:
        return "its disk is full; free space (or move the file) and run the command again"
    if "read-only" in low or "read only" in low or "permission denied" in low:
        return "it cannot be written (read-only); make it writable and run the command again"
    return None


_DAY = dt.timedelta(days=1)
_WEEK = dt.timedelta(weeks=1)


def _days(start: dt.date, end: dt.date) -> list[dt.date]:
    return [start + dt.timedelta(days=i) for i in range((end - start).days)]


def _base_table(spec: TableSpec) -> str:
    return f"{spec.name}{BASE_SUFFIX}"


def _key_order(spec: TableSpec) -> str:
    return f" ORDER BY {column_list((spec.partition_column, *spec.primary_key))}"


def live_union(spec: TableSpec, tables: Sequence[str], hide: Sequence[str]) -> str:
    """The target's view body: its base table without the rows of the weeks `hide` (the weeks
    that have a week table; runs of consecutive weeks are one range), then `tables`."""
    pc = quote_ident(spec.partition_column)
    ranges: list[list[dt.date]] = []
    for week in sorted(hide):
        monday = _monday_of(week)
        if ranges and ranges[-1][1] == monday:
            ranges[-1][1] = monday + _WEEK
        else:
            ranges.append([monday, monday + _WEEK])
    base = f"SELECT {column_list(spec.column_names)} FROM {quote_ident(_base_table(spec))}"
    if ranges:
        hidden = " OR ".join(f"({pc} >= DATE '{a}' AND {pc} < DATE '{b}')" for a, b in ranges)
        base += f" WHERE NOT ({hidden})"
    return " UNION ALL ".join([base, *(week_union(spec, [t]) for t in tables)])


def week_union(spec: TableSpec, tables: Sequence[str]) -> str:
    """Tables as one query with the spec's columns: the view's body, and (in parentheses) the
    relation the writes and the gates read their own week tables through."""
    cols = column_list(spec.column_names)
    return " UNION ALL ".join(f"SELECT {cols} FROM {quote_ident(t)}" for t in tables)


def fingerprint_sql(spec: TableSpec, unchanged: Sequence[str]) -> str:
    """The aggregate of a day's fingerprint of the key and the `unchanged` columns, which the
    gates compare between the shadow and the target: the sum of every row's hash, as HUGEINT.
    A sum, not a XOR: an identical pair of rows would cancel out of a XOR, so equal
    fingerprints say the two days hold the same (key, unchanged columns) rows, each as often."""
    return f"sum(hash({column_list((*spec.primary_key, *unchanged))})::HUGEINT)"


def fingerprint_of(unchanged: Sequence[str]) -> str:
    """What a recorded fingerprint covers (beside the key): its unchanged columns, in order."""
    return ",".join(unchanged)


def _fmt_days(days: list[str]) -> str:
    return ", ".join(days[:10]) + (f" and {len(days) - 10} more" if len(days) > 10 else "")


@dataclass(frozen=True)
class Fingerprints:
    """Per-day fingerprints (`fingerprint_sql`) of the key and the columns `of` names, as a live
    write records them: None for a day without rows."""

    of: str
    by_day: Mapping[dt.date, int | None]

    def params(self, days: Sequence[dt.date]) -> dict[str, Any]:
        """The statement parameters `$f` (per day, as text: HUGEINT does not bind from Python)
        and `$of` (NULL when nothing was fingerprinted)."""
        if not self.of:
            return {"f": [None] * len(days), "of": None}
        values = [self.by_day.get(d) for d in days]
        return {"f": [None if v is None else str(v) for v in values], "of": self.of}
