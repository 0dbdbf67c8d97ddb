"""DuckDB: writing a table's days (live or shadow), plain and reference tables, and the reads
for planning and the gates."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.dates import iso_weeks, parse_day, week_id
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import (
    EMPTY,
    GateInputs,
    PartitionStats,
    rows_of,
)
from backfill_assets.lib.warehouse.dialects import SQL, sql_for
from backfill_assets.lib.warehouse.duckdb.connection import M
from backfill_assets.lib.warehouse.duckdb.layout import DuckDBLayout, key_order
from backfill_assets.lib.warehouse.duckdb.meta import Fingerprints, fingerprint_of
from backfill_assets.lib.warehouse.identifiers import (
    column_list,
    quote_ident,
)

if TYPE_CHECKING:
    import pandas as pd

_BUILD_VIEW = "__backfill_build"


class DuckDBWrites(DuckDBLayout):
    """Partition writes, plain and reference tables, reads for planning and the gates."""

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
                order = key_order(spec) if table == rows_table else ""
                con.execute(f"DELETE FROM {qt} WHERE {pc} >= $s AND {pc} < $e", {"s": w0, "e": w1})
                con.execute(
                    f"INSERT INTO {qt} ({cols}) SELECT {cols} FROM {source} AS build "
                    f"WHERE {pc} >= $start AND {pc} < $end{order}",
                    {"start": w0, "end": w1},
                )
            if weeks != existing:
                self._recreate_view(con, spec, base, weeks)
            # From the tables just written, not the view: planning a view grows with its tables.
            written = " UNION ALL ".join(
                f"SELECT {cols} FROM {quote_ident(t)} "
                f"WHERE {pc} >= DATE '{w0}' AND {pc} < DATE '{w1}'"
                for t, w0, w1 in pieces
            )
            days = day_range(start, end)
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
                # One statement for every day (executemany runs one statement per row).
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

    def partition_stats(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> PartitionStats:
        base = spec.shadow_name if shadow else spec.name
        with self.connect(read_only=True) as con:
            exists = self._relation_kind(con, base) is not None
            rows = self._counts(con, base, spec, start, end) if exists else {}
        return PartitionStats(rows=rows, bytes_per_row=spec.bytes_per_row)

    def gate_inputs(self, spec: TableSpec, start: dt.date, end: dt.date, **kw: Any) -> GateInputs:
        """Everything a batch's gates need, in a few set-based queries (duckdb/gates.py)."""
        from backfill_assets.lib.warehouse.duckdb.gates import gate_inputs

        return gate_inputs(self, spec, start, end, **kw)

    def _diff_relations(
        self, con: Any, spec: TableSpec, start: dt.date, end: dt.date
    ) -> tuple[str, str]:
        """The diff's two sides: the week tables holding [start, end), as the gates read them."""
        from backfill_assets.lib.warehouse.duckdb.gates import _weeks

        tables = self._week_tables_of(con, spec.shadow_name, spec.name)
        return (
            _weeks(spec, spec.shadow_name, tables[spec.shadow_name], start, end),
            _weeks(spec, spec.name, tables[spec.name], start, end),
        )

    def _relation_columns(self, con: Any, name: str) -> list[tuple[str, str]]:
        return [
            (str(n), str(t))
            for n, t in con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' "
                "AND lower(table_name) = lower($n) ORDER BY column_index",
                {"n": name},
            ).fetchall()
        ]

    def checksums(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> dict[dt.date, str]:
        """An order-independent checksum of every column, per partition (hex)."""
        with self.connect(read_only=True) as con:
            base = spec.shadow_name if shadow else spec.name
            return self._checksums(con, quote_ident(base), spec, start, end)

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

    def build_problem(self, spec: TableSpec, build: SQL) -> str | None:
        """Builds are written in DuckDB's dialect: only SQL given for another dialect alone can
        fail to transpile (raised by `sql_for`). Nothing is opened: the file may be held."""
        sql_for(build, "duckdb")
        return None
