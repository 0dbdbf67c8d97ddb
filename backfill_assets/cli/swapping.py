"""`swap`, `rollback`, `release` and `abandon`: move a validated plan into its target and back,
then drop its backup, or give up a plan before its swap."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from backfill_assets.cli.common import (
    EXIT_OK,
    EXIT_REFRESH_FAILED,
    QUIET,
    _runs_output_to_log,
    _say_waiting,
)
from backfill_assets.cli.context import _context
from backfill_assets.cli.options import _plan_id_arg
from backfill_assets.errors import BackfillError

if TYPE_CHECKING:
    import argparse

    from backfill_assets.cli.context import Context


def _swap_like(a: argparse.Namespace, kind: str) -> int:
    from backfill_assets.cli.output import Refreshed, SwapOut, dump
    from backfill_assets.constants import rollback_job, swap_job, swap_run_config
    from backfill_assets.errors import SwapRefused
    from backfill_assets.lib.states import PlanStatus
    from backfill_assets.service.executor import refuse_unless_local, run_error
    from backfill_assets.service.plans import published_keys
    from backfill_assets.service.reconcile import current_plan
    from backfill_assets.service.refresh import refresh_downstream
    from backfill_assets.service.runs import run_as_writer
    from backfill_assets.service.tables import table_for

    c = _context(a, jobs=True)
    plan_id = _plan_id_arg(a.plan)
    plan, status = current_plan(c.instance, c.wh, plan_id)
    table = table_for(c.tables, plan.target, what=f"plan {plan_id}'s target")
    refuse_unless_local(c.instance, f"backfill-assets {kind}")
    # Say so now rather than after waiting for the table's writer.
    allowed = (
        (PlanStatus.APPROVED, PlanStatus.SWAPPED)
        if kind == "swap"
        else (
            PlanStatus.SWAPPED,
            PlanStatus.ROLLED_BACK,
        )
    )
    if status not in allowed:
        raise SwapRefused(
            f"plan {plan_id} is {status}; only "
            + (
                "an approved plan can be swapped"
                if kind == "swap"
                else "a swapped plan whose backup was not released can be rolled back"
            )
        )
    job = swap_job(plan.target) if kind == "swap" else rollback_job(plan.target)
    waiting = _say_waiting()
    with _runs_output_to_log() as log:
        result = run_as_writer(
            c.definitions,
            job,
            c.instance,
            c.wh,
            table,
            role=kind,
            plan_id=plan_id,
            wait_s=c.wait_s,
            on_wait=waiting,
            raise_on_error=False,
            log_level=QUIET,
            run_config=swap_run_config(plan.target, kind, plan_id, downstream=not a.no_refresh),
        )
    if not result.success:
        error = run_error(result)
        raise BackfillError(error[1] if error else f"{kind} failed; see {log}")
    # The target's partitions: the run also records those of the models published with it.
    mats = [
        e
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
        and e.asset_key is not None
        and e.asset_key.to_user_string() == plan.target
    ]
    impacted = [i.asset_key for i in plan.impact]

    def output(refresh: str, refreshed: list[Any], stale: list[str]) -> str:
        return dump(
            SwapOut(
                command=kind,  # type: ignore[arg-type]
                plan_id=plan_id,
                target=plan.target,
                range=f"{plan.start}..{plan.end}",
                partitions=len(mats),
                run_id=result.run_id,
                refresh=refresh,  # type: ignore[arg-type]
                refreshed=[
                    Refreshed(
                        assets=list(req.asset_keys),
                        start=str(req.start) if req.start else None,
                        end=str(req.end) if req.end else None,
                        ok=ok,
                    )
                    for req, ok in refreshed
                ],
                stale=stale,
            )
        )

    text = a.format != "json"
    if text:
        print(
            f"{kind} of plan {plan_id}: {len(mats)} partitions of {plan.target} "
            f"(run {result.run_id[:8]})"
        )
    # Published with the target by the swap (its rollback restored them): never refreshed.
    published = published_keys(c.instance, plan_id)
    views = {i.asset_key for i in plan.impact if i.at_swap == "view"}
    marts = [k for k in published if k not in views]
    if text and marts:
        print(
            ("restored with " if kind == "rollback" else "published with ")
            + f"{plan.target} in the same transaction: {', '.join(marts)}"
            + (f" (views reading it: {', '.join(sorted(views & set(published)))})" if views else "")
        )
    if a.no_refresh:
        stale = [k for k in impacted if k not in published]
        if text:
            print(
                f"downstream NOT refreshed (--no-refresh): {', '.join(stale)} are stale for "
                f"{plan.start}..{plan.end}"
            )
        else:
            print(output("skipped", [], stale))
        return EXIT_OK
    with _runs_output_to_log():
        refreshed = refresh_downstream(
            c.definitions,
            c.instance,
            c.wh,
            table,
            plan,
            wait_s=c.wait_s,
            log_level=QUIET,
            skip=published,
        )
    failed = [key for req, ok in refreshed if not ok for key in req.asset_keys]
    if text:
        for req, ok in refreshed:
            rng = f" {req.start}..{req.end}" if req.start else " (full refresh)"
            print(f"  refreshed {', '.join(req.asset_keys)}{rng}: {'ok' if ok else 'FAILED'}")
    else:
        print(output("failed" if failed else "done", refreshed, failed))
    if not failed:
        return EXIT_OK
    print(
        f"{kind} done, but the downstream refresh failed: the marts above marked FAILED are stale "
        f"for {plan.start}..{plan.end}; fix the cause and re-run them",
        file=sys.stderr,
    )
    return EXIT_REFRESH_FAILED


def cmd_swap(a: argparse.Namespace) -> int:
    return _swap_like(a, "swap")


def cmd_rollback(a: argparse.Namespace) -> int:
    return _swap_like(a, "rollback")


def cmd_release(a: argparse.Namespace) -> int:
    from backfill_assets.service.lease import holder_for_command, writer_lease
    from backfill_assets.service.swap import release_backup

    c = _context(a)
    plan_id = _plan_id_arg(a.plan)
    holder = holder_for_command("release", plan_id)
    target = _target_of(c, plan_id)
    with writer_lease(c.instance, c.wh, target, holder, wait_s=c.wait_s, on_wait=_say_waiting()):
        plan, n = release_backup(c.instance, c.tables, c.wh, plan_id)
    print(
        f"released the backup of plan {plan_id}: {n} backup weeks dropped; it can no longer "
        f"be rolled back and {plan.target} is free for a new plan"
    )
    return EXIT_OK


def cmd_abandon(a: argparse.Namespace) -> int:
    from backfill_assets.service.lease import holder_for_command, writer_lease
    from backfill_assets.service.swap import abandon_plan

    c = _context(a)
    plan_id = _plan_id_arg(a.plan)
    holder = holder_for_command("abandon", plan_id)
    target = _target_of(c, plan_id)
    with writer_lease(c.instance, c.wh, target, holder, wait_s=c.wait_s, on_wait=_say_waiting()):
        target, n = abandon_plan(c.instance, c.tables, c.wh, plan_id)
    print(
        f"abandoned plan {plan_id}: {n} shadow week tables dropped; {target} is free for a new plan"
    )
    return EXIT_OK


def _target_of(c: Context, plan_id: str) -> str:
    """The table a plan (or a warehouse claim of it) belongs to, for its writer lease."""
    from backfill_assets.errors import ExecutionRefused
    from backfill_assets.service.reconcile import current_plan

    try:
        return current_plan(c.instance, c.wh, plan_id, allow_proposed=True)[0].target
    except ExecutionRefused:
        for name in c.tables:
            if c.wh.active_plan(name) == plan_id:
                return name
        raise
