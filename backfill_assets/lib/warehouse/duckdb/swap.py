"""DuckDB: the swap, the rollback, the release and the abandon (see the package's docstring)."""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb

from backfill_assets.errors import SwapRefused
from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.dates import parse_day, week_id
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import (
    ABANDONED,
    EMPTY,
    RELEASED,
    ROLLED_BACK,
    SWAPPED,
    Companion,
    PartitionMove,
    SwapResult,
    check_companions,
    plan_companions,
    refuse_abandon,
    swap_move,
)
from backfill_assets.lib.warehouse.duckdb.connection import M
from backfill_assets.lib.warehouse.duckdb.layout import (
    DAY,
    WEEK,
    DuckDBLayout,
    base_table,
    key_order,
    monday_of,
)
from backfill_assets.lib.warehouse.identifiers import (
    column_list,
    quote_ident,
    validate_ident,
)


class DuckDBSwap(DuckDBLayout):
    """Swap, rollback, release, abandon: renames in one transaction each."""

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
            state = self._swap_state(con, spec.name, plan_id)
            if not self._may_swap(spec.name, plan_id, state, self._active_plan(con, spec.name)):
                return SwapResult(plan_id, "already_swapped", {}, 0, time.perf_counter() - t0)
            ins = self._check_versions(con, spec, plan_id, days)
            outs = self._recorded(con, spec.name, days)
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
                    f"{quote_ident(base_table(spec))}"
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
                week_live = live.get(week, base_table(spec))
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
            # One statement each (executemany runs one statement per row).
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

    def _restore_companions(
        self, con: duckdb.DuckDBPyConnection, moves: list[tuple[str, str, bool, bool]]
    ) -> tuple[str, ...]:
        """In the rollback's transaction: each companion's published table dropped, its backup
        (if it had a live table before the swap) renamed back (`_companion_moves`)."""
        for live, backup, had_live, exists in moves:
            if exists:
                con.execute(f"DROP TABLE {quote_ident(live)}")
            if had_live:
                con.execute(f"ALTER TABLE {quote_ident(backup)} RENAME TO {quote_ident(live)}")
        return tuple(live for live, *_ in moves)

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
        monday = monday_of(week)
        outside = f"NOT ({pc} >= $s AND {pc} < $e) AND {pc} >= $m AND {pc} < $n"
        bounds = {"s": r0, "e": r1, "m": monday, "n": monday + WEEK}
        con.execute(f"DELETE FROM {quote_ident(into)} WHERE {outside}", bounds)
        if source is not None:
            con.execute(
                f"INSERT INTO {quote_ident(into)} ({cols}) SELECT {cols} FROM "
                f"{quote_ident(source)} WHERE {outside}",
                bounds,
            )

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
            sums = self._checksums(con, quote_ident(relation), spec, lacking[0], lacking[-1] + DAY)
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
            self._refuse_later_swaps(con, spec, plan_id)
            companion_moves = self._companion_moves(con, spec.name, plan_id)
            backup_base = self._backup_base(spec, plan_id)
            weeks = self._week_tables_of(con, spec.name, backup_base)
            live, backup = weeks[spec.name], weeks[backup_base]
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            result: dict[dt.date, PartitionMove] = {}
            dropped = False
            days = [d for _, r0, r1, _, _ in log for d in day_range(r0, r1)]
            # What each day held before the swap (recorded by it) and holds now (recorded by
            # its last write); computed only for files from before they were recorded.
            restored = dict(
                con.execute(
                    f"SELECT partition_date, checksum_out FROM {M}.swap_days "
                    "WHERE table_name = $t AND plan_id = $p AND checksum_out IS NOT NULL",
                    {"t": spec.name, "p": plan_id},
                ).fetchall()
            )
            current = self._recorded(con, spec.name, days)
            for week, r0, r1, had_live, _ in log:
                if had_live and week not in backup:
                    raise SwapRefused(f"backup of week {week} for plan {plan_id} is missing")
                wdays = day_range(r0, r1)
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
                        f"{quote_ident(self._week_table(spec.name, monday_of(week)))}"
                    )
                elif cur:
                    # The week lived in the base table (or nowhere): its rows there, hidden
                    # since the swap, come back when its week table goes. Days outside the plan
                    # are carried into the base table first, as they are now.
                    self._fill(con, restored, base_table(spec), spec, wdays)
                    if len(wdays) < 7:
                        self._carry_outside(con, spec, base_table(spec), cur, week, r0, r1)
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

    def release_backup(self, spec: TableSpec, plan_id: str) -> int:
        """Drop a swapped plan's backup weeks; after this the plan can no longer roll back.

        The plan's weeks then move from their week tables into the base table (its rows of
        them, the swap's backup, go), in the same transaction: readers of the view see the same
        rows, through one table again. This copies the plan's range, once, outside the swap."""
        validate_ident(plan_id, "plan id")
        with self.transaction() as con:
            self._ensure(con, spec)
            state = self._swap_state(con, spec.name, plan_id)
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
                for name in self._companion_backups(con, spec.name, plan_id):
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
        base = quote_ident(base_table(spec))
        pc = quote_ident(spec.partition_column)
        cols = column_list(spec.column_names)
        for week in folded:
            monday = monday_of(week)
            (deleted,) = con.execute(
                f"DELETE FROM {base} WHERE {pc} >= $m AND {pc} < $n",
                {"m": monday, "n": monday + WEEK},
            ).fetchone()  # type: ignore[misc]
            backups += deleted > 0
            con.execute(
                f"INSERT INTO {base} ({cols}) SELECT {cols} FROM {quote_ident(live[week])}"
                + key_order(spec)
            )
            con.execute(f"DROP TABLE {quote_ident(live[week])}")
        self._settle(con, spec, {w: t for w, t in live.items() if w not in folded})
        return backups

    def drop_shadow(self, spec: TableSpec, plan_id: str | None = None) -> int:
        """Drop every shadow week and its build log; with `plan_id` (an abandoned plan), free
        the table from that plan in the same transaction."""
        with self.transaction() as con:
            unadopted = self._still_to_adopt(con, spec)
            if not unadopted:
                self._ensure(con, spec)
            if plan_id is not None:
                self._free_plan(con, spec.name, plan_id)
            return 0 if unadopted else self._drop_shadow(con, spec)

    def abandon(self, spec: TableSpec, plan_id: str) -> int:
        """Give up a plan that was not swapped, in one transaction: its shadow weeks dropped
        (if it holds the table), the table freed, the plan recorded abandoned. Refuses
        (SwapRefused, nothing changed) a plan that was swapped or is over. The shadow weeks
        dropped."""
        validate_ident(plan_id, "plan id")
        with self.transaction() as con:
            # A plan approved before its table was adopted: nothing of it was written, and
            # abandoning it must not take the user's table over (nor leave it held, which would
            # stop its adoption).
            unadopted = self._still_to_adopt(con, spec)
            if not unadopted:
                self._ensure(con, spec)
            refuse_abandon(plan_id, spec.name, self._swap_state(con, spec.name, plan_id),
                           self._plan_row(con, plan_id))  # fmt: skip
            dropped = 0
            if self._active_plan(con, spec.name) == plan_id:
                self._free_plan(con, spec.name, plan_id)
                dropped = 0 if unadopted else self._drop_shadow(con, spec)
            self._set_status(con, spec.name, plan_id, ABANDONED)
        return dropped
