"""The shadow's gates as Dagster checks: their specs, and the events that record their outcomes
per partition (lib.gates computes the outcomes)."""

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import dagster as dg

from backfill_assets.constants import GATE_NAMES
from backfill_assets.defs.check_targets import latest_writes
from backfill_assets.lib.gates import GateOutcome
from backfill_assets.lib.table import BackfillableTable

GATE_DESCRIPTIONS = {
    "row_count_gate": "Shadow rows per partition match the source/target within tolerance; "
    "no duplicate primary keys.",
    "sample_gate": "A reproducible sample per partition equals the target on unchanged columns; "
    "changed columns satisfy their rules; whole-partition fingerprint of unchanged columns.",
    "invariants_gate": "Every shadow row satisfies the declared invariants.",
    "diff_gate": "What the batch changes against the live rows (rows and columns changed, sums "
    "before and after); fails only on the thresholds the criteria declare (criteria.diff).",
}


def gate_check_specs(table: BackfillableTable) -> list[dg.AssetCheckSpec]:
    """One blocking check per gate on the table's shadow, partitioned as the table is."""
    return [
        dg.AssetCheckSpec(
            name,
            asset=dg.AssetKey(table.spec.shadow_name),
            blocking=True,
            partitions_def=table.partitions_def,
            description=GATE_DESCRIPTIONS[name],
        )
        for name in GATE_NAMES
    ]


def gate_events(
    context: dg.AssetExecutionContext, asset_key: dg.AssetKey, outcomes: list[GateOutcome]
) -> Iterator[dg.AssetCheckEvaluation | dg.AssetCheckResult]:
    """One evaluation per (gate, partition), then one result per gate for the run.

    Dagster records a partitioned check's result for a partition only in single-partition runs;
    in a range run it would record `partition=None`. So for ranges we emit an explicit
    `AssetCheckEvaluation(partition=pk)` per partition (these, being blocking, fail the step when
    they fail) and then the per-gate summary the check's output needs.
    """
    by_gate: dict[str, list[GateOutcome]] = defaultdict(list)
    for o in outcomes:
        by_gate[o.check_name].append(o)
    single = len(context.partition_keys) == 1
    targets = (
        {}
        if single
        else latest_writes(context.instance, asset_key, context.run_id, context.partition_keys)
    )
    for name in GATE_NAMES:
        items = by_gate.get(name, [])
        if single:
            o = items[0]
            yield dg.AssetCheckResult(
                asset_key=asset_key,
                check_name=name,
                passed=o.passed,
                description=o.description,
                metadata=_meta(o.metadata),
            )
            continue
        for o in items:
            yield dg.AssetCheckEvaluation(
                asset_key=asset_key,
                check_name=name,
                passed=o.passed,
                blocking=True,
                partition=o.partition,
                description=o.description,
                metadata=_meta(o.metadata),
                target_materialization_data=targets.get(o.partition),
            )
        failed = [o.partition for o in items if not o.passed]
        yield dg.AssetCheckResult(
            asset_key=asset_key,
            check_name=name,
            passed=not failed,
            description=(
                f"failed for {', '.join(failed)}"
                if failed
                else f"passed for all {len(items)} partitions"
            ),
            metadata={"partitions_checked": len(items), "failed_partitions": failed},
        )


def _meta(metadata: dict[str, Any]) -> dict[str, Any]:
    """Dagster metadata: numbers stay numbers, rows become a Markdown table a reviewer can read."""
    out: dict[str, Any] = {}
    for k, v in metadata.items():
        if k == "mismatching_rows" and v:
            out[k] = dg.MetadataValue.md(_rows_markdown(v))
        elif isinstance(v, dict | list):
            out[k] = dg.MetadataValue.json(v)
        elif v is None:
            out[k] = dg.MetadataValue.text("n/a")
        else:
            out[k] = v
    return out


def _rows_markdown(rows: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(c for r in rows for c in r))  # rows differ in what is wrong
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join(
        "| " + " | ".join("" if r.get(c) is None else str(r[c]) for c in cols) + " |\n"
        for r in rows
    )
