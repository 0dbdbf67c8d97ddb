"""Land synthetic source days, and build the history the demo starts from.

History is what `orders_daily` held before the FX fix: every day built by logic v1. In real life
older runs of the daily job wrote it; here it is written straight to the warehouse by the
example's own seeding (never a path a UI click can reach) and recorded in the instance as
materializations of `orders_daily` built by code version 1, as those runs would have been. Then
the dbt marts are built over it.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from backfill_assets.constants import CODE_VERSION_TAG
from backfill_assets.example import orders as o
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.production import MARTS_JOB
from backfill_assets.example.sources import LAND_JOB
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.runs import run_job

LOGIC = {"1": o.ORDERS_DAILY_SQL_V1, "2": o.ORDERS_DAILY_SQL}


def land_days(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    start: dt.date,
    end_inclusive: dt.date,
    rows_per_day: int,
) -> None:
    """The shop's daily drops for [start, end], in one run (raw_orders + FX reference data)."""
    run_job(
        defs,
        LAND_JOB,
        instance,
        start=start,
        end_inclusive=end_inclusive,
        run_config={"ops": {o.RAW_ORDERS: {"config": {"rows_per_day": rows_per_day}}}},
    )


def write_history(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    start: dt.date,
    end_inclusive: dt.date,
    logic: str = "1",
) -> int:
    """orders_daily for [start, end] as logic `logic` built it, recorded as materializations of
    that code version; returns the rows written."""
    counts = wh.replace_partitions(
        ORDERS.spec,
        start,
        end_inclusive + dt.timedelta(days=1),
        build=LOGIC[logic],
        fingerprint=ORDERS.criteria.fingerprint_columns,
    )
    total = wh.table_rows(ORDERS.spec)
    for day, rows in sorted(counts.items()):
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                asset_key=ORDERS.key,
                partition=day.isoformat(),
                metadata={
                    "rows": rows,
                    "dagster/partition_row_count": rows,
                    "dagster/row_count": total,
                    "logic_version": logic,
                },
                tags={CODE_VERSION_TAG: logic},
            )
        )
    return sum(counts.values())


def build_history(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    wh: Warehouse,
    start: dt.date,
    end_inclusive: dt.date,
    logic: str = "1",
) -> dg.ExecuteInProcessResult:
    """History of orders_daily by logic `logic`, then its daily and unpartitioned dbt marts."""
    write_history(instance, wh, start, end_inclusive, logic)
    return run_job(defs, MARTS_JOB, instance, start=start, end_inclusive=end_inclusive)
