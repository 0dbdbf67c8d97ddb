"""DuckDB: the target's layout, one plain table with week tables over it while a swap of a plan is
unreleased (see the package's docstring)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence

import duckdb

from backfill_assets.constants import (
    BASE_SUFFIX,
    TEMPLATE_SUFFIX,
    WEEK_INFIX,
)
from backfill_assets.errors import InvalidInput, WarehouseError, WarehouseMissing
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.duckdb.connection import M
from backfill_assets.lib.warehouse.duckdb.meta import META_TABLES, DuckDBMeta
from backfill_assets.lib.warehouse.identifiers import (
    column_list,
    quote_ident,
    validate_ident,
)

WEEK_RE = re.compile(r"([0-9]{4})w([0-9]{2})", re.ASCII)
DAY = dt.timedelta(days=1)
WEEK = dt.timedelta(weeks=1)


def monday_of(week: str) -> dt.date:
    """The Monday of a week id (`2026w03`)."""
    m = WEEK_RE.fullmatch(week)
    if not m:
        raise WarehouseError(f"unexpected week id {week!r}")
    return dt.date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)


class DuckDBLayout(DuckDBMeta):
    """The target's relations: its table (or base table and view), week tables, the shadow."""

    def _week_tables(self, con: duckdb.DuckDBPyConnection, base: str) -> dict[str, str]:
        """Existing week tables of `base` (live or shadow name) keyed by week id."""
        return self._week_tables_of(con, base)[base]

    def _week_tables_of(
        self, con: duckdb.DuckDBPyConnection, *bases: str
    ) -> dict[str, dict[str, str]]:
        """The week tables of each of `bases`, keyed by week id, from one scan of the catalog
        (each scan lists every table of the file, and a swap needs several bases). The names
        are filtered here: in SQL, `starts_with(table_name, ...)` doubled the scan's cost, which
        grows with every week of history."""
        rows = con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
        ).fetchall()
        out: dict[str, dict[str, str]] = {b: {} for b in bases}
        for base in bases:
            prefix = f"{base}{WEEK_INFIX}"
            for (name,) in rows:
                rest = name[len(prefix) :]
                if name.startswith(prefix) and WEEK_RE.fullmatch(rest):
                    out[base][rest] = name
        return out

    def relation_exists(self, name: str) -> bool:
        """Whether a table or view `name` exists in the file's schema main."""
        validate_ident(name, "relation")
        try:
            with self.connect(read_only=True) as con:
                return self._relation_kind(con, name) is not None
        except WarehouseMissing:
            return False

    def ensure_table(self, spec: TableSpec) -> None:
        """Create metadata, template and the live/shadow views if missing (idempotent)."""
        with self.transaction() as con:
            self._ensure(con, spec)

    def _ensure(
        self, con: duckdb.DuckDBPyConnection, spec: TableSpec, *, adopting: bool = False
    ) -> str:
        """Create what is missing; the table holding the target's rows that no week table
        overrides: the target itself while it is a plain table, else the base table under its
        view. A table of the target's name that the framework never wrote (no template, no
        recorded day) holding rows is refused unless `adopting`: `adopt` checks it first."""
        self._ensure_meta(con, META_TABLES, ("version_seq",))
        template = f"{spec.name}{TEMPLATE_SUFFIX}"
        cols = ", ".join(f"{quote_ident(c.name)} {c.sql_type}" for c in spec.columns)
        found = set(
            con.execute(
                "SELECT 'view', view_name FROM duckdb_views() WHERE schema_name = 'main' "
                "AND NOT internal AND view_name IN ($a, $b) UNION ALL SELECT 'table', table_name "
                "FROM duckdb_tables() WHERE schema_name = 'main' AND table_name IN ($a, $c, $d)",
                {"a": spec.name, "b": spec.shadow_name, "c": base_table(spec), "d": template},
            ).fetchall()
        )
        if ("table", template) not in found:
            if ("table", spec.name) in found and not adopting and self._unadopted(con, spec):
                raise InvalidInput(
                    f"{spec.name} already exists in {self.path} with rows that backfill_assets "
                    "did not write, so it will not take it over unchecked: run `backfill-assets "
                    f"adopt {spec.name} --check`, then `backfill-assets adopt {spec.name}`, which "
                    "checks its columns and keys against the declaration and records its history "
                    "in place (docs/adopt.md). Nothing was written"
                )
            con.execute(f"CREATE TABLE IF NOT EXISTS {quote_ident(template)} ({cols})")
        has_base, has_view = ("table", base_table(spec)) in found, ("view", spec.name) in found
        rows_table = base_table(spec)
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
                con.execute(f"CREATE TABLE {quote_ident(base_table(spec))} ({cols})")
            self._recreate_view(con, spec, spec.name)
        if ("view", spec.shadow_name) not in found:
            self._recreate_view(con, spec, spec.shadow_name)
        return rows_table

    def _still_to_adopt(self, con: duckdb.DuckDBPyConnection, spec: TableSpec) -> bool:
        """The metadata ensured; whether the target is a table still to adopt (`_unadopted`),
        whose layout must then not be created."""
        self._ensure_meta(con, META_TABLES, ("version_seq",))
        return self._unadopted(con, spec)

    def _unadopted(self, con: duckdb.DuckDBPyConnection, spec: TableSpec) -> bool:
        """Whether the target is a table the user created holding rows (written by their old
        pipeline), with no template: not taken over silently, since its columns, duplicates
        and history are `adopt`'s to check and record. The metadata tables exist."""
        if self._relation_kind(con, f"{spec.name}{TEMPLATE_SUFFIX}") is not None:
            return False
        if self._relation_kind(con, spec.name) != "table":
            return False
        recorded = con.execute(
            f"SELECT count(*) FROM {M}.partition_versions WHERE table_name = $t", {"t": spec.name}
        ).fetchone()
        if recorded and recorded[0]:
            return False  # a file from before the template: the framework wrote this table
        # An empty table, created ahead of the first run, is the framework's to use.
        return con.execute(f"SELECT 1 FROM {quote_ident(spec.name)} LIMIT 1").fetchone() is not None

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
            f"ALTER TABLE {quote_ident(base_table(spec))} RENAME TO {quote_ident(spec.name)}"
        )

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

    def _drop_shadow(self, con: duckdb.DuckDBPyConnection, spec: TableSpec) -> int:
        tables = self._week_tables(con, spec.shadow_name)
        for name in tables.values():
            con.execute(f"DROP TABLE {quote_ident(name)}")
        con.execute(f"DELETE FROM {M}.shadow_log WHERE table_name=$t", {"t": spec.name})
        self._recreate_view(con, spec, spec.shadow_name)
        return len(tables)

    def live_week_count(self, spec: TableSpec) -> int:
        with self.connect(read_only=True) as con:
            return len(self._week_tables(con, spec.name))


def base_table(spec: TableSpec) -> str:
    """The table of the target's rows while a swap's week tables override some of them."""
    return f"{spec.name}{BASE_SUFFIX}"


def key_order(spec: TableSpec) -> str:
    """Rows in the order readers' zone maps prune best: the partition column, then the key."""
    return f" ORDER BY {column_list((spec.partition_column, *spec.primary_key))}"


def live_union(spec: TableSpec, tables: Sequence[str], hide: Sequence[str]) -> str:
    """The target's view body: its base table without the rows of the weeks `hide` (the weeks
    that have a week table; runs of consecutive weeks are one range), then `tables`."""
    pc = quote_ident(spec.partition_column)
    ranges: list[list[dt.date]] = []
    for week in sorted(hide):
        monday = monday_of(week)
        if ranges and ranges[-1][1] == monday:
            ranges[-1][1] = monday + WEEK
        else:
            ranges.append([monday, monday + WEEK])
    base = f"SELECT {column_list(spec.column_names)} FROM {quote_ident(base_table(spec))}"
    if ranges:
        hidden = " OR ".join(f"({pc} >= DATE '{a}' AND {pc} < DATE '{b}')" for a, b in ranges)
        base += f" WHERE NOT ({hidden})"
    return " UNION ALL ".join([base, *(week_union(spec, [t]) for t in tables)])


def week_union(spec: TableSpec, tables: Sequence[str]) -> str:
    """Tables as one query with the spec's columns: the view's body, and (in parentheses) the
    relation the writes and the gates read their own week tables through."""
    cols = column_list(spec.column_names)
    return " UNION ALL ".join(f"SELECT {cols} FROM {quote_ident(t)}" for t in tables)
