"""The batch driver's runner run (service.plan_runner) on a real instance whose runs execute on
this machine (Dagster's DefaultRunLauncher): the driver sensor launches one runner run for a
started plan, which runs the batches one after another, each a run of its own, asking the
driver's rules before each. The runner runs here in-process, as the daemon's run worker runs it;
the whole path through `dagster dev` is tests/e2e/test_daemon.py's, a restart's
tests/e2e/test_restart.py's.
"""

import dataclasses
import datetime as dt

import dagster as dg
import pytest

from backfill_assets.constants import (
    BATCH_TAG,
    PLAN_ID_TAG,
    REAPED_TAG,
    ROLE_DAILY,
    ROLE_RUNNER,
    ROLE_TAG,
    WRITER_TAG,
    driver_sensor,
    runner_job,
)
from backfill_assets.defs.table.definitions import table_definitions
from backfill_assets.example.declaration import ORDERS
from backfill_assets.service.batch_driver import start_plan
from backfill_assets.service.executor import batch_done
from backfill_assets.service.runs import run_job
from tests.conftest import make_plan

UTC = dt.UTC
START, END = "2026-01-03", "2026-01-17"  # three batches
BAD_DAY = "2026-01-07"  # in batch 2


@pytest.fixture
def now() -> dt.datetime:
    return dt.datetime.now(UTC)


@pytest.fixture
def table(now):
    """orders_daily with its daily run 12 h from now: the runner's batches run at the real time
    of day (the runner reads the real clock), so the plan's window is set around it too."""
    daily_at = (now + dt.timedelta(hours=12)).time().replace(second=0, microsecond=0)
    return dataclasses.replace(ORDERS, daily_expected_start=daily_at)


@pytest.fixture
def plan(defs, instance, history, table, now):
    window = f"{now - dt.timedelta(hours=1):%H:%M}-{now + dt.timedelta(hours=2):%H:%M}"
    p = make_plan(
        defs, instance, history, START, END, tables={ORDERS.key: table}, window=window, now=now
    )
    start_plan(instance, p.plan_id, "tests", now)
    return p


def tick(defs, instance, table):
    built = table_definitions(table, clock=lambda: dt.datetime.now(UTC))
    sensor = next(s for s in built.sensors or [] if s.name == driver_sensor(ORDERS.key))
    return sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))


def run_runner(defs, instance, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """The runner run the daemon would launch for `request`, executed here."""
    job = runner_job(ORDERS.key)
    assert request.job_name == job
    tags = {**request.tags, "dagster/run_key": request.run_key or ""}
    return run_job(defs, job, instance, tags=tags, raise_on_error=False)


def runs_of(instance, plan, role: str | None = None) -> list[dg.DagsterRun]:
    tags = {PLAN_ID_TAG: plan.plan_id, **({ROLE_TAG: role} if role else {})}
    return list(reversed(instance.get_runs(filters=dg.RunsFilter(tags=tags))))  # oldest first


def test_the_driver_launches_one_runner_run_which_runs_every_batch_each_a_run_of_its_own(
    defs, instance, history, table, plan
):
    (request,) = tick(defs, instance, table).run_requests or []
    assert request.run_key == f"{plan.plan_id}-runner-1"
    assert BATCH_TAG not in request.tags  # not a batch's run: it runs them
    assert request.tags[PLAN_ID_TAG] == plan.plan_id
    assert request.tags[WRITER_TAG] == ORDERS.key  # a daily run launched meanwhile waits
    assert request.tags[ROLE_TAG] == ROLE_RUNNER
    assert run_runner(defs, instance, request).success

    batches = [r for r in runs_of(instance, plan) if BATCH_TAG in r.tags]
    assert [r.tags[BATCH_TAG] for r in batches] == ["1", "2", "3"]
    assert {r.status for r in batches} == {dg.DagsterRunStatus.SUCCESS}
    # Each batch's gates recorded per partition, as the swap reads them.
    assert all(batch_done(instance, plan, b) for b in plan.batches)
    done = tick(defs, instance, table)
    assert not done.run_requests and "all batches passed" in (done.skip_message or "")


def test_a_failed_gate_fails_the_runner_stops_the_next_batch_and_halts_the_plan(
    defs, instance, history, table, plan
):
    history.execute(
        "delete from raw_orders where order_id = (select min(order_id) from raw_orders "
        "where order_date = $d)",
        {"d": dt.date.fromisoformat(BAD_DAY)},
    )
    (request,) = tick(defs, instance, table).run_requests or []
    result = run_runner(defs, instance, request)
    assert not result.success
    batches = [r for r in runs_of(instance, plan) if BATCH_TAG in r.tags]
    assert [(r.tags[BATCH_TAG], r.status.value) for r in batches] == [
        ("1", "SUCCESS"),
        ("2", "FAILURE"),
    ]  # batch 3 never started
    halted = tick(defs, instance, table)
    assert not halted.run_requests
    assert "batch 2 (2026-01-05..2026-01-11) failed gates: halted" in (halted.skip_message or "")


def test_a_daily_run_in_progress_before_a_batch_ends_the_runner_quietly(
    defs, instance, history, table, plan
):
    (request,) = tick(defs, instance, table).run_requests or []
    # The daily run starts between the tick and the runner's first batch.
    job = ORDERS.daily_job
    daily = instance.create_run_for_job(
        defs.resolve_job_def(job),
        tags={WRITER_TAG: ORDERS.key, ROLE_TAG: ROLE_DAILY, "dagster/partition": "2026-01-21"},
    )
    start = dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=job)
    instance.report_dagster_event(start, run_id=daily.run_id)
    result = run_runner(defs, instance, request)
    assert result.success  # nothing failed: not now
    said = [e.message for e in result.all_events if e.event_type_value == "ENGINE_EVENT"]
    assert [r for r in runs_of(instance, plan) if BATCH_TAG in r.tags] == [], said
    instance.report_run_failed(instance.get_run_by_id(daily.run_id))  # the daily run ends
    (again,) = tick(defs, instance, table).run_requests or []
    assert again.run_key == f"{plan.plan_id}-runner-2"  # a new runner, a new key


def test_a_runner_that_failed_on_its_own_halts_the_plan_and_one_that_died_does_not(
    defs, instance, history, table, plan
):
    job = defs.resolve_job_def(runner_job(ORDERS.key))
    tags = {PLAN_ID_TAG: plan.plan_id, WRITER_TAG: ORDERS.key, ROLE_TAG: ROLE_RUNNER}
    died = instance.create_run_for_job(job, tags={**tags, REAPED_TAG: "its process is gone"})
    instance.report_run_failed(died)
    (request,) = tick(defs, instance, table).run_requests or []  # interrupted: run again
    assert request.run_key == f"{plan.plan_id}-runner-2"

    failed = instance.create_run_for_job(job, tags=tags)
    instance.report_run_failed(failed)
    halted = tick(defs, instance, table)
    assert not halted.run_requests
    assert f"runner run {failed.run_id[:8]}" in (halted.skip_message or "")
    assert "failed before batch 1 passed: halted" in (halted.skip_message or "")
    # Started again, the plan runs on.
    start_plan(instance, plan.plan_id, "tests", dt.datetime.now(UTC))
    (request,) = tick(defs, instance, table).run_requests or []
    assert request.run_key == f"{plan.plan_id}-runner-3"


def test_the_runner_job_launched_by_hand_without_a_plan_refuses_and_writes_nothing(
    defs, instance, history
):
    result = run_job(defs, runner_job(ORDERS.key), instance, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "Start the plan instead" in str(failure.event_specific_data)
