"""One writer per table: the writer lease.

Every run that writes a table (the daily run's target step, a batch, a swap, a rollback) and every
command that changes its physical tables (release, abandon) first claims the table's writer
lease, an atomic compare-and-set in the warehouse's `backfill_meta.writer_lease`. A run holds it
until the run ends: it is never released inside a step, so the rest of the daily run (its dbt
models, say) stays clear of backfill runs too. The lease needs no explicit release for runs; it is
free once its holder is known to be gone:

- the holder run finished (success, failure, canceled) or no longer exists;
- the holder's process is gone on this host (a SIGKILL, an OOM): the run is then marked failed,
  as Dagster's run monitoring would, so nothing waits for it again;
- a command holder (`cmd:...`) whose process is gone, or that held it for longer than any command
  takes.

A process is told by its pid *and its start*: the machine's boot id and the process's start
time since boot (Linux's /proc), recorded with the lease. A pid reused after a restart (or by a
later process) then does not keep the lease of the dead holder: the process carrying it now
started at another time, or under another boot. Where /proc is missing (not Linux) the pid alone
is checked, and a pid reused on the same host keeps the lease until its process ends.

A plan's runner (`backfill-assets run`) holds a lease of its own, `runner:<plan id>`, under a
process holder (`proc:...`) for the life of its process: a second runner of the plan is refused
while the first lives, and takes over once its process is gone (on another host: after
PROCESS_LEASE_MAX, the longest a run can last, inside one window).

Waiting is bounded, sleeps between attempts (never spins) and answers Ctrl-C: it is plain Python
`time.sleep`, interrupted by signals like any other.

Other tables are not held up: the lease is per table. On DuckDB one process writes the file at a
time, so two tables' writers take turns at the file (each connection waits for it, bounded).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import dagster as dg

from backfill_assets.constants import HOST_TAG, PID_TAG, PROCESS_TAG, REAPED_TAG
from backfill_assets.errors import ExecutionRefused, WarehouseError, WriterBusy
from backfill_assets.lib.states import FINISHED_RUN_STATUSES
from backfill_assets.lib.warehouse.base import (
    COMMAND_HOLDER,
    PROCESS_HOLDER,
    RUNNER_LEASE,
    LeaseHolder,
    Warehouse,
)

# A command (not a run) holds a lease for milliseconds; one that held it this long is gone.
COMMAND_LEASE_MAX = dt.timedelta(minutes=10)
# A process holder (a plan's runner) on another host, which cannot be checked from here, is
# taken for gone after this long: a `run` never runs past its plan's window, at most a day.
PROCESS_LEASE_MAX = dt.timedelta(hours=24)
# A run claims the lease moments after its run record is created (in-process runs claim first);
# a holder run still unknown to the instance after this long never started.
UNKNOWN_RUN_GRACE = dt.timedelta(minutes=2)
POLL_START_S = 0.2
POLL_MAX_S = 5.0


def this_host() -> str:
    return socket.gethostname()


@cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """What tells the process `pid` apart from any other that carries, or carried, the same
    pid: the machine's boot id and the process's start time in clock ticks since boot (field 22
    of /proc/<pid>/stat). "" where /proc cannot tell (not Linux, or no such process)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        # The command name (field 2) may hold spaces and parentheses: fields 3.. follow the
        # last ')'.
        start = int(data[data.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return ""
    return f"{_boot_id()}:{start}"


@cache
def this_process() -> str:
    """`process_start` of this process (it does not change while it lives)."""
    return process_start(os.getpid())


def process_alive(pid: int, started: str = "") -> bool:
    """Whether the process `pid` still runs on this host and, when `started` (its
    `process_start` when it claimed) is known, is the same process: a pid reused by a later
    process, after a restart say, does not count."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if started:
        now = process_start(pid)
        if now and now != started:
            return False
    return True


def _holder(holder_id: str, role: str, job_name: str = "", plan_id: str = "") -> LeaseHolder:
    return LeaseHolder(
        holder_id=holder_id,
        role=role,
        job_name=job_name,
        plan_id=plan_id,
        host=this_host(),
        pid=os.getpid(),
        process=this_process(),
    )


def holder_for_run(run_id: str, *, role: str, job_name: str = "", plan_id: str = "") -> LeaseHolder:
    return _holder(run_id, role, job_name, plan_id)


def holder_for_command(role: str, plan_id: str = "") -> LeaseHolder:
    return _holder(f"{COMMAND_HOLDER}{uuid.uuid4().hex[:12]}", role, plan_id=plan_id)


def holder_for_process(role: str, plan_id: str = "") -> LeaseHolder:
    """A holder for the life of this process (a plan's runner)."""
    return _holder(f"{PROCESS_HOLDER}{uuid.uuid4().hex[:12]}", role, plan_id=plan_id)


def _claimed_age(holder: LeaseHolder, now: dt.datetime) -> dt.timedelta:
    if holder.claimed_at is None:
        return dt.timedelta(0)
    claimed = (
        holder.claimed_at.replace(tzinfo=dt.UTC)
        if holder.claimed_at.tzinfo is None
        else (holder.claimed_at)
    )
    return now - claimed


def gone_reason(
    instance: dg.DagsterInstance, holder: LeaseHolder, *, reap: bool = True
) -> str | None:
    """Why `holder` no longer holds anything (it may be taken over), or None if it may still be
    writing. A holder run whose process is gone on this host is marked failed here (`reap`)."""
    now = dt.datetime.now(dt.UTC)
    same_host = holder.host == this_host() and holder.pid > 0
    gone = same_host and not process_alive(holder.pid, holder.process)
    if holder.run_id is None:
        if gone:
            return f"its process {holder.pid} is gone"
        age = _claimed_age(holder, now)
        if holder.holder_id.startswith(PROCESS_HOLDER):
            # On this host its process says; from another host, only its age can.
            if not same_host and age > PROCESS_LEASE_MAX:
                return f"its process on {holder.host} held it for more than {PROCESS_LEASE_MAX}"
            return None
        if age > COMMAND_LEASE_MAX:
            return f"a command held it for more than {COMMAND_LEASE_MAX}"
        return None
    run = instance.get_run_by_id(holder.run_id)
    if run is None:
        if gone:
            return f"run {holder.run_id[:8]} never started and its process {holder.pid} is gone"
        if _claimed_age(holder, now) > UNKNOWN_RUN_GRACE:
            return f"run {holder.run_id[:8]} does not exist in this instance"
        return None
    if run.status in FINISHED_RUN_STATUSES:
        return f"run {holder.run_id[:8]} ended ({run.status.value.lower()})"
    if gone:
        if not reap:
            return f"run {holder.run_id[:8]}'s process {holder.pid} is gone"
        reap_run(instance, run, f"its process {holder.pid} on {holder.host} no longer exists")
        return f"run {holder.run_id[:8]}'s process {holder.pid} is gone (marked failed)"
    return None


def reap_run(instance: dg.DagsterInstance, run: dg.DagsterRun, why: str) -> None:
    """Mark a run whose process died as failed (tagged as reaped: it was interrupted, it did not
    fail on its own) and free any concurrency slots it held."""
    instance.add_run_tags(run.run_id, {REAPED_TAG: why[:200]})
    instance.report_run_failed(run, message=why)
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


def mark_this_process(instance: dg.DagsterInstance, run: dg.DagsterRun) -> None:
    """Tag a run with the process (pid, host) its writing step runs in, so that if the process
    dies (a SIGKILL, a restart of the whole instance) the run can be told dead and reaped
    instead of staying STARTED forever. In-process runs carry these tags from their creation."""
    if run.tags.get(PID_TAG) != str(os.getpid()) or run.tags.get(HOST_TAG) != this_host():
        instance.add_run_tags(
            run.run_id,
            {PID_TAG: str(os.getpid()), HOST_TAG: this_host(), PROCESS_TAG: this_process()},
        )


def dead_local_runs(runs: list[dg.DagsterRun]) -> list[dg.DagsterRun]:
    """Of `runs` (in progress), those this package executed in a process on this host that no
    longer exists (their pid/host tags say where)."""
    here = this_host()
    return [
        run
        for run in runs
        if run.tags.get(HOST_TAG) == here
        and run.tags.get(PID_TAG, "").isdigit()
        and not process_alive(int(run.tags[PID_TAG]), run.tags.get(PROCESS_TAG, ""))
    ]


def reap_dead_local_runs(instance: dg.DagsterInstance, runs: list[dg.DagsterRun]) -> list[str]:
    """Mark failed (and free) the runs of `runs` whose local process is gone; their ids."""
    dead = dead_local_runs(runs)
    for run in dead:
        reap_run(instance, run, f"its process {run.tags[PID_TAG]} on {this_host()} is gone")
    return [r.run_id for r in dead]


@dataclass
class Waiting:
    """What a waiting claimant reports while the lease is held."""

    table: str
    holder: LeaseHolder
    waited_s: float


def acquire_writer(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: str,
    holder: LeaseHolder,
    *,
    wait_s: float,
    on_wait: Callable[[Waiting], None] | None = None,
) -> LeaseHolder:
    """Claim `table`'s writer lease for `holder`, waiting at most `wait_s` seconds.

    Raises:
        WriterBusy: when another live holder keeps it past the bound, naming it and how to free
            it. A warehouse that stays locked raises WarehouseError (its own bound).
    """
    t0 = time.monotonic()
    delay = POLL_START_S
    reported = -30.0  # report at once, then every 30 s
    while True:
        current = wh.claim_writer(table, holder)
        if current.holder_id == holder.holder_id:
            return current
        reason = gone_reason(instance, current)
        if reason is not None:
            current = wh.claim_writer(table, holder, takeover=current.holder_id)
            if current.holder_id == holder.holder_id:
                return current
            continue  # someone else took it over first: look again
        waited = time.monotonic() - t0
        if waited >= wait_s:
            raise WriterBusy(busy_message(table, current, waited))
        if on_wait is not None and waited - reported >= 30:
            on_wait(Waiting(table, current, waited))
            reported = waited
        time.sleep(min(delay, max(0.05, wait_s - waited)))
        delay = min(delay * 2, POLL_MAX_S)


def live_runner(instance: dg.DagsterInstance, wh: Warehouse, plan_id: str) -> LeaseHolder | None:
    """The process running the plan's batches (`backfill-assets run`), if one lives."""
    holder = wh.writer(f"{RUNNER_LEASE}{plan_id}")
    if holder is None or gone_reason(instance, holder, reap=False) is not None:
        return None
    return holder


def runner_refusal(plan_id: str, holder: LeaseHolder) -> ExecutionRefused:
    return ExecutionRefused(
        f"plan {plan_id} is already being run by {holder.describe()}; one runner per plan at a "
        "time. Wait for it to finish (or stop it with Ctrl-C), then run or start the plan again. "
        "Nothing was started"
    )


@contextmanager
def plan_runner(instance: dg.DagsterInstance, wh: Warehouse, plan_id: str) -> Iterator[None]:
    """Be the plan's one runner for the block, or refuse (ExecutionRefused) at once while
    another lives: two `run`s of one plan that both waited for the table once both ran its
    next batch."""
    holder = holder_for_process("runner", plan_id)
    name = f"{RUNNER_LEASE}{plan_id}"
    current = wh.claim_writer(name, holder)
    if current.holder_id != holder.holder_id:
        if gone_reason(instance, current, reap=False) is None:
            raise runner_refusal(plan_id, current)
        current = wh.claim_writer(name, holder, takeover=current.holder_id)
        if current.holder_id != holder.holder_id:
            raise runner_refusal(plan_id, current)
    try:
        yield
    finally:
        with suppress(WarehouseError):
            wh.release_writer(name, holder.holder_id)


def busy_message(table: str, holder: LeaseHolder, waited: float) -> str:
    return (
        f"{table} is being written by {holder.describe()}; one writer per table at a time, "
        f"waited {waited:.0f} s. Wait for it to finish and retry; if that run is dead, "
        "`backfill-assets doctor --repair` marks it failed and frees the table"
    )


@contextmanager
def writer_lease(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: str,
    holder: LeaseHolder,
    *,
    wait_s: float,
    on_wait: Callable[[Waiting], None] | None = None,
) -> Iterator[LeaseHolder]:
    """Hold `table`'s writer lease for the block (commands and in-process runs)."""
    acquire_writer(instance, wh, table, holder, wait_s=wait_s, on_wait=on_wait)
    try:
        yield holder
    finally:
        # If the warehouse cannot be reached now, the lease is freed later anyway: its holder
        # is a finished run or a gone process (see gone_reason).
        with suppress(WarehouseError):
            wh.release_writer(table, holder.holder_id)
