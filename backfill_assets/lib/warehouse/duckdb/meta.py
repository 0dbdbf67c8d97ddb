"""DuckDB: the metadata tables of `backfill_meta`, created as a file needs them, and each day's
version, rows, checksum and fingerprint."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import duckdb

from backfill_assets.errors import WarehouseError
from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import (
    EMPTY,
    rows_of,
)
from backfill_assets.lib.warehouse.duckdb.connection import DuckDBConnection, M
from backfill_assets.lib.warehouse.identifiers import (
    column_list,
    quote_ident,
)

# The metadata tables and their columns, in order. A table is created with every column; one from
# before a column (a file an earlier version wrote) is given it at the end, where it was added.
COORDINATION_TABLES: dict[str, tuple[str, ...]] = {
    "writer_lease": (
        "table_name VARCHAR PRIMARY KEY", "holder_id VARCHAR", "role VARCHAR", "job_name VARCHAR",
        "plan_id VARCHAR", "host VARCHAR", "pid BIGINT", "claimed_at TIMESTAMP",
        "process VARCHAR",
    ),
    "plan_claims": ("table_name VARCHAR PRIMARY KEY", "plan_id VARCHAR", "claimed_at TIMESTAMP"),
    # The state of record of each plan (lib/warehouse/shared/records.py).
    "plans": (
        "plan_id VARCHAR", "table_name VARCHAR", "status VARCHAR", "plan_json VARCHAR",
        "approved_by VARCHAR", "details VARCHAR", "changed_at TIMESTAMP", "recorded VARCHAR",
    ),
}  # fmt: skip


META_TABLES: dict[str, tuple[str, ...]] = {
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
    **COORDINATION_TABLES,
}  # fmt: skip


_SEQUENCES = "<sequences>"  # the catalog query's name for the schema's sequences


class DuckDBMeta(DuckDBConnection):
    """The metadata: created as a file needs it; per-day versions, checksums and fingerprints."""

    @contextmanager
    def _meta_transaction(
        self, *, every_table: bool = False
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.transaction() as con:
            if every_table:
                self._ensure_meta(con, META_TABLES, ("version_seq",))
            else:
                self._ensure_meta(con)
            yield con

    def _ensure_meta(
        self,
        con: duckdb.DuckDBPyConnection,
        tables: Mapping[str, tuple[str, ...]] = COORDINATION_TABLES,
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
        # One statement for every day (executemany runs one statement per row).
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
        out = dict.fromkeys(day_range(start, end), 0)
        rows = con.execute(
            f"SELECT {pc}, count(*) FROM {quote_ident(base)} WHERE {pc} >= $s AND {pc} < $e "
            "GROUP BY ALL",
            {"s": start, "e": end},
        ).fetchall()
        for day, n in rows:
            out[day] = n
        return out

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


def fingerprint_sql(spec: TableSpec, unchanged: Sequence[str]) -> str:
    """The aggregate of a day's fingerprint of the key and the `unchanged` columns, which the
    gates compare between the shadow and the target: the sum of every row's hash, as HUGEINT.
    A sum, not a XOR: an identical pair of rows would cancel out of a XOR, so equal
    fingerprints say the two days hold the same (key, unchanged columns) rows, each as often."""
    return f"sum(hash({column_list((*spec.primary_key, *unchanged))})::HUGEINT)"


def fingerprint_of(unchanged: Sequence[str]) -> str:
    """What a recorded fingerprint covers (beside the key): its unchanged columns, in order."""
    return ",".join(unchanged)


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
