"""Crashes: batches, swaps and daily writes killed mid-way, by SIGKILL or by an exception raised
between their statements. After each: the target is all old or all new, the backup restores the
old one, and no batch ran twice.

Real processes are killed: a child `python -c` loads the project and works on the same DuckDB
file and Dagster instance as the test; `tests.reliability.faults` wraps its warehouse connections
to pause it at a named statement so the SIGKILL lands inside the transaction, or to raise there.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import shutil
import time
from collections import defaultdict
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.constants import BATCH_TAG, GATE_NAMES, PLAN_ID_TAG, driver_sensor
from backfill_assets.errors import WarehouseError
from backfill_assets.example import orders as o
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.orders import ORDERS_DAILY_SQL as ORDERS_SQL
from backfill_assets.lib.states import PlanStatus
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.plans import load_plan
from backfill_assets.service.swap import perform_rollback, perform_swap
from tests.conftest import HISTORY_END, HISTORY_START, ROWS_PER_DAY, make_plan
from tests.helpers import execute
from tests.reliability.faults import injected
from tests.reliability.harness import (
    SPEC,
    Child,
    after_swap,
    expect_target,
    fault,
    target_checksums,
)

TABLE = ORDERS
# Two batches: Wed-Sun of ISO week 2026-W02 (a partial week: its Mon-Tue stay live) and W03.
START, END = "2026-01-07", "2026-01-18"

CHILD_EXECUTE = """
import datetime as dt, os, time
import dagster as dg
from backfill_assets.example.definitions import example_definitions
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.executor import execute_plan
from backfill_assets.service.tables import backfill_tables
from tests.reliability.faults import install

pause = os.environ["PAUSE_AT"]

def at_step(step):
    if step.startswith(pause):
        print("paused at " + step, flush=True)
        time.sleep(600)

def progress(event):
    report = event.report
    if report is None:  # a partition's progress inside the batch
        return
    print(f"batch {report.index} {report.status}", flush=True)
    if pause == f"after batch {report.index}":
        print("paused between batches", flush=True)
        time.sleep(600)

install(at_step)
now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
defs = example_definitions()
wh = DuckDBWarehouse(os.environ["BACKFILL_ASSETS_WAREHOUSE"])
execute_plan(defs, dg.DagsterInstance.get(), wh, backfill_tables(defs), os.environ["PLAN_ID"],
             clock=lambda: now, progress=progress, log_level="WARNING")
print("finished", flush=True)
"""

CHILD_SWAP = """
import datetime as dt, os, time
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from tests.reliability.faults import install

wh = DuckDBWarehouse(os.environ["WAREHOUSE"])
pause_after = int(os.environ["PAUSE_AFTER_STEPS"])  # 0: no pause, run at full speed
steps = 0

def at_step(step):
    global steps
    steps += 1
    if steps == pause_after:
        print(f"paused at step {steps}: {step}", flush=True)
        time.sleep(600)

if pause_after:
    install(at_step, wh)
start, end = dt.date.fromisoformat(os.environ["START"]), dt.date.fromisoformat(os.environ["END"])
days = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
print("swapping", flush=True)
wh.swap(ORDERS.spec, os.environ["PLAN_ID"], days)
print("committed", flush=True)
"""

CHILD_DAILY_WRITE = """
import datetime as dt, os, time
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.orders import ORDERS_DAILY_SQL as ORDERS_SQL
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from tests.reliability.faults import install

wh = DuckDBWarehouse(os.environ["WAREHOUSE"])
pause = os.environ.get("PAUSE_AT", "")

def at_step(step):
    if pause and step.startswith(pause):
        print("paused at " + step, flush=True)
        time.sleep(600)

install(at_step, wh)
day = dt.date.fromisoformat(os.environ["DAY"])
print("writing", flush=True)
# The daily job's write.
wh.replace_partitions(ORDERS.spec, day, day + dt.timedelta(days=1), build=ORDERS_SQL)
print("committed", flush=True)
"""

CHILD_LAUNCHED_RUN = """
import json, os, sys
import dagster as dg
from backfill_assets.example.definitions import example_definitions
from backfill_assets.service.runs import run_job
from tests.reliability.faults import install

request = json.loads(os.environ["REQUEST"])

def at_step(step):
    if step.startswith(os.environ["PAUSE_AT"]):
        print("paused at " + step, flush=True)
        sys.stdin.read()  # until the test lets it go on

install(at_step)
result = run_job(example_definitions(), request["job_name"], dg.DagsterInstance.get(),
                 tags=request["tags"], log_level="WARNING")
print(f"finished {result.success}", flush=True)
"""


class InjectedFault(Exception):
    """Raised by the fault seam between two statements of a transaction."""


def _raise_at(prefix: str):
    def hook(step: str) -> None:
        if step.startswith(prefix):
            fault()
            raise InjectedFault(step)

    return hook


def _child(code: str, tmp_path: Path, name: str, **env: str) -> Child:
    return Child(code, env, tmp_path / f"{name}.log")


def _execute_child(instance, warehouse_path: Path, tmp_path: Path, plan_id: str, pause: str):
    return _child(
        CHILD_EXECUTE,
        tmp_path,
        "execute",
        DAGSTER_HOME=instance.root_directory,
        BACKFILL_ASSETS_WAREHOUSE=str(warehouse_path),
        PLAN_ID=plan_id,
        PAUSE_AT=pause,
    )


def _execute(defs, instance, wh, plan):
    return execute(defs, instance, wh, plan)


def _runs_by_batch(instance: dg.DagsterInstance, plan_id: str) -> dict[str, list[str]]:
    """Batch tag -> statuses of that batch's runs, oldest first."""
    out: dict[str, list[str]] = defaultdict(list)
    runs = instance.get_runs(filters=dg.RunsFilter(tags={PLAN_ID_TAG: plan_id}))
    for run in reversed(runs):  # get_runs is newest first
        if BATCH_TAG in run.tags:
            out[run.tags[BATCH_TAG]].append(run.status.value)
    return dict(out)


def _dead_runs(instance: dg.DagsterInstance, plan_id: str) -> list[dg.DagsterRun]:
    return list(
        instance.get_runs(
            filters=dg.RunsFilter(
                tags={PLAN_ID_TAG: plan_id}, statuses=[dg.DagsterRunStatus.STARTED]
            )
        )
    )


def _days(plan) -> list[dt.date]:
    return [dt.date.fromisoformat(p) for p in plan.partitions]


def _history(wh) -> dict[dt.date, str]:
    return target_checksums(wh, HISTORY_START, HISTORY_END)


def _swap_then_rollback(case: str, instance, wh, plan, old) -> None:
    """The plan goes on: the swap gives exactly the gated shadow, the backup gives back `old`."""
    shadow = wh.checksums(SPEC, plan.start, plan.end_exclusive, shadow=True)
    assert len(shadow) == len(plan.partitions)
    assert perform_swap(instance, TABLE, wh, plan.plan_id).action == "swapped"
    expect_target(f"{case}, swapped", _history(wh), after_swap(old, shadow, _days(plan)))
    assert perform_rollback(instance, TABLE, wh, plan.plan_id).action == "rolled_back"
    expect_target(f"{case}, rolled back", _history(wh), old)


@pytest.mark.slow
def test_a_batch_killed_mid_shadow_write_leaves_the_target_untouched_and_a_rerun_resumes_it(
    defs, instance, history, warehouse_path, tmp_path
):
    plan = make_plan(defs, instance, history, START, END)
    old = _history(history)
    child = _execute_child(
        instance, warehouse_path, tmp_path, plan.plan_id, "deleted orders_daily__shadow__w2026w03"
    )
    child.wait_for("paused at")  # batch 2 deleted its shadow week and has not inserted yet
    child.kill()

    expect_target("batch killed mid-write", _history(history), old)
    first, second = plan.batches
    # The killed transaction left nothing: batch 2's shadow week does not exist, batch 1's is whole.
    assert history.checksums(SPEC, second.start, second.end_exclusive, shadow=True) == {}
    assert len(history.checksums(SPEC, first.start, first.end_exclusive, shadow=True)) == 5
    assert _runs_by_batch(instance, plan.plan_id) == {"1": ["SUCCESS"], "2": ["STARTED"]}

    # The rerun first marks the killed attempt failed and frees its writer slot, then resumes.
    reports = _execute(defs, instance, history, plan)
    assert [r.status for r in reports] == ["skipped (already passed)", "passed"]
    # Batch 1 ran once; batch 2's killed attempt never finished and its rerun passed once.
    assert _runs_by_batch(instance, plan.plan_id) == {
        "1": ["SUCCESS"],
        "2": ["FAILURE", "SUCCESS"],
    }
    facts = history.gate_inputs(
        SPEC,
        plan.start,
        plan.end_exclusive,
        plan_id=plan.plan_id,
        sample_size=1,
        unchanged=(),
        changed_predicates={},
        invariants={},
        full_compare=False,
    )
    assert sum(facts.duplicates.values()) == 0
    expect_target("batch killed mid-write, rerun", _history(history), old)
    _swap_then_rollback("batch killed mid-write", instance, history, plan, old)


@pytest.mark.slow
def test_a_batch_killed_between_its_committed_write_and_its_gates_is_rerun_whole(
    defs, instance, history, warehouse_path, tmp_path
):
    # The batch's write and gates share one opening of the file (a session): the write is
    # committed and checkpointed inside it, and the kill lands before any gate ran.
    plan = make_plan(defs, instance, history, START, END)
    old = _history(history)
    child = _execute_child(instance, warehouse_path, tmp_path, plan.plan_id, "checkpointed")
    child.wait_for("paused at")  # batch 1 wrote its shadow days and has checked none
    child.kill()

    expect_target("batch killed before its gates", _history(history), old)
    first, second = plan.batches
    # The committed write survived the kill whole; no gate of it was recorded.
    assert len(history.checksums(SPEC, first.start, first.end_exclusive, shadow=True)) == 5
    assert history.checksums(SPEC, second.start, second.end_exclusive, shadow=True) == {}
    assert _runs_by_batch(instance, plan.plan_id) == {"1": ["STARTED"]}
    keys = [dg.AssetCheckKey(dg.AssetKey(plan.shadow), g) for g in GATE_NAMES]
    infos = instance.event_log_storage.get_asset_check_partition_info(keys)
    assert [i for i in infos if i.latest_execution_status.value != "PLANNED"] == []

    # Unchecked, the batch has not passed: the rerun writes and checks it again, then batch 2.
    reports = _execute(defs, instance, history, plan)
    assert [r.status for r in reports] == ["passed", "passed"]
    assert _runs_by_batch(instance, plan.plan_id) == {
        "1": ["FAILURE", "SUCCESS"],
        "2": ["SUCCESS"],
    }
    expect_target("batch killed before its gates, rerun", _history(history), old)
    _swap_then_rollback("batch killed before its gates", instance, history, plan, old)


@pytest.mark.slow
def test_a_batch_killed_mid_run_does_not_keep_the_tables_writer_from_its_rerun(
    defs, instance, history, warehouse_path, tmp_path
):
    # Regression: a SIGKILLed in-process batch run stayed STARTED holding its writer slot, so the
    # next `backfill-assets run` waited for it forever (spinning, deaf to Ctrl-C).
    plan = make_plan(defs, instance, history, START, END)
    child = _execute_child(
        instance, warehouse_path, tmp_path, plan.plan_id, "deleted orders_daily__shadow__w2026w02"
    )
    child.wait_for("paused at")
    child.kill()
    dead = {r.run_id for r in _dead_runs(instance, plan.plan_id)}
    assert len(dead) == 1
    holder = history.writer(ORDERS.key)
    assert holder is not None and holder.holder_id in dead  # the dead run still holds the table
    t0 = time.monotonic()
    reports = _execute(defs, instance, history, plan)
    assert time.monotonic() - t0 < 60  # no wait for the dead holder
    assert [r.status for r in reports] == ["passed", "passed"]
    assert not _dead_runs(instance, plan.plan_id)
    assert {instance.get_run_by_id(r).status for r in dead} == {dg.DagsterRunStatus.FAILURE}
    holder = history.writer(ORDERS.key)
    assert holder is None or holder.holder_id not in dead


def _driver_tick(defs, instance, table, now):
    """One evaluation of the batch driver by a daemon that just (re)started: a sensor built
    afresh, a fresh context; the only state is the instance's."""
    from backfill_assets.defs.table.definitions import table_definitions

    built = table_definitions(table, clock=lambda: now)
    sensor = next(s for s in built.sensors or [] if s.name == driver_sensor(ORDERS.key))
    context = dg.build_sensor_context(instance=instance, definitions=defs)
    return sensor.evaluate_tick(context)


def _launch_tags(request: dg.RunRequest) -> dict[str, str]:
    """The tags the daemon gives the run it launches for a request (the run key among them)."""
    return {**request.tags, "dagster/run_key": request.run_key or ""}


@pytest.mark.slow
@pytest.mark.remote_launcher  # a run per batch (the runner's restart: tests/e2e/test_restart.py)
def test_a_daemon_restarted_while_a_batch_runs_requests_no_batch_twice_and_the_plan_continues(
    defs, instance, history, warehouse_path, tmp_path
):
    import json

    from backfill_assets.service.batch_driver import start_plan
    from backfill_assets.service.runs import run_job

    # The batch runs start at the real time of day, and a run that starts inside the daily
    # run's slot is an overrun: the plan's window and the daily run are set around the real
    # time (the window open, the daily run 12 h away), as tests/e2e does, and so is the clock.
    now = dt.datetime.now(dt.UTC)
    daily_at = (now + dt.timedelta(hours=12)).time().replace(second=0, microsecond=0)
    table = dataclasses.replace(ORDERS, daily_expected_start=daily_at)
    window = f"{now - dt.timedelta(hours=1):%H:%M}-{now + dt.timedelta(hours=2):%H:%M}"
    plan = make_plan(
        defs, instance, history, START, END, tables={ORDERS.key: table}, window=window, now=now
    )
    start_plan(instance, plan.plan_id, "tests", now)

    def tick():
        return _driver_tick(defs, instance, table, dt.datetime.now(dt.UTC))

    old = _history(history)
    (first,) = tick().run_requests or []
    assert first.tags[BATCH_TAG] == "1"
    # The daemon launched batch 1: its run worker is another process, now mid-write.
    worker = _child(
        CHILD_LAUNCHED_RUN,
        tmp_path,
        "run-worker",
        DAGSTER_HOME=instance.root_directory,
        BACKFILL_ASSETS_WAREHOUSE=str(warehouse_path),
        REQUEST=json.dumps({"job_name": first.job_name, "tags": _launch_tags(first)}),
        PAUSE_AT="deleted orders_daily__shadow__w2026w02",
    )
    worker.wait_for("paused at")
    # The daemon stops and restarts: its first ticks see the batch in progress and hold. (They
    # read the instance only: the run worker holds the warehouse meanwhile.)
    fault()
    for _ in range(2):
        held = tick()
        assert not held.run_requests
        assert "(batch 1, started) of this plan in progress" in (held.skip_message or "")
    assert worker.proc.stdin is not None
    worker.proc.stdin.close()
    assert worker.wait_for("finished") == "finished True"
    worker.reap()

    (second,) = tick().run_requests or []
    assert second.tags[BATCH_TAG] == "2" and second.run_key != first.run_key
    assert second.job_name
    assert run_job(defs, second.job_name, instance, tags=_launch_tags(second)).success
    done = tick()
    assert not done.run_requests and "all batches passed" in (done.skip_message or "")
    assert _runs_by_batch(instance, plan.plan_id) == {"1": ["SUCCESS"], "2": ["SUCCESS"]}
    expect_target("daemon restarted mid-plan", _history(history), old)
    _swap_then_rollback("daemon restarted mid-plan", instance, history, plan, old)


@pytest.mark.slow
def test_a_plan_killed_between_batches_continues_on_rerun_without_launching_a_batch_twice(
    defs, instance, history, warehouse_path, tmp_path
):
    # `backfill-assets run` (the executor, in-process) killed between two batches and run again.
    plan = make_plan(defs, instance, history, START, END)
    old = _history(history)
    child = _execute_child(instance, warehouse_path, tmp_path, plan.plan_id, "after batch 1")
    child.wait_for("paused between batches")
    child.kill()
    assert _runs_by_batch(instance, plan.plan_id) == {"1": ["SUCCESS"]}

    reports = _execute(defs, instance, history, plan)
    assert [r.status for r in reports] == ["skipped (already passed)", "passed"]
    assert _runs_by_batch(instance, plan.plan_id) == {"1": ["SUCCESS"], "2": ["SUCCESS"]}
    # Running it once more launches nothing at all.
    again = _execute(defs, instance, history, plan)
    assert [r.status for r in again] == ["skipped (already passed)"] * 2
    assert _runs_by_batch(instance, plan.plan_id) == {"1": ["SUCCESS"], "2": ["SUCCESS"]}
    expect_target("plan killed between batches", _history(history), old)
    _swap_then_rollback("plan killed between batches", instance, history, plan, old)


# Statements of the swap of START..END, in order. The target is one plain table: it becomes the
# base table; the partial week W02's shadow is trimmed to the plan's days and given the live days
# outside them; each week's shadow is renamed to its live name (the base table's rows of it,
# hidden by the view, are the backup); the views are built just before COMMIT.
SWAP_STEPS = [
    "renamed orders_daily to orders_daily__base",
    "deleted orders_daily__shadow__w2026w02",
    "inserted orders_daily__shadow__w2026w02",
    "renamed orders_daily__shadow__w2026w02 to orders_daily__w2026w02",
    "renamed orders_daily__shadow__w2026w03 to orders_daily__w2026w03",
    "before commit",
]


def test_a_crash_between_the_swaps_statements_rolls_it_back_and_the_plan_can_swap_again(
    defs, instance, history
):
    plan = make_plan(defs, instance, history, START, END)
    _execute(defs, instance, history, plan)
    old = _history(history)
    shadow = history.checksums(SPEC, plan.start, plan.end_exclusive, shadow=True)
    backups = "select count(*) from duckdb_tables() where table_name like '%backup%'"

    for step in SWAP_STEPS:
        with injected(_raise_at(step), on=history), pytest.raises(InjectedFault):
            perform_swap(instance, TABLE, history, plan.plan_id)
        expect_target(f"swap crashed at {step!r}", _history(history), old)
        assert history.checksums(SPEC, plan.start, plan.end_exclusive, shadow=True) == shadow
        assert history.swap_state(SPEC, plan.plan_id) is None
        assert history.query(backups) == [(0,)]
        assert load_plan(instance, plan.plan_id)[1] == PlanStatus.APPROVED

    assert perform_swap(instance, TABLE, history, plan.plan_id).action == "swapped"
    new = after_swap(old, shadow, _days(plan))
    expect_target("swap after the crashes", _history(history), new)

    # A crash inside the rollback leaves the swapped state whole; the next rollback restores.
    # (It carries W02's days outside the plan back into the base table before dropping W02.)
    restoring = "inserted orders_daily__base"
    with injected(_raise_at(restoring), on=history), pytest.raises(InjectedFault):
        perform_rollback(instance, TABLE, history, plan.plan_id)
    expect_target("rollback crashed", _history(history), new)
    assert load_plan(instance, plan.plan_id)[1] == PlanStatus.SWAPPED
    assert perform_rollback(instance, TABLE, history, plan.plan_id).action == "rolled_back"
    expect_target("rollback after the crash", _history(history), old)


# 16 ISO weeks landed; the plan starts and ends mid-week, so its first and last weeks are
# partial (their other days must survive a swap and a rollback untouched).
LANDED = (dt.date(2025, 2, 3), dt.date(2025, 5, 25))
PLANNED = (dt.date(2025, 2, 5), dt.date(2025, 5, 20))
PLANNED_DAYS = [
    PLANNED[0] + dt.timedelta(days=i) for i in range((PLANNED[1] - PLANNED[0]).days + 1)
]
KILL_PLAN = "pkillswap"
# The target renamed to the base table; the partial first and last weeks: trim the shadow to the
# plan's days and copy in the live days outside them (2 steps each); every week: rename shadow ->
# live (its live rows stay in the base table, hidden); then the commit. (Whole weeks copy
# nothing: their checksums were recorded when written.)
SWAP_STEP_COUNT = 1 + 2 * 2 + 16 + 1


@pytest.fixture
def many_weeks(defs, instance, wh, warehouse_path, tmp_path):
    """A warehouse with 16 live weeks (logic v1) and a plan's shadow of them (v2), saved aside."""
    from backfill_assets.example.seed import land_days

    land_days(defs, instance, LANDED[0], LANDED[1], 30)
    end = LANDED[1] + dt.timedelta(days=1)
    wh.replace_partitions(SPEC, LANDED[0], end, build=o.ORDERS_DAILY_SQL_V1)
    planned_end = PLANNED[1] + dt.timedelta(days=1)
    assert wh.claim_plan(SPEC.name, KILL_PLAN) == KILL_PLAN
    wh.replace_partitions(
        SPEC, PLANNED[0], planned_end, build=ORDERS_SQL, shadow=True, plan_id=KILL_PLAN
    )
    old = target_checksums(wh, *LANDED)
    shadow = wh.checksums(SPEC, PLANNED[0], planned_end, shadow=True)
    assert sorted(shadow) == PLANNED_DAYS
    template = tmp_path / "many_weeks.duckdb"
    shutil.copy(warehouse_path, template)
    return template, old, after_swap(old, shadow, PLANNED_DAYS)


def _full_speed_swap_seconds(template: Path, tmp_path: Path) -> float:
    """How long the child's swap takes, from its "swapping" line to its "committed" line."""
    path = tmp_path / "calibration.duckdb"
    shutil.copy(template, path)
    child = _child(
        CHILD_SWAP,
        tmp_path,
        "swap-calibration",
        WAREHOUSE=str(path),
        PAUSE_AFTER_STEPS="0",
        START=PLANNED[0].isoformat(),
        END=PLANNED[1].isoformat(),
        PLAN_ID=KILL_PLAN,
    )
    child.wait_for("swapping")
    t0 = time.monotonic()
    child.wait_for("committed")
    took = time.monotonic() - t0
    child.reap()
    return took


@pytest.mark.slow
def test_a_swap_of_many_weeks_killed_at_random_moments_is_all_old_or_all_new(many_weeks, tmp_path):
    template, old, new = many_weeks
    rng = random.Random(20261130)
    # Kill while paused after a random statement of the swap (its transaction open), then at
    # random times of a full-speed swap, then after it committed.
    kills = [("step", rng.randint(1, SWAP_STEP_COUNT)) for _ in range(4)]
    kills += [("time", rng.uniform(0.1, 0.9)) for _ in range(2)]  # fractions of a full swap
    kills.append(("committed", 0))
    took = _full_speed_swap_seconds(template, tmp_path)
    outcomes = []
    for i, (how, at) in enumerate(kills):
        path = tmp_path / f"kill{i}.duckdb"
        shutil.copy(template, path)
        child = _child(
            CHILD_SWAP,
            tmp_path,
            f"swap{i}",
            WAREHOUSE=str(path),
            PAUSE_AFTER_STEPS=str(at if how == "step" else 0),
            START=PLANNED[0].isoformat(),
            END=PLANNED[1].isoformat(),
            PLAN_ID=KILL_PLAN,
        )
        if how == "step":
            child.wait_for(f"paused at step {at}:")
        elif how == "time":
            child.wait_for("swapping")
            time.sleep(float(at) * took)
        else:
            child.wait_for("committed")
        child.kill()

        wh = DuckDBWarehouse(path, lock_timeout_s=5)
        state = expect_target(f"swap killed ({how} {at})", target_checksums(wh, *LANDED), old, new)
        if how == "step":
            assert state is old, f"killed at step {at} of an open transaction, yet not all old"
        if how == "committed":
            assert state is new
        outcomes.append("old" if state is old else "new")
        # Either way the plan goes on: swap it (again) and roll it back from its backup.
        if state is old:
            assert wh.swap_state(SPEC, KILL_PLAN) is None
            assert wh.swap(SPEC, KILL_PLAN, PLANNED_DAYS).action == "swapped"
            expect_target(f"swap after kill {i}", target_checksums(wh, *LANDED), new)
        assert wh.swap_state(SPEC, KILL_PLAN) == "swapped"
        wh.rollback(SPEC, KILL_PLAN)
        expect_target(f"rollback after kill {i}", target_checksums(wh, *LANDED), old)
    assert "old" in outcomes and "new" in outcomes


@pytest.mark.slow
def test_a_daily_write_is_one_transaction_a_second_writer_waits_and_a_kill_leaves_the_old_day(
    history, warehouse_path, tmp_path
):
    day = dt.date(2026, 1, 14)
    after = day + dt.timedelta(days=1)
    old_day = history.checksums(SPEC, day, after)
    versions = history.partition_versions(SPEC, HISTORY_START, HISTORY_END)
    child = _child(
        CHILD_DAILY_WRITE,
        tmp_path,
        "daily",
        WAREHOUSE=str(warehouse_path),
        DAY=day.isoformat(),
        PAUSE_AT="deleted orders_daily",  # the target, a plain table
    )
    child.wait_for("paused at")  # the day's rows are deleted inside the open transaction

    # A swap landing "between the DELETE and the INSERT" cannot: the writer holds the file.
    t0 = time.monotonic()
    with pytest.raises(WarehouseError, match="held by another process"):
        DuckDBWarehouse(warehouse_path, lock_timeout_s=0.5).swap(SPEC, "pother", [day])
    assert time.monotonic() - t0 < 5
    child.kill()

    expect_target(
        "daily write killed between DELETE and INSERT", history.checksums(SPEC, day, after), old_day
    )
    assert history.partition_versions(SPEC, HISTORY_START, HISTORY_END) == versions
    history.replace_partitions(SPEC, day, after, build=ORDERS_SQL)  # the daily run's retry
    rows, distinct = history.query(
        "select count(*), count(distinct order_id) from orders_daily where order_date = $d",
        {"d": day},
    )[0]
    assert rows == distinct == ROWS_PER_DAY  # the day once: neither lost nor duplicated


@pytest.mark.slow
def test_a_large_daily_write_killed_at_random_moments_leaves_the_day_all_old_or_all_new(
    defs, instance, history, warehouse_path, tmp_path
):
    from backfill_assets.example.seed import land_days

    day = HISTORY_END + dt.timedelta(days=1)
    after = day + dt.timedelta(days=1)
    rows = 200_000
    land_days(defs, instance, day, day, rows)

    def write_old() -> dict[dt.date, str]:
        history.replace_partitions(SPEC, day, after, build=o.ORDERS_DAILY_SQL_V1)
        return history.checksums(SPEC, day, after)

    def child(name: str) -> Child:
        return _child(
            CHILD_DAILY_WRITE, tmp_path, name, WAREHOUSE=str(warehouse_path), DAY=str(day)
        )

    # One unkilled write measures how long the child's transaction takes on this machine now.
    calibration = child("big-calibration")
    calibration.wait_for("writing")
    t0 = time.monotonic()
    calibration.wait_for("committed")
    took = time.monotonic() - t0
    calibration.reap()
    new_day = history.checksums(SPEC, day, after)
    assert new_day[day].startswith(f"{rows}:")

    old_day = write_old()
    assert old_day != new_day
    rng = random.Random(14)
    for i in range(3):
        big = child(f"big{i}")
        big.wait_for("writing")
        time.sleep(rng.uniform(0.1, 0.9) * took)
        big.kill()
        state = expect_target(
            f"large daily write killed ({i})", history.checksums(SPEC, day, after), old_day, new_day
        )
        if state is new_day:
            old_day = write_old()
