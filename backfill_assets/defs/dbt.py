"""dbt models downstream of the target, loaded with dagster-dbt.

Three `@dbt_assets` over one manifest, by grain: daily-partitioned models (tag `daily`),
weekly-partitioned models (tag `weekly`, ISO weeks) and unpartitioned ones. Partitioned models
receive their half-open partition window as the dbt vars `min_date` / `max_date`.
"""

import json
from collections.abc import Iterator
from typing import Any

import dagster as dg
from dagster_dbt import DbtCliResource, dbt_assets

from backfill_assets.constants import WRITER_POOL
from backfill_assets.defs.backfillable import partition_dates
from backfill_assets.defs.resources import dbt_project
from backfill_assets.example.declaration import DAILY, WEEKLY
from backfill_assets.lib.dbt_manifest import ensure_manifest

MANIFEST = ensure_manifest(dbt_project)


def partition_vars(context: dg.AssetExecutionContext) -> dict[str, str]:
    """dbt vars for the run's partition window, as ISO dates (half-open)."""
    start, end = partition_dates(context)
    return {"min_date": start.isoformat(), "max_date": end.isoformat()}


def _build(
    context: dg.AssetExecutionContext, dbt: DbtCliResource, partitioned: bool
) -> Iterator[Any]:
    args = ["build"]
    if partitioned:
        args += ["--vars", json.dumps(partition_vars(context))]
    yield from dbt.cli(args, context=context).stream()


@dbt_assets(
    manifest=MANIFEST,
    select="tag:daily",
    partitions_def=DAILY,
    name="dbt_daily_models",
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool=WRITER_POOL,
)
def dbt_daily_models(context: dg.AssetExecutionContext, dbt: DbtCliResource):
    yield from _build(context, dbt, partitioned=True)


@dbt_assets(
    manifest=MANIFEST,
    select="tag:weekly",
    partitions_def=WEEKLY,
    name="dbt_weekly_models",
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool=WRITER_POOL,
)
def dbt_weekly_models(context: dg.AssetExecutionContext, dbt: DbtCliResource):
    yield from _build(context, dbt, partitioned=True)


@dbt_assets(
    manifest=MANIFEST,
    exclude="tag:daily tag:weekly",
    name="dbt_unpartitioned_models",
    pool=WRITER_POOL,
)
def dbt_unpartitioned_models(context: dg.AssetExecutionContext, dbt: DbtCliResource):
    yield from _build(context, dbt, partitioned=False)


DBT_ASSETS = [dbt_daily_models, dbt_weekly_models, dbt_unpartitioned_models]
