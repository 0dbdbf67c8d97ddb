"""PostgreSQL: the metadata tables of `backfill_meta`, created once per database, and each day's
version, rows and checksum."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.dates import iso_weeks
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import (
    EMPTY,
    PartitionMove,
    rows_of,
)
from backfill_assets.lib.warehouse.postgres.connection import (
    Connection,
    M,
    PostgresConnection,
    _x,
    _xm,
)
from backfill_assets.lib.warehouse.postgres.idents import ident

# The row hash of checksums and fingerprints, XORed over a partition (order-independent): each
# column's own hash function, faster than hashing the row's text.
ROW_HASH = "hash_record_extended({cols}, 0)"
# Types whose values hash_record_extended can hash (they have a hash operator class); any other
# column (json, xml, geometric types, ...) is hashed as its text.
_HASHABLE_TYPES = (
    "BIGINT INT8 INTEGER INT INT4 SMALLINT INT2 TINYINT HUGEINT DECIMAL NUMERIC REAL FLOAT FLOAT4 "
    "FLOAT8 DOUBLE TEXT VARCHAR CHAR STRING DATE TIMESTAMP TIMESTAMPTZ TIME TIMETZ INTERVAL "
    "BOOLEAN BOOL UUID BYTEA BLOB JSONB"
)
_HASHABLE = frozenset(_HASHABLE_TYPES.split())


def base_type(spec: TableSpec, column: str) -> str:
    """The type name of `column` without its size or qualifiers (DECIMAL(12,2) -> DECIMAL)."""
    sql_type = next((c.sql_type for c in spec.columns if c.name == column), "")
    return sql_type.split("(")[0].split()[0].upper() if sql_type.strip() else ""


def hashable(spec: TableSpec, column: str, prefix: str = "") -> str:
    """`column` as a row hash takes it: itself, or its text when its type has no hash."""
    ref = f"{prefix}{ident(column)}"
    return ref if base_type(spec, column) in _HASHABLE else f"({ref})::text"


def _row_hash(spec: TableSpec, columns: Sequence[str], prefix: str = "") -> str:
    cols = ", ".join(hashable(spec, c, prefix) for c in columns)
    return ROW_HASH.format(cols=f"ROW({cols})")


def _checksum_text(rows: int, xor: int | None) -> str:
    return f"{rows}:{(xor or 0) & 0xFFFFFFFFFFFFFFFF:016x}"


class PostgresMeta(PostgresConnection):
    """The metadata: created once per database; per-day versions, rows and checksums."""

    @contextmanager
    def _meta_transaction(self, *, every_table: bool = False) -> Iterator[Connection]:
        del every_table  # PostgreSQL creates every metadata table at once
        with self.transaction() as con:
            self._ensure_meta(con)
            yield con

    def _ensure_meta(self, con: Connection) -> None:
        """The coordination tables; no table spec needed. Creating them is serialized by an
        advisory lock, since concurrent CREATE ... IF NOT EXISTS can collide in PostgreSQL's
        catalog; once they exist nothing is locked here (the lock would last until COMMIT and
        hold up every other table's writers)."""
        if self._meta_complete(con):
            return
        _x(con, "SELECT pg_advisory_xact_lock(hashtext('backfill_assets:ensure'))")
        self._ensure_schema(con)
        if self._meta_complete(con):
            return
        _x(con, f"CREATE SCHEMA IF NOT EXISTS {M}")
        _x(con, f"CREATE SEQUENCE IF NOT EXISTS {M}.version_seq")
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.partition_versions (table_name text, "
            "partition_date date, version bigint NOT NULL, row_count bigint, checksum text, "
            "written_at timestamp, PRIMARY KEY (table_name, partition_date))",
        )
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.shadow_log (table_name text, partition_date date, "
            "plan_id text, base_version bigint, row_count bigint, checksum text, "
            "written_at timestamp, PRIMARY KEY (table_name, partition_date))",
        )
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.swap_log (table_name text, plan_id text, week text, "
            "range_start date, range_end date, had_live boolean, state text, "
            "changed_at timestamp, PRIMARY KEY (table_name, plan_id, week))",
        )
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.swap_days (table_name text, plan_id text, "
            "partition_date date, rows_in bigint, checksum_in text, rows_out bigint, "
            "checksum_out text, PRIMARY KEY (table_name, plan_id, partition_date))",
        )
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.writer_lease (table_name text PRIMARY KEY, "
            "holder_id text, role text, job_name text, plan_id text, host text, pid bigint, "
            "claimed_at timestamp)",
        )
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.plan_claims (table_name text PRIMARY KEY, "
            "plan_id text, claimed_at timestamp)",
        )
        # Added after the others (checked apart in _meta_complete): the holder's process start,
        # and the state of record of each plan (lib/warehouse/shared/records.py).
        _x(con, f"ALTER TABLE {M}.writer_lease ADD COLUMN IF NOT EXISTS process text")
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.plans (plan_id text, table_name text, status text, "
            "plan_json text, approved_by text, details text, changed_at timestamp, "
            "recorded text, PRIMARY KEY (table_name, plan_id))",
        )
        # The downstream tables a swap published with the target, and their backups (added
        # after the others: checked apart in the early return above).
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.swap_companions (table_name text, plan_id text, "
            "live text, shadow text, backup text, had_live boolean, "
            "PRIMARY KEY (table_name, plan_id, live))",
        )

    def _ensure_schema(self, con: Connection) -> None:
        """The warehouse schema, created when missing (a user without CREATE on the database
        needs it to exist already)."""
        row = _x(con, "SELECT to_regnamespace(%(s)s) IS NULL", {"s": self.schema}).fetchone()
        if row and row[0]:
            _x(con, f"CREATE SCHEMA IF NOT EXISTS {ident(self.schema)}")

    def _meta_complete(self, con: Connection) -> bool:
        """Whether the warehouse schema and every coordination table and column exist (those
        added after the first version are checked apart from plan_claims)."""
        row = _x(
            con,
            "SELECT to_regnamespace(%(s)s) IS NOT NULL AND to_regclass(%(p)s) IS NOT NULL "
            "AND to_regclass(%(c)s) IS NOT NULL AND to_regclass(%(r)s) IS NOT NULL "
            "AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%(l)s) "
            "AND attname = 'process' AND NOT attisdropped)",
            {"s": self.schema, "p": f"{M}.plan_claims", "c": f"{M}.swap_companions",
             "r": f"{M}.plans", "l": f"{M}.writer_lease"},
        ).fetchone()  # fmt: skip
        return bool(row and row[0])

    def _bump_versions(
        self,
        con: Connection,
        spec: TableSpec,
        sums: Mapping[dt.date, str | None],
        now: dt.datetime,
    ) -> None:
        """A new version for each day, with the rows and checksum it now holds."""
        if not sums:
            return
        with con.cursor() as cur:
            _xm(cur, 
                f"INSERT INTO {M}.partition_versions VALUES (%(t)s, %(d)s, "
                f"nextval('{M}.version_seq'), %(n)s, %(c)s, %(now)s) "
                "ON CONFLICT (table_name, partition_date) DO UPDATE SET "
                "version = excluded.version, row_count = excluded.row_count, "
                "checksum = excluded.checksum, written_at = excluded.written_at",
                [
                    {"t": self._key(spec.name), "d": d, "n": rows_of(c),
                     "c": c or EMPTY, "now": now}
                    for d, c in sorted(sums.items())
                ],
            )  # fmt: skip

    def _log_shadow(
        self,
        con: Connection,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        plan_id: str,
        sums: Mapping[dt.date, str],
        now: dt.datetime,
    ) -> None:
        key = self._key(spec.name)
        _x(
            con,
            f"DELETE FROM {M}.shadow_log WHERE table_name = %(t)s AND partition_date >= %(s)s "
            "AND partition_date < %(e)s",
            {"t": key, "s": start, "e": end},
        )
        with con.cursor() as cur:
            _xm(cur, 
                f"INSERT INTO {M}.shadow_log SELECT %(t)s, %(d)s, %(p)s, "
                f"coalesce((SELECT version FROM {M}.partition_versions v WHERE "
                "v.table_name = %(t)s AND v.partition_date = %(d)s), 0), %(n)s, %(c)s, %(now)s",
                [
                    {"t": key, "d": d, "p": plan_id, "n": rows_of(sums.get(d)),
                     "c": sums.get(d, EMPTY), "now": now}
                    for d in day_range(start, end)
                ],
            )  # fmt: skip

    def _record_swap_days(
        self, con: Connection, key: str, plan_id: str, partitions: Mapping[dt.date, PartitionMove]
    ) -> None:
        with con.cursor() as cur:
            _xm(cur, 
                f"INSERT INTO {M}.swap_days VALUES (%(t)s, %(p)s, %(d)s, %(ri)s, %(ci)s, %(ro)s, "
                "%(co)s) ON CONFLICT (table_name, plan_id, partition_date) DO UPDATE SET "
                "rows_in = excluded.rows_in, checksum_in = excluded.checksum_in, "
                "rows_out = excluded.rows_out, checksum_out = excluded.checksum_out",
                [
                    {"t": key, "p": plan_id, "d": d, "ri": p.rows_in, "ci": p.checksum_in,
                     "ro": p.rows_out, "co": p.checksum_out}
                    for d, p in sorted(partitions.items())
                ],
            )  # fmt: skip

    def _checksums(
        self, con: Connection, relation: str, spec: TableSpec, start: dt.date, end: dt.date
    ) -> dict[dt.date, str]:
        pc = ident(spec.partition_column)
        where = f"{self._q(relation)} WHERE {pc} >= %(s)s AND {pc} < %(e)s"
        return self._checksums_of(con, spec, where, {"s": start, "e": end})

    def _checksums_of(
        self, con: Connection, spec: TableSpec, rows_sql: str, params: Any = None
    ) -> dict[dt.date, str]:
        """Rows and the XOR of row hashes per partition of `FROM {rows_sql}`."""
        pc = ident(spec.partition_column)
        rows = _x(
            con,
            f"SELECT {pc}, count(*), bit_xor({_row_hash(spec, spec.column_names)}) "
            f"FROM {rows_sql} GROUP BY 1",
            params,
        ).fetchall()
        return {day: _checksum_text(n, h) for day, n, h in rows}

    def _written_checksums(
        self, con: Connection, base: str, spec: TableSpec, start: dt.date, end: dt.date
    ) -> dict[dt.date, str]:
        """`_checksums` of the weeks just written, each read from its own table: a whole week
        without a filter, which the planner sizes from the table (not yet analyzed, a filter on
        it is guessed at a few hundred rows) and reads with the server's cores."""
        pc = ident(spec.partition_column)
        parts = []
        for w0, w1 in iso_weeks(start, end):
            week = self._q(self._week_table(base, w0))
            whole = (w1 - w0).days == 7
            parts.append(
                f"SELECT * FROM {week}"
                + ("" if whole else f" WHERE {pc} >= '{w0}'::date AND {pc} < '{w1}'::date")
            )
        # Parallel workers start for a week of rows (their start-up is costed as if they read
        # far fewer). LOCAL: until the write commits; what follows are small metadata writes.
        _x(con, "SET LOCAL parallel_setup_cost = 0")
        return self._checksums_of(con, spec, f"({' UNION ALL '.join(parts)}) AS w")
