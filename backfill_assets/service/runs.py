"""Run a job of the definitions in this process, against a real instance.

In-process runs are recorded in the instance like any other (the UI shows them; their tags count
toward the instance's run concurrency limits for queued runs), but they do not pass through the
run queue. So a run that writes a table first claims the table's writer lease (service.lease) in
this process, under the run's own id, and keeps it until the run has ended; and its tags carry
this process's pid and host, so a later command can reap it if the process dies.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import dagster as dg

from backfill_assets.constants import (
    HOST_TAG,
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PID_TAG,
    PROCESS_TAG,
)
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.service.lease import (
    Waiting,
    holder_for_run,
    this_host,
    this_process,
    writer_lease,
)


class RepositoryLocation:
    """A code location's repository, used as `run_job` uses Definitions: a run that the daemon
    launched (service.plan_runner) has its repository, not the Definitions object."""

    def __init__(self, repository: dg.RepositoryDefinition) -> None:
        self.repository = repository

    def resolve_job_def(self, name: str) -> dg.JobDefinition:
        return self.repository.get_job(name)

    def resolve_implicit_global_asset_job_def(self) -> dg.JobDefinition:
        return self.repository.get_implicit_global_asset_job_def()

    def get_repository_def(self) -> dg.RepositoryDefinition:
        return self.repository


# Where `run_job` finds the jobs it runs: the Definitions, or a run's repository.
Location = dg.Definitions | RepositoryLocation

# The Definitions of the job `run_job` is executing in this process (see code_location).
IN_PROCESS_LOCATION: ContextVar[Location | None] = ContextVar(
    "backfill_assets_in_process_location", default=None
)


def code_location_repository(context: Any) -> Any:
    """The repository of the code location a run belongs to: the one the webserver or the
    daemon launched it from; that of the Definitions `run_job` is executing in this process;
    else None (a bare `execute_in_process`)."""
    try:
        return context.repository_def
    except Exception:  # Dagster raises CheckError (no public type) for in-process runs
        pass
    defs = IN_PROCESS_LOCATION.get()
    return defs.get_repository_def() if defs is not None else None


def code_location(context: Any) -> Any:
    """The asset graph of the code location a run belongs to (`code_location_repository`)."""
    repository = code_location_repository(context)
    return repository.asset_graph if repository is not None else None


# The instances whose storage connections this process holds (`hold_connections`).
_HOLDING: weakref.WeakSet[dg.DagsterInstance] = weakref.WeakSet()
# A held connection older than this is replaced (dagster-webserver's default), and up to this
# many more than the one held may be open at once (the progress follower reads beside the run);
# no statement timeout, as with the storage's own connections.
POOL_RECYCLE_S = 3600
POOL_MAX_OVERFLOW = 4


def hold_connections(instance: dg.DagsterInstance) -> None:
    """Let `instance`'s storages keep one connection each open for the rest of this process, as
    dagster-webserver does (`DagsterInstance.optimize_for_webserver`, the only way Dagster
    offers). For a process that executes runs and then ends: the CLI's `run`, `swap` and
    `rollback`.

    Dagster's PostgreSQL storage otherwise opens a new server connection, a new server process,
    for every read and write: several per event, and a batch run stores dozens of events.
    Holding them more than halves a batch's time on a local server (`python -m
    bench.experiments.profile_dagster_path --storage postgres [--hold]`; docs/performance.md).
    Dagster's SQLite storage has no such setting, and this changes nothing there. Calling it
    again for the same instance does nothing."""
    if instance in _HOLDING:
        return
    instance.optimize_for_webserver(
        statement_timeout=0, pool_recycle=POOL_RECYCLE_S, max_overflow=POOL_MAX_OVERFLOW
    )
    _HOLDING.add(instance)


def range_tags(start: dt.date, end_inclusive: dt.date) -> dict[str, str]:
    """Dagster's tags for one run over a partition range (inclusive keys)."""
    return {
        PARTITION_RANGE_START_TAG: start.isoformat(),
        PARTITION_RANGE_END_TAG: end_inclusive.isoformat(),
    }


def local_process_tags() -> dict[str, str]:
    """Where an in-process run executes, so it can be reaped if this process dies."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: this_host(), PROCESS_TAG: this_process()}


def run_job(
    defs: Location,
    job_name: str,
    instance: dg.DagsterInstance,
    *,
    start: dt.date | None = None,
    end_inclusive: dt.date | None = None,
    partition_key: str | None = None,
    tags: Mapping[str, str] | None = None,
    run_config: Mapping[str, Any] | None = None,
    raise_on_error: bool = True,
    log_level: str | None = None,
    run_id: str | None = None,
    asset_selection: Sequence[dg.AssetKey] | None = None,
) -> dg.ExecuteInProcessResult:
    """Execute one job in-process: a single partition, a partition range, or unpartitioned.

    `log_level` (e.g. "WARNING") quiets the run's console logger for command-line use; the
    instance's event log keeps every event either way.
    """
    job = (
        defs.resolve_implicit_global_asset_job_def()
        if asset_selection is not None
        else defs.resolve_job_def(job_name)
    )
    all_tags = {**local_process_tags(), **(tags or {})}
    config = dict(run_config or {})
    if log_level:
        config["loggers"] = {"console": {"config": {"log_level": log_level}}}
    if start is not None and end_inclusive is not None:
        if start == end_inclusive:
            partition_key = start.isoformat()
        else:
            all_tags.update(range_tags(start, end_inclusive))
    # A run in this process has no repository; its steps find the code location here (the
    # target's front door proposes a plan from its lineage), for this call only.
    token = IN_PROCESS_LOCATION.set(defs)
    try:
        return job.execute_in_process(
            instance=instance,
            partition_key=partition_key,
            tags=all_tags,
            run_config=config,
            raise_on_error=raise_on_error,
            run_id=run_id,
            asset_selection=asset_selection,
        )
    finally:
        IN_PROCESS_LOCATION.reset(token)


def run_as_writer(
    defs: Location,
    job_name: str,
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    *,
    role: str,
    wait_s: float,
    plan_id: str = "",
    before: Callable[[str], None] | None = None,
    on_wait: Callable[[Waiting], None] | None = None,
    **kw: Any,
) -> dg.ExecuteInProcessResult:
    """`run_job` under `table`'s writer lease, claimed for the run's id before it starts.

    `before(run_id)` runs once the lease is held and before the run starts; it may raise to
    refuse (e.g. a daily run is queued: the lease alone would let the batch go first).
    """
    run_id = str(uuid.uuid4())
    holder = holder_for_run(run_id, role=role, job_name=job_name, plan_id=plan_id)
    with writer_lease(instance, wh, table.key, holder, wait_s=wait_s, on_wait=on_wait):
        if before is not None:
            before(run_id)
        return run_job(defs, job_name, instance, run_id=run_id, **kw)
