"""Which shadow write each per-partition gate evaluation checked.

Dagster records a partitioned check's target (the materialization it checked) by itself only for
an `AssetCheckResult` in a single-partition run. A batch is a range run, so the shadow asset emits
one `AssetCheckEvaluation(partition=...)` per partition and must say what each one checked, as
Dagster's own code does: the partition's latest materialization at evaluation time. With it, the
instance knows a gate result belongs to the shadow write this plan made (a later write makes it
stale), and the UI's Partitions tab of a gate shows its partitions as checked.
"""

from collections.abc import Sequence

import dagster as dg

# No public API exists for this record type: `dagster.AssetCheckEvaluation` documents the
# `target_materialization_data` argument, but its class lives in a private module. This is the
# only private Dagster import in the package.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData as CheckTarget,
)


def latest_writes(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, run_id: str, partitions: Sequence[str]
) -> dict[str, CheckTarget]:
    """partition -> this run's materialization of it (the write the gates are about to check)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=list(partitions)),
        limit=len(partitions),
    ).records  # newest first: this run wrote every one of them just now
    out: dict[str, CheckTarget] = {}
    for rec in records:
        pk = rec.partition_key
        if pk and pk not in out and rec.run_id == run_id:
            out[pk] = CheckTarget(
                storage_id=rec.storage_id, run_id=rec.run_id, timestamp=rec.timestamp
            )
    return out
