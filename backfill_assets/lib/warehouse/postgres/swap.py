"""PostgreSQL: the swap, the rollback, the release and the abandon (see the package's docstring)."""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

import psycopg

from backfill_assets.errors import SwapRefused, WarehouseError
from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.dates import parse_day, week_id, week_monday
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
    rows_of,
)
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.postgres.connection import Connection, M, _LockWait, _x, _xm
from backfill_assets.lib.warehouse.postgres.idents import ident, ident_list
from backfill_assets.lib.warehouse.postgres.layout import PostgresLayout
from backfill_assets.lib.warehouse.shared.coordination import utcnow


class PostgresSwap(PostgresLayout):
    """Swap, rollback, release, abandon: DETACH, rename, ATTACH in one transaction each."""

    def _locking(self, what: str, spec: TableSpec, attempt: Any) -> Any:
        """Run `attempt()` (one transaction) until it gets its locks, each try waiting at most
        `swap_lock_wait_s`, for `lock_timeout_s` in all; then refuse, naming who held them."""
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                return attempt()
            except _LockWait:
                if time.monotonic() + delay >= deadline:
                    break
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise WarehouseError(
            f"the {what} of {spec.name} waited {self.lock_timeout_s:g}s for sessions using it "
            f"to finish and gave up; nothing was changed. {self._holders(spec)}Retry when they "
            "are done, or raise BACKFILL_ASSETS_LOCK_TIMEOUT_S"
        )

    def _holders(self, spec: TableSpec) -> str:
        """Who holds locks on the table (for the refusal), best effort: sessions holding one of
        its relations, or its write lock (a writer between statements may hold only that). An
        advisory lock on one bigint shows in pg_locks as its high half (classid) and low half
        (objid), with objsubid 1."""
        with suppress(psycopg.Error, WarehouseError), self.connect() as con:
            rows = _x(
                con,
                "SELECT DISTINCT a.pid, a.state, left(regexp_replace(a.query, '\\s+', ' ', 'g'), "
                "80), extract(epoch FROM now() - a.xact_start)::int FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.granted "
                "AND a.pid <> pg_backend_pid() AND (l.relation IN (SELECT unnest(ARRAY["
                "i.inhparent, i.inhrelid]) FROM pg_inherits i WHERE i.inhparent = "
                "to_regclass(%(t)s)) OR (l.locktype = 'advisory' AND l.objsubid = 1 "
                "AND l.classid = ((hashtext(%(k)s)::bigint >> 32) & 4294967295)::oid "
                "AND l.objid = (hashtext(%(k)s)::bigint & 4294967295)::oid)) LIMIT 3",
                {"t": self._q(spec.name), "k": self._write_lock(spec)},
            ).fetchall()
            if rows:
                shown = "; ".join(f"pid {p} ({s}, {q!r}, {age}s)" for p, s, q, age in rows)
                return f"Held by: {shown}. "
        return ""

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
        result = self._locking(
            "swap", spec, lambda: self._swap_once(spec, plan_id, days, companions, details)
        )
        if result is None:
            return SwapResult(plan_id, "already_swapped", {}, 0, time.perf_counter() - t0)
        partitions, weeks, published = result
        return SwapResult(
            plan_id, "swapped", partitions, weeks, time.perf_counter() - t0, published
        )

    def _swap_once(
        self,
        spec: TableSpec,
        plan_id: str,
        days: list[dt.date],
        companions: Sequence[Companion] = (),
        details: Mapping[str, Any] | None = None,
    ) -> tuple[dict[dt.date, PartitionMove], int, tuple[str, ...]] | None:
        key = self._key(spec.name)
        with self.transaction(lock_wait_s=self.swap_lock_wait_s) as con:
            self._ensure(con, spec)
            # The plan's claim, locked: no approval, release or abandon of the table meanwhile.
            holder = _x(
                con,
                f"SELECT plan_id FROM {M}.plan_claims WHERE table_name = %(t)s FOR UPDATE",
                {"t": key},
            ).fetchone()
            state = self._swap_state(con, spec.name, plan_id)
            if not self._may_swap(spec.name, plan_id, state, holder[0] if holder else None):
                return None
            logged = self._check_versions(con, spec, plan_id, days)
            by_week: dict[str, list[dt.date]] = defaultdict(list)
            for d in days:
                by_week[week_id(d)].append(d)
            live = self._week_tables(con, spec.name)
            shadow = self._week_tables(con, spec.shadow_name)
            outs = self._recorded(con, spec.name, days)
            pc = ident(spec.partition_column)
            cols = ident_list(spec.column_names)
            now = utcnow()
            backup_base = self._backup_base(spec, plan_id)
            partitions: dict[dt.date, PartitionMove] = {}
            # 1. Row work first, before any lock that blocks readers of the target: only the
            # days of a partial week outside the plan are copied, from the live week.
            for week, wdays in sorted(by_week.items()):
                r0, r1 = wdays[0], wdays[-1] + dt.timedelta(days=1)
                if (r1 - r0).days != len(wdays):
                    raise SwapRefused(f"plan days in week {week} are not contiguous: {wdays}")
                if week not in shadow:
                    raise SwapRefused(
                        f"shadow week {week} of {spec.name} does not exist; run the plan's batch "
                        "for it first"
                    )
                if len(wdays) < 7:
                    outside = f"NOT ({pc} >= %(s)s AND {pc} < %(e)s)"
                    rng = {"s": r0, "e": r1}
                    _x(con, f"DELETE FROM {self._q(shadow[week])} WHERE {outside}", rng)
                    if week in live:
                        _x(
                            con,
                            f"INSERT INTO {self._q(shadow[week])} ({cols}) SELECT {cols} "
                            f"FROM {self._q(live[week])} WHERE {outside}",
                            rng,
                        )
                _x(con, 
                    f"INSERT INTO {M}.swap_log VALUES (%(t)s, %(p)s, %(w)s, %(s)s, %(e)s, %(h)s, "
                    "'swapped', %(now)s)",
                    {"t": key, "p": plan_id, "w": week, "s": r0, "e": r1, "h": week in live,
                     "now": now},
                )  # fmt: skip
                for d in wdays:
                    ins, out = logged[d], outs.get(d) or EMPTY
                    partitions[d] = PartitionMove(rows_of(ins), ins, rows_of(out), out)
            self._record_swap_days(con, key, plan_id, partitions)
            self._bump_versions(con, spec, {d: p.checksum_in for d, p in partitions.items()}, now)
            # The companions: checked and recorded before any lock that blocks their readers.
            published = self._plan_companions(con, key, plan_id, companions)
            self._set_status(con, spec.name, plan_id, SWAPPED, details)
            # Where each week moves from and to, read (and a new ISO year's table created and
            # attached, which readers do not wait for) before any lock that blocks them.
            parents = {
                week: (
                    self._parent_of(con, live[week]) if week in live else None,
                    self._week_parent(con, spec, week_monday(wdays[0])),
                )
                for week, wdays in sorted(by_week.items())
            }
            # 2. The catalog moves, sent as one script: they hold locks that block the
            # target's readers until COMMIT. The companions are locked first: a reader of a
            # mart and the target in one statement takes the mart's lock first (its FROM
            # order), so it waits for the swap holding nothing the swap needs; locked last, the
            # reader would hold the mart while waiting for the target and the swap would wait
            # for it (each attempt then times out and starts again).
            moves: list[str] = []
            held = [self._q(c.live) for c, _, had_live in published if had_live]
            if held:
                moves.append(f"LOCK TABLE {', '.join(held)} IN ACCESS EXCLUSIVE MODE")
            # Then ACCESS EXCLUSIVE on the weeks' year tables until COMMIT.
            for week, wdays in sorted(by_week.items()):
                monday = week_monday(wdays[0])
                was_in, goes_to = parents[week]
                moves.append(self._detach_sql(spec.shadow_name, shadow[week]))
                if was_in is not None:
                    moves.append(self._detach_sql(was_in, live[week]))
                    backup = self._week_table(backup_base, monday)
                    moves.append(f"ALTER TABLE {self._q(live[week])} RENAME TO {ident(backup)}")
                name = self._week_table(spec.name, monday)
                moves.append(f"ALTER TABLE {self._q(shadow[week])} RENAME TO {ident(name)}")
                moves.append(self._attach_sql(goes_to, name, monday))
            # Then each companion (ACCESS EXCLUSIVE on it until COMMIT): live -> backup,
            # shadow -> live.
            for c, backup, had_live in published:
                if had_live:
                    moves.append(f"ALTER TABLE {self._q(c.live)} RENAME TO {ident(backup)}")
                moves.append(f"ALTER TABLE {self._q(c.shadow)} RENAME TO {ident(c.live)}")
            self._script(con, moves)
        return partitions, len(by_week), tuple(c.live for c, _, _ in published)

    def _plan_companions(
        self, con: Connection, key: str, plan_id: str, companions: Sequence[Companion]
    ) -> list[tuple[Companion, str, bool]]:
        """Each companion with its backup name and whether its live exists, recorded in
        swap_companions; refuses (the transaction changes nothing) when a shadow is missing,
        or when views read the live table (they would follow it to its backup)."""
        if not companions:
            return []
        moves = plan_companions(
            plan_id, companions, lambda n: self._relation_kind(con, n), f"{self.schema}."
        )
        for c, _, had_live in moves:
            views = self._dependent_views(con, c.live) if had_live else []
            if views:
                raise SwapRefused(
                    f"companion {self.schema}.{c.live} is read by {', '.join(views)}: PostgreSQL "
                    "views follow a renamed table, so they would keep reading the replaced rows "
                    "in its backup; drop them before the swap and create them again after it. "
                    "Nothing was changed"
                )
        with con.cursor() as cur:
            _xm(cur, 
                f"INSERT INTO {M}.swap_companions VALUES (%(t)s, %(p)s, %(l)s, %(s)s, %(b)s, "
                "%(h)s)",
                [{"t": key, "p": plan_id, "l": c.live, "s": c.shadow, "b": b, "h": h}
                 for c, b, h in moves],
            )  # fmt: skip
        return moves

    def rollback(self, spec: TableSpec, plan_id: str) -> SwapResult:
        """Put the backed-up weeks back; days of those weeks outside the plan keep live data.
        Each companion the swap published is put back in the same transaction."""
        validate_ident(plan_id, "plan id")
        t0 = time.perf_counter()
        result = self._locking("rollback", spec, lambda: self._rollback_once(spec, plan_id))
        if result is None:
            return SwapResult(plan_id, "already_rolled_back", {}, 0, time.perf_counter() - t0)
        partitions, weeks, restored = result
        return SwapResult(
            plan_id, "rolled_back", partitions, weeks, time.perf_counter() - t0, restored=restored
        )

    def _rollback_once(
        self, spec: TableSpec, plan_id: str
    ) -> tuple[dict[dt.date, PartitionMove], int, tuple[str, ...]] | None:
        key = self._key(spec.name)
        with self.transaction(lock_wait_s=self.swap_lock_wait_s) as con:
            self._ensure(con, spec)
            _x(
                con,
                f"SELECT 1 FROM {M}.plan_claims WHERE table_name = %(t)s FOR UPDATE",
                {"t": key},
            )
            log = _x(
                con,
                f"SELECT week, range_start, range_end, had_live, state FROM {M}.swap_log "
                "WHERE table_name = %(t)s AND plan_id = %(p)s ORDER BY week FOR UPDATE",
                {"t": key, "p": plan_id},
            ).fetchall()
            if not log:
                raise SwapRefused(
                    f"plan {plan_id} was never swapped into {spec.name}; nothing to roll back"
                )
            states = {r[4] for r in log}
            if states == {"rolled_back"}:
                return None
            if states != {"swapped"}:
                raise SwapRefused(
                    f"plan {plan_id} cannot be rolled back: its backup is {sorted(states)}"
                )
            self._refuse_later_swaps(con, spec, plan_id)
            companion_moves = self._companion_moves(con, spec.name, plan_id)
            live = self._week_tables(con, spec.name)
            backup = self._week_tables(con, self._backup_base(spec, plan_id))
            swapped = _x(
                con,
                f"SELECT partition_date, checksum_out FROM {M}.swap_days "
                "WHERE table_name = %(t)s AND plan_id = %(p)s",
                {"t": key, "p": plan_id},
            ).fetchall()
            restored = dict(swapped)
            days = [d for _, r0, r1, _, _ in log for d in day_range(r0, r1)]
            current = self._recorded(con, spec.name, days)
            pc = ident(spec.partition_column)
            cols = ident_list(spec.column_names)
            now = utcnow()
            partitions: dict[dt.date, PartitionMove] = {}
            moves: list[tuple[str, str | None, str, dt.date]] = []
            # 1. Row work first: the days of a partial week outside the plan may have been
            # written since the swap; the backup week takes them from the live week.
            for week, r0, r1, had_live, _ in log:
                if had_live and week not in backup:
                    raise SwapRefused(f"backup of week {week} for plan {plan_id} is missing")
                cur = live.get(week)
                rng = {"s": r0, "e": r1}
                outside = f"NOT ({pc} >= %(s)s AND {pc} < %(e)s)"
                # A whole week of the plan has no outside days: no rows to move, as in the swap.
                partial = (r1 - r0).days < 7
                if had_live:
                    bk = self._q(backup[week])
                    if partial:
                        _x(con, f"DELETE FROM {bk} WHERE {outside}", rng)
                    if cur and partial:
                        _x(
                            con,
                            f"INSERT INTO {bk} ({cols}) SELECT {cols} FROM {self._q(cur)} "
                            f"WHERE {outside}",
                            rng,
                        )
                    moves.append((week, cur, backup[week], r0))
                elif cur:
                    _x(con, f"DELETE FROM {self._q(cur)} WHERE {pc} >= %(s)s AND {pc} < %(e)s", rng)
                for d in day_range(r0, r1):
                    back = restored.get(d, EMPTY) if had_live else EMPTY
                    out = current.get(d, EMPTY)
                    partitions[d] = PartitionMove(rows_of(back), back, rows_of(out), out)
            self._bump_versions(con, spec, {d: p.checksum_in for d, p in partitions.items()}, now)
            _x(
                con,
                f"UPDATE {M}.swap_log SET state = 'rolled_back', changed_at = %(now)s "
                "WHERE table_name = %(t)s AND plan_id = %(p)s",
                {"t": key, "p": plan_id, "now": now},
            )
            self._free_plan(con, spec.name, plan_id)
            self._set_status(con, spec.name, plan_id, ROLLED_BACK)
            # Where each week moves from and to, read before any lock that blocks readers.
            parents = [
                (
                    self._parent_of(con, cur) if cur else None,
                    self._week_parent(con, spec, week_monday(r0)),
                )
                for _, cur, _, r0 in moves
            ]
            # 2. The catalog moves, sent as one script (as the swap's).
            script: list[str] = []
            for (_, cur, bk, r0), (was_in, goes_to) in zip(moves, parents, strict=True):
                monday = week_monday(r0)
                if cur and was_in is not None:
                    script.append(self._detach_sql(was_in, cur))
                    script.append(f"DROP TABLE {self._q(cur)}")
                name = self._week_table(spec.name, monday)
                script.append(f"ALTER TABLE {self._q(bk)} RENAME TO {ident(name)}")
                script.append(self._attach_sql(goes_to, name, monday))
            # Then each companion: the published table dropped, its backup renamed back.
            for live_name, bk_name, had_live, exists in companion_moves:
                if exists:
                    script.append(f"DROP TABLE {self._q(live_name)}")
                if had_live:
                    script.append(f"ALTER TABLE {self._q(bk_name)} RENAME TO {ident(live_name)}")
            self._script(con, script)
        return partitions, len(log), tuple(m[0] for m in companion_moves)

    def release_backup(self, spec: TableSpec, plan_id: str) -> int:
        """Drop a swapped plan's backup weeks; after this the plan can no longer roll back."""
        validate_ident(plan_id, "plan id")
        key = self._key(spec.name)
        with self.transaction() as con:
            self._ensure(con, spec)
            state = self._swap_state(con, spec.name, plan_id)
            if state is None:
                raise SwapRefused(
                    f"plan {plan_id} has no backup in {spec.name}: it was never swapped"
                )
            backup = self._week_tables(con, self._backup_base(spec, plan_id))
            for name in backup.values():
                _x(con, f"DROP TABLE {self._q(name)}")
            self._free_plan(con, spec.name, plan_id)
            if state == "swapped":
                # The companions' backups (a rolled-back plan's were renamed back to live).
                for name in self._companion_backups(con, spec.name, plan_id):
                    _x(con, f"DROP TABLE IF EXISTS {self._q(name)}")
                _x(
                    con,
                    f"UPDATE {M}.swap_log SET state = 'released', changed_at = %(now)s "
                    "WHERE table_name = %(t)s AND plan_id = %(p)s",
                    {"t": key, "p": plan_id, "now": utcnow()},
                )
                self._set_status(con, spec.name, plan_id, RELEASED)
        return len(backup)

    def drop_shadow(self, spec: TableSpec, plan_id: str | None = None) -> int:
        """Drop every shadow week and its build log; with `plan_id` (an abandoned plan), free
        the table from that plan in the same transaction."""
        with self.transaction() as con:
            self._ensure(con, spec)
            if plan_id is not None:
                self._free_plan(con, spec.name, plan_id)
            return self._drop_shadow(con, spec)

    def abandon(self, spec: TableSpec, plan_id: str) -> int:
        """Give up a plan that was not swapped, in one transaction: its shadow weeks dropped
        (if it holds the table), the table freed, the plan recorded abandoned. Refuses
        (SwapRefused, nothing changed) a plan that was swapped or is over. The shadow weeks
        dropped."""
        validate_ident(plan_id, "plan id")
        key = self._key(spec.name)
        with self.transaction() as con:
            self._ensure(con, spec)
            holder = _x(
                con,
                f"SELECT plan_id FROM {M}.plan_claims WHERE table_name = %(t)s FOR UPDATE",
                {"t": key},
            ).fetchone()
            refuse_abandon(plan_id, spec.name, self._swap_state(con, spec.name, plan_id),
                           self._plan_row(con, plan_id))  # fmt: skip
            dropped = 0
            if holder is not None and holder[0] == plan_id:
                self._free_plan(con, spec.name, plan_id)
                dropped = self._drop_shadow(con, spec)
            self._set_status(con, spec.name, plan_id, ABANDONED)
        return dropped
