"""What a swap or a rollback records in the Dagster instance besides the plan's status: one
materialization of the target per partition it moved (with the code version that built the rows
it put in, which `plan --stale` reads), and one per partition of each dbt model it published or
restored with the target.

The swap and rollback ops log these in their run; service.reconcile records them without a run
when the process died after the warehouse committed and before they were logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from backfill_assets.constants import CODE_VERSION_TAG
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.warehouse.base import SwapResult
from backfill_assets.service.plans import (
    CODE_VERSIONS,
    PUBLISHED_PARTITIONS,
    recorded_published_keys,
)

# What a swap's and a rollback's materializations of the target say they were (metadata
# "action"); the models' say "published by <action>".
SWAP_ACTION, ROLLBACK_ACTION = "swap", "rollback"
# Which side of the recorded code versions each action put into the target.
_SIDE = {SWAP_ACTION: "in", ROLLBACK_ACTION: "out"}


def swap_materializations(
    target: str,
    result: SwapResult,
    action: str,
    table_rows: int | None = None,
    code_versions: Mapping[str, str | None] | None = None,
    **extra: Any,
) -> list[dg.AssetMaterialization]:
    """One materialization of the target per swapped partition, with rows and checksums, and
    the whole table's rows after it (`table_rows`) as Dagster's `dagster/row_count`. Each
    carries the code version that built the rows it put in (`code_versions`, by partition) as
    Dagster's `dagster/code_version`, as a run of the target would. `extra`: more metadata."""
    versions = code_versions or {}
    return [
        dg.AssetMaterialization(
            asset_key=dg.AssetKey.from_user_string(target),
            partition=day.isoformat(),
            tags=(
                {CODE_VERSION_TAG: str(versions[day.isoformat()])}
                if versions.get(day.isoformat()) is not None
                else None
            ),
            metadata={
                "action": action,
                "plan_id": result.plan_id,
                "dagster/partition_row_count": info.rows_in,
                **({"dagster/row_count": table_rows} if table_rows is not None else {}),
                "rows_in": info.rows_in,
                "rows_out": info.rows_out,
                "checksum_in": info.checksum_in,
                "checksum_out": info.checksum_out,
                **extra,
            },
        )
        for day, info in sorted(result.partitions.items())
    ]


def code_versions_of(record: Mapping[str, Any], action: str) -> dict[str, str | None]:
    """The code versions a plan's swap recorded (in its record, or its warehouse details) for
    what `action` put into the target: the shadow's for the swap, the replaced rows' for the
    rollback. Empty when none were recorded."""
    found = record.get(CODE_VERSIONS)
    side = found.get(_SIDE[action]) if isinstance(found, dict) else None
    return dict(side) if isinstance(side, dict) else {}


def model_materializations(
    plan: BackfillPlan, record: Mapping[str, Any], action: str, **extra: Any
) -> list[dg.AssetMaterialization]:
    """One materialization per affected partition of each dbt model the swap published (or the
    rollback restored), so that Dagster shows them written by the plan: the partitions its
    shadow build rebuilt (`record`'s), which can be more than the plan's impact set (a daily
    model rebuilt over whole weeks with the weekly one)."""
    keys = set(recorded_published_keys(record))
    rebuilt = record.get(PUBLISHED_PARTITIONS) or {}
    out = []
    for item in plan.impact:
        if item.asset_key not in keys:
            continue
        parts: list[str | None]
        if rebuilt.get(item.asset_key):
            parts = [str(k) for k in rebuilt[item.asset_key]]
        elif item.partitions != "all" and item.partitions:
            parts = list(item.partitions)
        else:
            parts = [None]
        out += [
            dg.AssetMaterialization(
                asset_key=dg.AssetKey.from_user_string(item.asset_key),
                partition=p,
                metadata={"action": f"published by {action}", "plan_id": plan.plan_id, **extra},
            )
            for p in parts
        ]
    return out


def swap_recorded(instance: dg.DagsterInstance, plan: BackfillPlan, action: str) -> bool:
    """Whether the instance holds the target's materializations of the plan's `action` (read
    on one of its partitions, among that partition's latest 100)."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey.from_user_string(plan.target),
            asset_partitions=[plan.partitions[0]],
        ),
        limit=100,
    )
    for record in result.records:
        mat = record.asset_materialization
        meta = mat.metadata if mat is not None else {}
        plan_id, act = meta.get("plan_id"), meta.get("action")
        if (
            plan_id is not None
            and act is not None
            and plan_id.value == plan.plan_id
            and act.value == action
        ):
            return True
    return False
