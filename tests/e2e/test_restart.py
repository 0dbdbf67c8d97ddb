"""The whole instance restarted mid-plan: webserver, daemon, code server and the batch's run worker
killed at once (SIGKILL to `dagster dev`'s process group) while a batch writes, then started again.

No batch runs twice to success, the killed batch's run and its runner run are reaped rather than
left STARTED forever, and the driver resumes the plan inside its window with a new runner (run
keys are deterministic per runner).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
from collections import defaultdict

import dagster as dg
import pytest

from backfill_assets.constants import BATCH_TAG, PID_TAG, REAPED_TAG, ROLE_RUNNER
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.approval import approve_plan
from backfill_assets.service.batch_driver import start_plan
from backfill_assets.testing.waiting import poll
from tests.e2e.test_daemon import (
    RUN_TIMEOUT_S,
    UTC,
    _seed_history,
    instance_config,
    plan_now,
    plan_runs,
    start_dev,
    wait_for,
    window_around,
)

pytestmark = pytest.mark.slow
BIG_DAY = 150_000  # orders a day in the plan's range


def test_the_whole_instance_restarted_mid_batch_resumes_the_plan_without_a_duplicate(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance_config(home)
    warehouse = str(tmp_path / "warehouse.duckdb")
    today = dt.datetime.now(UTC).date()
    log = tmp_path / "dagster-dev.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(home))
        mp.setenv(WAREHOUSE_ENV, warehouse)
        instance = dg.DagsterInstance.get()
        _seed_history(instance, warehouse, today)
        proc, dev = start_dev(instance, warehouse, log, today)
        try:
            now = dt.datetime.now(UTC)
            d12 = today - dt.timedelta(days=12)
            monday = d12 - dt.timedelta(days=d12.weekday())
            window = window_around(now, -dt.timedelta(hours=1), dt.timedelta(hours=3))
            plan = plan_now(
                dev, monday - dt.timedelta(days=2), monday + dt.timedelta(days=1), window
            )
            assert len(plan.batches) == 2
            approve_plan(instance, DuckDBWarehouse(warehouse), ORDERS, plan, "e2e")
            start_plan(instance, plan.plan_id, "e2e", now)

            def batch_one_writing() -> dg.DagsterRun | None:
                for rec in plan_runs(dev, plan.plan_id):
                    run = rec.dagster_run
                    if run.tags.get(BATCH_TAG) == "1" and PID_TAG in run.tags:
                        return run if run.status == dg.DagsterRunStatus.STARTED else None
                return None

            # Batch 1's writing step has started (it tagged its run with its process).
            killed = poll(batch_one_writing, RUN_TIMEOUT_S, 0.05)  # fast: the write lasts seconds
            assert killed is not None, dev.log_tail()
        finally:
            # Everything at once: webserver, daemon, code server, run worker.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(killed.tags[PID_TAG]), signal.SIGKILL)  # if it had its own session

        proc, dev = start_dev(instance, warehouse, log, today)
        try:

            def all_passed() -> dict[str, list[str]] | None:
                by_batch: dict[str, list[str]] = defaultdict(list)
                for rec in reversed(plan_runs(dev, plan.plan_id)):  # oldest first
                    run = rec.dagster_run
                    if BATCH_TAG in run.tags:
                        by_batch[run.tags[BATCH_TAG]].append(run.status.value)
                done = all(v and v[-1] == "SUCCESS" for v in by_batch.values())
                return dict(by_batch) if done and set(by_batch) == {"1", "2"} else None

            runs = wait_for(
                "the plan to finish after the restart", all_passed, 4 * RUN_TIMEOUT_S, dev
            )
            # The killed attempt was reaped (marked failed: its process is gone), not left
            # STARTED; then batch 1 ran once more and batch 2 once.
            assert runs == {"1": ["FAILURE", "SUCCESS"], "2": ["SUCCESS"]}, runs
            first = instance.get_run_by_id(killed.run_id)
            assert first is not None and REAPED_TAG in first.tags
            batch_one = [
                r.dagster_run
                for r in plan_runs(dev, plan.plan_id)
                if r.dagster_run.tags.get(BATCH_TAG) == "1"
            ]
            assert len({r.run_id for r in batch_one}) == 2  # each attempt a run of its own
            # Both ran in runner runs the driver launched (service.plan_runner): the killed one
            # was reaped with its batch, and did not halt the plan; the next has its own key.
            runners = [r.dagster_run for r in plan_runs(dev, plan.plan_id, ROLE_RUNNER)]
            keys = {r.tags.get("dagster/run_key") for r in runners}
            assert len(keys) == len(runners) >= 2
            assert any(REAPED_TAG in r.tags for r in runners)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
            instance.dispose()
