"""Write a table's partitions from its build: the daily path (live) and batches (shadow).

A SQL build is run by the warehouse inside the write's transaction. A Python build is called
first, its DataFrame checked against the table (columns, types, days, keys) and refused with a
clear message before the warehouse is opened; then the same transactional write takes it. Shadow
write, gates, swap and rollback are the same for both.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from backfill_assets.lib.frames import check_frame
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse


def write_partitions(
    wh: Warehouse,
    table: BackfillableTable,
    start: dt.date,
    end: dt.date,
    *,
    shadow: bool,
    plan_id: str | None = None,
) -> dict[dt.date, int]:
    """Replace days [start, end) of the live table or its shadow; rows written per day."""
    if isinstance(table.build, str | Mapping):
        build = table.build
    else:
        build = check_frame(table.spec, table.build(start, end), start, end)
    return wh.replace_partitions(
        table.spec, start, end, build=build, shadow=shadow, plan_id=plan_id
    )
