"""Who writes a table now and which plan holds it: the writer leases and the plan claims, changed
by compare-and-set in one transaction each (`backfill_meta.writer_lease`, `plan_claims`).

A claimant makes sure the row exists, locks it (PostgreSQL; a DuckDB transaction holds the file),
reads who holds it and takes it only if no one does, it already does, or the holder is the one
the caller found dead (`takeover`). Of two claimants racing, exactly one wins.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from backfill_assets.lib.warehouse.base import SWAPPED, LeaseHolder, lease_holder_from
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.shared.hooks import Hooks, M
from backfill_assets.lib.warehouse.shared.records import PlanBook


def utcnow() -> dt.datetime:
    """Now, in UTC, as the metadata's naive timestamps keep it."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Coordination(PlanBook, Hooks):
    """The writer leases and the plan claims."""

    # -- the writer lease of each table (and the runner lease of each plan) -------------------

    def _lease_row(self, con: Any, key: str) -> LeaseHolder | None:
        names, rows = self._sql_named(
            con,
            f"SELECT * FROM {M}.writer_lease WHERE table_name = $t AND holder_id IS NOT NULL",
            {"t": key},
        )
        # By column name: a table from before a column (an older warehouse, read without
        # writing) reads too.
        return lease_holder_from(names, rows[0]) if rows else None

    def _take_row(self, con: Any, table: str, key: str) -> None:
        """Make sure `table`'s row for `key` exists, and lock it until the transaction ends."""
        self._sql(
            con,
            f"INSERT INTO {M}.{table} (table_name) VALUES ($t) ON CONFLICT (table_name) DO NOTHING",
            {"t": key},
        )
        lock = self._lock_clause()
        if lock:
            self._sql(con, f"SELECT 1 FROM {M}.{table} WHERE table_name = $t{lock}", {"t": key})

    def claim_writer(
        self, table: str, holder: LeaseHolder, *, takeover: str | None = None
    ) -> LeaseHolder:
        """Take `table`'s writer lease (or another lease: base.lease_name) if it is free,
        already ours, or held by `takeover` (a holder the caller found dead); return whoever
        holds it afterwards."""
        key = self._lease_key(table)
        with self._meta_transaction() as con:
            self._take_row(con, "writer_lease", key)
            current = self._lease_row(con, key)
            if current is not None and current.holder_id not in (holder.holder_id, takeover):
                return current
            same = current is not None and current.holder_id == holder.holder_id
            self._sql(
                con,
                f"UPDATE {M}.writer_lease SET holder_id = $h, role = $r, job_name = $j, "
                "plan_id = $p, host = $host, pid = $pid, claimed_at = $at, process = $process "
                "WHERE table_name = $t",
                {"t": key, "h": holder.holder_id, "r": holder.role, "j": holder.job_name,
                 "p": holder.plan_id, "host": holder.host, "pid": holder.pid,
                 "at": current.claimed_at if same and current else utcnow(),
                 "process": holder.process},
            )  # fmt: skip
            return self._lease_row(con, key) or holder

    def release_writer(self, table: str, holder_id: str) -> bool:
        """Free `table`'s writer lease if `holder_id` holds it; True if it did."""
        with self._meta_transaction() as con:
            return self._free(con, "writer_lease", "holder_id", self._lease_key(table), holder_id)

    def writer(self, table: str) -> LeaseHolder | None:
        """Who holds `table`'s writer lease, if anyone."""
        with self._meta_reader("writer_lease") as con:
            return None if con is None else self._lease_row(con, self._lease_key(table))

    def _free(self, con: Any, table: str, column: str, key: str, value: str) -> bool:
        """Free the row of `key` in `table` if `column` holds `value`; True if it did."""
        done = self._sql(
            con,
            (
                f"DELETE FROM {M}.{table}"
                if self._frees_by_delete
                else f"UPDATE {M}.{table} SET {column} = NULL"
            )
            + f" WHERE table_name = $t AND {column} = $v RETURNING 1",
            {"t": key, "v": value},
        )
        return bool(done)

    # -- the plan that holds each table ---------------------------------------------------------

    def _active_plan(self, con: Any, table: str) -> str | None:
        """The plan holding `table` (read in the caller's transaction)."""
        rows = self._sql(
            con,
            f"SELECT plan_id FROM {M}.plan_claims WHERE table_name = $t AND plan_id IS NOT NULL",
            {"t": self._key(table)},
        )
        return str(rows[0][0]) if rows else None

    def active_plan(self, table: str) -> str | None:
        """The plan that holds `table`, if one does."""
        with self._meta_reader("plan_claims") as con:
            return None if con is None else self._active_plan(con, table)

    def claim_plan(
        self, table: str, plan_id: str, *, plan_json: str | None = None, approved_by: str = ""
    ) -> str:
        """Make `plan_id` the plan that holds `table`, if none does (compare-and-set); return
        the plan that holds it afterwards. Approvals racing for one table: exactly one wins.
        With `plan_json`, the plan is kept as approved in the same transaction (the state of
        record, records.PlanBook); a plan the warehouse saw through is refused."""
        validate_ident(plan_id, "plan id")
        key = self._key(table)
        # With the plan, the swap log too: a plan claimed before plans were kept may have been
        # swapped already.
        with self._meta_transaction(every_table=plan_json is not None) as con:
            self._take_row(con, "plan_claims", key)
            if plan_json is not None:
                self._refuse_closed(con, plan_id)
            holder = self._active_plan(con, table)
            if holder is None:
                self._sql(
                    con,
                    f"UPDATE {M}.plan_claims SET plan_id = $p, claimed_at = $at "
                    "WHERE table_name = $t",
                    {"t": key, "p": plan_id, "at": utcnow()},
                )
                holder = plan_id
            if holder == plan_id and plan_json is not None:
                swapped = self._swap_state(con, table, plan_id) == SWAPPED
                self._record_plan(con, table, plan_id, plan_json, approved_by, swapped)
            return holder

    def release_plan(self, table: str, plan_id: str) -> bool:
        """Free `table` if `plan_id` holds it (rolled back, released or abandoned)."""
        with self._meta_transaction() as con:
            return self._free_plan(con, table, plan_id)

    def _free_plan(self, con: Any, table: str, plan_id: str) -> bool:
        """Free `table` if `plan_id` holds it, in the caller's transaction."""
        return self._free(con, "plan_claims", "plan_id", self._key(table), plan_id)

    def _swap_state(self, con: Any, table: str, plan_id: str) -> str | None:
        """The plan's state in the swap log (None: never swapped)."""
        rows = self._sql(
            con,
            f"SELECT min(state) FROM {M}.swap_log WHERE table_name = $t AND plan_id = $p",
            {"t": self._key(table), "p": plan_id},
        )
        return str(rows[0][0]) if rows and rows[0][0] is not None else None
