"""The physical names every adapter gives a table's relations, and days in messages."""

from __future__ import annotations

import datetime as dt

from backfill_assets.constants import BACKUP_INFIX, WEEK_INFIX
from backfill_assets.lib.dates import week_id
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.identifiers import validate_ident


def week_table(base: str, day: dt.date) -> str:
    """The table of the ISO week holding `day` under `base` (the target's, the shadow's or a
    backup's name): `orders_daily__w2026w03`."""
    return validate_ident(f"{base}{WEEK_INFIX}{week_id(day)}", "week table")


def backup_base(spec: TableSpec, plan_id: str) -> str:
    """The name a plan's backup weeks are kept under: `orders_daily__backup__<plan>`."""
    return f"{spec.name}{BACKUP_INFIX}{validate_ident(plan_id, 'plan id')}"


def fmt_days(days: list[str]) -> str:
    """Days in a message: the first ten, and how many more."""
    return ", ".join(days[:10]) + (f" and {len(days) - 10} more" if len(days) > 10 else "")
