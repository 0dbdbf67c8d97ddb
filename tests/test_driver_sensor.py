"""The batch driver and refresh sensors evaluated for real against a real instance.

Plans come from the project's planner and are approved and started as in production; runs the
sensor must notice (a daily run in progress, a failed batch, an overrunning batch) are real runs
of the project's jobs, created in the instance and moved through their lifecycle by the same
events a run worker reports. The sensors' clock is fixed; run timestamps are real or explicit.
"""

import datetime as dt

import dagster as dg
import pytest

from backfill_assets.constants import (
    BATCH_TAG,
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PLAN_ID_TAG,
    ROLE_DAILY,
    ROLE_TAG,
    START_JOB,
    WRITER_TAG,
    driver_sensor,
    refresh_sensor,
    shadow_job,
)
from backfill_assets.defs.table.definitions import table_definitions
from backfill_assets.example.declaration import ORDERS
from backfill_assets.service.batch_driver import refresh_run_requests, start_plan
from backfill_assets.service.executor import batch_tags
from backfill_assets.service.plans import PLAN_KEY, latest_plan_record
from backfill_assets.service.runs import run_job
from tests.conftest import make_plan

DRIVER_SENSOR = driver_sensor(ORDERS.key)
REFRESH_SENSOR = refresh_sensor(ORDERS.key)

UTC = dt.UTC
WINDOW = "02:00-05:00"  # UTC; the daily run's slot is 00:30-01:45 UTC
INSIDE = dt.datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
OUTSIDE = dt.datetime(2026, 12, 1, 11, 3, tzinfo=UTC)
BEGUN = INSIDE - dt.timedelta(minutes=10)  # when runs created by these tests started

# The driver's run per batch, as on an instance whose runs execute on other machines; where
# they execute on this one it launches the plan's runner instead (tests/test_plan_runner.py).
pytestmark = pytest.mark.remote_launcher


def sensor(name: str, now: dt.datetime, table=ORDERS) -> dg.SensorDefinition:
    built = table_definitions(table, clock=lambda: now)
    return next(s for s in built.sensors or [] if s.name == name)


def tick(
    defs,
    instance,
    now: dt.datetime,
    name: str = DRIVER_SENSOR,
    cursor: str | None = None,
    table=ORDERS,
):
    context = dg.build_sensor_context(instance=instance, definitions=defs, cursor=cursor)
    return sensor(name, now, table).evaluate_tick(context)


def started_run(
    defs, instance, job: str, tags: dict[str, str], at: dt.datetime = BEGUN, run_config=None
):
    """A run of a project job, created and reported started at `at` the way a run worker
    reports it (an explicit start keeps the run's timeline on the sensors' fixed clock)."""
    run = instance.create_run_for_job(defs.resolve_job_def(job), tags=tags, run_config=run_config)
    start = dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=job)
    instance.report_dagster_event(start, run_id=run.run_id, timestamp=at.timestamp())
    return instance.get_run_by_id(run.run_id)


def batch_run_tags(plan, index: int) -> dict[str, str]:
    return {PLAN_ID_TAG: plan.plan_id, BATCH_TAG: str(index), WRITER_TAG: plan.target}


def run_batch_one(defs, instance, plan):
    """Batch 1, run as the daemon would launch it (the plan is started, so `backfill-assets run`
    refuses to take turns with the driver); returns the batch."""
    first = plan.batches[0]
    assert run_job(
        defs,
        shadow_job(plan.target),
        instance,
        start=first.start,
        end_inclusive=first.end,
        tags=batch_tags(plan, first),
    ).success
    return first


@pytest.fixture
def plan(defs, instance, history):
    """An approved, started plan of 2026-01-03..2026-01-17 (3 batches) in window 02:00-05:00."""
    p = make_plan(defs, instance, history, "2026-01-03", "2026-01-17", window=WINDOW)
    start_plan(instance, p.plan_id, "tests", dt.datetime.now(UTC))
    return p


def test_inside_the_window_the_driver_requests_batch_one_with_plan_batch_and_range_tags(
    defs, instance, plan
):
    result = tick(defs, instance, INSIDE)
    (req,) = result.run_requests or []
    assert req.job_name == "orders_daily__shadow_job"
    assert req.run_key == f"{plan.plan_id}-batch-1-attempt-1"
    assert req.tags[PLAN_ID_TAG] == plan.plan_id
    assert req.tags[BATCH_TAG] == "1"
    assert req.tags[WRITER_TAG] == "orders_daily"
    assert req.tags[PARTITION_RANGE_START_TAG] == "2026-01-03"
    assert req.tags[PARTITION_RANGE_END_TAG] == "2026-01-04"


def test_a_daily_job_the_code_location_does_not_have_launches_nothing_and_says_why(
    defs, instance, plan
):
    # A plan approved and started from the UI never met the CLI's check of the daily job; the
    # guards find the daily runs by that name, so with a typo batches could run beside them.
    from dataclasses import replace

    result = tick(defs, instance, INSIDE, table=replace(ORDERS, daily_job="orders_daly_job"))
    assert not result.run_requests
    assert "names 'orders_daly_job' as its daily job, but the code location has no such job" in (
        result.skip_message or ""
    )
    assert tick(defs, instance, INSIDE).run_requests  # the declared job: batch 1 is due


def test_outside_the_window_the_tick_skips_and_records_why(defs, instance, plan):
    result = tick(defs, instance, OUTSIDE)
    assert not result.run_requests
    assert f"plan {plan.plan_id}: outside window 02:00-05:00 UTC (now 11:03)" in (
        result.skip_message or ""
    )


def test_a_daily_run_in_progress_holds_the_batch_inside_the_window(defs, instance, plan):
    daily = started_run(
        defs,
        instance,
        "orders_daily_job",
        {WRITER_TAG: "orders_daily", ROLE_TAG: ROLE_DAILY, "dagster/partition": "2026-01-21"},
    )
    assert daily.status == dg.DagsterRunStatus.STARTED
    result = tick(defs, instance, INSIDE)
    assert not result.run_requests
    assert f"daily run {daily.run_id[:8]} (daily, started) in progress" in (
        result.skip_message or ""
    )


def test_run_keys_are_deterministic_and_a_launched_batch_is_never_requested_twice(
    defs, instance, plan
):
    first = tick(defs, instance, INSIDE).run_requests or []
    again = tick(defs, instance, INSIDE).run_requests or []
    assert [r.run_key for r in first] == [r.run_key for r in again]
    # The daemon created the run (it is now in progress): the next tick requests nothing.
    run = started_run(defs, instance, "orders_daily__shadow_job", batch_run_tags(plan, 1))
    result = tick(defs, instance, INSIDE)
    assert not result.run_requests
    assert f"run {run.run_id[:8]} (batch 1, started) of this plan in progress" in (
        result.skip_message or ""
    )


def test_after_batch_one_passed_its_gates_the_driver_requests_batch_two(defs, instance, plan):
    run_batch_one(defs, instance, plan)
    (req,) = tick(defs, instance, INSIDE).run_requests or []
    assert req.run_key == f"{plan.plan_id}-batch-2-attempt-1"
    assert req.tags[PARTITION_RANGE_START_TAG] == "2026-01-05"


def test_a_tick_reads_the_gates_again_only_after_a_run_of_the_plan_or_a_write_of_the_shadow(
    defs, instance, plan, monkeypatch
):
    """Between batches and from the last batch to the swap every tick asks which batches passed
    (on a five-year plan, the gates of 1,826 partitions). The answer is kept while the plan's
    runs and the shadow's writes are as they were, and read again once either changes."""
    import backfill_assets.service.batch_driver as driver

    reads: list[str] = []
    real = driver.passed_batches

    def counted(instance, plan):
        reads.append(plan.plan_id)
        return real(instance, plan)

    monkeypatch.setattr(driver, "passed_batches", counted)
    first = run_batch_one(defs, instance, plan)
    for _ in range(3):
        (req,) = tick(defs, instance, INSIDE).run_requests or []
        assert req.run_key == f"{plan.plan_id}-batch-2-attempt-1"
    assert reads == [plan.plan_id]
    # Something other than the plan writes a day of batch 1 in the shadow: its gates no longer
    # speak for what the shadow holds, and the next tick sees it.
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=plan.shadow, partition=first.start.isoformat())
    )
    (req,) = tick(defs, instance, INSIDE).run_requests or []
    assert req.run_key == f"{plan.plan_id}-batch-1-attempt-2"
    assert reads == [plan.plan_id] * 2
    # A run of the plan ends: read again.
    run = started_run(defs, instance, "orders_daily__shadow_job", batch_run_tags(plan, 1))
    assert not tick(defs, instance, INSIDE).run_requests  # in progress: nothing read
    instance.report_run_failed(run)
    assert "halted" in (tick(defs, instance, INSIDE).skip_message or "")
    assert reads == [plan.plan_id] * 3


def test_a_failed_batch_halts_the_plan_until_it_is_started_again_as_a_new_attempt(
    defs, instance, plan
):
    run = started_run(defs, instance, "orders_daily__shadow_job", batch_run_tags(plan, 1))
    instance.report_run_failed(run)
    halted = tick(defs, instance, INSIDE)
    assert not halted.run_requests
    assert "batch 1 (2026-01-03..2026-01-04) failed before its gates passed: halted" in (
        halted.skip_message or ""
    )
    start_plan(instance, plan.plan_id, "tests", dt.datetime.now(UTC))
    (req,) = tick(defs, instance, INSIDE).run_requests or []
    assert req.run_key == f"{plan.plan_id}-batch-1-attempt-2"


def test_an_approved_plan_is_driven_only_after_the_start_job_ran(defs, instance, history):
    plan = make_plan(defs, instance, history, "2026-01-03", "2026-01-17", window=WINDOW)
    waiting = tick(defs, instance, INSIDE)
    assert not waiting.run_requests
    assert "approved but not started" in (waiting.skip_message or "")
    result = defs.resolve_job_def(START_JOB).execute_in_process(
        instance=instance,
        run_config={"ops": {"start_backfill_plan": {"config": {"plan_id": plan.plan_id}}}},
    )
    assert result.success
    assert [r.run_key for r in tick(defs, instance, INSIDE).run_requests or []] == [
        f"{plan.plan_id}-batch-1-attempt-1"
    ]


def test_the_tick_reads_a_plans_runs_and_gates_only_once_it_is_started(
    defs, instance, history, monkeypatch
):
    """A plan approved but not started (or run by `backfill-assets run`) gets "not started"
    whatever its runs and gates say: the tick does not read them (on a five-year plan, the gates
    of 1,826 partitions every tick). Once started, it does."""
    import backfill_assets.service.batch_driver as driver

    reads: list[str] = []
    real = driver.plan_facts

    def counted(instance, table, plan, record, **kw):
        reads.append(plan.plan_id)
        return real(instance, table, plan, record, **kw)

    monkeypatch.setattr(driver, "plan_facts", counted)
    plan = make_plan(defs, instance, history, "2026-01-03", "2026-01-17", window=WINDOW)
    assert "approved but not started" in (tick(defs, instance, INSIDE).skip_message or "")
    assert reads == []
    start_plan(instance, plan.plan_id, "tests", dt.datetime.now(UTC))
    assert tick(defs, instance, INSIDE).run_requests
    assert reads == [plan.plan_id]


def test_the_start_job_refuses_a_plan_that_is_not_approved(defs, instance, warehouse_path):
    # The start job reads the warehouse's record of the plan (BACKFILL_ASSETS_WAREHOUSE).
    result = defs.resolve_job_def(START_JOB).execute_in_process(
        instance=instance,
        run_config={"ops": {"start_backfill_plan": {"config": {"plan_id": "p0000000000"}}}},
        raise_on_error=False,
    )
    assert not result.success


def test_an_overrun_is_recorded_once_on_the_plan_status_and_the_plan_stays_started(
    defs, instance, plan
):
    # Batch 1 started at 00:00 and still runs at 00:40, after the daily slot began at 00:30.
    run = started_run(
        defs,
        instance,
        "orders_daily__shadow_job",
        batch_run_tags(plan, 1),
        at=dt.datetime(2026, 12, 1, 0, 0, tzinfo=UTC),
    )
    now = dt.datetime(2026, 12, 1, 0, 40, tzinfo=UTC)
    result = tick(defs, instance, now)
    assert not result.run_requests
    assert f"overrun: run {run.run_id[:8]} (batch 1, started)" in (result.skip_message or "")
    record = latest_plan_record(instance, plan.plan_id) or {}
    assert record["overrun"]["run_id"] == run.run_id
    assert record["overrun"]["hold_until"] == "2026-12-01T02:00:00+00:00"
    assert record["driving"] is True
    records_before = _plan_records(instance, plan.plan_id)
    tick(defs, instance, now)
    assert _plan_records(instance, plan.plan_id) == records_before  # recorded once


def _plan_records(instance, plan_id: str) -> int:
    return len(
        instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=PLAN_KEY, asset_partitions=[plan_id]), limit=100
        ).records
    )


def test_refresh_requests_cover_the_impact_set_one_run_per_grain_upstream_first(defs, plan):
    reqs = refresh_run_requests(plan, defs.resolve_asset_graph(), "swaprun1")
    assert [r.run_key for r in reqs] == [
        f"{plan.plan_id}-refresh-swaprun1-{i}" for i in range(1, len(reqs) + 1)
    ]
    selected = [{k.to_user_string() for k in r.asset_selection or []} for r in reqs]
    assert set().union(*selected) == {i.asset_key for i in plan.impact}
    assert "fct_daily_revenue" in selected[0]  # the daily grain before the weekly one
    assert all(r.tags[PLAN_ID_TAG] == plan.plan_id for r in reqs)
    assert all(r.tags[WRITER_TAG] == "orders_daily" for r in reqs)
    daily = reqs[0].tags
    assert (daily[PARTITION_RANGE_START_TAG], daily[PARTITION_RANGE_END_TAG]) == (
        "2026-01-03",
        "2026-01-17",
    )


def test_the_refresh_sensor_leaves_a_swap_run_in_process_to_its_caller(defs, instance, plan):
    # The CLI swaps in-process and refreshes right after; a second refresh would race it.
    swap = started_run(
        defs,
        instance,
        "orders_daily__swap_job",
        {WRITER_TAG: "orders_daily", ROLE_TAG: "swap"},
        at=dt.datetime.now(UTC),
        run_config={"ops": {"orders_daily__swap": {"config": {"plan_id": plan.plan_id}}}},
    )
    success = dg.DagsterEvent(dg.DagsterEventType.RUN_SUCCESS.value, job_name=swap.job_name)
    instance.report_dagster_event(success, run_id=swap.run_id)
    result = tick(defs, instance, dt.datetime.now(UTC), name=REFRESH_SENSOR)
    assert not result.run_requests
    assert f"swap run {swap.run_id[:8]} ran in-process" in (result.skip_message or "")
    assert result.cursor  # the next tick starts after this run
    later = tick(defs, instance, dt.datetime.now(UTC), name=REFRESH_SENSOR, cursor=result.cursor)
    assert "no swap or rollback run succeeded" in (later.skip_message or "")


def test_a_tick_reads_only_the_approved_plans_from_an_index_the_statuses_keep(
    defs, instance, history
):
    from backfill_assets.constants import ACTIVE_PLANS_PARTITIONS
    from backfill_assets.service.plans import active_plan_ids
    from backfill_assets.service.swap import abandon_plan

    tables = {ORDERS.key: ORDERS}
    first = make_plan(defs, instance, history, "2026-01-03", "2026-01-09", window=WINDOW)
    assert instance.get_dynamic_partitions(ACTIVE_PLANS_PARTITIONS) == [first.plan_id]
    # As an instance from before the index: the first read builds it once, from every plan.
    instance.delete_dynamic_partition(ACTIVE_PLANS_PARTITIONS, first.plan_id)
    assert active_plan_ids(instance) == [first.plan_id]
    # Approving adds a plan; every other status takes it out.
    abandon_plan(instance, tables, history, first.plan_id)
    assert active_plan_ids(instance) == []
    second = make_plan(defs, instance, history, "2026-01-10", "2026-01-16", window=WINDOW)
    assert active_plan_ids(instance) == [second.plan_id]
    start_plan(instance, second.plan_id, "tests", dt.datetime.now(UTC))
    assert active_plan_ids(instance) == [second.plan_id]  # started is still approved
    result = tick(defs, instance, INSIDE)
    assert [r.tags[PLAN_ID_TAG] for r in result.run_requests or []] == [second.plan_id]


@pytest.mark.slow
def test_every_writer_run_in_progress_is_seen_however_many_there_are(defs, instance, wh):
    from backfill_assets.service.guards import writer_runs_in_progress

    for _ in range(55):  # more than a page of 50 runs
        started_run(defs, instance, shadow_job(ORDERS.key), {WRITER_TAG: ORDERS.key})
    assert len(writer_runs_in_progress(instance, ORDERS)) == 55
