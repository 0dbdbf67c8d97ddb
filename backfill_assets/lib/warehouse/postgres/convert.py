"""PostgreSQL: adopting a plain table, or one range-partitioned by its day in another layout
(by month, with a default partition, ...), by converting it online to the framework's layout.

Readers keep reading the old table until the switch; the rows are copied beside it, a week at a
time, each week in one transaction (the caller holds the table's writer lease for each, so the
daily job can write between two):

1. `convert_start`: the new parent `<table>__adopting` (partitioned by range on the partition
   column, with the target's indexes), a change log and statement triggers on the old table (and
   on each of its partitions, for a pipeline that writes them directly) that record each day any
   INSERT, UPDATE or DELETE touches (so a write of the old pipeline during the conversion is
   never missed; a partition it creates meanwhile gets the triggers, and its days are logged,
   before the next copy of the changed weeks), the adoption's record in
   `backfill_meta.adoptions`, and, when a plain old table has no index leading with the
   partition column, one built concurrently
   (`<table>__adopt_day`; a rollback drops it). A partitioned old table needs none: each week's
   read is pruned to the partitions that hold it.
2. `convert_week`: copy one ISO week into its week table `<table>__w<week>` (the final name),
   under its ISO year table, and record each day's rows and checksum. Again for a week the log
   says changed since it was copied (`changed_weeks`).
3. `convert_switch`: one short transaction, as the swap's (each attempt waits at most
   `swap_lock_wait_s` for its locks): lock the old table, refuse to go on if the log holds a
   change not yet copied or a partition has no triggers, rename the old table to
   `<table>__adopted` (the backup) and the new parent to `<table>`, drop the triggers, create
   the shadow.
4. `convert_rollback` restores the old table (with the days written since the switch copied
   back into it); `convert_release` drops it.

A conversion killed at any point continues: a week table attached is a week done, and a change
logged after its copy is copied again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from backfill_assets.errors import AdoptionRefused, SwapRefused
from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import EMPTY
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.postgres.adopt import PostgresAdopt
from backfill_assets.lib.warehouse.postgres.connection import Connection, M, _x
from backfill_assets.lib.warehouse.postgres.idents import ident, ident_list
from backfill_assets.lib.warehouse.postgres.layout import BOUND
from backfill_assets.lib.warehouse.postgres.swap import PostgresSwap
from backfill_assets.lib.warehouse.shared.coordination import utcnow

ADOPTING, ADOPTED = "__adopting", "__adopted"
CONVERTING, SWITCHED, ROLLED_BACK, RELEASED = "converting", "switched", "rolled_back", "released"
WEEK = dt.timedelta(days=7)


class _Pending(Exception):
    """The switch found changes of the old table not yet copied (caught by the caller)."""


def monday(day: dt.date) -> dt.date:
    return day - dt.timedelta(days=day.weekday())


class PostgresConvert(PostgresAdopt, PostgresSwap):
    """The online conversion of a plain table (see the module's docstring)."""

    def _names(self, spec: TableSpec) -> tuple[str, str]:
        return (
            validate_ident(f"{spec.name}{ADOPTING}", "table name"),
            validate_ident(f"{spec.name}{ADOPTED}", "table name"),
        )

    def _ensure_adoption_meta(self, con: Connection) -> None:
        self._ensure_meta(con)
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.adoptions (table_name text PRIMARY KEY, "
            "state text NOT NULL, backup text NOT NULL, started_at timestamp, "
            "switched_at timestamp, changed_at timestamp)",
        )
        _x(
            con,
            f"CREATE TABLE IF NOT EXISTS {M}.adopt_changes (seq bigserial PRIMARY KEY, "
            "table_name text NOT NULL, partition_date date)",
        )

    def adoption_state(self, spec: TableSpec) -> str | None:
        """The adoption's state (converting, switched, rolled_back, released), or None."""
        with self.connect(read_only=True) as con:
            row = _x(con, "SELECT to_regclass(%(t)s) IS NOT NULL", {"t": f"{M}.adoptions"})
            if not (row.fetchone() or (False,))[0]:
                return None
            got = _x(
                con,
                f"SELECT state FROM {M}.adoptions WHERE table_name = %(t)s",
                {"t": self._key(spec.name)},
            ).fetchone()
        return str(got[0]) if got else None

    def _function(self, spec: TableSpec) -> str:
        """The trigger function of the table's change log (a hash of its key: a name of
        schema and table could pass PostgreSQL's 63 characters)."""
        digest = hashlib.sha256(self._key(spec.name).encode()).hexdigest()[:16]
        return f"{M}.adopt_log_{digest}"

    def _day_index(self, spec: TableSpec) -> str:
        return validate_ident(f"{spec.name}__adopt_day", "index name")

    def _index_days(self, spec: TableSpec) -> None:
        """An index on the old table's partition column, built without blocking its writers,
        unless one leads with it already: each week's copy then reads its week, not the
        table (without it, the conversion's cost grows with the square of the history)."""
        name = self._day_index(spec)
        with self.connect() as con:
            if self._leaves(con, spec.name):
                return
            row = _x(
                con,
                "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
                "i.indrelid AND a.attnum = i.indkey[0] WHERE i.indrelid = to_regclass(%(t)s) "
                "AND a.attname = %(c)s AND i.indisvalid)",
                {"t": self._q(spec.name), "c": spec.partition_column},
            ).fetchone()
            if row and row[0]:
                return
            # An index left invalid by a build that was killed is built again.
            _x(con, f"DROP INDEX CONCURRENTLY IF EXISTS {self._q(name)}")
            _x(
                con,
                f"CREATE INDEX CONCURRENTLY {ident(name)} ON {self._q(spec.name)} "
                f"({ident(spec.partition_column)})",
            )

    def convert_start(self, spec: TableSpec) -> None:
        """The new parent, the change log and its triggers, the record, an index on the old
        table's days if it has none (idempotent)."""
        adopting, adopted = self._names(spec)
        self._check_names(spec)
        self._index_days(spec)
        pc = ident(spec.partition_column)
        fn = self._function(spec)
        key = self._key(spec.name)
        with self.transaction(lock_wait_s=self.swap_lock_wait_s) as con:
            _x(con, "SELECT pg_advisory_xact_lock(hashtext(%(k)s))", {"k": self._write_lock(spec)})
            self._ensure_adoption_meta(con)
            _x(
                con,
                f"CREATE TABLE IF NOT EXISTS {self._q(adopting)} ({self._ddl_columns(spec)}) "
                f"PARTITION BY RANGE ({pc})",
            )
            _x(
                con,
                f"CREATE INDEX IF NOT EXISTS {ident(spec.name + '__key')} ON {self._q(adopting)} "
                f"({ident_list(spec.primary_key)})",
            )
            _x(
                con,
                f"CREATE INDEX IF NOT EXISTS {ident(spec.name + '__day')} ON "
                f"{self._q(adopting)} ({pc})",
            )
            # The days each statement touched, in the writer's own transaction.
            _x(
                con,
                f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $f$ "
                "BEGIN "
                "IF TG_OP IN ('UPDATE', 'DELETE') THEN "
                f"INSERT INTO {M}.adopt_changes (table_name, partition_date) "
                f"SELECT DISTINCT '{key}', {pc} FROM old_rows; END IF; "
                "IF TG_OP IN ('UPDATE', 'INSERT') THEN "
                f"INSERT INTO {M}.adopt_changes (table_name, partition_date) "
                f"SELECT DISTINCT '{key}', {pc} FROM new_rows; END IF; "
                "IF TG_OP = 'TRUNCATE' THEN "
                f"INSERT INTO {M}.adopt_changes (table_name, partition_date) "
                f"VALUES ('{key}', NULL); END IF; "
                "RETURN NULL; END $f$",
            )
            # A write through a partitioned table fires its own statement triggers only; one
            # straight into a partition fires the partition's.
            for q in (self._q(spec.name), *self._leaves(con, spec.name)):
                self._watch(con, fn, q)
            _x(
                con,
                f"INSERT INTO {M}.adoptions VALUES (%(t)s, %(s)s, %(b)s, %(now)s, NULL, %(now)s) "
                "ON CONFLICT (table_name) DO UPDATE SET state = excluded.state, "
                "changed_at = excluded.changed_at",
                {"t": key, "s": CONVERTING, "b": adopted, "now": utcnow()},
            )

    def _watch(self, con: Connection, fn: str, q: str) -> None:
        """The change log's statement triggers on the table or partition `q`."""
        for suffix, event, refs in (
            ("i", "INSERT", "NEW TABLE AS new_rows"),
            ("u", "UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
            ("d", "DELETE", "OLD TABLE AS old_rows"),
        ):
            name = ident(f"backfill_adopt_{suffix}")
            _x(con, f"DROP TRIGGER IF EXISTS {name} ON {q}")
            _x(
                con,
                f"CREATE TRIGGER {name} AFTER {event} ON {q} REFERENCING {refs} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
            )
        _x(con, f"DROP TRIGGER IF EXISTS backfill_adopt_t ON {q}")
        _x(
            con,
            f"CREATE TRIGGER backfill_adopt_t AFTER TRUNCATE ON {q} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
        )

    def _unwatched(self, con: Connection, spec: TableSpec) -> list[str]:
        """The old table's partitions without the change log's triggers: created (or attached)
        by its pipeline after the conversion started. One query, whatever the number of
        partitions: the switch asks it while it holds the table's lock."""
        return [
            str(r[0])
            for r in _x(
                con,
                "SELECT t.relid::regclass::text FROM pg_partition_tree(to_regclass(%(t)s)) t "
                "WHERE t.isleaf AND t.relid <> to_regclass(%(t)s) AND NOT EXISTS (SELECT 1 FROM "
                "pg_trigger g WHERE g.tgrelid = t.relid AND g.tgname = 'backfill_adopt_i')",
                {"t": self._q(spec.name)},
            ).fetchall()
        ]

    def watch_new_partitions(self, spec: TableSpec) -> int:
        """Watch the partitions the old pipeline created during the conversion: their triggers,
        and every day they hold logged as changed (written where no trigger saw it), in one
        transaction per partition (creating the triggers waits for its writers). How many."""
        with self.connect(read_only=True) as con:
            if not self._exists(con, spec.name):
                return 0
            new = self._unwatched(con, spec)
        fn, key = self._function(spec), self._key(spec.name)
        pc = ident(spec.partition_column)
        for q in new:
            with self.transaction(lock_wait_s=self.swap_lock_wait_s) as con:
                self._watch(con, fn, q)  # locks the partition against writes until the commit
                _x(
                    con,
                    f"INSERT INTO {M}.adopt_changes (table_name, partition_date) "
                    f"SELECT DISTINCT %(t)s, {pc} FROM {q}",
                    {"t": key},
                )
        return len(new)

    def converted_weeks(self, spec: TableSpec) -> set[dt.date]:
        """The Mondays of the weeks already copied (attached under the new parent)."""
        adopting, _ = self._names(spec)
        with self.connect(read_only=True) as con:
            if not self._exists(con, adopting):
                return set()
            names = self._attached(con, adopting)
        prefix = f"{spec.name}__w"
        out = set()
        for name in names:
            week = name[len(prefix) :]
            if name.startswith(prefix) and len(week) == 7:
                out.add(dt.date.fromisocalendar(int(week[:4]), int(week[5:]), 1))
        return out

    def changed_weeks(self, spec: TableSpec) -> set[dt.date]:
        """The Mondays of the weeks the log says changed since they were copied, partitions
        created meanwhile included (`watch_new_partitions`); a TRUNCATE of the old table is
        refused (AdoptionRefused)."""
        self.watch_new_partitions(spec)
        with self.connect(read_only=True) as con:
            rows = _x(
                con,
                f"SELECT DISTINCT partition_date FROM {M}.adopt_changes WHERE table_name = %(t)s",
                {"t": self._key(spec.name)},
            ).fetchall()
        if any(r[0] is None for r in rows):
            raise AdoptionRefused(
                f"{spec.name} was truncated during its adoption: run `backfill-assets adopt "
                f"{spec.name} --rollback` to drop the copy, then adopt it again"
            )
        return {monday(r[0]) for r in rows}

    def convert_week(self, spec: TableSpec, week: dt.date) -> dict[dt.date, str]:
        """Copy the ISO week starting `week` into its week table (again, if it was copied) and
        record each of its days; the days' checksums."""
        adopting, _ = self._names(spec)
        name = self._week_table(spec.name, week)
        nxt = week + WEEK
        pc = ident(spec.partition_column)
        cols = ident_list(spec.column_names)
        key = self._key(spec.name)
        with self.transaction() as con:
            _x(con, "SELECT pg_advisory_xact_lock(hashtext(%(k)s))", {"k": self._write_lock(spec)})
            seen = _x(
                con,
                f"SELECT coalesce(max(seq), 0) FROM {M}.adopt_changes WHERE table_name = %(t)s "
                "AND partition_date >= %(s)s AND partition_date < %(e)s",
                {"t": key, "s": week, "e": nxt},
            ).fetchone()
            if self._exists(con, name):
                _x(con, f"DELETE FROM {self._q(name)}")
            else:
                _x(
                    con,
                    f"CREATE TABLE {self._q(name)} ({self._ddl_columns(spec)}, CONSTRAINT "
                    f"{BOUND} CHECK ({pc} IS NOT NULL AND {pc} >= '{week}'::date AND "
                    f"{pc} < '{nxt}'::date))",
                )
            _x(
                con,
                f"INSERT INTO {self._q(name)} ({cols}) SELECT {cols} FROM {self._q(spec.name)} "
                f"WHERE {pc} >= %(s)s AND {pc} < %(e)s ORDER BY {pc}, "
                f"{ident_list(spec.primary_key)}",
                {"s": week, "e": nxt},
            )
            if name not in self._attached(con, adopting):
                year = self._adopting_year(con, spec, adopting, week)
                self._attach(con, year, name, week)
            sums = self._checksums(con, name, spec, week, nxt)
            days = {d: sums.get(d) for d in day_range(week, nxt)}
            self._bump_versions(con, spec, days, utcnow())
            _x(
                con,
                f"DELETE FROM {M}.adopt_changes WHERE table_name = %(t)s AND seq <= %(q)s "
                "AND partition_date >= %(s)s AND partition_date < %(e)s",
                {"t": key, "q": seen[0] if seen else 0, "s": week, "e": nxt},
            )
        return {d: c or EMPTY for d, c in days.items()}

    def _adopting_year(self, con: Connection, spec: TableSpec, adopting: str, week: dt.date) -> str:
        """The ISO year table of `week` under the new parent, created on first use."""
        year = self._year_table(spec, week)
        if self._exists(con, year):
            return year
        iso = week.isocalendar()[0]
        y0, y1 = dt.date.fromisocalendar(iso, 1, 1), dt.date.fromisocalendar(iso + 1, 1, 1)
        _x(
            con,
            f"CREATE TABLE {self._q(year)} (LIKE {self._q(adopting)} INCLUDING DEFAULTS "
            f"INCLUDING INDEXES) PARTITION BY RANGE ({ident(spec.partition_column)})",
        )
        _x(
            con,
            f"ALTER TABLE {self._q(adopting)} ATTACH PARTITION {self._q(year)} "
            f"FOR VALUES FROM ('{y0}') TO ('{y1}')",
        )
        return year

    def convert_switch(self, spec: TableSpec) -> bool:
        """Switch the names in one short transaction; False, changing nothing, when the log
        holds a change not yet copied (copy `changed_weeks` again, then switch)."""
        adopting, adopted = self._names(spec)
        key = self._key(spec.name)

        def attempt() -> None:
            with self.transaction(lock_wait_s=self.swap_lock_wait_s) as con:
                _x(
                    con,
                    "SELECT pg_advisory_xact_lock(hashtext(%(k)s))",
                    {"k": self._write_lock(spec)},
                )
                _x(con, f"LOCK TABLE {self._q(spec.name)} IN ACCESS EXCLUSIVE MODE")
                left = _x(
                    con,
                    f"SELECT count(*) FROM {M}.adopt_changes WHERE table_name = %(t)s",
                    {"t": key},
                ).fetchone()
                # A partition created since the log was read may hold unlogged rows: the
                # caller's next `changed_weeks` watches it and logs its days.
                if (left and left[0]) or self._unwatched(con, spec):
                    raise _Pending
                self._drop_triggers(con, spec, spec.name)
                _x(con, f"ALTER TABLE {self._q(spec.name)} RENAME TO {ident(adopted)}")
                _x(con, f"ALTER TABLE {self._q(adopting)} RENAME TO {ident(spec.name)}")
                self._ensure(con, spec)  # the shadow
                _x(
                    con,
                    f"UPDATE {M}.adoptions SET state = %(s)s, switched_at = %(now)s, "
                    "changed_at = %(now)s WHERE table_name = %(t)s",
                    {"s": SWITCHED, "now": utcnow(), "t": key},
                )

        try:
            self._locking("switch", spec, attempt)
        except _Pending:
            return False
        return True

    def _drop_triggers(self, con: Connection, spec: TableSpec, on: str) -> None:
        for q in (self._q(on), *self._leaves(con, on)):
            for suffix in "iudt":
                _x(con, f"DROP TRIGGER IF EXISTS backfill_adopt_{suffix} ON {q}")
        _x(con, f"DROP FUNCTION IF EXISTS {self._function(spec)}()")

    def _leaves(self, con: Connection, name: str) -> list[str]:
        """The partitions holding the rows of a partitioned table `name` (none: a plain
        table), as SQL names."""
        return [
            str(r[0])
            for r in _x(
                con,
                "SELECT t.relid::regclass::text FROM pg_partition_tree(to_regclass(%(t)s)) t "
                "WHERE t.isleaf AND t.relid <> to_regclass(%(t)s)",
                {"t": self._q(name)},
            ).fetchall()
        ]

    def convert_rollback(self, spec: TableSpec) -> int:
        """Put the old table back under its name; the days written since the switch (the
        daily job's) are copied into it first. Drops the converted layout and its records;
        the days copied back."""
        adopting, adopted = self._names(spec)
        key = self._key(spec.name)
        holder = self.active_plan(spec.name)
        if holder is not None:
            raise SwapRefused(
                f"plan {holder} holds {spec.name}: release or abandon it before rolling back "
                "its adoption. Nothing was changed"
            )
        state = self.adoption_state(spec)
        if state not in (CONVERTING, SWITCHED):
            raise SwapRefused(
                f"{spec.name} has no adoption to roll back ({state or 'never adopted'} here); "
                "nothing was changed"
            )

        def attempt() -> int:
            with self.transaction(lock_wait_s=self.swap_lock_wait_s) as con:
                _x(
                    con,
                    "SELECT pg_advisory_xact_lock(hashtext(%(k)s))",
                    {"k": self._write_lock(spec)},
                )
                copied = 0
                if state == SWITCHED:
                    copied = self._copy_back(con, spec, adopted)
                    _x(con, f"DROP TABLE IF EXISTS {self._q(spec.shadow_name)}")
                    for name in self._week_tables(con, spec.shadow_name).values():
                        _x(con, f"DROP TABLE {self._q(name)}")
                    # Its week and year tables go with it; a view over it makes this fail.
                    _x(con, f"DROP TABLE {self._q(spec.name)}")
                    _x(con, f"ALTER TABLE {self._q(adopted)} RENAME TO {ident(spec.name)}")
                    _x(con, f"DROP INDEX IF EXISTS {self._q(self._day_index(spec))}")
                else:
                    self._drop_triggers(con, spec, spec.name)
                    _x(con, f"DROP TABLE IF EXISTS {self._q(adopting)}")
                    _x(con, f"DROP INDEX IF EXISTS {self._q(self._day_index(spec))}")
                for table in ("partition_versions", "shadow_log", "adopt_changes"):
                    _x(con, f"DELETE FROM {M}.{table} WHERE table_name = %(t)s", {"t": key})
                _x(
                    con,
                    f"UPDATE {M}.adoptions SET state = %(s)s, changed_at = %(now)s "
                    "WHERE table_name = %(t)s",
                    {"s": ROLLED_BACK, "now": utcnow(), "t": key},
                )
                return copied

        return int(self._locking("rollback of the adoption", spec, attempt))

    def _copy_back(self, con: Connection, spec: TableSpec, adopted: str) -> int:
        """The days written after the switch, from the converted table into the old one."""
        key = self._key(spec.name)
        rows = _x(
            con,
            f"SELECT v.partition_date FROM {M}.partition_versions v JOIN {M}.adoptions a "
            "ON a.table_name = v.table_name WHERE v.table_name = %(t)s "
            "AND v.written_at > a.switched_at",
            {"t": key},
        ).fetchall()
        days = sorted(r[0] for r in rows)
        if not days:
            return 0
        pc = ident(spec.partition_column)
        cols = ident_list(spec.column_names)
        params: dict[str, Any] = {"d": days}
        _x(con, f"DELETE FROM {self._q(adopted)} WHERE {pc} = ANY(%(d)s)", params)
        _x(
            con,
            f"INSERT INTO {self._q(adopted)} ({cols}) SELECT {cols} FROM {self._q(spec.name)} "
            f"WHERE {pc} = ANY(%(d)s)",
            params,
        )
        return len(days)

    def convert_release(self, spec: TableSpec) -> bool:
        """Drop the old table kept since the switch; whether there was one."""
        _, adopted = self._names(spec)
        if self.adoption_state(spec) != SWITCHED:
            raise SwapRefused(
                f"{spec.name} has no switched adoption whose old table could be released; "
                "nothing was changed"
            )
        with self.transaction() as con:
            _x(con, "SELECT pg_advisory_xact_lock(hashtext(%(k)s))", {"k": self._write_lock(spec)})
            existed = self._exists(con, adopted)
            _x(con, f"DROP TABLE IF EXISTS {self._q(adopted)}")
            _x(
                con,
                f"UPDATE {M}.adoptions SET state = %(s)s, changed_at = %(now)s "
                "WHERE table_name = %(t)s",
                {"s": RELEASED, "now": utcnow(), "t": self._key(spec.name)},
            )
        return existed
