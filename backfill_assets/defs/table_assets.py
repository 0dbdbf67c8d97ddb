"""The Dagster definitions of one BackfillableTable: target, shadow with gates, its jobs and
sensors.

- The **target** asset writes the live table only on the declared daily path (service.frontdoor);
  any other run of it (a UI "Materialize..." or partition backfill) is refused before it writes and
  turned into a proposed plan for the same range.
- The **shadow** asset writes the shadow partitions of an approved plan, then evaluates every gate
  per partition as blocking checks. The swap and rollback jobs move data between them.
- Every step that writes claims the table's writer lease first (service.lease): one writer per
  table, whatever launched it.
- The table's **batch driver** sensor launches the next batch of its started plan inside the
  window; its **refresh** sensor refreshes downstream after a swap or rollback launched from the UI.

Every decorated function here gathers its inputs from the context and calls service/.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import suppress
from functools import cache
from typing import Any

import dagster as dg
from pydantic import Field

from backfill_assets.constants import (
    DOWNSTREAM_CHECK,
    DOWNSTREAM_DBT_METADATA_KEY,
    GATE_NAMES,
    PLAN_ID_TAG,
    ROLE_BATCH,
    ROLE_DAILY,
    ROLE_ROLLBACK,
    ROLE_SWAP,
    ROLE_TAG,
    TABLE_METADATA_KEY,
    WAREHOUSE_RESOURCE_KEY,
    WRITER_TAG,
    driver_sensor,
    refresh_sensor,
    rollback_job,
    rollback_op,
    shadow_job,
    swap_job,
    swap_op,
)
from backfill_assets.defs.check_targets import latest_writes
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.errors import ExecutionRefused
from backfill_assets.lib.gates import GateOutcome, evaluate_gates
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.states import ACTIVE_PLAN_STATUSES
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import SwapResult, Warehouse, iter_days
from backfill_assets.service.batch_driver import drive, follow_swaps
from backfill_assets.service.downstream import (
    DbtDownstream,
    build_in_shadow,
    drop_shadows,
)
from backfill_assets.service.frontdoor import daily_path_refusal, propose_instead
from backfill_assets.service.lease import (
    Waiting,
    acquire_writer,
    holder_for_run,
    mark_this_process,
)
from backfill_assets.service.plans import latest_plan_record
from backfill_assets.service.published import (
    ROLLBACK_ACTION,
    SWAP_ACTION,
    code_versions_of,
    model_materializations,
    swap_materializations,
)
from backfill_assets.service.reconcile import current_plan, settle
from backfill_assets.service.runs import code_location
from backfill_assets.service.swap import perform_rollback, perform_swap, prepare_downstream
from backfill_assets.service.tables import backfill_tables, daily_job_problems
from backfill_assets.service.writes import prepared_build, write_partitions

# The least seconds between two evaluations of a table's batch driver and refresh sensors
# (backfill_definitions' `sensor_interval_s`, or BACKFILL_ASSETS_SENSOR_INTERVAL_S).
DEFAULT_SENSOR_INTERVAL_S = 15

GATE_DESCRIPTIONS = {
    "row_count_gate": "Shadow rows per partition match the source/target within tolerance; "
    "no duplicate primary keys.",
    "sample_gate": "A reproducible sample per partition equals the target on unchanged columns; "
    "changed columns satisfy their rules; whole-partition fingerprint of unchanged columns.",
    "invariants_gate": "Every shadow row satisfies the declared invariants.",
}


class PlanIdConfig(dg.Config):
    """Which approved plan to act on."""

    plan_id: str


class SwapConfig(PlanIdConfig):
    """Which approved plan to swap, and whether its downstream dbt models are published with it."""

    downstream: bool = Field(
        default=True,
        description="Build the impacted dbt models in shadow, gate them on their dbt tests and "
        "publish them with the target (the table declares how: downstream_dbt). False: publish "
        "the target alone and leave the models stale (the CLI's --no-refresh).",
    )


def partition_dates(context: dg.AssetExecutionContext) -> tuple[dt.date, dt.date]:
    """The half-open date range [start, end) of the run's partitions."""
    window = context.partition_time_window
    return window.start.date(), window.end.date()


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _claim(
    context: Any, wh: Warehouse, table: BackfillableTable, role: str, plan_id: str = ""
) -> None:
    """Claim the table's writer lease for this run (held until the run ends)."""

    def waiting(w: Waiting) -> None:
        context.log.info(
            f"waiting for {w.table}'s writer lease, held by {w.holder.describe()} "
            f"({w.waited_s:.0f} s so far, at most {table.writer_wait_seconds:.0f} s)"
        )

    mark_this_process(context.instance, context.run)
    holder = holder_for_run(context.run_id, role=role, job_name=context.job_name, plan_id=plan_id)
    acquire_writer(
        context.instance,
        wh,
        table.key,
        holder,
        wait_s=table.writer_wait_seconds,
        on_wait=waiting,
    )


def _rows_metadata(context: dg.AssetExecutionContext, counts: dict[dt.date, int]) -> dict[str, Any]:
    """The rows a run wrote. Each partition's materialization carries its own count as Dagster's
    `dagster/partition_row_count` (the UI plots it per partition); `rows` and `partitions` are
    the whole run's."""
    for day, n in counts.items():
        context.add_asset_metadata(
            {"dagster/partition_row_count": n}, partition_key=day.isoformat()
        )
    return {"rows": sum(counts.values()), "partitions": len(counts)}


@cache
def table_definitions(
    table: BackfillableTable,
    clock: Callable[[], dt.datetime] = _utc_now,
    downstream: DbtDownstream | None = None,
    sensor_interval_s: int = DEFAULT_SENSOR_INTERVAL_S,
) -> dg.Definitions:
    """Everything one table contributes. Cached per declaration: calling `backfill_definitions`
    twice with the same table yields the very same objects, which Definitions.merge accepts.

    `clock` is the sensors' time source (tests pass a fixed one). `downstream`: how the swap
    builds the impacted dbt models in shadow and publishes them with the target (None: they are
    refreshed after the swap). `sensor_interval_s`: the least time between two evaluations of
    the table's batch driver and of its refresh sensor.
    """
    spec = table.spec
    deps = [dg.AssetKey(d) for d in table.deps]
    resources = {WAREHOUSE_RESOURCE_KEY}

    @dg.asset(
        name=spec.name,
        partitions_def=table.partitions_def,
        deps=deps,
        code_version=table.code_version,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=table.group_name,
        kinds={"table"},
        required_resource_keys=resources,
        description=table.description
        or f"Daily-partitioned table {spec.name}. Written live only by its daily job "
        f"{table.daily_job} (the last {table.daily_lookback_days} days); a backfill of it "
        "becomes a plan that writes the shadow and swaps after every gate passed.",
        metadata={
            TABLE_METADATA_KEY: table,
            "backfill_assets/declaration": dg.MetadataValue.json(table.describe()),
            "primary_key": list(spec.primary_key),
            "partition_column": spec.partition_column,
            DOWNSTREAM_DBT_METADATA_KEY: downstream is not None,
        },
    )
    def target(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        start, end = partition_dates(context)
        now = _utc_now()
        wh = _warehouse(context).adapter()
        refusal = daily_path_refusal(
            table, context.job_name, start, end - dt.timedelta(days=1), now
        )
        if refusal is not None:
            graph = code_location(context)
            tables = backfill_tables(graph) if graph is not None else {table.key: table}
            plan_id, next_step = propose_instead(
                context.instance, table, tables, graph, wh, start, end - dt.timedelta(days=1), now
            )
            raise dg.Failure(
                description=f"Refused: {refusal}. Nothing was written. {next_step}.",
                metadata={"proposed_plan": plan_id or "none"},
                allow_retries=False,
            )
        _claim(context, wh, table, ROLE_DAILY)
        counts = write_partitions(wh, table, start, end, shadow=False)
        # The whole table's rows (Dagster's `dagster/row_count`), from the per-day counts the
        # warehouse records with every write; the shadow has no such total of its own.
        return dg.MaterializeResult(
            metadata={**_rows_metadata(context, counts), "dagster/row_count": wh.table_rows(spec)}
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
        group_name=table.group_name,
        kinds={"table"},
        check_specs=check_specs,
        required_resource_keys=resources,
        description=f"Shadow of {spec.name}: backfill batches write here, gated by blocking "
        "checks recorded per partition; the swap moves validated partitions into the target. "
        f"A run needs the tag {PLAN_ID_TAG} naming the approved plan that holds the table.",
    )
    def shadow(context: dg.AssetExecutionContext) -> Iterator[Any]:
        plan_id = context.run.tags.get(PLAN_ID_TAG, "")
        wh = _warehouse(context).adapter()
        start, end = partition_dates(context)
        criteria = _refuse_shadow_without_plan(context.instance, wh, table, plan_id, start, end)
        _claim(context, wh, table, ROLE_BATCH, plan_id)
        # A Python build runs before the warehouse is opened; the write and the gates then share
        # one opening of it (DuckDB: the catalog loaded once, the week just written still in
        # its buffers).
        build = prepared_build(table, start, end)
        with wh.session():
            counts = write_partitions(
                wh, table, start, end, shadow=True, plan_id=plan_id, build=build
            )
            yield dg.MaterializeResult(
                metadata={**_rows_metadata(context, counts), "plan_id": plan_id}
            )
            outcomes = evaluate_gates(wh, spec, criteria, start, end, plan_id)
        yield from gate_events(context, shadow_key, outcomes)

    batch_job = dg.define_asset_job(
        shadow_job(spec.name),
        # The downstream gate belongs to the swap (it builds the whole plan's models): not here.
        selection=dg.AssetSelection.assets(shadow_key)
        - dg.AssetSelection.checks(dg.AssetCheckKey(shadow_key, DOWNSTREAM_CHECK)),
        partitions_def=table.partitions_def,
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_BATCH},
        description=f"One backfill batch of {spec.name}: write the shadow's partitions, then run "
        f"every gate per partition (blocking). Needs the tag {PLAN_ID_TAG} of the approved plan.",
    )

    # The swap and the downstream gate run dbt through the code location's DbtCliResource.
    swap_resources = resources | ({downstream.resource_key} if downstream else set())

    @dg.asset_check(
        asset=shadow_key,
        name=DOWNSTREAM_CHECK,
        blocking=True,  # it gates the swap, as the batch gates do
        required_resource_keys=swap_resources,
        description="The impacted dbt models built in shadow from this shadow, and their dbt "
        "tests run there. The swap evaluates it (and refuses on failure) before it publishes the "
        "target with those models; executing it here builds and tests them for the plan that "
        "holds the table, then drops what it built.",
    )
    def downstream_check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        # Dagster finds the context by the parameter's name: any other name makes it an input,
        # loaded from the shadow asset's IO manager, and the check failed before it ran.
        op = context.op_execution_context
        wh = _warehouse(op).adapter()
        plan_id = wh.active_plan(spec.name)
        if plan_id is None or downstream is None:
            return dg.AssetCheckResult(
                passed=True,
                description="nothing to check: "
                + ("no plan holds the table" if downstream else "no downstream_dbt declared"),
            )
        _claim(op, wh, table, ROLE_SWAP, plan_id)
        plan, _ = current_plan(op.instance, wh, plan_id)
        graph = code_location(op)
        build = build_in_shadow(
            plan,
            table,
            graph,
            wh,
            getattr(op.resources, downstream.resource_key),
            downstream,
            _warehouse(op).url,
            op.log.info,
        )
        drop_shadows(wh, build)  # a dry run: the rest was dropped by the build itself
        ev = build.evaluation(spec.shadow_name)
        return dg.AssetCheckResult(
            passed=ev.passed,
            description=ev.description,
            metadata=ev.metadata,
            severity=ev.severity,
        )

    @dg.op(
        name=swap_op(spec.name),
        required_resource_keys=swap_resources,
        description=f"Swap a validated plan's shadow partitions into {spec.name} atomically, "
        "keeping the replaced rows as a backup; with downstream dbt models declared, build them "
        "in shadow first, gate them on their dbt tests, and publish them in the same transaction.",
    )
    def do_swap(context: dg.OpExecutionContext, config: SwapConfig) -> None:
        wh = _warehouse(context).adapter()
        _claim(context, wh, table, ROLE_SWAP, config.plan_id)
        build = None
        if downstream is not None and config.downstream:
            build = prepare_downstream(
                context.instance,
                table,
                code_location(context),
                wh,
                getattr(context.resources, downstream.resource_key),
                downstream,
                _warehouse(context).url,
                config.plan_id,
                context.log.info,
            )
            if build is not None:
                context.log_event(build.evaluation(spec.shadow_name))  # type: ignore[arg-type]
        try:
            result = perform_swap(context.instance, table, wh, config.plan_id, build)
        except Exception:
            if build is not None:  # refused or failed: the models built in shadow go too
                drop_shadows(wh, build)
            raise
        _log_moves(context, wh, table, result, SWAP_ACTION)
        context.log.info(
            f"{result.action}: {len(result.partitions)} partitions in "
            f"{result.weeks} weeks, {result.seconds * 1000:.1f} ms"
        )

    @dg.op(
        name=rollback_op(spec.name),
        required_resource_keys=resources,
        description=f"Restore the rows a plan's swap replaced in {spec.name}, atomically.",
    )
    def do_rollback(context: dg.OpExecutionContext, config: PlanIdConfig) -> None:
        wh = _warehouse(context).adapter()
        _claim(context, wh, table, ROLE_ROLLBACK, config.plan_id)
        result = perform_rollback(context.instance, table, wh, config.plan_id)
        _log_moves(context, wh, table, result, ROLLBACK_ACTION)
        context.log.info(
            f"{result.action}: {len(result.partitions)} partitions restored in "
            f"{result.seconds * 1000:.1f} ms"
        )

    @dg.job(
        name=swap_job(spec.name),
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_SWAP},
        description=f"Swap a plan into {spec.name} (config: plan_id).",
    )
    def swap() -> None:
        do_swap()

    @dg.job(
        name=rollback_job(spec.name),
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_ROLLBACK},
        description=f"Roll a swapped plan of {spec.name} back (config: plan_id).",
    )
    def rollback() -> None:
        do_rollback()

    @dg.sensor(
        name=driver_sensor(spec.name),
        minimum_interval_seconds=sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        jobs=[batch_job],
        description=f"Launches the next batch of each started, approved plan of {spec.name} "
        "inside its window, never while its daily run is queued or running, only after every "
        "gate of the previous batches passed and only if the batch fits before the window or "
        "the daily slot. The skip reason of each tick says why nothing launched.",
    )
    def batch_driver(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        # The guards find the daily runs by the daily job's name: with a job the code location
        # does not have (or one that does not write the table), batches could run beside the
        # real daily run. The CLI refuses it when it loads the location; a plan approved and
        # started from the UI meets it here.
        repo = context.repository_def
        problems = daily_job_problems(repo, {table.key: table}) if repo is not None else []
        if problems:
            reason = "launching nothing: " + "; ".join(problems)
            context.log.warning(reason)
            return dg.SensorResult(run_requests=[], skip_reason=reason)
        requests, reasons = drive(context.instance, table, clock())
        for reason in reasons:
            context.log.info(reason)
        return dg.SensorResult(
            run_requests=requests, skip_reason=None if requests else "; ".join(reasons)
        )

    downstream_assets = dg.AssetSelection.assets(spec.name).downstream(include_self=False)

    @dg.sensor(
        name=refresh_sensor(spec.name),
        minimum_interval_seconds=sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        asset_selection=downstream_assets - dg.AssetSelection.assets(shadow_key),
        description=f"After a swap or rollback of {spec.name} launched from the UI succeeds, "
        "refreshes the plan's downstream impact set for the affected partitions (one run per "
        "grain).",
    )
    def refresh_after_swap(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        graph = context.repository_def.asset_graph  # type: ignore[union-attr]
        requests, reasons, cursor = follow_swaps(
            context.instance, table, graph, context.cursor, clock()
        )
        for reason in reasons:
            context.log.info(reason)
        return dg.SensorResult(
            run_requests=requests,
            cursor=cursor,
            skip_reason=None if requests else "; ".join(reasons),
        )

    return dg.Definitions(
        assets=[target, shadow],
        asset_checks=[downstream_check],
        jobs=[batch_job, swap, rollback],
        sensors=[batch_driver, refresh_after_swap],
    )


def _warehouse(context: Any) -> WarehouseResource:
    return getattr(context.resources, WAREHOUSE_RESOURCE_KEY)


def _log_moves(
    context: dg.OpExecutionContext,
    wh: Warehouse,
    table: BackfillableTable,
    result: SwapResult,
    action: str,
) -> None:
    """Log what the swap or rollback moved (the target's partitions, the models published or
    restored with it), then settle the plan's record: the instance has been told everything."""
    record = latest_plan_record(context.instance, result.plan_id) or {}
    versions = code_versions_of(record, action)
    rows = wh.table_rows(table.spec)
    for event in swap_materializations(table.key, result, action, rows, versions):
        context.log_event(event)
    if result.partitions and isinstance(record.get("plan"), dict):  # not when already done
        for event in model_materializations(BackfillPlan.from_dict(record["plan"]), record, action):
            context.log_event(event)
    if record.get("status"):
        settle(wh, result.plan_id, str(record["status"]))


def _refuse_shadow_without_plan(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    plan_id: str,
    start: dt.date,
    end: dt.date,
) -> Criteria:
    """The shadow belongs to the plan that holds the table, for the plan's partitions; a run
    for no plan, another one, or days outside it would overwrite what that plan's gates
    checked, or write a shadow the plan never swaps. The plan's criteria, for the gates."""
    holder = wh.active_plan(table.key)
    plan, status = None, None
    if plan_id:
        with suppress(ExecutionRefused):
            plan, status = current_plan(instance, wh, plan_id)
    if plan is not None and plan_id == holder and status in ACTIVE_PLAN_STATUSES:
        days = set(plan.partitions)
        outside = [d.isoformat() for d in iter_days(start, end) if d.isoformat() not in days]
        if not outside:
            return plan.criteria
        raise ExecutionRefused(
            f"plan {plan_id} covers {plan.start}..{plan.end}; this run of the shadow of "
            f"{table.key} is for {_span(outside)}, outside it. Nothing was written. A batch "
            "writes the plan's own days: let the batch driver or `backfill-assets run` launch it"
        )
    tag = f"{PLAN_ID_TAG}={holder}" if holder else f"{PLAN_ID_TAG}=<an approved plan>"
    what = f"plan {plan_id} ({status or 'not approved'})" if plan_id else "no plan"
    raise ExecutionRefused(
        f"the shadow of {table.key} is written only for the approved plan that holds the table "
        f"({holder or 'none does'}); this run is for {what}. Launch the batch with the tag {tag}, "
        "or let the batch driver do it (start_backfill_plan_job)"
    )


def _span(days: list[str]) -> str:
    return days[0] if len(days) == 1 else f"{days[0]}..{days[-1]} ({len(days)} days)"


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
