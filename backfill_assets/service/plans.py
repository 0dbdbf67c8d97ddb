"""The instance's record of plans: one dynamic partition of the `backfill_plans` asset per plan
id, whose latest materialization carries the plan JSON, its Markdown and its status.

It is what users see in the UI and what the daemon's sensors read (they never open the
warehouse), and it works the same on Postgres storage and Kubernetes. It is not the state of
record of an approved plan: the warehouse is (lib/warehouse/shared/records.py), and
service.reconcile tells this record what it missed. A proposed plan lives here only: a plan file
alone launches nothing, and approving is the explicit step that claims the table in the
warehouse (service.approval).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from backfill_assets.constants import ACTIVE_PLANS_PARTITIONS, PLANS_ASSET, PLANS_PARTITIONS
from backfill_assets.errors import ExecutionRefused, InvalidInput
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.planning.markdown import render_markdown
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.states import PlanStatus

PLAN_KEY = dg.AssetKey(PLANS_ASSET)

# Fields of a plan's status record carried forward to every later record of the same plan (who
# approved it, whether and since when the daemon's driver runs it), unless a change sets them.
DRIVING = "driving"
STARTED_AT = "started_at"
STARTED_BY = "started_by"
APPROVED_BY = "approved_by"
OVERRUN = "overrun"
# Per partition, the code versions the swap put in and took out (service.swap).
CODE_VERSIONS = "code_versions"
PUBLISHED = "published"  # asset keys of the dbt models the swap published with the target
# per published partitioned model, the partition keys its shadow build rebuilt
PUBLISHED_PARTITIONS = "published_partitions"
# Who reviewed the plan's diff, when, the newest shadow write the review saw (an event storage
# id: a later write voids the review), and the diff's summary as reviewed (service.review).
REVIEWED_BY = "reviewed_by"
REVIEWED_AT = "reviewed_at"
REVIEWED_WRITE = "reviewed_shadow_write"
DIFF_SUMMARY = "diff_summary"
CARRIED = (
    APPROVED_BY,
    DRIVING,
    STARTED_AT,
    STARTED_BY,
    OVERRUN,
    CODE_VERSIONS,
    PUBLISHED,
    PUBLISHED_PARTITIONS,
    REVIEWED_BY,
    REVIEWED_AT,
    REVIEWED_WRITE,
    DIFF_SUMMARY,
)


# Materializations of a plan's partition read per query while looking for the framework's latest.
_RECORD_PAGE = 20


def latest_plan_record(instance: dg.DagsterInstance, plan_id: str) -> dict[str, Any] | None:
    """The latest record of a plan this package wrote: {"plan": dict, "status": str, ...}, or
    None.

    A materialization of `backfill_plans` that carries no plan and status is not one of them:
    the UI's "Report materialization event" (GraphQL `reportRunlessAssetEvents`) records one
    with a description at most, and it once replaced the plan's record, so that every command
    lost a swapped plan. Such events are skipped; they change nothing a command does."""
    if not instance.has_dynamic_partition(PLANS_PARTITIONS, plan_id):
        return None
    records_filter = dg.AssetRecordsFilter(asset_key=PLAN_KEY, asset_partitions=[plan_id])
    cursor = None
    # The first page is the latest record alone: it is nearly always the one, and each record
    # holds the whole plan (a five-year plan's took 17 ms to read, and a page of 20 all of them).
    limit = 1
    while True:
        result = instance.fetch_materializations(records_filter, limit=limit, cursor=cursor)
        limit = _RECORD_PAGE
        for record in result.records:
            mat = record.asset_materialization
            found = {k: v.value for k, v in mat.metadata.items()} if mat is not None else {}
            if isinstance(found.get("plan"), dict) and found.get("status"):
                return found
        if not result.has_more:
            return None
        cursor = result.cursor


def load_plan(
    instance: dg.DagsterInstance, plan_id: str, allow_proposed: bool = False
) -> tuple[BackfillPlan, PlanStatus]:
    """The stored plan and its status; ExecutionRefused if it was never approved."""
    rec = latest_plan_record(instance, plan_id)
    status = PlanStatus(str(rec.get("status", PlanStatus.APPROVED))) if rec else None
    if (
        rec is None
        or not isinstance(rec.get("plan"), dict)
        or (status == PlanStatus.PROPOSED and not allow_proposed)
    ):
        raise ExecutionRefused(
            f"plan {plan_id} is not approved in this Dagster instance; approve it first "
            "(`backfill-assets approve PLAN.json`, or approve_backfill_job in the UI)"
        )
    assert status is not None
    return BackfillPlan.from_dict(rec["plan"]), status


def plan_criteria(instance: dg.DagsterInstance, plan_id: str) -> Criteria | None:
    rec = latest_plan_record(instance, plan_id)
    if rec is None:
        return None
    plan = rec.get("plan")
    if not isinstance(plan, dict) or "criteria" not in plan:
        raise InvalidInput(f"stored plan {plan_id} has no criteria; approve it again")
    return Criteria.from_dict(plan["criteria"])


def plan_statuses(
    instance: dg.DagsterInstance, target: str | None = None
) -> dict[str, tuple[str, PlanStatus]]:
    """plan id -> (target, status) for every recorded plan (of `target`, if given)."""
    out: dict[str, tuple[str, PlanStatus]] = {}
    for pid in instance.get_dynamic_partitions(PLANS_PARTITIONS):
        rec = latest_plan_record(instance, pid)
        if rec and isinstance(rec.get("plan"), dict):
            plan_target = str(rec["plan"].get("target"))
            if target is None or plan_target == target:
                out[pid] = (plan_target, PlanStatus(str(rec.get("status"))))
    return out


_INDEXED = "__every_approved_plan_indexed__"  # marker: the index was built from every plan


def active_plan_ids(instance: dg.DagsterInstance) -> list[str]:
    """Ids of the plans in the approved state, from the index `record_status` keeps, without
    reading every plan the instance ever recorded. An instance from before the index has it
    built once, from every plan. Entries are a hint: callers check each plan's latest status."""
    keys = instance.get_dynamic_partitions(ACTIVE_PLANS_PARTITIONS)
    if _INDEXED not in keys:
        approved = [p for p, (_, s) in plan_statuses(instance).items() if s == PlanStatus.APPROVED]
        instance.add_dynamic_partitions(ACTIVE_PLANS_PARTITIONS, [*approved, _INDEXED])
        keys = [*keys, *approved]
    return sorted({k for k in keys if k != _INDEXED})


def published_keys(instance: dg.DagsterInstance, plan_id: str) -> list[str]:
    """The dbt models the plan's swap published with the target (tables, restored by its
    rollback; views, which follow the target): no refresh after the swap or rollback needs them."""
    return recorded_published_keys(latest_plan_record(instance, plan_id) or {})


def recorded_published_keys(record: Mapping[str, Any]) -> list[str]:
    """`published_keys` from a plan record already read."""
    found = record.get(PUBLISHED)
    return [str(k) for k in found] if isinstance(found, list) else []


def record_status(
    instance: dg.DagsterInstance,
    plan: BackfillPlan,
    status: PlanStatus,
    *,
    previous: Mapping[str, Any] | None = None,
    **extra: Any,
) -> None:
    """Append a new record of the plan with a new status (history stays in the event log).

    The fields in CARRIED are copied from the latest record (or `previous`, when the caller
    already read it) unless `extra` sets them.
    """
    if status == PlanStatus.APPROVED:  # indexed before it is recorded: never missed by a driver
        instance.add_dynamic_partitions(ACTIVE_PLANS_PARTITIONS, [plan.plan_id])
    before = previous if previous is not None else latest_plan_record(instance, plan.plan_id)
    carried = {k: (before or {})[k] for k in CARRIED if k in (before or {})}
    metadata: dict[str, Any] = {
        "plan": dg.MetadataValue.json(plan.to_dict()),
        "plan_markdown": dg.MetadataValue.md(render_markdown(plan)),
        "status": str(status),
        "target": plan.target,
        "range": f"{plan.start.isoformat()}..{plan.end.isoformat()}",
        "batches": len(plan.batches),
        "batches_table": batches_table(plan),
    }
    for k, v in {**carried, **extra}.items():
        if v is None:
            continue
        metadata[k] = dg.MetadataValue.json(v) if isinstance(v, dict | list) else v
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=PLAN_KEY, partition=plan.plan_id, metadata=metadata)
    )
    if status != PlanStatus.APPROVED and instance.has_dynamic_partition(
        ACTIVE_PLANS_PARTITIONS, plan.plan_id
    ):
        instance.delete_dynamic_partition(ACTIVE_PLANS_PARTITIONS, plan.plan_id)


_BATCH_COLUMNS = (
    dg.TableColumn("batch", "int"),
    dg.TableColumn("start", "date"),
    dg.TableColumn("end", "date", description="inclusive"),
    dg.TableColumn("partitions", "int"),
    dg.TableColumn("est_rows", "int"),
    dg.TableColumn("est_seconds", "float"),
    dg.TableColumn("slot_start", "string", description="planned start, in the window"),
    dg.TableColumn("gates", "string"),
)


def batches_table(plan: BackfillPlan) -> dg.TableMetadataValue:
    """The plan's batches as a Dagster table (the UI shows it as one)."""
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord(
                {
                    "batch": b.index,
                    "start": b.start.isoformat(),
                    "end": b.end.isoformat(),
                    "partitions": len(b.partitions),
                    "est_rows": b.estimated_rows,
                    "est_seconds": round(b.estimated_seconds, 1),
                    "slot_start": b.slot.start.isoformat(timespec="minutes"),
                    "gates": ", ".join(b.gates),
                }
            )
            for b in plan.batches
        ],
        schema=dg.TableSchema(columns=list(_BATCH_COLUMNS)),
    )
