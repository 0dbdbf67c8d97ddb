"""The front door: who may write the live table.

The target asset writes a partition only on the declared daily path: a run of the table's daily
job (or another production job it declares), for partitions within its lookback. Every other run
of the target (a "Materialize..." or a partition backfill launched from the UI, a run of the daily
job over old days) is refused before anything is written, and, where it can be, turned into a
*proposed* plan for the same range: visible on `backfill_plans`, to be reviewed and approved.
Backfills write the shadow, and the swap and rollback move the data, not the asset.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from zoneinfo import ZoneInfo

import dagster as dg

from backfill_assets.constants import APPROVE_JOB, PLAN_JOB, PLANS_ASSET, START_JOB
from backfill_assets.errors import BackfillError
from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.planning.build import PlanRequest
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.approval import propose_plan
from backfill_assets.service.planner import plan_backfill


def daily_path_refusal(
    table: BackfillableTable,
    job_name: str,
    start: dt.date,
    end_inclusive: dt.date,
    now: dt.datetime,
) -> str | None:
    """Why a run of `job_name` over [start, end] may not write the live table, or None."""
    rng = f"{start}..{end_inclusive}" if start != end_inclusive else str(start)
    jobs = ", ".join(table.production_job_names)
    if job_name not in table.production_job_names:
        return (
            f"this run of {job_name} would write the live table {table.key} for {rng} with no "
            f"plan, shadow, gates or backup; only its daily path ({jobs}) writes it live"
        )
    today = now.astimezone(ZoneInfo(table.timezone)).date()
    oldest = today - dt.timedelta(days=table.daily_lookback_days)
    if start < oldest:
        return (
            f"{job_name} writes {table.key} live only for the last {table.daily_lookback_days} "
            f"days (from {oldest}); {rng} is backfill territory"
        )
    return None


def propose_instead(
    instance: dg.DagsterInstance,
    table: BackfillableTable,
    tables: Mapping[str, BackfillableTable],
    asset_graph: AssetGraphLike | None,
    wh: Warehouse,
    start: dt.date,
    end_inclusive: dt.date,
    now: dt.datetime,
) -> tuple[str | None, str]:
    """Propose a plan for the refused range; return its id (or None) and what to do next."""
    manual = (
        f"plan it with {PLAN_JOB} in the UI or `backfill-assets plan {table.key} --start {start} "
        f"--end {end_inclusive} --window HH:MM-HH:MM --rollback backup`"
    )
    if table.backfill_window is None:
        return None, (
            f"No plan was proposed ({table.key} declares no backfill_window): {manual}, then "
            "approve and start it"
        )
    if asset_graph is None:
        return None, (
            "No plan was proposed (this run has no code location to read the lineage from, so "
            f"it was not launched from the UI or the daemon): {manual}"
        )
    request = PlanRequest(
        target=table.key,
        start=start.isoformat(),
        end=end_inclusive.isoformat(),
        window=table.backfill_window,
        timezone=None,
        rollback="backup",
    )
    try:
        plan = plan_backfill(
            request, asset_graph=asset_graph, tables=tables, instance=instance, warehouse=wh,
            now=now,
        )  # fmt: skip
        status = propose_plan(instance, plan, wh)
    except BackfillError as e:
        return None, f"No plan was proposed: {e}. Otherwise {manual}"
    return plan.plan_id, (
        f"Plan {plan.plan_id} ({status}) covers that range instead, in {len(plan.batches)} "
        f"weekly batches in the window {plan.window.label} {plan.window.timezone}: review it on "
        f"the {PLANS_ASSET} asset (partition {plan.plan_id}), approve it with {APPROVE_JOB} "
        f"(plan_id: {plan.plan_id}) or `backfill-assets approve {plan.plan_id}`, then start it "
        f"with {START_JOB}"
    )
