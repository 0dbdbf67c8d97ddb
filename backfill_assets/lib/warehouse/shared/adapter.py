"""`WarehouseBase`: what an engine's adapter inherits (see the package's docstring)."""

from __future__ import annotations

import datetime as dt

from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.shared.coordination import Coordination
from backfill_assets.lib.warehouse.shared.naming import backup_base, week_table
from backfill_assets.lib.warehouse.shared.swaps import SwapBook


class WarehouseBase(Coordination, SwapBook):
    """Coordination (leases, claims, plan records), versions and swap checks, names."""

    @staticmethod
    def _week_table(base: str, day: dt.date) -> str:
        return week_table(base, day)

    @staticmethod
    def _backup_base(spec: TableSpec, plan_id: str) -> str:
        return backup_base(spec, plan_id)
