"""The batch driver's decision (`next_action`) on plain data with a controlled clock.

No instance, no warehouse: plans come from the pure planner, runs are plain `RunFact`s.
"""

import dataclasses
import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from backfill_assets.lib.planning.build import PlanInputs, PlanRequest, TargetInfo, build_plan
from backfill_assets.lib.planning.criteria import Criteria, RowCountCriterion, SampleCriterion
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.planning.windows import resolve_local
from backfill_assets.service.batch_decision import (
    FAILED_GATES,
    FAILED_RUN,
    PASSED,
    RunFact,
    batch_run_key,
    next_action,
)

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")
PLANNED_AT = dt.datetime(2026, 2, 1, 12, 0, tzinfo=UTC)


def make_plan(
    window: str = "02:00-05:00",
    timezone: str = "UTC",
    daily_start: dt.time = dt.time(1, 0),
    now: dt.datetime = PLANNED_AT,
    target_timezone: str = "UTC",
) -> BackfillPlan:
    """A plan of 2026-01-03..2026-01-17 (3 batches) from the real planner; with the default
    daily run (expected 01:00 UTC, 900 s, 30 min margins) its slot is 00:30-01:45 UTC."""
    target = TargetInfo(
        key="orders_daily",
        shadow_key="orders_daily__shadow",
        partitions_start=dt.date(2025, 1, 1),
        partitions_end=None,
        timezone=target_timezone,
        daily_job="orders_daily_job",
        daily_expected_start=daily_start,
        columns=("order_id", "order_date"),
        default_criteria=Criteria(
            row_count=RowCountCriterion(compare_to=("source",)),
            sample=SampleCriterion(unchanged_columns=("order_date",)),
        ),
    )
    inputs = PlanInputs(
        targets={"orders_daily": target},
        known_assets=frozenset({"orders_daily"}),
        impact=(),
        partition_rows={},
        seconds_per_row=None,
        batch_overhead_seconds=None,
        daily_durations_seconds=(),
        now=now,
    )
    request = PlanRequest("orders_daily", "2026-01-03", "2026-01-17", window, timezone, "backup")
    return build_plan(request, inputs)


def needing(plan: BackfillPlan, seconds: float) -> BackfillPlan:
    """The same plan with every batch estimated at `seconds`."""
    batches = tuple(dataclasses.replace(b, estimated_seconds=seconds) for b in plan.batches)
    return dataclasses.replace(plan, batches=batches)


def decide(plan: BackfillPlan, now: dt.datetime, **facts):
    kw = {"batch_states": {}, "active_runs": [], "daily_runs": [], "failed_attempts": {}}
    kw.update(facts)
    return next_action(plan, now, **kw)


def at(text: str, tz: dt.tzinfo = UTC) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=tz)


def test_inside_the_window_with_nothing_running_launches_batch_one_as_attempt_one():
    plan = make_plan()
    d = decide(plan, at("2026-02-02 03:00"))
    assert d.launch is not None and d.launch.index == 1
    assert d.attempt == 1
    assert batch_run_key(plan.plan_id, 1, d.attempt) == f"{plan.plan_id}-batch-1-attempt-1"
    assert d.reason.startswith(f"plan {plan.plan_id}: launching batch 1")
    assert not d.overrun


def test_outside_the_window_skips_and_says_when_it_opens():
    plan = make_plan()
    d = decide(plan, at("2026-02-02 11:03"))
    assert d.launch is None
    assert f"plan {plan.plan_id}: outside window 02:00-05:00 UTC (now 11:03)" in d.reason
    assert "opens next at 2026-02-03 02:00 UTC" in d.reason


def test_the_same_facts_always_give_the_same_decision():
    plan = make_plan()
    now = at("2026-02-02 03:00")
    assert decide(plan, now) == decide(plan, now)


def test_a_window_crossing_midnight_is_open_on_both_sides_of_it_and_closed_at_noon():
    plan = make_plan("22:00-04:00", daily_start=dt.time(12, 0))
    assert decide(plan, at("2026-02-02 23:30")).launch is not None
    assert decide(plan, at("2026-02-03 03:00")).launch is not None
    assert "outside window 22:00-04:00" in decide(plan, at("2026-02-03 12:00")).reason


def test_a_batch_that_does_not_fit_before_a_window_crossing_midnight_closes_waits():
    plan = needing(make_plan("22:00-04:00", daily_start=dt.time(12, 0)), 7200)
    d = decide(plan, at("2026-02-03 03:00"))
    assert d.launch is None
    assert "batch 1 needs 7200 s but the window closes in 3600 s" in d.reason
    # Before midnight the same batch fits: 6 hours are left.
    assert decide(plan, at("2026-02-02 22:30")).launch is not None


def test_on_the_spring_dst_day_in_berlin_the_window_is_an_hour_shorter_in_real_time():
    # 01:00-04:00 Europe/Berlin is 3 h on an ordinary night; on 2026-03-29 the clocks jump from
    # 02:00 to 03:00, so at 01:30 only 1.5 h of real time are left.
    plan = needing(make_plan("01:00-04:00", "Europe/Berlin", daily_start=dt.time(12, 0)), 7200)
    ordinary = decide(plan, at("2026-03-28 01:30", BERLIN))
    assert ordinary.launch is not None
    dst_day = decide(plan, at("2026-03-29 01:30", BERLIN))
    assert dst_day.launch is None
    assert "batch 1 needs 7200 s but the window closes in 5400 s" in dst_day.reason


def test_on_the_autumn_dst_day_in_berlin_the_window_is_an_hour_longer_in_real_time():
    plan = needing(make_plan("01:00-04:00", "Europe/Berlin", daily_start=dt.time(12, 0)), 12000)
    # 2026-10-25: 03:00 CEST becomes 02:00 CET; 01:30..04:00 lasts 3.5 h of real time.
    assert decide(plan, at("2026-10-25 01:30", BERLIN)).launch is not None
    assert decide(plan, at("2026-10-24 01:30", BERLIN)).launch is None


def test_inside_the_daily_slot_nothing_launches_even_inside_the_window():
    # The planner refuses a window over the daily slot; but the driver checks the slot on its
    # own (on DST days the real slot can drift into a window), so force one here.
    base = make_plan("22:00-06:00", daily_start=dt.time(12, 0))
    contention = dataclasses.replace(base.contention, daily_expected_start="01:00")
    plan = dataclasses.replace(base, contention=contention)
    d = decide(plan, at("2026-02-03 00:45"))
    assert d.launch is None
    assert "inside the daily run's slot 00:30-01:45 UTC (now 00:45)" in d.reason
    # At 23:00 a two-hour batch would run into the slot at 00:30.
    late = decide(needing(plan, 7200), at("2026-02-02 23:00"))
    assert late.launch is None
    assert "needs 7200 s but the daily run's slot 00:30-01:45 UTC starts in 5400 s" in late.reason
    assert decide(needing(plan, 3000), at("2026-02-02 23:00")).launch is not None


@pytest.mark.parametrize("day", ["2026-01-15", "2026-03-15", "2026-07-15", "2026-10-28"])
def test_the_daily_slot_follows_the_daily_jobs_own_clock_across_both_dst_changes(day):
    # The plan is in New York, the daily job runs at 01:00 Berlin. Europe and the US change
    # their clocks weeks apart: on 2026-03-15 and 2026-10-28 Berlin is 5 hours ahead of New York,
    # not 6. Regression: the driver kept the slot as shown in the plan's zone on the day it was
    # planned (18:30-19:45 New York, in February), so on those days it launched batches inside
    # the real slot (19:30-20:45 New York).
    planned = make_plan(
        "02:00-17:00", "America/New_York", daily_start=dt.time(1, 0),
        target_timezone="Europe/Berlin",
    )  # fmt: skip
    window = dataclasses.replace(planned.window, start="12:00", end="23:59")
    plan = dataclasses.replace(planned, window=window)  # a window over the slot, forced
    daily = resolve_local(
        dt.date.fromisoformat(day) + dt.timedelta(days=1), dt.time(1, 0), BERLIN, edge="start"
    )
    inside = decide(plan, daily + dt.timedelta(minutes=5))
    assert inside.launch is None
    assert "inside the daily run's slot 00:30-01:45 Europe/Berlin" in inside.reason
    assert decide(plan, daily - dt.timedelta(minutes=25)).launch is None  # the margin before
    after = decide(plan, daily + dt.timedelta(minutes=46))  # 15 min run + 30 min margin
    assert after.launch is not None


def test_a_queued_or_running_daily_run_holds_every_batch():
    plan = make_plan()
    daily = [RunFact("abc12345ffff", "QUEUED", role="daily")]
    d = decide(plan, at("2026-02-02 03:00"), daily_runs=daily)
    assert d.launch is None
    assert "daily run abc12345 (daily, queued) in progress" in d.reason


def test_another_run_of_the_plan_in_progress_holds_the_next_batch():
    plan = make_plan()
    running = [RunFact("def67890aaaa", "STARTED", batch=1, started_at=at("2026-02-02 02:10"))]
    d = decide(plan, at("2026-02-02 03:00"), active_runs=running)
    assert d.launch is None and not d.overrun
    assert "run def67890 (batch 1, started) of this plan in progress" in d.reason


def test_batches_run_in_order_after_every_gate_of_the_previous_ones_passed():
    plan = make_plan()
    d = decide(plan, at("2026-02-02 03:00"), batch_states={1: PASSED})
    assert d.launch is not None and d.launch.index == 2


def test_a_batch_that_failed_its_gates_halts_the_plan():
    plan = make_plan()
    d = decide(
        plan,
        at("2026-02-02 03:00"),
        batch_states={1: PASSED, 2: FAILED_GATES},
        failed_attempts={2: 1},
    )
    assert d.launch is None
    assert "batch 2 (2026-01-05..2026-01-11) failed gates: halted" in d.reason
    run_failed = decide(plan, at("2026-02-02 03:00"), batch_states={1: FAILED_RUN})
    assert "batch 1 (2026-01-03..2026-01-04) failed before its gates passed: halted" in (
        run_failed.reason
    )


def test_a_re_run_after_an_acknowledged_failure_is_a_new_attempt_with_a_new_run_key():
    plan = make_plan()
    d = decide(plan, at("2026-02-02 03:00"), batch_states={1: PASSED}, failed_attempts={2: 2})
    assert d.launch is not None and d.launch.index == 2
    assert d.attempt == 3
    assert batch_run_key(plan.plan_id, 2, d.attempt) == f"{plan.plan_id}-batch-2-attempt-3"


def test_when_every_batch_passed_the_plan_is_ready_to_swap():
    plan = make_plan()
    d = decide(plan, at("2026-02-02 03:00"), batch_states={1: PASSED, 2: PASSED, 3: PASSED})
    assert d.launch is None
    assert "all batches passed: ready to swap" in d.reason


def test_an_approved_plan_that_was_not_started_launches_nothing():
    plan = make_plan()
    d = decide(plan, at("2026-02-02 03:00"), started=False)
    assert d.launch is None
    assert "approved but not started; start it with start_backfill_plan_job" in d.reason


def test_a_batch_still_running_when_the_daily_slot_starts_is_an_overrun_held_to_the_next_window():
    plan = make_plan("21:00-23:30", daily_start=dt.time(1, 0))  # slot 00:30-01:45 UTC
    running = [RunFact("fee12345bbbb", "STARTED", batch=2, started_at=at("2026-02-02 23:00"))]
    daily = [RunFact("dd001234cccc", "QUEUED", role="daily")]
    before = decide(plan, at("2026-02-03 00:20"), active_runs=running, daily_runs=daily)
    assert not before.overrun
    d = decide(plan, at("2026-02-03 00:40"), active_runs=running, daily_runs=daily)
    assert d.overrun and d.launch is None
    assert d.overrun_run_id == "fee12345bbbb"
    assert d.hold_until == at("2026-02-03 21:00")
    assert "overrun: run fee12345 (batch 2, started)" in d.reason
    assert "daily run dd001234 (daily, queued) waits for it" in d.reason


def test_a_hold_after_an_overrun_keeps_the_next_batch_until_the_window_it_names():
    plan = make_plan()
    hold = at("2026-02-03 02:00")
    held = decide(plan, at("2026-02-02 04:00"), batch_states={1: PASSED}, hold_until=hold)
    assert held.launch is None and "held after an overrun" in held.reason
    after = decide(plan, at("2026-02-03 02:30"), batch_states={1: PASSED}, hold_until=hold)
    assert after.launch is not None and after.launch.index == 2


def test_a_naive_clock_is_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        decide(make_plan(), dt.datetime(2026, 2, 2, 3, 0))
