"""The state the browser tests look at, and the `dagster dev` that serves it.

Everything is seeded in the test process *before* the server starts, the way
tests/test_execute.py does it: ~3 weeks of source data, the target's history written by the buggy
v1 logic, one plan planned and approved, a restated source day planted under it, and the plan
executed in-process until its sample gate fails (batch 1 passed, batch 2 failed, batch 3 never
ran). From then on only runs launched by the server write the warehouse: DuckDB allows one
writing process per file, so the test process writes again only while no run is in progress.

The server is started like tests/e2e/test_daemon.py starts it, with that module's helpers: its
own DAGSTER_HOME holding a copy of the project's dagster.yaml (writer tag limit 1, writer pool
1, telemetry and the "nux" pop-up off; runs taken off the queue every second), its own DuckDB
file, a new session with SIGINT restored, a bounded wait for /server_info, SIGTERM to the
process group then SIGKILL after a bound.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.errors import GateFailed
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.seed import land_days, write_history
from backfill_assets.lib.planning.build import PlanRequest
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.approval import approve_plan
from backfill_assets.service.executor import execute_plan
from backfill_assets.service.planner import plan_backfill

# The `dagster dev` helpers of the daemon end-to-end tests, shared rather than copied.
from tests.e2e.test_daemon import Dev, defs, dev_server, window_around

ROWS_PER_DAY = 200
# One order in ten of the restated day gets another amount, a column the criteria declare
# unchanged (tests/test_execute.py's "changed_unchanged_column" corruption).
CORRUPTION_SQL = (
    "update raw_orders set amount = amount + 1 where order_date = $d and order_id % 10 = 0"
)


@dataclasses.dataclass(frozen=True)
class Story:
    """The running server and the seeded state the tests look at."""

    dev: Dev
    plan: BackfillPlan
    bad_day: dt.date  # in batch 2; its sample gate failed
    daily_day: dt.date  # a day in the daily job's lookback, for the daily run a test launches

    def url(self, path: str) -> str:
        return f"{self.dev.url}{path}"


def plan_three_batches(
    instance: dg.DagsterInstance, warehouse: str, today: dt.date
) -> BackfillPlan:
    """Three batches: the Saturday-Sunday ending an ISO week, the next whole week and the
    Monday-Tuesday after it. The window is open now and the daily run is pretended to be due
    12 h from now (as tests/e2e does), so the driver may run batches whatever the time of day."""
    now = dt.datetime.now(dt.UTC)
    day = today - dt.timedelta(days=19)
    monday = day - dt.timedelta(days=day.weekday())
    start, end = monday - dt.timedelta(days=2), monday + dt.timedelta(days=8)
    daily_at = (now + dt.timedelta(hours=12)).time().replace(second=0, microsecond=0)
    tables = {ORDERS.key: dataclasses.replace(ORDERS, daily_expected_start=daily_at)}
    window = window_around(now, -dt.timedelta(hours=1), dt.timedelta(hours=2))
    plan = plan_backfill(
        PlanRequest(ORDERS.key, start.isoformat(), end.isoformat(), window, "UTC", "backup"),
        asset_graph=defs.resolve_asset_graph(),
        tables=tables,
        instance=instance,
        warehouse=DuckDBWarehouse(warehouse),
        now=now,
    )
    assert [len(b.partitions) for b in plan.batches] == [2, 7, 2], plan.batches
    return plan


def seed(
    instance: dg.DagsterInstance, warehouse: str, today: dt.date
) -> tuple[BackfillPlan, dt.date, dt.date]:
    """Land the history, plan, approve, plant the corruption, run until the gate fails."""
    # From 31 days ago: at least three days before the plan, which starts 21-27 days ago.
    first, last = today - dt.timedelta(days=31), today - dt.timedelta(days=5)
    land_days(defs, instance, first, last, ROWS_PER_DAY)
    wh = DuckDBWarehouse(warehouse)
    # The history as the buggy v1 logic wrote it (tests/conftest.py `history`): building the
    # dbt marts over it would add a minute and show nothing more here.
    write_history(instance, wh, first, last, logic="1")
    plan = plan_three_batches(instance, warehouse, today)
    approve_plan(instance, wh, ORDERS, plan, "ui-tests")
    bad_day = plan.batches[1].start + dt.timedelta(days=1)
    wh.execute(CORRUPTION_SQL, {"d": bad_day})
    with pytest.raises(GateFailed, match=f"{bad_day} sample_gate"):
        execute_plan(
            defs,
            instance,
            wh,
            {ORDERS.key: ORDERS},
            plan.plan_id,
            clock=lambda: dt.datetime.now(dt.UTC),
            log_level="WARNING",
        )
    # The last landed day is 5 days old, past the daily sensor's lookback, so the daemon starts
    # no daily run of its own. The daily run a test launches is for yesterday: the daily job
    # writes the live table only within its lookback (older days are backfill territory).
    return plan, bad_day, today - dt.timedelta(days=1)


@contextmanager
def serve_story(tmp: Path) -> Iterator[Story]:
    with dev_server(tmp, seed) as (dev, (plan, bad_day, daily_day)):
        yield Story(dev, plan, bad_day, daily_day)
