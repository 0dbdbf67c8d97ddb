"""`backfill-assets doctor`: find what keeps writers waiting forever, and repair it.

Checks, each with a finding and (with `repair=True`) the fix:

- **pools**: a concurrency pool whose limit and slots disagree. `DagsterInstance.wipe()` deletes
  pool slots but keeps the limit row, so a pool with limit 1 is left with 0 slots and every step
  in it waits forever. Repair: recreate the slots for the limit.
- **dead runs**: runs this package executed in a process on this host that no longer exists
  (SIGKILL, OOM), still STARTED. Repair: mark them failed and free their slots.
- **writer leases**: a table's writer lease held by a run that ended or a process that is gone.
  Repair: free it (it would be taken over on the next claim anyway; this says so now).
- **plan claims**: a table held in the warehouse by a plan the instance no longer has active.
  Repair: free the table.
- **run queue**: the instance does not limit the writer tag to one run per table, so runs of
  one table are not kept queued behind each other (not repaired: it is instance configuration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg

from backfill_assets.constants import WRITER_TAG
from backfill_assets.lib.states import ACTIVE_PLAN_STATUSES, IN_PROGRESS_RUN_STATUSES
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.lease import dead_local_runs, gone_reason, reap_dead_local_runs
from backfill_assets.service.plans import latest_plan_record


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
        rec = latest_plan_record(instance, plan_id)
        status = str(rec.get("status")) if rec else None
        if status in ACTIVE_PLAN_STATUSES:
            continue
        if repair:
            wh.release_plan(name, plan_id)
        out.append(
            Finding(
                "plans",
                f"{name} is held by plan {plan_id}, which the instance has "
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
        findings += _claims(instance, wh, tables, repair)
    return findings
