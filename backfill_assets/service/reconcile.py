"""One state of record: the warehouse says what happened to a plan's table; the instance shows it.

A plan's status changes in the warehouse in the transaction that does what it names (the claim,
the swap, the rollback, the release, the abandon: lib/warehouse/shared/records.py). Then the
instance is told: the plan's record on `backfill_plans`, and for a swap or a rollback the
materializations of the target and of the dbt models it published (service.published). A
process that dies between the two, or a record erased in the UI, leaves the instance behind the
warehouse. So every command reads the warehouse's record first and tells the instance what it
missed (`current_plan`, `reconcile_untold`): a swap the warehouse committed is "swapped"
whatever the event log says, and its rollback stays possible until `release`.

The instance keeps what only it has: proposed plans (nothing was claimed yet), whether the batch
driver drives a plan, and the gate results per partition.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from backfill_assets.constants import PLANS_PARTITIONS
from backfill_assets.errors import InvalidInput
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.states import PlanStatus
from backfill_assets.lib.warehouse.base import PlanRecord, SwapResult, Warehouse
from backfill_assets.service.plans import (
    CODE_VERSIONS,
    DRIVING,
    PUBLISHED,
    PUBLISHED_PARTITIONS,
    latest_plan_record,
    load_plan,
    record_status,
)
from backfill_assets.service.published import (
    ROLLBACK_ACTION,
    SWAP_ACTION,
    code_versions_of,
    model_materializations,
    swap_materializations,
    swap_recorded,
)

# What a swap keeps with the plan in the warehouse (and the instance's record carries).
SWAP_DETAILS = (CODE_VERSIONS, PUBLISHED, PUBLISHED_PARTITIONS)
RECONCILED = "reconciled"  # the note on a record the instance was told late


def current_plan(
    instance: dg.DagsterInstance,
    wh: Warehouse | None,
    plan_id: str,
    *,
    allow_proposed: bool = False,
) -> tuple[BackfillPlan, PlanStatus]:
    """The plan and its status: the warehouse's, when it keeps the plan (telling the instance
    first if it was behind); else the instance's (a proposed plan, or one approved before the
    warehouse kept plans). ExecutionRefused when neither has it approved."""
    try:
        rec = wh.plan_record(plan_id) if wh is not None else None
    except InvalidInput:  # not a plan id at all: the instance's refusal says so
        rec = None
    if rec is None:
        return load_plan(instance, plan_id, allow_proposed=allow_proposed)
    assert wh is not None
    reconcile(instance, wh, rec)
    return BackfillPlan.from_json(rec.plan_json), PlanStatus(rec.status)


def reconcile(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    rec: PlanRecord,
    *,
    seen: dict[str, Any] | None = None,
) -> str | None:
    """Tell the instance what the warehouse's record of a plan says and it missed; a sentence
    saying what was told, or None when it had it all. `seen`: the instance's latest record of
    the plan, when the caller read it already."""
    if seen is None:
        seen = latest_plan_record(instance, rec.plan_id)
    had = str(seen["status"]) if seen else None
    if had == rec.status and rec.told:
        return None
    plan = BackfillPlan.from_json(rec.plan_json)
    told: list[str] = []
    # The events a lost record came with (recorded without a run, once: each is looked for
    # first): the target's partitions as the swap, then the rollback, moved them.
    actions = {
        PlanStatus.SWAPPED: [SWAP_ACTION],
        PlanStatus.RELEASED: [SWAP_ACTION],
        PlanStatus.ROLLED_BACK: [SWAP_ACTION, ROLLBACK_ACTION],
    }.get(PlanStatus(rec.status), [])
    for action in actions:
        if not swap_recorded(instance, plan, action):
            told.append(f"the {action} of {plan.target}'s partitions")
            for event in _events(wh, plan, rec, action):
                instance.report_runless_asset_event(event)
    if had != rec.status:
        if not instance.has_dynamic_partition(PLANS_PARTITIONS, plan.plan_id):
            instance.add_dynamic_partitions(PLANS_PARTITIONS, [plan.plan_id])
        note = (
            f"recorded from the warehouse, the state of record: the instance had "
            f"{had or 'no record of this plan'}"
        )
        told.insert(0, f"{plan.plan_id} {rec.status} ({note})")
        details = {k: rec.details[k] for k in SWAP_DETAILS if k in rec.details}
        record_status(
            instance,
            plan,
            PlanStatus(rec.status),
            previous=seen or {},
            approved_by=rec.approved_by or None,
            **({DRIVING: False} if rec.status != PlanStatus.APPROVED else {}),
            **details,
            **{RECONCILED: note},
        )
    wh.mark_recorded(rec.plan_id, rec.status)
    return "; ".join(told) if told else None


def _events(
    wh: Warehouse, plan: BackfillPlan, rec: PlanRecord, action: str
) -> list[dg.AssetMaterialization]:
    """The materializations `action` would have logged: the target's per partition it moved,
    as the warehouse recorded them, and the published models'."""
    moves = wh.swap_moves(plan.target, plan.plan_id)
    if action == ROLLBACK_ACTION:  # the rollback puts back what the swap took out
        moves = {
            d: type(m)(m.rows_out, m.checksum_out, m.rows_in, m.checksum_in)
            for d, m in moves.items()
        }
    result = SwapResult(plan.plan_id, action, moves, 0, 0.0)
    late = {RECONCILED: "recorded from the warehouse after the process that did it ended"}
    return [
        *swap_materializations(
            plan.target, result, action, None, code_versions_of(rec.details, action), **late
        ),
        *model_materializations(plan, rec.details, action, **late),
    ]


def reconcile_untold(instance: dg.DagsterInstance, wh: Warehouse) -> list[str]:
    """Tell the instance every change of a plan the warehouse made and the instance was not
    told (a process died between the two); what was told, one sentence per plan."""
    out = []
    for rec in wh.plan_records(untold=True):
        said = reconcile(instance, wh, rec)
        if said:
            out.append(said)
    return out


def settle(wh: Warehouse, plan_id: str, status: PlanStatus | str) -> None:
    """The instance was told `status` and everything that comes with it: say so in the
    warehouse's record (a later command then has nothing to tell it)."""
    wh.mark_recorded(plan_id, str(status))
