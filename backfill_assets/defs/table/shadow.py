"""The shadow asset and its batch job: what a backfill batch writes, gated per partition.

The shadow belongs to the approved plan that holds the table: a batch writes that plan's days
in the shadow, then evaluates every gate per partition as blocking checks (gates.py). The swap
(publish.py) moves validated partitions into the target.
"""

import datetime as dt
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import dagster as dg

from backfill_assets.constants import (
    DOWNSTREAM_CHECK,
    PLAN_ID_TAG,
    ROLE_BATCH,
    ROLE_TAG,
    WAREHOUSE_RESOURCE_KEY,
    WRITER_TAG,
    shadow_job,
)
from backfill_assets.defs.table.gates import gate_check_specs, gate_events
from backfill_assets.defs.table.steps import (
    claim_writer,
    partition_dates,
    rows_metadata,
    warehouse_resource,
)
from backfill_assets.errors import ExecutionRefused
from backfill_assets.lib.dates import days as day_range
from backfill_assets.lib.gates import evaluate_gates
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.states import ACTIVE_PLAN_STATUSES
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.gating import PLAN_METADATA, plan_data_version
from backfill_assets.service.reconcile import current_plan
from backfill_assets.service.writes import prepared_build, write_partitions


def build_shadow_asset(table: BackfillableTable) -> dg.AssetsDefinition:
    """The table's shadow asset, with one blocking check per gate."""
    spec = table.spec
    shadow_key = dg.AssetKey(spec.shadow_name)

    @dg.asset(
        name=spec.shadow_name,
        partitions_def=table.partitions_def,
        deps=[*(dg.AssetKey(d) for d in table.deps), dg.AssetKey(spec.name)],
        code_version=table.code_version,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=table.group_name,
        kinds={"table"},
        check_specs=gate_check_specs(table),
        required_resource_keys={WAREHOUSE_RESOURCE_KEY},
        description=f"Shadow of {spec.name}: backfill batches write here, gated by blocking "
        "checks recorded per partition; the swap moves validated partitions into the target. "
        f"A run needs the tag {PLAN_ID_TAG} naming the approved plan that holds the table.",
    )
    def shadow(context: dg.AssetExecutionContext) -> Iterator[Any]:
        plan_id = context.run.tags.get(PLAN_ID_TAG, "")
        wh = warehouse_resource(context).adapter()
        start, end = partition_dates(context)
        criteria = refuse_shadow_without_plan(context.instance, wh, table, plan_id, start, end)
        claim_writer(context, wh, table, ROLE_BATCH, plan_id)
        # A Python build runs before the warehouse is opened; the write and the gates then share
        # one opening of it (DuckDB: the catalog loaded once, the week just written still in
        # its buffers).
        build = prepared_build(table, start, end)
        with wh.session():
            counts = write_partitions(
                wh, table, start, end, shadow=True, plan_id=plan_id, build=build
            )
            yield dg.MaterializeResult(
                metadata={**rows_metadata(context, counts), PLAN_METADATA: plan_id},
                data_version=plan_data_version(plan_id),
            )
            outcomes = evaluate_gates(wh, spec, criteria, start, end, plan_id)
        yield from gate_events(context, shadow_key, outcomes)

    return shadow


def build_batch_job(table: BackfillableTable):
    """The job of one backfill batch: the shadow's partitions and their gates (an asset job,
    resolved when the Definitions load; Dagster exports no name for its type)."""
    spec = table.spec
    shadow_key = dg.AssetKey(spec.shadow_name)
    return dg.define_asset_job(
        shadow_job(spec.name),
        # The downstream gate belongs to the swap (it builds the whole plan's models): not here.
        selection=dg.AssetSelection.assets(shadow_key)
        - dg.AssetSelection.checks(dg.AssetCheckKey(shadow_key, DOWNSTREAM_CHECK)),
        partitions_def=table.partitions_def,
        tags={WRITER_TAG: spec.name, ROLE_TAG: ROLE_BATCH},
        description=f"One backfill batch of {spec.name}: write the shadow's partitions, then run "
        f"every gate per partition (blocking). Needs the tag {PLAN_ID_TAG} of the approved plan.",
    )


def refuse_shadow_without_plan(
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
        outside = [d.isoformat() for d in day_range(start, end) if d.isoformat() not in days]
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
