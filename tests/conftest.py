"""Shared fixtures: a real DuckDB file under tmp_path, a real Dagster instance, a real dbt parse.

Each test gets its own warehouse file (BACKFILL_ASSETS_WAREHOUSE points at it) and its own
instance; the example's definitions are loaded once per session (the dbt manifest is parsed
then). The example's dbt project is found through BACKFILL_ASSETS_DBT_PROJECT, as an installed
deployment would find it.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
from backfill_assets.lib.warehouse.duckdb_adapter import DuckDBWarehouse

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("BACKFILL_ASSETS_DBT_PROJECT", str(REPO / "dbt_project"))

# A fixed, fully landed history window for tests that do not depend on "now".
HISTORY_START = dt.date(2026, 1, 1)
HISTORY_END = dt.date(2026, 1, 21)  # inclusive: 3 ISO weeks (2026-W01 starts Mon 2025-12-29)
ROWS_PER_DAY = 300


def pytest_addoption(parser: pytest.Parser) -> None:
    # For the browser tests in tests/ui (`make screenshots`); options must be declared here.
    parser.addoption("--screenshots", metavar="DIR", help="save the UI tests' screenshots in DIR")


@pytest.fixture(scope="session")
def defs() -> dg.Definitions:
    from backfill_assets.example.definitions import example_definitions

    return example_definitions()


@pytest.fixture(scope="session")
def tables(defs):
    from backfill_assets.service.tables import backfill_tables

    return backfill_tables(defs)


@pytest.fixture
def warehouse_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "warehouse.duckdb"
    monkeypatch.setenv(WAREHOUSE_ENV, str(path))
    return path


@pytest.fixture
def wh(warehouse_path: Path) -> DuckDBWarehouse:
    return DuckDBWarehouse(warehouse_path, lock_timeout_s=2)


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as inst:
        yield inst


@pytest.fixture
def landed(defs, instance, wh) -> DuckDBWarehouse:
    """Source data landed for the whole history window."""
    from backfill_assets.example.seed import land_days

    land_days(defs, instance, HISTORY_START, HISTORY_END, ROWS_PER_DAY)
    return wh


@pytest.fixture
def history(instance, landed) -> DuckDBWarehouse:
    """orders_daily built for the window by the buggy v1 logic (warehouse write, no dbt)."""
    from backfill_assets.example.seed import write_history

    write_history(instance, landed, HISTORY_START, HISTORY_END, logic="1")
    return landed


@pytest.fixture
def history_with_marts(defs, instance, landed) -> DuckDBWarehouse:
    """orders_daily for the window by logic v1, and its dbt marts."""
    from backfill_assets.example.seed import build_history

    build_history(defs, instance, landed, HISTORY_START, HISTORY_END, logic="1")
    return landed


# Planning and execution happen at a fixed "now", inside this window and clear of the daily run.
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
WINDOW = "02:00-23:00"


def make_plan(defs, instance, wh, start: str, end: str, approve: bool = True, **kw):
    """Plan (and approve) a backfill of orders_daily with the project's real planner."""
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.service.planner import plan_backfill
    from backfill_assets.service.plans import approve_plan
    from backfill_assets.service.tables import backfill_tables

    tables = kw.pop("tables", None) or backfill_tables(defs)
    request = PlanRequest(
        "orders_daily",
        start,
        end,
        kw.pop("window", WINDOW),
        kw.pop("timezone", "UTC"),
        kw.pop("rollback", "backup"),
        kw.pop("criteria", None),
    )
    plan = plan_backfill(
        request,
        asset_graph=defs.resolve_asset_graph(),
        tables=tables,
        instance=instance,
        warehouse=wh,
        now=kw.pop("now", NOW),
    )
    if approve:
        approve_plan(instance, wh, tables["orders_daily"], plan, "tests")
    return plan
