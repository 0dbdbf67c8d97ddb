"""What the metadata says about a table's versions and swaps, and the checks a swap and a rollback
make with it before they move anything: the same on every engine.

- `partition_versions`: each live day's version, bumped by every write of it; a shadow write
  records the version it was built against (`shadow_log`), and the swap refuses a day written
  since (`_check_versions`).
- `swap_log`: one row per week a plan's swap published, its state (swapped, rolled_back,
  released); `swap_days`: what the swap put into each day and took out.
- `swap_companions`: the downstream relations a swap published with the target.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from backfill_assets.errors import SwapRefused
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import PartitionMove, swap_move
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.shared.hooks import Hooks, M
from backfill_assets.lib.warehouse.shared.naming import fmt_days


class SwapBook(Hooks):
    """Versions, the swap log and the checks around a swap."""

    def partition_versions(
        self, spec: TableSpec, start: dt.date, end: dt.date
    ) -> dict[dt.date, int]:
        with self._meta_reader("partition_versions") as con:
            if con is None:
                return {}
            rows = self._sql(
                con,
                f"SELECT partition_date, version FROM {M}.partition_versions "
                "WHERE table_name = $t AND partition_date >= $s AND partition_date < $e",
                {"t": self._key(spec.name), "s": start, "e": end},
            )
        return {d: int(v) for d, v in rows}

    def table_rows(self, spec: TableSpec) -> int:
        """Rows in the live table, from the per-day counts every write, swap and rollback
        records (no scan of the table)."""
        with self._meta_reader("partition_versions") as con:
            if con is None:
                return 0
            rows = self._sql(
                con,
                f"SELECT coalesce(sum(row_count), 0) FROM {M}.partition_versions "
                "WHERE table_name = $t",
                {"t": self._key(spec.name)},
            )
        return int(rows[0][0]) if rows else 0

    def swap_state(self, spec: TableSpec, plan_id: str) -> str | None:
        """The plan's swap in the log: swapped, rolled_back, released, or None (never)."""
        with self._meta_reader("swap_log") as con:
            if con is None:
                return None
            rows = self._sql(
                con,
                f"SELECT min(state) FROM {M}.swap_log WHERE table_name = $t AND plan_id = $p",
                {"t": self._key(spec.name), "p": plan_id},
            )
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def swap_moves(self, table: str, plan_id: str) -> dict[dt.date, PartitionMove]:
        """What the plan's swap put into each partition and took out (rows and checksums), as
        it recorded them; empty if it was never swapped."""
        validate_ident(plan_id, "plan id")
        with self._meta_reader("swap_days") as con:
            if con is None:
                return {}
            rows = self._sql(
                con,
                f"SELECT partition_date, checksum_in, checksum_out FROM {M}.swap_days "
                "WHERE table_name = $t AND plan_id = $p ORDER BY 1",
                {"t": self._key(table), "p": plan_id},
            )
        return {d: swap_move(ci, co) for d, ci, co in rows}

    def _recorded(self, con: Any, table: str, days: list[dt.date]) -> dict[dt.date, str]:
        """The checksum each live day of [days[0], days[-1]] was recorded with when it was
        written (if it was)."""
        rows = self._sql(
            con,
            f"SELECT partition_date, checksum FROM {M}.partition_versions WHERE table_name = $t "
            "AND partition_date >= $a AND partition_date <= $b AND checksum IS NOT NULL",
            {"t": self._key(table), "a": days[0], "b": days[-1]},
        )
        return dict(rows)

    @staticmethod
    def _may_swap(table: str, plan_id: str, state: str | None, holder: str | None) -> bool:
        """Whether the plan's swap goes ahead (False: it already happened, nothing to do), given
        its state in the swap log and the plan holding the table's claim; refused otherwise."""
        if state == "swapped":
            return False
        if state is not None:
            raise SwapRefused(
                f"plan {plan_id} was already swapped and then {state}; plan a new backfill "
                "to write this range again"
            )
        if holder != plan_id:
            raise SwapRefused(
                f"plan {plan_id} does not hold {table}"
                + (f" (plan {holder} does)" if holder else " (no plan does)")
                + "; approve it first, and only one plan per table at a time"
            )
        return True

    def _check_versions(
        self, con: Any, spec: TableSpec, plan_id: str, days: list[dt.date]
    ) -> dict[dt.date, str]:
        """Refuse unless every day's shadow was built by the plan against the live version still
        in place (locking those rows until the transaction ends); return the checksum each day's
        shadow was recorded with (if it was)."""
        rng = {"t": self._key(spec.name), "a": days[0], "b": days[-1]}
        if self._lock_clause():
            self._sql(
                con,
                f"SELECT 1 FROM {M}.partition_versions WHERE table_name = $t AND partition_date "
                f">= $a AND partition_date <= $b{self._lock_clause()}",
                rng,
            )
        rows = self._sql(
            con,
            f"SELECT s.partition_date, s.plan_id, s.base_version, coalesce(v.version, 0), "
            f"s.checksum FROM {M}.shadow_log s LEFT JOIN {M}.partition_versions v "
            "ON v.table_name = s.table_name AND v.partition_date = s.partition_date "
            "WHERE s.table_name = $t AND s.partition_date >= $a AND s.partition_date <= $b"
            + self._lock_clause("s"),
            rng,
        )
        seen = {r[0]: r for r in rows}
        missing = [d.isoformat() for d in days if d not in seen or seen[d][1] != plan_id]
        if missing:
            raise SwapRefused(
                f"the shadow of {spec.name} was not built by plan {plan_id} for "
                f"{fmt_days(missing)}; run those batches of the plan, then swap again"
            )
        stale = [d.isoformat() for d in days if seen[d][2] != seen[d][3]]
        if stale:
            raise SwapRefused(
                f"{spec.name} was written after its shadow was built for {fmt_days(stale)} "
                "(e.g. by the daily run); re-run those batches so the gates see the newer data, "
                "then swap again"
            )
        return {d: seen[d][4] for d in days if seen[d][4]}

    def _refuse_later_swaps(self, con: Any, spec: TableSpec, plan_id: str) -> None:
        """Refuse to roll back a plan whose weeks a later plan swapped: restoring this backup
        would undo the later swap's rows and bring back rows the later plan replaced, so the
        target would match neither state."""
        later = self._sql(
            con,
            f"SELECT DISTINCT o.plan_id FROM {M}.swap_log o JOIN {M}.swap_log m "
            "ON o.table_name = m.table_name AND o.week = m.week "
            "WHERE m.table_name = $t AND m.plan_id = $p AND o.plan_id <> $p "
            "AND o.changed_at >= m.changed_at AND o.state IN ('swapped', 'released') "
            "ORDER BY 1",
            {"t": self._key(spec.name), "p": plan_id},
        )
        if later:
            others = ", ".join(str(r[0]) for r in later)
            raise SwapRefused(
                f"plan {plan_id} cannot be rolled back: plan {others} swapped the same weeks "
                f"of {spec.name} after it; roll that plan back first (rollbacks go in reverse "
                "swap order)"
            )

    def _companion_moves(
        self, con: Any, table: str, plan_id: str
    ) -> list[tuple[str, str, bool, bool]]:
        """The companions a plan's swap published: (live, backup, had_live, live exists now).
        Refuses, before the rollback changes anything, when a backup it needs is missing, or
        when views read the published table (its DROP would fail)."""
        rows = self._sql(
            con,
            f"SELECT live, backup, had_live FROM {M}.swap_companions "
            "WHERE table_name = $t AND plan_id = $p ORDER BY live",
            {"t": self._key(table), "p": plan_id},
        )
        out: list[tuple[str, str, bool, bool]] = []
        for live, backup, had_live in rows:
            if had_live and self._relation_kind(con, backup) != "table":
                raise SwapRefused(
                    f"backup {self._where}{backup} of companion {live} for plan {plan_id} is "
                    "missing; nothing was rolled back"
                )
            kind = self._relation_kind(con, live)
            if kind not in (None, "table"):
                raise SwapRefused(
                    f"companion {self._where}{live} is now a {kind}, not the table plan "
                    f"{plan_id} published; nothing was rolled back"
                )
            views = self._dependent_views(con, live) if kind else []
            if views:
                raise SwapRefused(
                    f"companion {self._where}{live} is read by {', '.join(views)}, so it cannot "
                    "be dropped to restore its backup; drop those views, roll back, then create "
                    "them again. Nothing was rolled back"
                )
            out.append((str(live), str(backup), bool(had_live), kind is not None))
        return out

    def _companion_backups(self, con: Any, table: str, plan_id: str) -> list[str]:
        """The backups a swapped plan keeps of the companions it replaced (what a release
        drops)."""
        rows = self._sql(
            con,
            f"SELECT backup FROM {M}.swap_companions WHERE table_name = $t AND plan_id = $p "
            "AND had_live",
            {"t": self._key(table), "p": plan_id},
        )
        return [str(r[0]) for r in rows]
