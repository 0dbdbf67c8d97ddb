"""PostgreSQL: reading a table that already exists, for `adopt --check`, and recording the days
of a table that is already in the framework's layout.

A plain table is converted online by `convert.py`. The checks read only: the declaration's types
are named by the server through a temporary table created in a transaction that is rolled back.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence

from backfill_assets.lib.adoption import (
    ABSENT,
    OTHER_PARTITIONING,
    PARTITIONED,
    TABLE,
    VIEW,
    ExistingRelation,
    TableScan,
)
from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import EMPTY
from backfill_assets.lib.warehouse.postgres.connection import M, _x
from backfill_assets.lib.warehouse.postgres.idents import ident, ident_list
from backfill_assets.lib.warehouse.postgres.layout import PostgresLayout

EXAMPLES = 5  # duplicate keys shown as examples
_DECLARED = "backfill_assets_declared"


class _Rollback(Exception):
    """Ends the transaction that named the declared types, so that nothing of it stays."""


class PostgresAdopt(PostgresLayout):
    """Describe, scan and record an existing table (lib/adoption.py says what it means)."""

    def describe_existing(self, spec: TableSpec) -> ExistingRelation:
        declared = self._declared_types(spec)
        with self.connect(read_only=True) as con:
            row = _x(
                con,
                "SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %(s)s AND c.relname = %(n)s",
                {"s": self.schema, "n": spec.name},
            ).fetchone()
            if row is None:
                return ExistingRelation(spec.name, ABSENT, declared=declared)
            oid, relkind = row
            cols = _x(
                con,
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = %(o)s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                {"o": oid},
            ).fetchall()
            kind, detail = TABLE, ""
            if relkind in ("v", "m"):
                kind = VIEW
            elif relkind == "p":
                part = _x(
                    con,
                    "SELECT p.partstrat, pg_get_partkeydef(p.partrelid), "
                    "(SELECT a.attname FROM pg_attribute a WHERE a.attrelid = p.partrelid "
                    "AND a.attnum = p.partattrs[0]) FROM pg_partitioned_table p "
                    "WHERE p.partrelid = %(o)s",
                    {"o": oid},
                ).fetchone()
                ranged = part is not None and part[0] == "r" and part[2] == spec.partition_column
                kind = PARTITIONED if ranged else OTHER_PARTITIONING
                detail = str(part[1]) if part else ""
            layout = self._exists(con, spec.shadow_name)
            views = tuple(self._dependent_views(con, spec.name))
        return ExistingRelation(
            spec.name,
            kind,
            tuple((str(n), str(t)) for n, t in cols),
            declared,
            detail=detail,
            layout=layout,
            views=views,
        )

    def _declared_types(self, spec: TableSpec) -> tuple[tuple[str, str], ...]:
        """The declaration's columns with their types as the server names them."""
        out: list[tuple[str, str]] = []
        try:
            with self.transaction() as con:
                _x(con, f"CREATE TEMPORARY TABLE {_DECLARED} ({self._ddl_columns(spec)})")
                out = [
                    (str(n), str(t))
                    for n, t in _x(
                        con,
                        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                        f"WHERE attrelid = 'pg_temp.{_DECLARED}'::regclass AND attnum > 0 "
                        "ORDER BY attnum",
                    ).fetchall()
                ]
                raise _Rollback
        except _Rollback:
            pass
        return tuple(out)

    def scan_existing(self, spec: TableSpec) -> TableScan:
        t0 = time.perf_counter()
        pc = ident(spec.partition_column)
        q = self._q(spec.name)
        keys = ident_list(spec.primary_key)
        n_keys = len(spec.primary_key)
        with self.connect(read_only=True) as con:
            counts = _x(con, f"SELECT {pc}, count(*) FROM {q} GROUP BY 1").fetchall()
            grouped = (
                f"SELECT {pc} AS day, {keys}, count(*) AS n FROM {q} WHERE {pc} IS NOT NULL "
                f"GROUP BY {', '.join(str(i) for i in range(1, n_keys + 2))} HAVING count(*) > 1"
            )
            dups = _x(con, f"SELECT day, count(*), sum(n) FROM ({grouped}) d GROUP BY 1").fetchall()
            examples = (
                _x(
                    con,
                    f"{grouped} ORDER BY n DESC, "
                    f"{', '.join(str(i) for i in range(1, n_keys + 2))} LIMIT {EXAMPLES}",
                ).fetchall()
                if dups
                else []
            )
            recorded = (
                _x(
                    con,
                    f"SELECT partition_date FROM {M}.partition_versions WHERE table_name = %(t)s",
                    {"t": self._key(spec.name)},
                ).fetchall()
                if self._exists_meta(con)
                else []
            )
        return TableScan.from_rows(
            counts, dups, examples, (r[0] for r in recorded), time.perf_counter() - t0
        )

    def _exists_meta(self, con: object) -> bool:
        row = _x(
            con,  # type: ignore[arg-type]
            "SELECT to_regclass(%(t)s) IS NOT NULL",
            {"t": f"{M}.partition_versions"},
        ).fetchone()
        return bool(row and row[0])

    def record_existing(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, fingerprint: Sequence[str] = ()
    ) -> dict[dt.date, str]:
        """Record the rows and checksum of each day of [start, end) that has no record yet, in
        one transaction under the table's write lock; the days recorded now. PostgreSQL's gates
        compute fingerprints themselves (`fingerprint` is not recorded)."""
        del fingerprint
        with self.transaction() as con:
            self._ensure(con, spec)
            done = {
                r[0]
                for r in _x(
                    con,
                    f"SELECT partition_date FROM {M}.partition_versions WHERE table_name = %(t)s "
                    "AND partition_date >= %(s)s AND partition_date < %(e)s",
                    {"t": self._key(spec.name), "s": start, "e": end},
                ).fetchall()
            }
            todo = [d for d in day_range(start, end) if d not in done]
            if not todo:
                return {}
            lo, hi = todo[0], todo[-1] + dt.timedelta(days=1)
            stats = self._checksums(con, spec.name, spec, lo, hi)
            sums = {d: stats.get(d) for d in todo}
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            self._bump_versions(con, spec, sums, now)
        return {d: s or EMPTY for d, s in sums.items()}
