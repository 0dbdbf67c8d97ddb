"""End to end with the real daemon and webserver: `dagster dev` drives plans through the sensor.

One `dagster dev` serves the module, with its own DAGSTER_HOME (the project's dagster.yaml:
writer tag limit 1, writer pool 1; the tests take runs off the queue every second and evaluate
the sensors every 5 s, not 5 and 15, see FAST_DEQUEUE and start_dev) and its own DuckDB file.
The warehouse and the instance are seeded from this process *before* it starts: DuckDB allows
one process per file, and from then on only runs launched by the daemon write it (this process
opens it again only while no run is in progress). Plans are planned and approved here, as an
operator would with the CLI; they are started, swapped and raced by a daily run through the
webserver's GraphQL API, as from the UI.

Plans pretend the daily run is expected 12 hours from now, so a window around "now" is clear of
its slot whatever time of day the suite runs.
"""

import contextlib
import dataclasses
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
import pytest
import requests

from backfill_assets.constants import (
    BATCH_TAG,
    PLAN_ID_TAG,
    ROLE_REFRESH,
    ROLE_RUNNER,
    ROLE_SWAP,
    ROLE_TAG,
    START_JOB,
    driver_sensor,
    refresh_sensor,
)
from backfill_assets.defs.factory import SENSOR_INTERVAL_ENV
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.definitions import example_definitions
from backfill_assets.example.seed import land_days, write_history
from backfill_assets.lib.planning.build import PlanRequest
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV, open_warehouse
from backfill_assets.service.approval import approve_plan
from backfill_assets.service.batch_driver import start_plan
from backfill_assets.service.guards import writer_runs_in_progress
from backfill_assets.service.lease import acquire_writer, holder_for_command
from backfill_assets.service.planner import plan_backfill
from backfill_assets.service.plans import plan_statuses
from backfill_assets.service.refresh import refresh_requests
from backfill_assets.service.swap import abandon_plan, release_backup
from backfill_assets.testing.throwaway_postgres import dagster_pg_env
from backfill_assets.testing.waiting import poll

pytestmark = pytest.mark.slow

defs = example_definitions()
DRIVER_SENSOR = driver_sensor(ORDERS.key)
REFRESH_SENSOR = refresh_sensor(ORDERS.key)
TABLES = {ORDERS.key: ORDERS}

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
LOCATION = "backfill_assets"
REPOSITORY = "__repository__"
WEEKLY_REFRESH_SENSOR = "orders_weekly_refresh_sensor"
ROWS_PER_DAY = 300
STARTUP_TIMEOUT_S = 90
RUN_TIMEOUT_S = 120
STOP_TIMEOUT_S = 20
UTC = dt.UTC


@dataclasses.dataclass
class Dev:
    """A running `dagster dev` and what the test process needs to talk to it."""

    url: str
    instance: dg.DagsterInstance
    warehouse: str  # a DuckDB file path or a postgresql:// URL
    log: Path
    today: dt.date
    location: str = LOCATION  # the code location's name in the workspace

    def wh(self, lock_timeout_s: float = 30) -> Warehouse:
        return open_warehouse(self.warehouse, lock_timeout_s=lock_timeout_s)

    def graphql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        # A 500 is retried a few times: on a loaded machine the webserver's write to the
        # instance's SQLite storage can time out on a lock the daemon holds (CI once failed the
        # UI story's set-up on stopSensor so). Anything else, or a 500 that persists, fails.
        def post() -> requests.Response:
            return requests.post(
                f"{self.url}/graphql", json={"query": query, "variables": variables}, timeout=30
            )

        resp = post()
        for attempt in range(4):
            if resp.status_code < 500:
                break
            time.sleep(1 + attempt)
            resp = post()
        if resp.status_code >= 500:
            raise AssertionError(f"GraphQL answered {resp.status_code}: {resp.text[:2000]}")
        resp.raise_for_status()
        body = resp.json()
        assert "errors" not in body, body
        return body["data"]

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_sigint() -> None:
    # pytest (or a CI shell) may leave SIGINT ignored; dagster dev must be stoppable.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT_S)


def wait_for(what: str, check: Callable[[], Any], timeout: float, dev: Dev | None = None) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` s."""
    value = poll(check, timeout, 0.5)
    if not value:
        tail = f"\n--- dagster dev log ---\n{dev.log_tail()}" if dev else ""
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}{tail}")
    return value


def start_dev(
    instance: dg.DagsterInstance,
    warehouse: str,
    log: Path,
    today: dt.date,
    *,
    target: tuple[str, ...] = ("-w", str(REPO / "workspace.yaml")),
    cwd: Path = REPO,
    location: str = LOCATION,
    driver_sensor_name: str = DRIVER_SENSOR,
):
    """`dagster dev` on a free 127.0.0.1 port over the instance's DAGSTER_HOME and `warehouse`,
    answering and with its code location loaded; returns the process and the Dev. By default
    the example's workspace; `target`/`cwd`/`location` point it at another code location."""
    port = _free_port()
    dagster = str(Path(sys.executable).with_name("dagster"))
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [dagster, "dev", *target, "-h", "127.0.0.1", "-p", str(port)],
            cwd=cwd,
            # The sensors every 5 s (the daemon's own loop), not 15: the tests wait for their
            # ticks, and the guards do not depend on the interval.
            env={**os.environ, SENSOR_INTERVAL_ENV: "5"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
    d = Dev(f"http://127.0.0.1:{port}", instance, warehouse, log, today, location)
    try:
        wait_for("the webserver", lambda: _answers(d.url), STARTUP_TIMEOUT_S, d)
        wait_for(
            "the code location",
            lambda: _sensor_ticks(d, driver_sensor_name) is not None,
            STARTUP_TIMEOUT_S,
            d,
        )
        if location == LOCATION:
            # Refreshing the weekly marts after a daily run is production behaviour tested on
            # its own; here it would only hold the table's writer for a dbt run between batches.
            stop_sensor(d, WEEKLY_REFRESH_SENSOR)
    except BaseException:
        _stop(proc)
        raise
    return proc, d


@contextlib.contextmanager
def dev_server(
    tmp: Path,
    seed: Callable[[dg.DagsterInstance, str, dt.date], T],
    *,
    postgres: str | None = None,
) -> Iterator[tuple[Dev, T]]:
    """`dagster dev` over a fresh DAGSTER_HOME and warehouse, after `seed(instance, warehouse,
    today)` has filled them: the test process must be done writing DuckDB before the server's
    runs start writing it.

    Embedded: the shipped dagster.yaml (SQLite storage) and a DuckDB file. With `postgres` (a
    database URL on a server): the shipped dagster.postgres.yaml over a new database for the
    instance, and a new database for the warehouse."""
    home = tmp / "dagster_home"
    home.mkdir()
    today = dt.datetime.now(UTC).date()
    with pytest.MonkeyPatch.context() as mp:
        if postgres is None:
            instance_config(home)
            warehouse = str(tmp / "warehouse.duckdb")
        else:
            from tests.conftest import fresh_database

            instance_config(home, "dagster.postgres.yaml")
            for key, value in dagster_pg_env(fresh_database(postgres, "dagster")).items():
                mp.setenv(key, value)
            warehouse = fresh_database(postgres, "warehouse")
        mp.setenv("DAGSTER_HOME", str(home))
        mp.setenv(WAREHOUSE_ENV, warehouse)
        instance = dg.DagsterInstance.get()
        seeded = seed(instance, warehouse, today)
        proc, d = start_dev(instance, warehouse, tmp / "dagster-dev.log", today)
        try:
            yield d, seeded
        finally:
            _stop(proc)
            instance.dispose()


# Appended to the tests' copies of the shipped instance config: the daemon takes runs off the
# queue every second instead of every 5 (Dagster's default), as the tests wait for each run. The
# queue's limits still come from the shipped `concurrency` section.
FAST_DEQUEUE = """
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""


def instance_config(home: Path, shipped: str = "dagster.yaml") -> None:
    """`home`/dagster.yaml: the project's `shipped` instance config, with FAST_DEQUEUE."""
    text = (REPO / "dagster_home" / shipped).read_text()
    (home / "dagster.yaml").write_text(text + FAST_DEQUEUE)


def _seed_history(instance: dg.DagsterInstance, warehouse: str, today: dt.date) -> None:
    # History ends 5 days ago: older than the daily sensor's lookback, so the daemon starts
    # no daily run of its own and the only daily run is the one a test launches.
    first, last = today - dt.timedelta(days=20), today - dt.timedelta(days=5)
    land_days(defs, instance, first, last, ROWS_PER_DAY)
    # The target's history written directly by the v1 logic (as tests/conftest.py `history`
    # does): building the dbt marts over it would add half a minute.
    write_history(instance, open_warehouse(warehouse), first, last, logic="1")


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with dev_server(tmp_path_factory.mktemp("e2e"), _seed_history) as (d, _):
        yield d


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/server_info", timeout=2).ok
    except requests.RequestException:
        return False


SENSOR_TICKS = """
query($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { ticks(limit: 20) { status timestamp skipReason runIds } } }
  }
}
"""

SENSOR_ID = """
query($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) { ... on Sensor { id } }
}
"""

STOP_SENSOR = """
mutation($id: String!) { stopSensor(id: $id) { __typename } }
"""

REPORT_EVENT = """
mutation($eventParams: ReportRunlessAssetEventsParams!) {
  reportRunlessAssetEvents(eventParams: $eventParams) {
    __typename
    ... on PythonError { message }
    ... on UnauthorizedError { message }
  }
}
"""

LAUNCH_RUN = """
mutation($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""


def _sensor_ticks(d: Dev, sensor: str) -> list[dict[str, Any]] | None:
    try:
        data = d.graphql(SENSOR_TICKS, {"selector": _selector(d, sensorName=sensor)})
    except (requests.RequestException, AssertionError):
        return None
    found = data["sensorOrError"]
    return found["sensorState"]["ticks"] if found["__typename"] == "Sensor" else None


def _selector(d: Dev, **kw: str) -> dict[str, str]:
    return {"repositoryLocationName": d.location, "repositoryName": REPOSITORY, **kw}


def stop_sensor(d: Dev, name: str) -> None:
    sensor = d.graphql(SENSOR_ID, {"selector": _selector(d, sensorName=name)})["sensorOrError"]
    result = d.graphql(STOP_SENSOR, {"id": sensor["id"]})["stopSensor"]
    assert result["__typename"] == "StopSensorMutationResult", result


def launch(
    d: Dev,
    job: str,
    run_config: dict[str, Any],
    tags: dict[str, str] | None = None,
    assets: list[str] | None = None,
) -> str:
    """Launch a run the way the Launchpad does; return its run id."""
    selector: dict[str, Any] = _selector(d, jobName=job)
    if assets:
        selector["assetSelection"] = [{"path": [a]} for a in assets]
    params = {
        "selector": selector,
        "runConfigData": run_config,
        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
    }
    result = d.graphql(LAUNCH_RUN, {"executionParams": params})["launchRun"]
    assert result["__typename"] == "LaunchRunSuccess", result
    return result["run"]["runId"]


def finished(d: Dev, run_id: str) -> dg.RunRecord | None:
    rec = d.instance.get_run_record_by_id(run_id)
    return rec if rec and rec.dagster_run.is_finished else None


def status_of(d: Dev, run_id: str) -> dg.DagsterRunStatus | None:
    run = d.instance.get_run_by_id(run_id)
    return run.status if run is not None else None


def succeeded(d: Dev, run_id: str, timeout: float = RUN_TIMEOUT_S) -> dg.RunRecord:
    rec = wait_for(f"run {run_id} to finish", lambda: finished(d, run_id), timeout, d)
    assert rec.dagster_run.status == dg.DagsterRunStatus.SUCCESS, d.log_tail()
    return rec


def plan_now(d: Dev, start: dt.date, end: dt.date, window: str) -> BackfillPlan:
    """Plan with the real planner while no run holds the warehouse; the daily run is expected
    12 h from now (see the module docstring)."""
    now = dt.datetime.now(UTC)
    daily_at = (now + dt.timedelta(hours=12)).time().replace(second=0, microsecond=0)
    tables = {ORDERS.key: dataclasses.replace(ORDERS, daily_expected_start=daily_at)}
    wait_for(
        "no run writing the warehouse",
        lambda: not writer_runs_in_progress(d.instance, ORDERS),
        RUN_TIMEOUT_S,
        d,
    )
    return plan_backfill(
        PlanRequest(ORDERS.key, start.isoformat(), end.isoformat(), window, "UTC", "backup"),
        asset_graph=defs.resolve_asset_graph(),
        tables=tables,
        instance=d.instance,
        warehouse=d.wh(),
        now=now,
    )


def window_around(now: dt.datetime, before: dt.timedelta, after: dt.timedelta) -> str:
    return f"{now + before:%H:%M}-{now + after:%H:%M}"


def plan_runs(d: Dev, plan_id: str, role: str | None = None) -> list[dg.RunRecord]:
    tags = {PLAN_ID_TAG: plan_id, **({ROLE_TAG: role} if role else {})}
    return list(d.instance.get_run_records(dg.RunsFilter(tags=tags)))


def claim_target(d: Dev) -> None:
    """Free orders_daily for a new plan (one active plan per target): abandon or release any
    plan still holding it, once no run holds the writer tag (DuckDB allows one process)."""
    active = {
        pid: status
        for pid, (target, status) in plan_statuses(d.instance).items()
        if target == ORDERS.key and status in ("approved", "swapped")
    }
    if not active:
        return
    wait_for(
        "no run writing the warehouse",
        lambda: not writer_runs_in_progress(d.instance, ORDERS),
        3 * RUN_TIMEOUT_S,
        d,
    )
    wh = d.wh()
    for pid, status in active.items():
        if status == "approved":
            abandon_plan(d.instance, TABLES, wh, pid)
        else:
            release_backup(d.instance, TABLES, wh, pid)


def test_a_started_plan_whose_window_is_closed_launches_nothing_and_the_tick_says_why(dev):
    claim_target(dev)
    now = dt.datetime.now(UTC)
    window = window_around(now, dt.timedelta(hours=4), dt.timedelta(hours=6))
    day = dev.today - dt.timedelta(days=10)
    plan = plan_now(dev, day, day, window)
    approve_plan(dev.instance, dev.wh(), ORDERS, plan, "e2e")
    start_plan(dev.instance, plan.plan_id, "e2e", now)
    started = time.time()

    def ticks_about_plan() -> list[dict[str, Any]]:
        ticks = _sensor_ticks(dev, DRIVER_SENSOR) or []
        return [
            t for t in ticks if t["timestamp"] > started and plan.plan_id in (t["skipReason"] or "")
        ]

    # Two evaluations of the sensor after the start saw the plan and skipped it.
    wait_for("two driver ticks about the plan", lambda: len(ticks_about_plan()) >= 2, 60, dev)
    for t in ticks_about_plan():
        assert t["status"] == "SKIPPED"
        assert f"plan {plan.plan_id}: outside window {window} UTC" in t["skipReason"]
    assert plan_runs(dev, plan.plan_id) == []


def test_a_plan_started_from_the_launchpad_completes_through_the_sensor_around_a_daily_run(dev):
    launchpad_plan_around_a_daily_run(dev)


def launchpad_plan_around_a_daily_run(dev: Dev) -> None:
    """Start a plan from the Launchpad; while its runner run is in progress, launch a daily run:
    it queues, the runner ends before its next batch, the daily run runs, and a new runner
    passes both batches after it, through the driver sensor; swap from the Launchpad and watch
    the refresh runs."""
    claim_target(dev)
    now = dt.datetime.now(UTC)
    window = window_around(now, -dt.timedelta(hours=1), dt.timedelta(hours=2))
    # Two batches: the last Saturday-Sunday of one ISO week and the Monday-Tuesday after it.
    d12 = dev.today - dt.timedelta(days=12)
    monday = d12 - dt.timedelta(days=d12.weekday())
    plan = plan_now(dev, monday - dt.timedelta(days=2), monday + dt.timedelta(days=1), window)
    assert len(plan.batches) == 2
    approve_plan(dev.instance, dev.wh(), ORDERS, plan, "e2e")
    start_config = {"ops": {"start_backfill_plan": {"config": {"plan_id": plan.plan_id}}}}
    # A batch of this small table lasts a fraction of a second, and the runner starts the next
    # one at once: to launch the daily run while the runner is in progress whatever the
    # machine's speed, the test takes the table's writer lease first, as a command would, so the
    # runner waits for it before batch 1.
    wh = dev.wh()
    hold = holder_for_command("e2e: holds the runner before batch 1")
    acquire_writer(dev.instance, wh, ORDERS.key, hold, wait_s=30)
    try:
        start_run = launch(dev, START_JOB, start_config)

        def runner_started() -> dg.RunRecord | None:
            for rec in plan_runs(dev, plan.plan_id, ROLE_RUNNER):
                if rec.dagster_run.status == dg.DagsterRunStatus.STARTED:
                    return rec
            return None

        runner = wait_for("the plan's runner to start", runner_started, RUN_TIMEOUT_S, dev)
        # The daily production run, launched from the UI: only its first step (the target's
        # write), since the dbt models after it would add a minute and prove nothing. It waits
        # in the queue: the runner holds the table's writer slot.
        daily_day = (dev.today - dt.timedelta(days=1)).isoformat()  # within the daily lookback
        daily_id = launch(
            dev, "orders_daily_job", {}, {"dagster/partition": daily_day}, assets=[ORDERS.key]
        )
        wait_for(
            "the daily run to be queued",
            lambda: status_of(dev, daily_id) == dg.DagsterRunStatus.QUEUED,
            RUN_TIMEOUT_S,
            dev,
        )
    finally:
        wh.release_writer(ORDERS.key, hold.holder_id)
    succeeded(dev, start_run)

    def all_batches_succeeded() -> list[dg.RunRecord] | None:
        recs = [r for r in plan_runs(dev, plan.plan_id) if r.dagster_run.tags.get(BATCH_TAG)]
        assert not [r for r in recs if r.dagster_run.status == dg.DagsterRunStatus.FAILURE], (
            dev.log_tail()
        )
        ok = [r for r in recs if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS]
        return ok if {r.dagster_run.tags[BATCH_TAG] for r in ok} == {"1", "2"} else None

    batches = wait_for("both batches to pass", all_batches_succeeded, 3 * RUN_TIMEOUT_S, dev)
    daily = succeeded(dev, daily_id)
    first = succeeded(dev, runner.dagster_run.run_id)  # it ended: not now, nothing failed

    # Each batch a run of its own, run by the driver's runner runs (service.plan_runner), each
    # with its deterministic run key; no run per batch from the sensor.
    assert all("dagster/run_key" not in r.dagster_run.tags for r in batches)
    runners = plan_runs(dev, plan.plan_id, ROLE_RUNNER)
    keys = sorted(r.dagster_run.tags.get("dagster/run_key", "") for r in runners)
    assert keys == [f"{plan.plan_id}-runner-{i}" for i in range(1, len(runners) + 1)]
    assert len(runners) >= 2
    # The daily run was queued while the first runner ran, started after it ended, and no batch
    # was even created before the daily run had finished: the runner ended before batch 1, and
    # the driver held the next one, not only the instance's writer tag limit.
    assert daily.start_time is not None and daily.end_time is not None
    assert first.end_time is not None
    assert daily.create_timestamp.timestamp() < first.end_time <= daily.start_time
    for rec in batches:
        assert rec.create_timestamp.timestamp() >= daily.end_time

    # Swap from the Launchpad publishing the target alone (`downstream: false`, the CLI's
    # --no-refresh): the refresh sensor requests one run per grain of the impact set. (With the
    # default, the models are published with the target and nothing is left to refresh: see
    # tests/test_downstream.py and the browser test of the swap.)
    swap_config = {
        "ops": {"orders_daily__swap": {"config": {"plan_id": plan.plan_id, "downstream": False}}}
    }
    swap = launch(dev, "orders_daily__swap_job", swap_config)
    succeeded(dev, swap)
    expected = [f"{plan.plan_id}-refresh-{swap}-{i}" for i in (1, 2, 3)]
    assert len(refresh_requests(plan, defs.resolve_asset_graph())) == len(expected)

    def refresh_runs() -> list[dg.RunRecord] | None:
        recs = plan_runs(dev, plan.plan_id, ROLE_REFRESH)
        return recs if len(recs) == len(expected) else None

    recs = wait_for("the refresh runs to be requested", refresh_runs, 60, dev)
    by_key = {r.dagster_run.tags.get("dagster/run_key"): r for r in recs}
    assert sorted(by_key) == expected
    run_ids = {r.dagster_run.run_id for r in recs}

    def refresh_tick() -> list[dict[str, Any]]:
        # The tick records its run ids once it has submitted every run it requested, and its
        # status a moment later, when it ends: wait for both.
        ticks = _sensor_ticks(dev, REFRESH_SENSOR) or []
        return [t for t in ticks if set(t["runIds"]) == run_ids and t["status"] != "STARTED"]

    assert wait_for("the refresh sensor's tick", refresh_tick, 30, dev)[0]["status"] == "SUCCESS"
    # The first (the daily grain, upstream of the rest) runs through the daemon and succeeds;
    # the others queue behind it on the writer tag.
    first = by_key[expected[0]].dagster_run
    assert "fct_daily_revenue" in {k.to_user_string() for k in first.asset_selection or []}
    succeeded(dev, first.run_id)


LAUNCH_BACKFILL = """
mutation($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""


def step_failure(d: Dev, run_id: str) -> str:
    """What a failed run's step said: its Failure's description, else its error message."""
    for rec in d.instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = rec.dagster_event.event_specific_data if rec.dagster_event else None
        info = getattr(data, "user_failure_data", None)
        if info is not None and info.description:
            return info.description
        error = getattr(data, "error", None)
        if error is not None:
            return error.message
    return ""


def quiet_checksums(
    d: Dev, start: dt.date, end: dt.date, *, shadow: bool = False
) -> dict[dt.date, str]:
    """The target's (or its shadow's) checksums, read while no run writes the warehouse
    (DuckDB: one process)."""
    wait_for(
        "no run writing the warehouse",
        lambda: not writer_runs_in_progress(d.instance, ORDERS),
        3 * RUN_TIMEOUT_S,
        d,
    )
    return d.wh().checksums(ORDERS.spec, start, end + dt.timedelta(days=1), shadow=shadow)


def test_a_backfill_of_the_target_launched_as_the_ui_does_writes_nothing_and_proposes_a_plan(
    dev,
):
    # Regression: a UI backfill of orders_daily over past days rewrote the live table directly
    # (no plan, shadow, gates or backup) and succeeded.
    claim_target(dev)
    start = dev.today - dt.timedelta(days=18)
    end = start + dt.timedelta(days=4)
    before = quiet_checksums(dev, start, end)
    keys = [(start + dt.timedelta(days=i)).isoformat() for i in range(5)]
    params = {
        "assetSelection": [{"path": [ORDERS.key]}],
        "partitionNames": keys,
        "fromFailure": False,
        "tags": [],
    }
    result = dev.graphql(LAUNCH_BACKFILL, {"backfillParams": params})["launchPartitionBackfill"]
    assert result["__typename"] == "LaunchBackfillSuccess", result
    backfill = result["backfillId"]

    def backfill_run() -> dg.RunRecord | None:
        recs = dev.instance.get_run_records(dg.RunsFilter(tags={"dagster/backfill": backfill}))
        return recs[0] if recs and recs[0].dagster_run.is_finished else None

    run = wait_for("the backfill's run to finish", backfill_run, 3 * RUN_TIMEOUT_S, dev)
    assert run.dagster_run.status == dg.DagsterRunStatus.FAILURE
    why = step_failure(dev, run.dagster_run.run_id)
    assert why.startswith("Refused: this run of __ASSET_JOB would write the live table")
    assert "Nothing was written" in why
    proposed = [
        pid
        for pid, (target, status) in plan_statuses(dev.instance).items()
        if target == ORDERS.key and status == "proposed"
    ]
    assert any(f"Plan {pid} (proposed) covers that range instead" in why for pid in proposed)
    assert quiet_checksums(dev, start, end) == before  # the live table is unchanged


def cli(d: Dev, *args: str, timeout_s: str = "5") -> subprocess.CompletedProcess[str]:
    """`backfill-assets` as an operator runs it beside the deployment, on the same instance."""
    env = {
        **os.environ,
        "DAGSTER_HOME": d.instance.root_directory,
        WAREHOUSE_ENV: str(d.warehouse),
        "BACKFILL_ASSETS_LOCK_TIMEOUT_S": timeout_s,
        "PYTHONWARNINGS": "ignore",
    }
    exe = str(Path(sys.executable).with_name("backfill-assets"))
    return subprocess.run(
        [exe, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_plan_driven_by_the_daemon_and_the_cli_never_act_at_once(dev):
    claim_target(dev)
    now = dt.datetime.now(UTC)
    window = window_around(now, -dt.timedelta(hours=1), dt.timedelta(hours=2))
    d12 = dev.today - dt.timedelta(days=12)
    monday = d12 - dt.timedelta(days=d12.weekday())
    plan = plan_now(dev, monday - dt.timedelta(days=2), monday + dt.timedelta(days=1), window)
    approve_plan(dev.instance, dev.wh(), ORDERS, plan, "e2e")
    before = quiet_checksums(dev, plan.start, plan.end)
    started = cli(dev, "start", plan.plan_id)
    assert started.returncode == 0, started.stderr
    # While the daemon drives it, a rollback is refused at once (nothing is swapped; the daemon
    # never swaps)...
    rollback = cli(dev, "rollback", plan.plan_id, "--no-refresh")
    assert rollback.returncode == 2 and "only a swapped plan" in rollback.stderr
    # ... the CLI refuses to run its batches, and says why...
    run = cli(dev, "run", plan.plan_id, "--ignore-window")
    assert run.returncode == 2 and "being driven by the daemon" in run.stderr
    # ... and a swap is refused while a batch is left: either the table is being written by one
    # of the daemon's batches, or the gates are not all run yet. The swap does not wait for the
    # table here (0.5 s, not the tests' 5 s). The daemon may still have passed both batches
    # before the swap started (it did, with the tests' files on a tmpfs, and on a loaded
    # machine): then the swap rightly goes on, and it must have begun after every batch ended.
    swap = cli(dev, "swap", plan.plan_id, "--no-refresh", timeout_s="0.5")
    if swap.returncode == 0:
        runs = plan_runs(dev, plan.plan_id)
        batch_runs = [r for r in runs if r.dagster_run.tags.get(BATCH_TAG)]
        # The swap job's run (tagged by role; the newest, as the module's tests share the instance)
        swaps = dg.RunsFilter(tags={ROLE_TAG: ROLE_SWAP})
        swap_run = dev.instance.get_run_records(swaps, limit=1)[0]
        assert sorted(r.dagster_run.tags[BATCH_TAG] for r in batch_runs) == ["1", "2"]
        assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in batch_runs)
        assert swap_run.start_time is not None
        assert all(
            r.end_time is not None and r.end_time <= swap_run.start_time for r in batch_runs
        ), [(r.dagster_run.run_id, r.end_time) for r in batch_runs]
    else:
        assert swap.returncode == 2, swap.stderr
        refusals = ("is being written by run", "cannot be swapped", "is held by another process")
        assert any(why in swap.stderr for why in refusals), swap.stderr

        def all_batches_passed() -> bool:
            ticks = _sensor_ticks(dev, DRIVER_SENSOR) or []
            return any(f"plan {plan.plan_id}: all batches passed" in (t["skipReason"] or "")
                       for t in ticks)  # fmt: skip

        wait_for("the daemon to pass every batch", all_batches_passed, 3 * RUN_TIMEOUT_S, dev)
        validated = quiet_checksums(dev, plan.start, plan.end, shadow=True)
        assert sorted(validated) == sorted(before)  # every day of the plan has a validated shadow
        # Now only the CLI acts: it swaps, and the daemon launches nothing more for the plan.
        swapped = cli(dev, "swap", plan.plan_id, "--no-refresh", timeout_s="60")
        assert swapped.returncode == 0, swapped.stderr
        assert quiet_checksums(dev, plan.start, plan.end) == validated
    # The UI's "Report materialization event" on the swapped plan's partition of
    # backfill_plans. Regression: it replaced the plan's record; every command then lost the
    # plan, and its rollback was refused ("not approved in this Dagster instance").
    params = {
        "eventType": "ASSET_MATERIALIZATION",
        "assetKey": {"path": ["backfill_plans"]},
        "partitionKeys": [plan.plan_id],
        "description": "reported from the UI",
    }
    reported = dev.graphql(REPORT_EVENT, {"eventParams": params})["reportRunlessAssetEvents"]
    assert reported["__typename"] == "ReportRunlessAssetEventsSuccess", reported
    status = cli(dev, "status", plan.plan_id)
    assert status.returncode == 0 and ": swapped" in status.stdout.splitlines()[0], status.stderr
    rolled = cli(dev, "rollback", plan.plan_id, "--no-refresh", timeout_s="60")
    assert rolled.returncode == 0, rolled.stderr
    assert quiet_checksums(dev, plan.start, plan.end) == before
    batch_runs = [r for r in plan_runs(dev, plan.plan_id) if r.dagster_run.tags.get(BATCH_TAG)]
    assert sorted(r.dagster_run.tags[BATCH_TAG] for r in batch_runs) == ["1", "2"]
