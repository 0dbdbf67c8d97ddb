"""Adopting backfill_assets in another project, with the public API alone.

`tests/fixture_project` is a second project (its own package `shop`, not the example): a table
with a composite key, New York partitions and a SQL build; a table built by a pandas function; a
third declared in YAML with the Dagster Component; its own daily jobs, no dbt. These tests drive
it as its users would: the CLI from its own directory, pointed at its own code location, on a
fresh DAGSTER_HOME and warehouse.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "fixture_project"
START, END = dt.date(2026, 1, 5), dt.date(2026, 1, 18)  # two ISO weeks of history
HISTORY = (dt.date(2026, 1, 1), dt.date(2026, 1, 25))  # inclusive


@pytest.fixture(scope="module")
def shop() -> Iterator[object]:
    """The fixture project's package, importable as its own code location is."""
    sys.path.insert(0, str(PROJECT))
    import shop.tables as tables

    yield tables
    sys.path.remove(str(PROJECT))


def seed(shop, path: Path) -> DuckDBWarehouse:
    """The past, as the shop's old pipeline left it: raw events landed, and both tables as their
    buggy v1 builds wrote them, by plain SQL on the file, not through backfill_assets. The tests
    then bring the tables in as a user does: `adopt` (`adopt_in` or the CLI)."""
    start, end = HISTORY[0], HISTORY[1] + dt.timedelta(days=1)
    con = duckdb.connect(str(path))
    try:
        raw = ", ".join(name for name, _ in shop.RAW_EVENT_COLUMNS)
        ddl = ", ".join(f"{name} {kind}" for name, kind in shop.RAW_EVENT_COLUMNS)
        con.execute(f"CREATE TABLE {shop.RAW_EVENTS} ({ddl})")
        for i in range((end - start).days):
            con.execute(
                f"INSERT INTO {shop.RAW_EVENTS} ({raw}) SELECT {raw} FROM ({shop.RAW_EVENTS_SQL})",
                {"day": start + dt.timedelta(days=i), "n": 20},
            )
        for table, rows in (
            (shop.EVENTS, f"({shop.EVENTS_SQL_V1})"),
            (shop.STORES, "stores_v1"),
        ):
            cols = ", ".join(table.spec.column_names)
            con.execute(
                f"CREATE TABLE {table.key} "
                f"({', '.join(f'{c.name} {c.sql_type}' for c in table.spec.columns)})"
            )
            con.register("stores_v1", shop.build_stores_v1(start, end))
            con.execute(
                f"INSERT INTO {table.key} ({cols}) SELECT {cols} FROM {rows}",
                {"start": start, "end": end} if table is shop.EVENTS else {},
            )
    finally:
        con.close()
    return DuckDBWarehouse(path, lock_timeout_s=5)


def adopt_in(instance: dg.DagsterInstance, wh: DuckDBWarehouse, tables: dict, *more: str) -> None:
    """`backfill-assets adopt` of the tables `seed` wrote (and `more`), through its service, in
    this process."""
    from backfill_assets.service.adopt import adopt_table

    for name in ("events", "stores", *more):
        result = adopt_table(instance, wh, tables[name], code_version="1")
        assert result.recorded == (HISTORY[1] - HISTORY[0]).days + 1


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return home


def cli(args: list[str], home: Path, warehouse: Path) -> subprocess.CompletedProcess[str]:
    """The installed `backfill-assets`, run from the project's own directory."""
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        WAREHOUSE_ENV: str(warehouse),
        "PYTHONWARNINGS": "ignore",
    }
    exe = Path(sys.executable).with_name("backfill-assets")
    return subprocess.run(
        [str(exe), *args], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("table", ["events", "stores"])
def test_a_second_project_runs_the_whole_cycle_from_its_own_directory(shop, home, tmp_path, table):
    warehouse = tmp_path / "shop.duckdb"
    spec = {"events": shop.EVENTS, "stores": shop.STORES}[table].spec
    wh = seed(shop, warehouse)
    history = (HISTORY[0], HISTORY[1] + dt.timedelta(days=1))
    before = wh.checksums(spec, *history)
    assert f"adopted {table}: " in ok(cli(["adopt", table, "--code-version", "1"], home, warehouse))

    plan_file = tmp_path / "plan.json"
    ok(cli([
        "plan", table, "--start", START.isoformat(), "--end", END.isoformat(),
        "--window", "03:00-23:59", "--rollback", "backup", "--out", str(plan_file),
    ], home, warehouse))  # fmt: skip
    plan_id = json.loads(plan_file.read_text())["plan_id"]
    assert "approved" in ok(cli(["approve", str(plan_file)], home, warehouse))
    assert "2 batches ran and passed" in ok(
        cli(["run", plan_id, "--ignore-window"], home, warehouse)
    )
    assert wh.checksums(spec, *history) == before  # batches write the shadow only
    listed = json.loads(ok(cli(["list", "--format", "json"], home, warehouse)))
    assert {"plan_id": plan_id, "target": table, "status": "approved"} in listed

    ok(cli(["swap", plan_id, "--no-refresh"], home, warehouse))
    after = wh.checksums(spec, *history)
    changed = {d for d in before if before[d] != after[d]}
    days = {START + dt.timedelta(days=i) for i in range((END - START).days + 1)}
    assert changed == days  # the fix reached exactly the planned days

    ok(cli(["rollback", plan_id, "--no-refresh"], home, warehouse))
    assert wh.checksums(spec, *history) == before  # checksums restored


def test_the_cli_knows_its_version_and_the_projects_tables(shop, home, tmp_path):
    assert ok(cli(["--version"], home, tmp_path / "wh.duckdb")).startswith("backfill-assets 0.")
    done = cli(
        ["plan", "orders_daily", "--start", "2026-01-05", "--end", "2026-01-06"],
        home,
        tmp_path / "wh.duckdb",
    )
    assert done.returncode == 2
    # The tables come from the shop's code location (the YAML component's included), not the
    # example's.
    assert "backfillable tables are ['clicks', 'events', 'stores']" in done.stderr


def test_an_unset_warehouse_says_what_to_set_without_a_stack_trace(home, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != WAREHOUSE_ENV}
    env.update({"DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore"})
    exe = Path(sys.executable).with_name("backfill-assets")
    done = subprocess.run(
        [str(exe), "doctor"], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert f"Set {WAREHOUSE_ENV} to the warehouse: a DuckDB file path or a postgresql://" in (
        done.stderr
    )
    assert "Stack Trace" not in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.slow
def test_a_daily_run_of_one_table_blocks_its_own_batches_but_not_another_tables(
    shop, tmp_path, monkeypatch
):
    from shop.definitions import defs as location  # type: ignore[import-not-found]

    from backfill_assets.errors import WriterBusy
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.planner import plan_backfill
    from backfill_assets.service.runs import run_job
    from backfill_assets.service.tables import backfill_tables
    from tests.helpers import NOW, execute

    warehouse = tmp_path / "shop.duckdb"
    monkeypatch.setenv(WAREHOUSE_ENV, str(warehouse))
    wh = seed(shop, warehouse)
    defs = location()
    tables = backfill_tables(defs)
    home = tmp_path / "home"
    home.mkdir()
    config = yaml.safe_load((REPO / "dagster_home" / "dagster.yaml").read_text())
    overrides = {"concurrency": config["concurrency"]}
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
        adopt_in(instance, wh, tables)
        plans = {}
        for name in ("events", "stores"):
            plan = plan_backfill(
                PlanRequest(name, "2026-01-05", "2026-01-11", "03:00-23:59", None, "backup"),
                asset_graph=defs.resolve_asset_graph(),
                tables=tables,
                instance=instance,
                warehouse=wh,
                now=NOW,
            )
            approve_plan(instance, wh, tables[name], plan, "tests")
            plans[name] = plan

        # The daily run of `stores` holds its table: it is inside its build, past its lease.
        yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
        shop.BUILD_GATE.clear()
        shop.ENTERED_BUILD.clear()
        results: list[bool] = []
        daily = threading.Thread(
            target=lambda: results.append(
                run_job(defs, "stores_daily", instance, partition_key=yesterday.isoformat()).success
            )
        )
        daily.start()
        try:
            assert shop.ENTERED_BUILD.wait(timeout=120), "the daily run never reached its build"
            # A batch of `events` goes ahead: one writer per table, not per instance.
            reports = execute(defs, instance, wh, plans["events"], ignore_window=True)
            assert [r.status for r in reports] == ["passed"]
            # A batch of `stores` does not: its table is being written by the daily run.
            with pytest.raises(WriterBusy, match=r"stores is being written by run .*stores_daily"):
                execute(defs, instance, wh, plans["stores"], ignore_window=True, wait_s=2)
        finally:
            shop.BUILD_GATE.set()
            daily.join(timeout=120)
        assert results == [True]
        # Once the daily run is over, the same batch runs.
        reports = execute(defs, instance, wh, plans["stores"], ignore_window=True)
        assert [r.status for r in reports] == ["passed"]


@pytest.mark.slow
def test_dagster_validates_both_code_locations(home, tmp_path):
    dagster = str(Path(sys.executable).with_name("dagster"))
    env = {**os.environ, "DAGSTER_HOME": str(home), WAREHOUSE_ENV: str(tmp_path / "w.duckdb")}
    for args, cwd in (
        (["definitions", "validate", "-w", "workspace.yaml"], REPO),
        (["definitions", "validate", "-m", "shop.definitions"], PROJECT),
    ):
        done = subprocess.run(
            [dagster, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "All code locations passed validation" in done.stdout + done.stderr


def test_a_table_declared_in_yaml_takes_its_sensors_interval_from_its_component(shop):
    from shop.definitions import defs as location  # type: ignore[import-not-found]

    intervals = {
        s.name: s.minimum_interval_seconds for s in location().get_repository_def().sensor_defs
    }
    assert intervals["clicks__batch_driver"] == intervals["clicks__refresh_after_swap"] == 30
    # The tables declared in Python keep the default.
    assert intervals["events__batch_driver"] == intervals["stores__batch_driver"] == 15
    # Its budget too comes from its YAML.
    from backfill_assets import Budget
    from backfill_assets.service.tables import backfill_tables

    tables = backfill_tables(location())
    assert tables["clicks"].backfill_budget == Budget(max_rows=1_000_000)
    assert tables["events"].backfill_budget is None


@pytest.mark.parametrize("table", ["events", "stores", "clicks"])
def test_a_backfill_of_any_of_the_projects_tables_writes_nothing_and_says_how_to_plan(
    shop, tmp_path, monkeypatch, table
):
    """The front door holds for every backfillable table of a user's project: a run of the
    table's asset over past days (what the UI's Materialize... over a range launches) is
    refused before writing; a table that declares a backfill window gets a proposed plan."""
    from shop.definitions import defs as location  # type: ignore[import-not-found]

    from backfill_assets.constants import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
    from backfill_assets.service.plans import plan_statuses
    from backfill_assets.service.runs import run_job
    from backfill_assets.service.tables import backfill_tables
    from tests.helpers import failure_description

    warehouse = tmp_path / "shop.duckdb"
    monkeypatch.setenv(WAREHOUSE_ENV, str(warehouse))
    wh = seed(shop, warehouse)
    defs = location()
    declared = backfill_tables(defs)[table]
    history = (HISTORY[0], HISTORY[1] + dt.timedelta(days=1))
    if table == "clicks":  # declared in YAML: its history by its own build, as plain SQL
        cols = ", ".join(declared.spec.column_names)
        ddl = ", ".join(f"{c.name} {c.sql_type}" for c in declared.spec.columns)
        con = duckdb.connect(str(warehouse))
        con.execute(f"CREATE TABLE {table} ({ddl})")
        con.execute(
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM ({declared.build})",
            {"start": history[0], "end": history[1]},
        )
        con.close()
    before = wh.checksums(declared.spec, *history)
    assert before
    (tmp_path / "home").mkdir()
    span = {PARTITION_RANGE_START_TAG: START.isoformat(), PARTITION_RANGE_END_TAG: END.isoformat()}
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        adopt_in(instance, wh, backfill_tables(defs), *(["clicks"] if table == "clicks" else []))
        result = run_job(
            defs, "", instance, asset_selection=[dg.AssetKey(table)], tags=span,
            raise_on_error=False,
        )  # fmt: skip
        assert not result.success
        why = failure_description(result)
        refused = f"Refused: this run of __ASSET_JOB would write the live table {table}"
        assert why.startswith(refused)
        assert f"only its daily path ({declared.daily_job})" in why and "Nothing was written" in why
        statuses = plan_statuses(instance, table).items()
        proposed = [pid for pid, (_, status) in statuses if status == "proposed"]
        if declared.backfill_window is None:
            assert proposed == []
            assert f"No plan was proposed ({table} declares no backfill_window)" in why
            assert f"backfill-assets plan {table} --start {START} --end {END}" in why
        else:
            assert len(proposed) == 1
            assert f"Plan {proposed[0]} (proposed) covers that range instead" in why
    assert wh.checksums(declared.spec, *history) == before
