"""A second project, adopted with the public API alone, through the Dagster UI's own path.

`dagster dev` serves the fixture project's code location (tests/fixture_project, `shop`), with
the shipped dagster.yaml, a fresh DAGSTER_HOME and its own DuckDB file. Every step is launched
the way the Launchpad launches it (the `launchRun` mutation): adopt, plan, approve and start; the
daemon's batch driver runs the batches; then swap and rollback. The target changes exactly on
the planned days, and the rollback restores its checksums.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import pytest

from backfill_assets.constants import (
    ADOPT_JOB,
    ADOPT_OP,
    APPROVE_JOB,
    APPROVE_OP,
    BATCH_TAG,
    PLAN_JOB,
    PLAN_OP,
    START_JOB,
    START_OP,
    driver_sensor,
    rollback_job,
    swap_job,
    swap_run_config,
)
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV, open_warehouse
from backfill_assets.service.guards import writer_runs_in_progress
from backfill_assets.service.plans import plan_statuses
from tests.e2e.test_daemon import (
    RUN_TIMEOUT_S,
    UTC,
    Dev,
    _stop,
    instance_config,
    launch,
    plan_runs,
    start_dev,
    succeeded,
    wait_for,
)
from tests.test_adoption import END, HISTORY, PROJECT, START, seed

pytestmark = pytest.mark.slow
LOCATION = "shop.definitions"


@pytest.fixture(scope="module")
def shop_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dev, str]]:
    sys.path.insert(0, str(PROJECT))
    import shop.tables as tables  # the project's own module, as its code location imports it

    tmp = tmp_path_factory.mktemp("shop-ui")
    home = tmp / "dagster_home"
    home.mkdir()
    instance_config(home)
    warehouse = str(tmp / "shop.duckdb")
    seed(tables, Path(warehouse))
    table = _table_clear_of_its_daily_run(dt.datetime.now(UTC))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(home))
        mp.setenv(WAREHOUSE_ENV, warehouse)
        mp.setenv("PYTHONPATH", os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")]))
        instance = dg.DagsterInstance.get()
        proc, d = start_dev(
            instance,
            warehouse,
            tmp / "dagster-dev.log",
            dt.datetime.now(UTC).date(),
            target=("-m", "shop.definitions"),
            cwd=PROJECT,
            location=LOCATION,
            driver_sensor_name=driver_sensor(table),
        )
        try:
            yield d, table
        finally:
            _stop(proc)
            instance.dispose()
            sys.path.remove(str(PROJECT))


def _table_clear_of_its_daily_run(now: dt.datetime) -> str:
    """A table whose daily slot stays clear of the window [now - 15 min, now + 1 h], which the
    planner requires. The planner checks the slot on every day of the coming year in the plan's
    timezone (UTC here), so a table in America/New_York has two slots, an hour apart (EDT, EST).
    The slot is its expected start - 30 min to start + 15 min + 30 min: the window misses it when
    the start is at least 1 h 40 after now or 1 h 10 before (10 min to spare each way). The
    shop's two tables (02:00 UTC; 01:00 New York) are never both too close."""
    from shop.tables import EVENTS, STORES  # type: ignore[import-not-found]

    day = 24 * 3600
    for t in (STORES, EVENTS):
        tz = ZoneInfo(t.timezone)
        local = now.astimezone(tz).date()
        starts = {
            dt.datetime.combine(local + dt.timedelta(days=k), t.daily_expected_start, tzinfo=tz)
            .astimezone(UTC)
            .time()
            for k in range(367)
        }
        clock = now.hour * 3600 + now.minute * 60 + now.second
        behind = [(clock - (s.hour * 3600 + s.minute * 60)) % day for s in starts]
        if all(70 * 60 <= b <= day - 100 * 60 for b in behind):
            return t.key
    raise AssertionError(f"no table's daily slot is clear of the window around {now}")


def _quiet_checksums(d: Dev, table: str) -> dict[dt.date, str]:
    from shop.definitions import defs as location  # type: ignore[import-not-found]

    from backfill_assets.service.tables import backfill_tables

    declared = backfill_tables(location())[table]
    wait_for(
        "no run writing the warehouse",
        lambda: not writer_runs_in_progress(d.instance, declared),
        3 * RUN_TIMEOUT_S,
        d,
    )
    end = HISTORY[1] + dt.timedelta(days=1)
    return open_warehouse(d.warehouse, lock_timeout_s=30).checksums(declared.spec, HISTORY[0], end)


def _config(op: str, **values: Any) -> dict[str, Any]:
    return {"ops": {op: {"config": values}}}


def test_a_second_project_runs_plan_approve_start_swap_rollback_from_the_launchpad(shop_dev):
    d, table = shop_dev
    before = _quiet_checksums(d, table)
    now = dt.datetime.now(UTC)
    window = f"{now - dt.timedelta(minutes=15):%H:%M}-{now + dt.timedelta(hours=1):%H:%M}"

    # Adopt the table its old pipeline wrote, from the Launchpad: until then the framework
    # refuses to write it.
    succeeded(d, launch(d, ADOPT_JOB, _config(ADOPT_OP, target=table, code_version="1")))
    assert _quiet_checksums(d, table) == before

    # Plan, from the Launchpad: the plan is recorded as proposed.
    succeeded(d, launch(d, PLAN_JOB, _config(
        PLAN_OP, target=table, start=START.isoformat(), end=END.isoformat(), window=window,
        timezone="UTC", rollback="backup",
    )))  # fmt: skip
    proposed = [p for p, (t, s) in plan_statuses(d.instance).items() if t == table]
    assert len(proposed) == 1, plan_statuses(d.instance)
    plan_id = proposed[0]
    assert plan_statuses(d.instance)[plan_id][1] == "proposed"

    # Approve, then start: the daemon's batch driver runs both weeks, once each.
    succeeded(d, launch(d, APPROVE_JOB, _config(APPROVE_OP, plan_id=plan_id)))
    succeeded(d, launch(d, START_JOB, _config(START_OP, plan_id=plan_id)))

    def both_batches_passed() -> list[dg.RunRecord] | None:
        recs = [r for r in plan_runs(d, plan_id) if r.dagster_run.tags.get(BATCH_TAG)]
        failed = [r for r in recs if r.dagster_run.status == dg.DagsterRunStatus.FAILURE]
        assert not failed, d.log_tail()
        ok = [r for r in recs if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS]
        return ok if sorted(r.dagster_run.tags[BATCH_TAG] for r in ok) == ["1", "2"] else None

    wait_for("both batches to pass", both_batches_passed, 4 * RUN_TIMEOUT_S, d)
    assert _quiet_checksums(d, table) == before  # batches write the shadow only

    # Swap from the Launchpad: exactly the planned days change.
    succeeded(d, launch(d, swap_job(table), swap_run_config(table, "swap", plan_id)))
    after = _quiet_checksums(d, table)
    days = {START + dt.timedelta(days=i) for i in range((END - START).days + 1)}
    assert {day for day in before if before[day] != after[day]} == days
    assert plan_statuses(d.instance)[plan_id][1] == "swapped"

    # Roll back from the Launchpad: the checksums come back.
    succeeded(d, launch(d, rollback_job(table), swap_run_config(table, "rollback", plan_id)))
    assert _quiet_checksums(d, table) == before
    assert plan_statuses(d.instance)[plan_id][1] == "rolled_back"
