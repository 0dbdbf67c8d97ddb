"""DuckDB: adopting a table that already exists, in place.

The table keeps its name and its rows; nothing is copied. Adopting it records each day's rows,
checksum and fingerprint, as every write of the framework does, so that the gates, the swap and
Dagster read them instead of scanning the table. The caller records a bounded range of days at a
time (each range one transaction, under the table's writer lease), and a day already recorded
is never recorded again: a second `adopt` after a kill continues where the first stopped.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence

import duckdb

from backfill_assets.constants import TEMPLATE_SUFFIX
from backfill_assets.errors import WarehouseMissing
from backfill_assets.lib.adoption import (
    ABSENT,
    TABLE,
    VIEW,
    ExistingRelation,
    TableScan,
)
from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import EMPTY
from backfill_assets.lib.warehouse.duckdb.connection import M
from backfill_assets.lib.warehouse.duckdb.layout import DuckDBLayout, base_table
from backfill_assets.lib.warehouse.duckdb.meta import Fingerprints, fingerprint_of
from backfill_assets.lib.warehouse.identifiers import column_list, quote_ident

EXAMPLES = 5  # duplicate keys shown as examples


class DuckDBAdopt(DuckDBLayout):
    """Describe, scan and record an existing table (lib/adoption.py says what it means)."""

    def describe_existing(self, spec: TableSpec) -> ExistingRelation:
        declared = declared_types(spec)
        try:
            with self.connect(read_only=True) as con:
                kind = self._relation_kind(con, spec.name)
                if kind is None:
                    return ExistingRelation(spec.name, ABSENT, declared=declared)
                layout = self._exists(con, base_table(spec)) or self._exists(
                    con, f"{spec.name}{TEMPLATE_SUFFIX}"
                )
                cols = con.execute(
                    "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = "
                    "'main' AND lower(table_name) = lower($n) ORDER BY column_index",
                    {"n": spec.name},
                ).fetchall()
        except WarehouseMissing:
            return ExistingRelation(spec.name, ABSENT, declared=declared)
        # The framework's own view (after a swap, until its release) is the target too.
        if kind == "view" and layout:
            kind = TABLE
        return ExistingRelation(
            spec.name,
            TABLE if kind == "table" else VIEW if kind == "view" else kind,
            tuple((str(n), str(t)) for n, t in cols),
            declared,
            layout=layout,
        )

    def scan_existing(self, spec: TableSpec) -> TableScan:
        """One read of the table: rows per day with null days counted apart, then its duplicate
        keys per day (only keys that occur more than once leave the aggregation)."""
        t0 = time.perf_counter()
        pc = quote_ident(spec.partition_column)
        q = quote_ident(spec.name)
        keys = column_list(spec.primary_key)
        with self.connect(read_only=True) as con:
            counts = con.execute(f"SELECT {pc}, count(*) FROM {q} GROUP BY ALL").fetchall()
            dups = con.execute(
                f"WITH d AS (SELECT {pc} AS day, {keys}, count(*) AS n FROM {q} "
                f"WHERE {pc} IS NOT NULL GROUP BY ALL HAVING count(*) > 1) "
                "SELECT day, count(*), sum(n) FROM d GROUP BY ALL"
            ).fetchall()
            examples = (
                con.execute(
                    f"SELECT {pc}, {keys}, count(*) AS n FROM {q} WHERE {pc} IS NOT NULL "
                    f"GROUP BY ALL HAVING count(*) > 1 ORDER BY n DESC, 1, {keys} "
                    f"LIMIT {EXAMPLES}"
                ).fetchall()
                if dups
                else []
            )
            recorded = (
                con.execute(
                    f"SELECT DISTINCT partition_date FROM {M}.partition_versions "
                    "WHERE table_name = $t",
                    {"t": spec.name},
                ).fetchall()
                if self._has_table(con, M, "partition_versions")
                else []
            )
        return TableScan.from_rows(
            counts, dups, examples, (r[0] for r in recorded), time.perf_counter() - t0
        )

    def record_existing(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, fingerprint: Sequence[str] = ()
    ) -> dict[dt.date, str]:
        """Record the rows, checksum and fingerprint of each day of [start, end) that has no
        record yet, from one scan of those days, in one transaction; the days recorded now and
        their checksums (empty: every day had one)."""
        with self.transaction() as con:
            self._ensure(con, spec, adopting=True)
            done = {
                r[0]
                for r in con.execute(
                    f"SELECT partition_date FROM {M}.partition_versions WHERE table_name = $t "
                    "AND partition_date >= $s AND partition_date < $e",
                    {"t": spec.name, "s": start, "e": end},
                ).fetchall()
            }
            todo = [d for d in day_range(start, end) if d not in done]
            if not todo:
                return {}
            lo, hi = todo[0], todo[-1] + dt.timedelta(days=1)
            stats = self._day_stats(con, quote_ident(spec.name), spec, lo, hi, fingerprint)
            sums = {d: stats[d][0] if d in stats else None for d in todo}
            fps = Fingerprints(fingerprint_of(fingerprint), {d: v[1] for d, v in stats.items()})
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            self._bump_versions(con, spec, sums, now, fps)
        return {d: s or EMPTY for d, s in sums.items()}


def declared_types(spec: TableSpec) -> tuple[tuple[str, str], ...]:
    """The declaration's columns with their types as DuckDB names them (an in-memory table)."""
    cols = ", ".join(f"{quote_ident(c.name)} {c.sql_type}" for c in spec.columns)
    con = duckdb.connect()
    try:
        con.execute(f"CREATE TABLE declared ({cols})")
        rows = con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'declared' "
            "ORDER BY column_index"
        ).fetchall()
    finally:
        con.close()
    return tuple((str(n), str(t)) for n, t in rows)
