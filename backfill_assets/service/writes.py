"""Write a table's partitions from its build: the daily path (live) and batches (shadow).

A SQL build is run by the warehouse inside the write's transaction. A Python build is called
first, its DataFrame checked against the table (columns, types, days, keys) and refused with a
clear message before the warehouse is opened; then the same transactional write takes it. Shadow
write, gates, swap and rollback are the same for both.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING

from backfill_assets.lib.frames import check_frame
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse

if TYPE_CHECKING:
    import pandas as pd

    from backfill_assets.lib.warehouse.dialects import SQL


def prepared_build(table: BackfillableTable, start: dt.date, end: dt.date) -> SQL | pd.DataFrame:
    """The table's SQL build, or its Python build's DataFrame for [start, end), checked."""
    if isinstance(table.build, str | Mapping):
        return table.build
    return check_frame(table.spec, table.build(start, end), start, end)


def write_partitions(
    wh: Warehouse,
    table: BackfillableTable,
    start: dt.date,
    end: dt.date,
    *,
    shadow: bool,
    plan_id: str | None = None,
    build: SQL | pd.DataFrame | None = None,
) -> dict[dt.date, int]:
    """Replace days [start, end) of the live table or its shadow; rows written per day.
    `build`: what `prepared_build` returned, when the caller ran it first. A live write records
    the fingerprints of the table's criteria's unchanged columns, which the gates of a later
    backfill compare with its shadow's."""
    if build is None:
        build = prepared_build(table, start, end)
    return wh.replace_partitions(
        table.spec,
        start,
        end,
        build=build,
        shadow=shadow,
        plan_id=plan_id,
        fingerprint=() if shadow else table.criteria.fingerprint_columns,
    )
