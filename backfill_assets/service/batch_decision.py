"""The batch driver's decision: launch the next batch of a plan now, or say why not.

`next_action` is pure: the plan, the clock and plain facts about runs go in, a `Decision` comes
out. `service.batch_driver` gathers the facts from the Dagster instance (never the warehouse) and
turns a decision into a `RunRequest`; tests drive it with a controlled clock.

Rules, in the order they are checked (the first that applies is the reason given):

1. the plan was started (approval alone launches nothing; a halted plan waits for a restart);
2. no other run of this plan is queued or in progress; if a batch run is still going when the
   daily run's slot starts, that is an *overrun*: the daily run waits (the instance's writer tag
   limit) and the next batch is held until the next window;
3. batches run in order; a batch whose gates (or run) failed halts the plan, as does a runner
   run (service.plan_runner) that failed on its own;
4. a hold after an overrun has expired;
5. now is inside the plan's window and outside the daily run's slot;
6. no daily production run of the target is queued or in progress;
7. the batch's estimated duration fits before the window closes and before the next daily slot.

Times in plans are local wall-clock times; every instant computed here is real (UTC) time, so a
window on a DST day is as long as it really is. The daily run's slot is computed every day in the
daily job's own timezone: when the plan's zone and the daily job's differ, a DST change in either
never shifts the real slot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from backfill_assets.lib.planning.plan import BackfillPlan, Batch
from backfill_assets.lib.planning.windows import (
    TimeWindow,
    occurrences,
    parse_window,
    resolve_local,
    seconds_of_day,
)
from backfill_assets.lib.states import BatchState
from backfill_assets.service.executor import in_window

PASSED = BatchState.PASSED
PENDING = BatchState.PENDING
FAILED_GATES = BatchState.FAILED_GATES
FAILED_RUN = BatchState.FAILED_RUN


@dataclass(frozen=True)
class RunFact:
    """What the driver needs to know about one run (plain data, read from the instance)."""

    run_id: str
    status: str  # a DagsterRunStatus value: "QUEUED", "STARTED", ...
    batch: int | None = None  # the batch index tag, for this plan's batch runs
    role: str = ""  # the run's role tag: "batch", "daily", "swap", ...
    started_at: dt.datetime | None = None  # None while queued

    @property
    def label(self) -> str:
        what = f"batch {self.batch}" if self.batch is not None else (self.role or "run")
        return f"run {self.run_id[:8]} ({what}, {self.status.lower()})"


@dataclass(frozen=True)
class Decision:
    """What the driver does for one plan on one tick.

    `launch` is the batch to request now (else None) and `attempt` its attempt number. `overrun`
    is set when a batch run of the plan was still going as the daily run's slot started;
    `overrun_run_id` names that run and `hold_until` is when the next window opens.
    """

    launch: Batch | None
    reason: str
    overrun: bool = False
    attempt: int = 0
    hold_until: dt.datetime | None = None
    overrun_run_id: str | None = None


def batch_run_key(plan_id: str, index: int, attempt: int) -> str:
    """Deterministic: a restarted daemon re-evaluating the same tick cannot launch a batch twice,
    while a new attempt (after a failure was acknowledged) gets a new key."""
    return f"{plan_id}-batch-{index}-attempt-{attempt}"


def next_action(
    plan: BackfillPlan,
    now: dt.datetime,
    *,
    batch_states: Mapping[int, BatchState],
    active_runs: Sequence[RunFact],
    daily_runs: Sequence[RunFact],
    failed_attempts: Mapping[int, int],
    started: bool = True,
    hold_until: dt.datetime | None = None,
    failed_runner: RunFact | None = None,
) -> Decision:
    """Decide what the driver does for `plan` at `now`.

    Args:
        plan: an approved plan.
        now: timezone-aware current time.
        batch_states: batch index -> PASSED, PENDING, FAILED_GATES or FAILED_RUN; a batch
            missing here is PENDING (the sensor stops reading at the first batch not passed).
        active_runs: runs of this plan that are queued or in progress (any role).
        daily_runs: daily production runs of the target that are queued or in progress.
        failed_attempts: batch index -> finished runs of that batch that did not leave it
            passed; the next attempt is that number plus one.
        started: whether the plan was started for the driver (approval alone is not enough).
        hold_until: after an overrun, no batch starts before this instant.
        failed_runner: the plan's last runner run (service.plan_runner), if it failed on its
            own since the plan was started: the plan halts as on a failed batch.

    Returns:
        The decision, with a reason a person reads in the sensor's tick history.
    """
    if now.tzinfo is None:
        raise ValueError("next_action needs a timezone-aware `now`, e.g. datetime.now(UTC)")
    prefix = f"plan {plan.plan_id}: "

    def skip(reason: str) -> Decision:
        return Decision(None, prefix + reason)

    if not started:
        return skip(
            "approved but not started; start it with start_backfill_plan_job (Launchpad, "
            f"config plan_id: {plan.plan_id}) to let the driver run it"
        )

    if active_runs:
        return _while_running(plan, now, active_runs, daily_runs)

    todo = [b for b in plan.batches if batch_states.get(b.index, PENDING) != PASSED]
    if not todo:
        return skip(
            f"all batches passed: ready to swap ({plan.target}__swap_job with plan_id "
            f"{plan.plan_id}, or `backfill-assets swap {plan.plan_id}`)"
        )
    batch = todo[0]
    state = batch_states.get(batch.index, PENDING)
    if state in (FAILED_GATES, FAILED_RUN):
        what = "failed gates" if state == FAILED_GATES else "failed before its gates passed"
        return skip(
            f"batch {batch.index} ({batch.start}..{batch.end}) {what}: halted; fix the cause, "
            "then start the plan again (start_backfill_plan_job) to re-run it"
        )
    if failed_runner is not None:
        return skip(
            f"runner {failed_runner.label} failed before batch {batch.index} passed: halted; "
            "see its logs, fix the cause, then start the plan again (start_backfill_plan_job)"
        )

    tz = ZoneInfo(plan.window.timezone)
    window = parse_window(plan.window.label)
    if hold_until is not None and now < hold_until:
        return skip(
            f"held after an overrun into the daily run's slot; batch {batch.index} waits for "
            f"the window opening {_at(hold_until, tz)}"
        )
    if not in_window(plan, now):
        opens = next(occurrences(window, tz, now))[0]
        return skip(
            f"outside window {plan.window.label} {plan.window.timezone} (now "
            f"{now.astimezone(tz):%H:%M}); it opens next at {_at(opens, tz)}"
        )
    slot, slot_tz = daily_slot(plan)
    if occurrence_at(slot, slot_tz, now) is not None:
        return skip(
            f"inside the daily run's slot {slot.label} {slot_tz.key} (now "
            f"{now.astimezone(slot_tz):%H:%M})"
        )
    if daily_runs:
        busy = ", ".join(r.label for r in daily_runs)
        return skip(f"daily {busy} in progress; a batch never overlaps it")

    occ = occurrence_at(window, tz, now)
    closes = occ[1] if occ is not None else now
    next_slot = next(occurrences(slot, slot_tz, now))[0]
    need = batch.estimated_seconds
    left_in_window = (closes - now).total_seconds()
    left_before_daily = (next_slot - now).total_seconds()
    if need > left_in_window:
        return skip(
            f"batch {batch.index} needs {need:.0f} s but the window closes in "
            f"{left_in_window:.0f} s"
        )
    if need > left_before_daily:
        return skip(
            f"batch {batch.index} needs {need:.0f} s but the daily run's slot {slot.label} "
            f"{slot_tz.key} starts in {left_before_daily:.0f} s"
        )
    attempt = failed_attempts.get(batch.index, 0) + 1
    return Decision(
        batch,
        prefix + f"launching batch {batch.index} ({batch.start}..{batch.end}), attempt "
        f"{attempt}: needs {need:.0f} s, {min(left_in_window, left_before_daily):.0f} s left "
        "before the window closes or the daily run's slot starts",
        attempt=attempt,
    )


def _while_running(
    plan: BackfillPlan,
    now: dt.datetime,
    active_runs: Sequence[RunFact],
    daily_runs: Sequence[RunFact],
) -> Decision:
    """A run of the plan is queued or in progress: never start another; report an overrun."""
    prefix = f"plan {plan.plan_id}: "
    slot, slot_tz = daily_slot(plan)
    for run in active_runs:
        if run.batch is None or run.started_at is None:
            continue
        if overran(slot, slot_tz, run.started_at, now):
            tz = ZoneInfo(plan.window.timezone)
            reopens = next(occurrences(parse_window(plan.window.label), tz, now))[0]
            waiting = f"; daily {daily_runs[0].label} waits for it" if daily_runs else ""
            return Decision(
                None,
                prefix + f"overrun: {run.label} was still running when the daily "
                f"run's slot {slot.label} {slot_tz.key} started{waiting}; the "
                f"next batch is held until the window opening {_at(reopens, tz)}",
                overrun=True,
                hold_until=reopens,
                overrun_run_id=run.run_id,
            )
    busy = ", ".join(r.label for r in active_runs)
    return Decision(None, prefix + f"{busy} of this plan in progress; the next batch waits for it")


def daily_slot(plan: BackfillPlan) -> tuple[TimeWindow, ZoneInfo]:
    """The daily run's slot as a daily window in the daily job's own timezone: [expected start
    - margin, expected start + duration + margin] on its clock, whatever the plan's zone.

    Plans written before `daily_timezone` existed keep the slot as shown (plan's timezone).
    """
    c = plan.contention
    if c.daily_timezone is None:
        return parse_window(f"{c.daily_slot_start}-{c.daily_slot_end}"), ZoneInfo(c.timezone)
    begin = seconds_of_day(dt.time.fromisoformat(c.daily_expected_start)) - c.margin_seconds
    end = begin + c.daily_duration_seconds + 2 * c.margin_seconds
    return TimeWindow(_clock(begin), _clock(end, round_up=True)), ZoneInfo(c.daily_timezone)


def _clock(seconds: float, *, round_up: bool = False) -> dt.time:
    total = int(-(-seconds // 60) if round_up else seconds // 60) % (24 * 60)
    return dt.time(total // 60, total % 60)


def occurrence_at(
    window: TimeWindow, tz: ZoneInfo, now: dt.datetime
) -> tuple[dt.datetime, dt.datetime] | None:
    """The occurrence of a daily window (as real UTC instants) that contains `now`, if any.

    Only yesterday's and today's occurrences (local dates) can contain `now`, since a window is
    shorter than a day. An occurrence that DST leaves empty contains nothing.
    """
    day = now.astimezone(tz).date()
    end_offset = dt.timedelta(days=1 if window.crosses_midnight else 0)
    for d in (day - dt.timedelta(days=1), day):
        start = resolve_local(d, window.start, tz, edge="start")
        end = resolve_local(d + end_offset, window.end, tz, edge="end")
        if start <= now < end:
            return start, end
    return None


def overran(slot: TimeWindow, tz: ZoneInfo, started_at: dt.datetime, now: dt.datetime) -> bool:
    """Whether a daily slot began (or was already on) while a run went from `started_at` to
    `now`."""
    if occurrence_at(slot, tz, started_at) is not None:
        return True
    return next(occurrences(slot, tz, started_at))[0] <= now


def _at(instant: dt.datetime, tz: ZoneInfo) -> str:
    return f"{instant.astimezone(tz):%Y-%m-%d %H:%M} {tz.key}"
