"""Land synthetic source days and build `orders_daily` history through the daily job's path."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from backfill_assets.example import orders as o
from backfill_assets.example.declaration import DAILY_JOB, ORDERS
from backfill_assets.service.runs import run_job

LAND_JOB = "land_raw_orders_job"


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


def build_history(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    start: dt.date,
    end_inclusive: dt.date,
    logic_version: str | None = None,
) -> dg.ExecuteInProcessResult:
    """Build [start, end] of orders_daily and its daily/unpartitioned marts in one daily-job run,
    optionally with an earlier logic version (how the demo's buggy history was built)."""
    config = {"ops": {ORDERS.key: {"config": {"logic_version": logic_version or ""}}}}
    return run_job(
        defs, DAILY_JOB, instance, start=start, end_inclusive=end_inclusive, run_config=config
    )
