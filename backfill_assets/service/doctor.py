"""`backfill-assets doctor`: find what keeps writers waiting forever, and repair it.

Checks, each with a finding and (with `repair=True`) the fix:

- **pools**: a concurrency pool whose limit and slots disagree. `DagsterInstance.wipe()` deletes
  pool slots but keeps the limit row, so a pool with limit 1 is left with 0 slots and every step
  in it waits forever. Repair: recreate the slots for the limit.
- **dead runs**: runs this package executed in a process on this host that no longer exists
  (SIGKILL, OOM), still STARTED. Repair: mark them failed and free their slots.
- **writer leases**: a table's writer lease held by a run that ended or a process that is gone.
  Repair: free it (it would be taken over on the next claim anyway; this says so now).
- **plan records**: a plan whose status in the warehouse, the state of record, is not what the
  instance has (a process died between the two, or the record was erased in the UI), or whose
  swap or rollback the instance was not told completely. Repair: tell the instance
  (service.reconcile). A plan the instance has as approved or swapped that the warehouse does not
  hold is reported (approve it again or abandon it).
- **plan claims**: a table held in the warehouse by a plan that is over. Repair: free the table,
  never while the plan has a live backup in the warehouse (its rollback needs the claim).
- **run queue**: the instance does not limit the writer tag to one run per table, so runs of
  one table are not kept queued behind each other (not repaired: it is instance configuration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg

from backfill_assets.constants import WRITER_TAG
from backfill_assets.lib.states import ACTIVE_PLAN_STATUSES, IN_PROGRESS_RUN_STATUSES, PlanStatus
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.lease import dead_local_runs, gone_reason, reap_dead_local_runs
from backfill_assets.service.plans import latest_plan_record, plan_statuses
from backfill_assets.service.reconcile import reconcile


@dataclass(frozen=True)
class Finding:
    check: str
    problem: str
    fix: str
    repaired: bool = False

    def line(self) -> str:
        done = "repaired" if self.repaired else f"fix: {self.fix}"
        return f"[{self.check}] {self.problem} ({done})"


def _pools(instance: dg.DagsterInstance, repair: bool) -> list[Finding]:
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    out = []
    limits = storage.get_pool_limits()
    infos = storage.get_concurrency_infos([p.name for p in limits])
    for pool in limits:
        info = infos[pool.name]
        if info.slot_count == pool.limit:
            continue
        if repair:
            storage.set_concurrency_slots(pool.name, pool.limit)
        out.append(
            Finding(
                "pools",
                f"pool {pool.name!r} has limit {pool.limit} but {info.slot_count} slots; steps "
                "in it wait forever",
                f"backfill-assets doctor --repair (sets its slots to {pool.limit})",
                repair,
            )
        )
    return out


def _dead_runs(instance: dg.DagsterInstance, repair: bool) -> list[Finding]:
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=list(IN_PROGRESS_RUN_STATUSES)))
    ids = (
        reap_dead_local_runs(instance, list(runs))
        if repair
        else [r.run_id for r in dead_local_runs(list(runs))]
    )
    return [
        Finding(
            "runs",
            f"run {rid[:8]} was in progress but its process on this host is gone",
            "backfill-assets doctor --repair (marks it failed)",
            repair,
        )
        for rid in ids
    ]


def _leases(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    tables: Mapping[str, BackfillableTable],
    repair: bool,
) -> list[Finding]:
    out = []
    for name in sorted(tables):
        holder = wh.writer(name)
        if holder is None:
            continue
        why = gone_reason(instance, holder, reap=repair)
        if why is None:
            continue
        if repair:
            wh.release_writer(name, holder.holder_id)
        out.append(
            Finding(
                "leases",
                f"{name}'s writer lease is held by {holder.describe()}, but {why}",
                "backfill-assets doctor --repair (frees it)",
                repair,
            )
        )
    return out


def _records(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    tables: Mapping[str, BackfillableTable],
    repair: bool,
) -> list[Finding]:
    """Every disagreement between the warehouse's records of plans and the instance's."""
    out = []
    kept = set()
    for rec in wh.plan_records():
        kept.add(rec.plan_id)
        if rec.table not in tables:  # another code location's table, in the same warehouse
            continue
        seen = latest_plan_record(instance, rec.plan_id)
        had = str(seen["status"]) if seen else None
        if had == rec.status and rec.told:
            continue
        if had != rec.status:
            problem = (
                f"plan {rec.plan_id} of {rec.table} is {rec.status} in the warehouse (the state "
                "of record), but the instance has " + (f"it as {had}" if had else "no record of it")
            )
        else:
            problem = (
                f"plan {rec.plan_id} of {rec.table} is {rec.status}, but the instance was not told "
                "all of it (the process ended between the warehouse's commit and the instance)"
            )
        if repair:
            reconcile(instance, wh, rec, seen=seen)
        out.append(
            Finding(
                "records",
                problem,
                "backfill-assets doctor --repair (tells the instance what the warehouse did)",
                repair,
            )
        )
    for plan_id, (target, status) in sorted(plan_statuses(instance).items()):
        if target not in tables or status not in ACTIVE_PLAN_STATUSES or plan_id in kept:
            continue
        if wh.active_plan(target) == plan_id:  # claimed before the warehouse kept plans
            continue
        out.append(
            Finding(
                "records",
                f"plan {plan_id} of {target} is {status} in the instance, but the warehouse "
                "neither holds the table for it nor keeps it",
                f"approve it again (backfill-assets approve PLAN.json), or backfill-assets "
                f"abandon {plan_id}",
            )
        )
    return out


def _claims(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    tables: Mapping[str, BackfillableTable],
    repair: bool,
) -> list[Finding]:
    out = []
    for name in sorted(tables):
        plan_id = wh.active_plan(name)
        if plan_id is None:
            continue
        kept = wh.plan_record(plan_id)
        if kept is not None:
            status: str | None = kept.status
            source = "the warehouse"
        else:  # claimed before the warehouse kept plans: the instance's word
            rec = latest_plan_record(instance, plan_id)
            status = str(rec.get("status")) if rec else None
            source = "the instance"
        if status in ACTIVE_PLAN_STATUSES:
            continue
        if wh.swap_state(tables[name].spec, plan_id) == PlanStatus.SWAPPED:
            # Its backup is live: freeing the claim would let another plan swap over it and
            # leave the backup with nothing to restore it. Never repaired.
            out.append(
                Finding(
                    "plans",
                    f"{name} is held by plan {plan_id}, which has a live backup in the warehouse "
                    f"but which {source} has " + (f"as {status}" if status else "no record of"),
                    f"roll it back or release it (backfill-assets rollback {plan_id}); the claim "
                    "is kept while the backup lives",
                )
            )
            continue
        if repair:
            wh.release_plan(name, plan_id)
        out.append(
            Finding(
                "plans",
                f"{name} is held by plan {plan_id}, which {source} has "
                + (f"as {status}" if status else "never recorded"),
                f"backfill-assets doctor --repair, or backfill-assets abandon {plan_id}",
                repair,
            )
        )
    return out


def _run_queue(instance: dg.DagsterInstance) -> list[Finding]:
    config = instance.get_concurrency_config().run_queue_config
    limits = config.tag_concurrency_limits if config else []
    for limit in limits or []:
        value = limit.get("value")
        if (
            limit.get("key") == WRITER_TAG
            and isinstance(value, Mapping)
            and value.get("applyLimitPerUniqueValue")
            and limit.get("limit") == 1
        ):
            return []
    return [
        Finding(
            "queue",
            f"the instance does not limit the run tag {WRITER_TAG} to 1 per unique value: runs of "
            "one table are not held queued behind each other (the writer lease still keeps them "
            "from writing at once, but they wait inside a run instead of in the queue)",
            "add to dagster.yaml: concurrency: {runs: {tag_concurrency_limits: [{key: "
            f"{WRITER_TAG}, value: {{applyLimitPerUniqueValue: true}}, limit: 1}}]}}}}",
        )
    ]


def diagnose(
    instance: dg.DagsterInstance,
    wh: Warehouse | None,
    tables: Mapping[str, BackfillableTable],
    *,
    repair: bool = False,
) -> list[Finding]:
    """Every finding, repaired if `repair` (except instance configuration)."""
    findings = [*_pools(instance, repair), *_dead_runs(instance, repair), *_run_queue(instance)]
    if wh is not None:
        findings += _leases(instance, wh, tables, repair)
        findings += _records(instance, wh, tables, repair)
        findings += _claims(instance, wh, tables, repair)
    return findings
