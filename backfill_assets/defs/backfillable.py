"""Build the Dagster definitions of one `BackfillableTable`: target, shadow with gates.

Both assets write through the warehouse adapter in one transaction per call, share the writer
pool (the instance runs at most one of their steps at a time) and take a partition range in a
single run (`BackfillPolicy.single_run()`), so a weekly batch is one run and one step.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dagster as dg

from backfill_assets.constants import (
    GATE_NAMES,
    PLAN_ID_TAG,
    ROLE_BATCH,
    ROLE_ROLLBACK,
    ROLE_SWAP,
    ROLE_TAG,
    WRITER_POOL,
    WRITER_TAG,
)
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.lib.gates import GateOutcome, evaluate_gates
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.service.plans import plan_criteria
from backfill_assets.service.swap import perform_rollback, perform_swap, swap_materializations

if TYPE_CHECKING:
    from backfill_assets.table import BackfillableTable

ADHOC_PLAN = "adhoc"

GATE_DESCRIPTIONS = {
    "row_count_gate": "Shadow rows per partition match the source/target within tolerance; "
    "no duplicate primary keys.",
    "sample_gate": "A reproducible sample per partition equals the target on unchanged columns; "
    "changed columns satisfy their rules; whole-partition fingerprint of unchanged columns.",
    "invariants_gate": "Every shadow row satisfies the declared invariants.",
}


class TargetBuildConfig(dg.Config):
    """Replay an earlier version of the build logic (e.g. to rebuild history as it was)."""

    logic_version: str = ""


def partition_dates(context: dg.AssetExecutionContext) -> tuple[dt.date, dt.date]:
    """The half-open date range [start, end) of the run's partitions."""
    window = context.partition_time_window
    return window.start.date(), window.end.date()


def build_table_definitions(table: "BackfillableTable") -> dg.Definitions:
    spec = table.spec
    deps = [dg.AssetKey(d) for d in table.deps]

    @dg.asset(
        name=spec.name,
        partitions_def=table.partitions_def,
        deps=deps,
        code_version=table.code_version,
        backfill_policy=dg.BackfillPolicy.single_run(),
        pool=WRITER_POOL,
        group_name=table.group_name,
        kinds={"duckdb"},
        description=f"Daily-partitioned target table {spec.name} (a view over one table per ISO "
        "week). Backfills never write it directly: they write the shadow and swap.",
        metadata={"primary_key": list(spec.primary_key), "partition_column": spec.partition_column},
    )
    def target(
        context: dg.AssetExecutionContext, config: TargetBuildConfig, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:
        start, end = partition_dates(context)
        counts = warehouse.adapter().replace_partitions(
            spec, start, end, build_sql=table.build_sql(config.logic_version or None)
        )
        return dg.MaterializeResult(
            metadata={
                "rows": sum(counts.values()),
                "partitions": len(counts),
                "logic_version": config.logic_version or table.code_version,
            }
        )

    shadow_key = dg.AssetKey(spec.shadow_name)
    check_specs = [
        dg.AssetCheckSpec(
            name,
            asset=shadow_key,
            blocking=True,
            partitions_def=table.partitions_def,
            description=GATE_DESCRIPTIONS[name],
        )
        for name in GATE_NAMES
    ]

    @dg.asset(
        name=spec.shadow_name,
        partitions_def=table.partitions_def,
        deps=[*deps, dg.AssetKey(spec.name)],
        code_version=table.code_version,
        backfill_policy=dg.BackfillPolicy.single_run(),
        pool=WRITER_POOL,
        group_name=table.group_name,
        kinds={"duckdb"},
        check_specs=check_specs,
        description=f"Shadow of {spec.name}: backfill batches write here, gated by blocking "
        "checks recorded per partition; the swap moves validated partitions into the target.",
    )
    def shadow(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> Iterator[Any]:
        plan_id = context.run.tags.get(PLAN_ID_TAG) or ADHOC_PLAN
        criteria = _criteria_for(context.instance, plan_id, table.criteria)
        start, end = partition_dates(context)
        wh = warehouse.adapter()
        counts = wh.replace_partitions(spec, start, end, shadow=True, plan_id=plan_id)
        yield dg.MaterializeResult(
            metadata={"rows": sum(counts.values()), "partitions": len(counts), "plan_id": plan_id}
        )
        outcomes = evaluate_gates(wh, spec, criteria, start, end, plan_id)
        yield from gate_events(context, shadow_key, outcomes)

    shadow_job = dg.define_asset_job(
        f"{spec.name}__shadow_job",
        selection=dg.AssetSelection.assets(shadow_key),
        partitions_def=table.partitions_def,
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_BATCH},
        description=f"One backfill batch of {spec.name}: write the shadow's partitions, then run "
        "every gate per partition (blocking). Tag a run with backfill_assets/plan_id to use that "
        "plan's criteria.",
    )

    @dg.op(
        name=f"{spec.name}__swap",
        pool=WRITER_POOL,
        description=f"Swap a validated plan's shadow partitions into {spec.name} atomically, "
        "keeping the replaced rows as a backup.",
    )
    def swap_op(
        context: dg.OpExecutionContext, config: PlanIdConfig, warehouse: WarehouseResource
    ) -> None:
        result = perform_swap(context.instance, table, warehouse.adapter(), config.plan_id)
        for event in swap_materializations(table, result, "swap"):
            context.log_event(event)
        context.log.info(
            f"{result.action}: {len(result.partitions)} partitions in "
            f"{result.weeks} weeks, {result.seconds * 1000:.1f} ms"
        )

    @dg.op(
        name=f"{spec.name}__rollback",
        pool=WRITER_POOL,
        description=f"Restore the rows a plan's swap replaced in {spec.name}, atomically.",
    )
    def rollback_op(
        context: dg.OpExecutionContext, config: PlanIdConfig, warehouse: WarehouseResource
    ) -> None:
        result = perform_rollback(context.instance, table, warehouse.adapter(), config.plan_id)
        for event in swap_materializations(table, result, "rollback"):
            context.log_event(event)
        context.log.info(
            f"{result.action}: {len(result.partitions)} partitions restored in "
            f"{result.seconds * 1000:.1f} ms"
        )

    @dg.job(
        name=f"{spec.name}__swap_job",
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_SWAP},
        description=f"Swap a plan into {spec.name} (config: plan_id).",
    )
    def swap_job() -> None:
        swap_op()

    @dg.job(
        name=f"{spec.name}__rollback_job",
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_ROLLBACK},
        description=f"Roll a swapped plan of {spec.name} back (config: plan_id).",
    )
    def rollback_job() -> None:
        rollback_op()

    return dg.Definitions(assets=[target, shadow], jobs=[shadow_job, swap_job, rollback_job])


class PlanIdConfig(dg.Config):
    """Which approved plan to act on."""

    plan_id: str


def _criteria_for(instance: dg.DagsterInstance, plan_id: str, default: Criteria) -> Criteria:
    if plan_id == ADHOC_PLAN:
        return default
    return plan_criteria(instance, plan_id) or default


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
