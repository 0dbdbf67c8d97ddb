"""The example's daily production run and what triggers it.

`orders_daily_job` materialises one day of `orders_daily` and refreshes the daily and
unpartitioned dbt models; a sensor starts it once that day's source data has landed. When it
succeeds, a second sensor refreshes the weekly model for that day's ISO week.

The framework finds these runs by the job's name (the table declares `daily_job`); the tags
below are optional extras a production job may carry: the writer tag lets the instance keep the
daily run queued (rather than waiting inside its run) while a backfill run of the same table
holds it, and `dagster/priority` lets it go first when both are queued.
"""

import datetime as dt
from zoneinfo import ZoneInfo

import dagster as dg

from backfill_assets.constants import (
    PARTITION_TAG,
    PRIORITY_TAG,
    ROLE_DAILY,
    ROLE_REFRESH,
    ROLE_TAG,
    WRITER_TAG,
)
from backfill_assets.example import orders as o
from backfill_assets.example.daily import daily_run_key, daily_run_keys
from backfill_assets.example.dbt import DbtModels
from backfill_assets.example.declaration import DAILY, DAILY_JOB, ORDERS, WEEKLY
from backfill_assets.lib.dates import week_monday

WEEKLY_JOB = "orders_weekly_marts_job"
# The daily and unpartitioned marts alone, over any range (history; never the target).
MARTS_JOB = "orders_marts_job"
RAW_ORDERS_KEY = dg.AssetKey(o.RAW_ORDERS)
# Above backfill runs (priority 0): when both are queued, the daily run starts first.
DAILY_PRIORITY = "10"


def production_definitions(dbt: DbtModels) -> dg.Definitions:
    orders_daily_job = dg.define_asset_job(
        DAILY_JOB,
        selection=dg.AssetSelection.assets(ORDERS.key)
        | dg.AssetSelection.assets(dbt.daily, dbt.unpartitioned),
        partitions_def=DAILY,
        tags={WRITER_TAG: ORDERS.key, ROLE_TAG: ROLE_DAILY, PRIORITY_TAG: DAILY_PRIORITY},
        description="Daily production run: one day of orders_daily, then the daily and "
        "unpartitioned dbt models downstream of it.",
    )

    orders_marts_job = dg.define_asset_job(
        MARTS_JOB,
        selection=dg.AssetSelection.assets(dbt.daily, dbt.unpartitioned),
        partitions_def=DAILY,
        tags={WRITER_TAG: ORDERS.key, ROLE_TAG: ROLE_REFRESH},
        description="Rebuilds the daily and unpartitioned dbt marts over orders_daily as it is "
        "(history, a manual refresh); writes no backfillable table.",
    )

    orders_weekly_job = dg.define_asset_job(
        WEEKLY_JOB,
        selection=dg.AssetSelection.assets(dbt.weekly),
        partitions_def=WEEKLY,
        tags={WRITER_TAG: ORDERS.key, ROLE_TAG: ROLE_REFRESH},
        description="Refreshes the weekly dbt models for one ISO week.",
    )

    @dg.sensor(
        job=orders_daily_job,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts the daily production run for each day whose source data has landed "
        "(a new materialization of raw_orders), once per day.",
    )
    def orders_daily_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        after = int(context.cursor) if context.cursor else None
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=RAW_ORDERS_KEY, after_storage_id=after),
            limit=1000,
            ascending=True,
        ).records
        if not records:
            return dg.SensorResult(skip_reason="no new source data has landed")
        today = dt.datetime.now(tz=ZoneInfo(DAILY.timezone or "UTC")).date()
        keys = daily_run_keys(
            [r.partition_key for r in records if r.partition_key],
            today,
            lookback_days=ORDERS.daily_lookback_days,
        )
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(run_key=daily_run_key(pk), partition_key=pk) for pk in keys
            ],
            cursor=str(max(r.storage_id for r in records)),
            skip_reason=None if keys else "landed days are older than the daily lookback",
        )

    @dg.run_status_sensor(
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[orders_daily_job],
        request_job=orders_weekly_job,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="After a successful daily run, refreshes the weekly models for that ISO week.",
    )
    def orders_weekly_refresh_sensor(context: dg.RunStatusSensorContext):
        pk = context.dagster_run.tags.get(PARTITION_TAG)
        if not pk:
            return dg.SkipReason("the daily run had no single partition")
        monday = week_monday(dt.date.fromisoformat(pk)).isoformat()
        return dg.RunRequest(
            run_key=f"weekly-{monday}-{context.dagster_run.run_id}", partition_key=monday
        )

    return dg.Definitions(
        jobs=[orders_daily_job, orders_marts_job, orders_weekly_job],
        sensors=[orders_daily_sensor, orders_weekly_refresh_sensor],
    )
