"""The five-year measure's code location (`bench.measures.five_years`): the example's
`orders_daily`, declared by a user whose history starts in 2020, so five years of daily
partitions exist.

It is what a team's own code location looks like at its smallest: one `BackfillableTable`,
`backfill_definitions([table])`, and the table's daily job. No dbt models: the measure is about
what the plan, its batches and its swap cost as the instance fills, not about dbt.
"""

from __future__ import annotations

import dataclasses

import dagster as dg

from backfill_assets import backfill_definitions
from backfill_assets.constants import ROLE_DAILY, ROLE_TAG, WRITER_TAG
from backfill_assets.example.declaration import DAILY_JOB, ORDERS

PARTITIONS_START = "2020-01-01"
DAILY = dg.DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC")


TABLE = dataclasses.replace(ORDERS, partitions_def=DAILY)


def five_year_definitions() -> dg.Definitions:
    daily_job = dg.define_asset_job(
        DAILY_JOB,
        selection=dg.AssetSelection.assets(TABLE.key),
        partitions_def=DAILY,
        tags={WRITER_TAG: TABLE.key, ROLE_TAG: ROLE_DAILY},
        description="The daily production run of orders_daily (one day).",
    )
    return dg.Definitions.merge(
        backfill_definitions([TABLE]),
        dg.Definitions(jobs=[daily_job], executor=dg.in_process_executor),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return five_year_definitions()
