"""PostgreSQL: the target's layout, one table partitioned by ISO year, then by ISO week."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from backfill_assets.constants import BACKUP_INFIX, WEEK_INFIX, YEAR_INFIX
from backfill_assets.errors import InvalidInput, WarehouseError
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.dialects import column_type
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.postgres.connection import Connection, M, _x
from backfill_assets.lib.warehouse.postgres.idents import ident, ident_list
from backfill_assets.lib.warehouse.postgres.meta import PostgresMeta

BOUND = "backfill_week_bound"  # the CHECK constraint every week table carries


MAX_IDENT = 63  # PostgreSQL truncates longer identifiers


PLAN_ID_LEN = 12


class PostgresLayout(PostgresMeta):
    """The target's relations: its partitioned table, year and week tables, the shadow."""

    def _week_tables(self, con: Connection, base: str) -> dict[str, str]:
        """Existing week tables of `base` (live, shadow or backup name) keyed by week id."""
        prefix = f"{base}{WEEK_INFIX}"
        rows = _x(
            con,
            "SELECT tablename FROM pg_tables WHERE schemaname = %(s)s "
            "AND starts_with(tablename, %(p)s)",
            {"s": self.schema, "p": prefix},
        ).fetchall()
        out = {}
        for (name,) in rows:
            rest = name[len(prefix) :]
            if len(rest) == 7 and rest[4] == "w" and rest[:4].isdigit() and rest[5:].isdigit():
                out[rest] = name
        return out

    def _attached(self, con: Connection, parent: str) -> set[str]:
        """The week tables under `parent`, directly or through its ISO-year tables."""
        rows = _x(
            con,
            "SELECT c.relname FROM pg_partition_tree(to_regclass(%(p)s)) t "
            "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf AND t.level > 0",
            {"p": self._q(parent)},
        ).fetchall()
        return {r[0] for r in rows}

    @staticmethod
    def _year_table(spec: TableSpec, monday: dt.date) -> str:
        return validate_ident(f"{spec.name}{YEAR_INFIX}{monday.isocalendar()[0]}", "year table")

    def _week_parent(self, con: Connection, spec: TableSpec, monday: dt.date) -> str:
        """Where a week of the target attaches: its ISO year's table, created on first use, so
        that attaching and detaching a week costs the same whatever the years of history (each
        changes one year's list of at most 53 weeks, not the list of every week). A target whose
        weeks were attached to it directly (before the year level) keeps them that way."""
        year = self._year_table(spec, monday)
        if self._exists(con, year):
            return year
        flat = _x(
            con,
            "SELECT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%(t)s) AND c.relkind = 'r')",
            {"t": self._q(spec.name)},
        ).fetchone()
        if flat and flat[0]:
            return spec.name
        iso_year = monday.isocalendar()[0]
        y0 = dt.date.fromisocalendar(iso_year, 1, 1)
        y1 = dt.date.fromisocalendar(iso_year + 1, 1, 1)
        # Created standalone, then attached: CREATE ... PARTITION OF would block readers.
        _x(
            con,
            f"CREATE TABLE {self._q(year)} (LIKE {self._q(spec.name)} INCLUDING DEFAULTS "
            f"INCLUDING INDEXES) PARTITION BY RANGE ({ident(spec.partition_column)})",
        )
        _x(
            con,
            f"ALTER TABLE {self._q(spec.name)} ATTACH PARTITION {self._q(year)} "
            f"FOR VALUES FROM ('{y0}') TO ('{y1}')",
        )
        return year

    def _parent_of(self, con: Connection, name: str) -> str:
        """The table `name` is attached to (a year table, the target, or the shadow)."""
        row = _x(
            con,
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent "
            "WHERE i.inhrelid = to_regclass(%(n)s)",
            {"n": self._q(name)},
        ).fetchone()
        if row is None:
            raise WarehouseError(f"{self.schema}.{name} is not attached to any table")
        return str(row[0])

    def relation_exists(self, name: str) -> bool:
        """Whether a relation `name` exists in the warehouse schema."""
        validate_ident(name, "relation")
        with self.connect(read_only=True) as con:
            return self._relation_kind(con, name) is not None

    def ensure_table(self, spec: TableSpec) -> None:
        """Create the metadata, the partitioned target and its shadow if missing (idempotent)."""
        with self.transaction() as con:
            self._ensure(con, spec)

    def _check_names(self, spec: TableSpec) -> None:
        longest = f"{spec.name}{BACKUP_INFIX}{'p' * PLAN_ID_LEN}{WEEK_INFIX}2026w01"
        if len(longest) > MAX_IDENT:
            raise InvalidInput(
                f"table name {spec.name!r} is too long for PostgreSQL: its backup week tables "
                f"would be {len(longest)} characters (limit {MAX_IDENT}); use a name of at most "
                f"{MAX_IDENT - len(longest) + len(spec.name)} characters"
            )

    def _write_lock(self, spec: TableSpec) -> str:
        """The key of the table's write lock (an advisory lock on `hashtext(key)`)."""
        return f"backfill_assets:write:{self._key(spec.name)}"

    def _ensure(self, con: Connection, spec: TableSpec) -> None:
        """Take the table's write lock, then create what is missing. Every transaction that
        writes the table (live or shadow rows, swap, rollback, release, drop) starts here, so
        they take turns even without the writer lease: e.g. a live write never commits between
        the swap's copy of a partial week's other days and its move of that week. Other tables
        are not held up. The lock lasts until COMMIT or ROLLBACK."""
        self._check_names(spec)
        _x(con, "SELECT pg_advisory_xact_lock(hashtext(%(k)s))", {"k": self._write_lock(spec)})
        self._ensure_meta(con)
        if not (self._exists(con, spec.name) and self._exists(con, spec.shadow_name)):
            cols = self._ddl_columns(spec)
            pc = ident(spec.partition_column)
            for base in (spec.name, spec.shadow_name):
                _x(
                    con,
                    f"CREATE TABLE IF NOT EXISTS {self._q(base)} ({cols}) "
                    f"PARTITION BY RANGE ({pc})",
                )
                _x(
                    con,
                    f"CREATE INDEX IF NOT EXISTS {ident(base + '__key')} "
                    f"ON {self._q(base)} ({ident_list(spec.primary_key)})",
                )
                # A week holds seven days: a reader of one day reads its index, not the week.
                _x(
                    con,
                    f"CREATE INDEX IF NOT EXISTS {ident(base + '__day')} ON {self._q(base)} ({pc})",
                )
        self._refuse_unpartitioned(con, spec)

    def _refuse_unpartitioned(self, con: Connection, spec: TableSpec) -> None:
        """A table of that name that is not range-partitioned on the partition column cannot be
        swapped into; say how to move it rather than fail half-way through a write."""
        row = _x(
            con,
            "SELECT p.partstrat, a.attname FROM pg_partitioned_table p JOIN pg_attribute a "
            "ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0] "
            "WHERE p.partrelid = to_regclass(%(t)s)",
            {"t": self._q(spec.name)},
        ).fetchone()
        if row is None or row[0] != "r" or row[1] != spec.partition_column:
            raise InvalidInput(
                f"{self.schema}.{spec.name} exists but is not partitioned by range on "
                f"{spec.partition_column}, so backfill_assets cannot write it yet: adopt it "
                f"(`backfill-assets adopt {spec.name}`), which converts it online to the "
                "partitioned layout and keeps the old table until you release it (docs/adopt.md)"
            )

    @staticmethod
    def _ddl_columns(spec: TableSpec) -> str:
        return ", ".join(
            f"{ident(c.name)} {column_type(c.sql_type, 'postgres')}" for c in spec.columns
        )

    def _create_week(
        self, con: Connection, spec: TableSpec, parent: str, monday: dt.date, *, attach: bool = True
    ) -> str:
        """A week table of `parent` (target or shadow), created standalone with its bound as a
        CHECK constraint, then attached (ATTACH does not block readers, CREATE ... PARTITION OF
        would). It copies the target's indexes, yours included: attaching a shadow week to the
        target then matches them instead of building them inside the swap. `attach=False` leaves
        the attaching to the caller (`_load_fresh_week`)."""
        name = self._week_table(parent, monday)
        nxt = monday + dt.timedelta(days=7)
        pc = ident(spec.partition_column)
        _x(
            con,
            f"CREATE TABLE {self._q(name)} (LIKE {self._q(spec.name)} INCLUDING DEFAULTS "
            "INCLUDING INDEXES, "
            f"CONSTRAINT {BOUND} CHECK ({pc} IS NOT NULL AND {pc} >= '{monday}'::date "
            f"AND {pc} < '{nxt}'::date))",
        )
        if attach:
            self._attach_week(con, spec, parent, name, monday)
        return name

    def _attach_week(
        self, con: Connection, spec: TableSpec, parent: str, name: str, monday: dt.date
    ) -> None:
        if parent == spec.name:
            parent = self._week_parent(con, spec, monday)
        self._attach(con, parent, name, monday)

    def _attach(self, con: Connection, parent: str, name: str, monday: dt.date) -> None:
        _x(con, self._attach_sql(parent, name, monday))

    def _attach_sql(self, parent: str, name: str, monday: dt.date) -> str:
        nxt = monday + dt.timedelta(days=7)
        return (
            f"ALTER TABLE {self._q(parent)} ATTACH PARTITION {self._q(name)} "
            f"FOR VALUES FROM ('{monday}') TO ('{nxt}')"
        )

    def _detach_sql(self, parent: str, name: str) -> str:
        return f"ALTER TABLE {self._q(parent)} DETACH PARTITION {self._q(name)}"

    @staticmethod
    def _script(con: Connection, statements: Sequence[str]) -> None:
        """Statements composed here from validated identifiers, without parameters, sent as one
        script: one round trip to the server, not one per statement. A swap's catalog moves
        hold locks that block the target's readers from the first to the commit; at five years
        they were 1,300 statements (docs/performance.md)."""
        if statements:
            _x(con, ";\n".join(statements))

    def _drop_shadow(self, con: Connection, spec: TableSpec) -> int:
        tables = self._week_tables(con, spec.shadow_name)
        for name in tables.values():
            _x(con, f"DROP TABLE {self._q(name)}")
        _x(
            con,
            f"DELETE FROM {M}.shadow_log WHERE table_name = %(t)s",
            {"t": self._key(spec.name)},
        )
        return len(tables)

    def live_week_count(self, spec: TableSpec) -> int:
        with self.connect(read_only=True) as con:
            return len(self._attached(con, spec.name))
