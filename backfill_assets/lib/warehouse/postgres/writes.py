"""PostgreSQL: writing a table's days (live or shadow), plain and reference tables, and the reads
for planning and the gates."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any, LiteralString, cast

import psycopg
from psycopg import errors as pg_errors

from backfill_assets.errors import WarehouseError
from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.dates import iso_weeks, parse_day, week_id, week_monday
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import (
    GateInputs,
    PartitionStats,
    rows_of,
)
from backfill_assets.lib.warehouse.dialects import SQL, column_type, sql_for, transpile
from backfill_assets.lib.warehouse.postgres.connection import Connection, _x, _xm, diff_session
from backfill_assets.lib.warehouse.postgres.idents import ident, ident_list
from backfill_assets.lib.warehouse.postgres.layout import PostgresLayout
from backfill_assets.lib.warehouse.shared.coordination import utcnow

if TYPE_CHECKING:
    import pandas as pd

    from backfill_assets.lib.review.diff import DataDiff


class PostgresWrites(PostgresLayout):
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

        `build` is one SELECT over [$start, $end) (DuckDB's dialect, transpiled; or SQL per
        dialect, see `dialects.sql_for`) or a DataFrame already checked against the spec. Each
        written day's rows and checksum are recorded: live writes bump the day's version, shadow
        writes record the live version they were built against, so the swap can tell when the
        live partition changed since. `fingerprint` is not recorded here: PostgreSQL's gates
        scan the shadow and the target side by side, each query on a core of its own
        (postgres/gates.py), which costs the batch less than a second scan in the write.
        """
        del fingerprint
        start, end = parse_day(start, "start"), parse_day(end, "end")
        if end <= start:
            return {}
        base = spec.shadow_name if shadow else spec.name
        pc = ident(spec.partition_column)
        cols = ident_list(spec.column_names)
        rng = {"start": start, "end": end}
        select = sql_for(build, "postgres") if isinstance(build, str | Mapping) else None
        with self.transaction() as con:
            self._ensure(con, spec)
            existing = self._week_tables(con, base)
            spans = list(iso_weeks(start, end))
            fresh = [w for w in spans if week_id(w[0]) not in existing]
            if select is None:  # a DataFrame is copied through the parent, into its weeks
                for w0, _ in fresh:
                    self._create_week(con, spec, base, week_monday(w0))
            _x(con, f"DELETE FROM {self._q(base)} WHERE {pc} >= %(start)s AND {pc} < %(end)s", rng)
            if select is not None:
                # Weeks that already exist are written through the parent, a run of
                # consecutive ones at a time; new weeks are loaded alone, then indexed.
                for run in _runs([w for w in spans if w not in fresh]):
                    _x(
                        con,
                        f"INSERT INTO {self._q(base)} ({cols}) SELECT {cols} FROM "
                        f"({select}) AS build WHERE {pc} >= %(start)s AND {pc} < %(end)s",
                        {"start": run[0], "end": run[1]},
                    )
                for span in fresh:
                    self._load_fresh_week(con, spec, base, span, select, cols)
            elif not isinstance(build, str | Mapping):
                self._copy_frame(con, base, spec.column_names, build)
            sums = self._written_checksums(con, base, spec, start, end)
            now = utcnow()
            if shadow:
                self._log_shadow(con, spec, start, end, plan_id or "", sums, now)
            else:
                self._bump_versions(con, spec, {d: sums.get(d) for d in day_range(start, end)}, now)
        return {d: rows_of(sums.get(d)) for d in day_range(start, end)}

    def _load_fresh_week(
        self,
        con: Connection,
        spec: TableSpec,
        parent: str,
        span: tuple[dt.date, dt.date],
        select: str,
        cols: str,
    ) -> None:
        """A week table that does not exist yet, filled with the build's rows of `span` (its
        part of the range) before it has indexes, then indexed and attached. Building an index
        over the loaded rows is cheaper than maintaining it row by row. The indexes are the ones
        the new table copied from the target (`pg_get_indexdef`), dropped and built again; those
        behind a constraint stay."""
        monday = week_monday(span[0])
        name = self._create_week(con, spec, parent, monday, attach=False)
        indexes = _x(
            con,
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid = to_regclass(%(t)s) AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
            "WHERE c.conindid = i.indexrelid) ORDER BY 1",
            {"t": self._q(name)},
        ).fetchall()
        for index, _ in indexes:
            _x(con, f"DROP INDEX {index}")
        pc = ident(spec.partition_column)
        _x(
            con,
            f"INSERT INTO {self._q(name)} ({cols}) SELECT {cols} FROM ({select}) AS build "
            f"WHERE {pc} >= %(start)s AND {pc} < %(end)s",
            {"start": span[0], "end": span[1]},
        )
        for _, definition in indexes:
            _x(con, definition)
        self._attach_week(con, spec, parent, name, monday)

    def _copy_frame(
        self, con: Connection, table: str, columns: Sequence[str], frame: pd.DataFrame
    ) -> None:
        import pandas as pd

        copy_sql = f"COPY {self._q(table)} ({ident_list(columns)}) FROM STDIN"
        with con.cursor().copy(cast("LiteralString", copy_sql)) as copy:
            for row in frame[list(columns)].itertuples(index=False, name=None):
                copy.write_row([None if _is_missing(v, pd) else _plain(v) for v in row])

    def partition_stats(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> PartitionStats:
        base = spec.shadow_name if shadow else spec.name
        with self.connect(read_only=True) as con:
            if not self._exists(con, base):
                return PartitionStats(rows={}, bytes_per_row=spec.bytes_per_row)
            sums = self._checksums(con, base, spec, start, end)
        rows = {d: rows_of(sums.get(d)) for d in day_range(start, end)}
        return PartitionStats(rows=rows, bytes_per_row=spec.bytes_per_row)

    def gate_inputs(self, spec: TableSpec, start: dt.date, end: dt.date, **kw: Any) -> GateInputs:
        """Everything a batch's gates need, in a few set-based queries (postgres/gates.py)."""
        from backfill_assets.lib.warehouse.postgres.gates import gate_inputs

        return gate_inputs(self, spec, start, end, **kw)

    def gates_and_diff(
        self, spec: TableSpec, start: dt.date, end: dt.date, **kw: Any
    ) -> tuple[GateInputs, DataDiff]:
        """The gates' inputs and the diff gate's diff, side by side (postgres/gates.py)."""
        from backfill_assets.lib.warehouse.postgres.gates import gates_and_diff

        return gates_and_diff(self, spec, start, end, **kw)

    def _diff_relations(
        self, con: Any, spec: TableSpec, start: dt.date, end: dt.date
    ) -> tuple[str, str]:
        """The diff's two sides: the partitioned tables (each read pruned to the days)."""
        return self._q(spec.shadow_name), self._q(spec.name)

    def _diff_session(self, con: Any) -> None:
        diff_session(con)

    def _relation_columns(self, con: Any, name: str) -> list[tuple[str, str]]:
        return [
            (str(n), str(t))
            for n, t in _x(
                con,
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(%(t)s) AND attnum > 0 AND NOT attisdropped "
                "ORDER BY attnum",
                {"t": self._q(name)},
            ).fetchall()
        ]

    def checksums(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> dict[dt.date, str]:
        """An order-independent checksum of every column, per partition (rows:hex)."""
        base = spec.shadow_name if shadow else spec.name
        with self.connect(read_only=True) as con:
            if not self._exists(con, base):
                return {}
            return self._checksums(con, base, spec, start, end)

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
        """Replace days [start, end) of a plain table atomically: a SELECT (DuckDB dialect,
        transpiled) run once per day with `$day` bound, or a DataFrame of those days."""
        qt, pc = self._q(table), ident(partition_column)
        ddl = ", ".join(f"{ident(n)} {column_type(t, 'postgres')}" for n, t in columns)
        names = [n for n, _ in columns]
        rng = {"s": start, "e": end}
        with self.transaction() as con:
            self._ensure_schema(con)
            if not self._exists(con, table):
                _x(con, f"CREATE TABLE IF NOT EXISTS {qt} ({ddl})")
                # Every landing deletes and counts days, and the gates count a batch's days:
                # without it each of those reads the whole table.
                _x(con, f"CREATE INDEX IF NOT EXISTS {ident(table + '__day')} ON {qt} ({pc})")
            _x(con, f"DELETE FROM {qt} WHERE {pc} >= %(s)s AND {pc} < %(e)s", rng)
            if isinstance(select_sql, str):
                sql = transpile(select_sql, "postgres")
                for day in day_range(start, end):
                    _x(
                        con,
                        f"INSERT INTO {qt} ({ident_list(names)}) SELECT {ident_list(names)} "
                        f"FROM ({sql}) AS src",
                        {**(params or {}), "day": day},
                    )
            else:
                self._copy_frame(con, table, names, select_sql)
            row = _x(
                con, f"SELECT count(*) FROM {qt} WHERE {pc} >= %(s)s AND {pc} < %(e)s", rng
            ).fetchone()
        return int(row[0]) if row else 0

    def replace_reference_table(
        self, table: str, columns: list[tuple[str, str]], rows: list[tuple]
    ) -> None:
        """Replace a small reference table (e.g. FX rates) in one transaction."""
        qt = self._q(table)
        ddl = ", ".join(f"{ident(n)} {column_type(t, 'postgres')}" for n, t in columns)
        marks = ", ".join("%s" for _ in columns)
        with self.transaction() as con:
            self._ensure_schema(con)
            _x(con, f"CREATE TABLE IF NOT EXISTS {qt} ({ddl})")
            _x(con, f"DELETE FROM {qt}")
            if rows:
                with con.cursor() as cur:
                    _xm(cur, f"INSERT INTO {qt} VALUES ({marks})", rows)

    def build_problem(self, spec: TableSpec, build: SQL) -> str | None:
        """Why `build` cannot run here (PostgreSQL's own error for its transpiled SELECT), or
        None: it plans, or the tables it reads do not exist yet, or the server is unreachable
        (nothing can be judged then)."""
        sql = sql_for(build, "postgres")
        pc = ident(spec.partition_column)
        day = dt.date(2000, 1, 3)
        try:
            with self.connect(read_only=True) as con:
                _x(
                    con,
                    f"EXPLAIN SELECT {ident_list(spec.column_names)} FROM ({sql}) AS build "
                    f"WHERE {pc} >= %(start)s AND {pc} < %(end)s",
                    {"start": day, "end": day + dt.timedelta(days=1)},
                )
        except WarehouseError:
            return None
        except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
            return None
        except psycopg.Error as e:
            return str(e).strip().splitlines()[0]
        return None


def _runs(spans: Sequence[tuple[dt.date, dt.date]]) -> list[tuple[dt.date, dt.date]]:
    """Consecutive half-open spans merged: [(a, b), (b, c), (d, e)] -> [(a, c), (d, e)]."""
    out: list[tuple[dt.date, dt.date]] = []
    for s0, s1 in spans:
        if out and out[-1][1] == s0:
            out[-1] = (out[-1][0], s1)
        else:
            out.append((s0, s1))
    return out


def _is_missing(value: Any, pd: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _plain(value: Any) -> Any:
    """numpy and pandas scalars as the Python values psycopg adapts."""
    to_py = getattr(value, "to_pydatetime", None)
    if callable(to_py):
        return to_py()
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, str | bytes):
        with suppress(ValueError, TypeError):
            return item()
    return value
