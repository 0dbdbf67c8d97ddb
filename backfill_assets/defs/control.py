"""Control-plane definitions shared by every backfillable table: the plans asset, and (as they
land) the planning, approval, batch, swap and rollback jobs."""

from collections.abc import Mapping
from typing import TYPE_CHECKING

import dagster as dg

from backfill_assets.constants import PLANS_ASSET, PLANS_PARTITIONS

if TYPE_CHECKING:
    from backfill_assets.table import BackfillableTable

PLANS_PARTITIONS_DEF = dg.DynamicPartitionsDefinition(name=PLANS_PARTITIONS)

plans_spec = dg.AssetSpec(
    PLANS_ASSET,
    partitions_def=PLANS_PARTITIONS_DEF,
    group_name="backfill_control",
    description="Approved backfill plans, one partition per plan id. Each materialization's "
    "metadata holds the plan (JSON), its Markdown for review, and its status.",
)


def control_definitions(tables: Mapping[str, "BackfillableTable"]) -> dg.Definitions:
    from backfill_assets.defs.driver import driver_jobs
    from backfill_assets.defs.planning_jobs import planning_definitions

    return dg.Definitions.merge(
        dg.Definitions(assets=[plans_spec], jobs=driver_jobs()), planning_definitions(tables)
    )
