"""The plans table: the warehouse's record of what happened to each plan, the state of record.

A plan's status changes in the transaction that does what it names: the claim of its table
(`approved`), the swap (`swapped`), the rollback (`rolled_back`), the release (`released`),
the abandon (`abandoned`). So it is true whatever happens to the process after the commit. The
plan's JSON, as approved, is kept with it: a command needs nothing from the Dagster instance to
roll back, release or report a plan. The instance keeps its own record of each plan (what the
UI shows); `recorded` says which status it was last told, and service.reconcile tells it what it
missed.

The statements run inside the callers' transactions, which hold the table's claim row (or the
file) for their length.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from backfill_assets.errors import ExecutionRefused
from backfill_assets.lib.warehouse.base import (
    APPROVED,
    HOLDING_STATES,
    PLAN_COLUMNS,
    SWAPPED,
    PlanRecord,
    plan_record_from_row,
)
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.shared.hooks import Hooks, M


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class PlanBook(Hooks):
    """The plans table (`backfill_meta.plans`)."""

    # -- inside the adapter's transactions ---------------------------------------------------

    def _plan_row(self, con: Any, plan_id: str) -> PlanRecord | None:
        rows = self._sql(
            con,
            f"SELECT {PLAN_COLUMNS} FROM {M}.plans WHERE plan_id = $p "
            "AND starts_with(table_name, $k)",
            {"p": plan_id, "k": self._key_prefix},
        )
        return self._record(rows[0]) if rows else None

    def _record(self, row: tuple) -> PlanRecord:
        return plan_record_from_row(row, str(row[1])[len(self._key_prefix) :])

    def _refuse_closed(self, con: Any, plan_id: str) -> None:
        """Refuse to claim a table for a plan the warehouse has already seen through."""
        rec = self._plan_row(con, plan_id)
        if rec is not None and rec.status not in HOLDING_STATES:
            raise ExecutionRefused(
                f"plan {plan_id} was already {rec.status} in the warehouse; plan again with a "
                "different range or criteria to backfill this range once more"
            )

    def _record_plan(
        self, con: Any, table: str, plan_id: str, plan_json: str, approved_by: str, swapped: bool
    ) -> None:
        """Keep the plan, as approved, with the claim of its table (once: a plan already kept
        keeps its status). `swapped`: the swap log says it was swapped (a plan claimed before
        the warehouse kept plans)."""
        if self._plan_row(con, plan_id) is not None:
            return
        self._sql(
            con,
            f"INSERT INTO {M}.plans ({PLAN_COLUMNS}) VALUES ($p, $t, $s, $j, $b, '{{}}', $now, "
            "NULL)",
            {
                "p": plan_id,
                "t": self._key_prefix + table,
                "s": SWAPPED if swapped else APPROVED,
                "j": plan_json,
                "b": approved_by,
                "now": _now(),
            },
        )

    def _set_status(
        self,
        con: Any,
        table: str,
        plan_id: str,
        status: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """The plan's new status (and what its swap recorded, merged into `details`), in the
        caller's transaction; nothing for a plan the warehouse does not keep (claimed before
        it kept plans, or through the adapter alone)."""
        rec = self._plan_row(con, plan_id)
        if rec is None or rec.table != table:
            return
        merged = {**rec.details, **(details or {})}
        self._sql(
            con,
            f"UPDATE {M}.plans SET status = $s, details = $d, changed_at = $now "
            "WHERE plan_id = $p AND table_name = $t",
            {
                "s": status,
                "d": json.dumps(merged, sort_keys=True, default=str),
                "now": _now(),
                "p": plan_id,
                "t": self._key_prefix + table,
            },
        )

    # -- public ------------------------------------------------------------------------------

    def plan_record(self, plan_id: str) -> PlanRecord | None:
        """The warehouse's record of a plan, or None (never approved here)."""
        validate_ident(plan_id, "plan id")
        with self._meta_reader("plans") as con:
            return None if con is None else self._plan_row(con, plan_id)

    def plan_records(self, *, untold: bool = False) -> list[PlanRecord]:
        """Every plan the warehouse keeps (`untold`: those whose status the Dagster instance
        was not told yet), oldest change first."""
        with self._meta_reader("plans") as con:
            if con is None:
                return []
            rows = self._sql(
                con,
                f"SELECT {PLAN_COLUMNS} FROM {M}.plans WHERE starts_with(table_name, $k)"
                + (" AND (recorded IS NULL OR recorded <> status)" if untold else "")
                + " ORDER BY changed_at, plan_id",
                {"k": self._key_prefix},
            )
        return [self._record(r) for r in rows]

    def mark_recorded(self, plan_id: str, status: str) -> None:
        """Note that the Dagster instance was told `status` (if it is still the plan's)."""
        validate_ident(plan_id, "plan id")
        with self._meta_transaction() as con:
            self._sql(
                con,
                f"UPDATE {M}.plans SET recorded = $s WHERE plan_id = $p AND status = $s "
                "AND starts_with(table_name, $k)",
                {"s": status, "p": plan_id, "k": self._key_prefix},
            )
