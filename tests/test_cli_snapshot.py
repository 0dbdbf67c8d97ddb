"""The code location's snapshot: what `plan`, `approve`, `status` and the other plan commands read
instead of importing the location again (backfill_assets/location/snapshot.py).

The commands run as an operator runs them: a fresh interpreter each, from the project's own
directory, on a real instance and DuckDB file. Each says whether it imported the location (its
definitions module is in `sys.modules`) or read the snapshot. The shop project is copied into
`tmp_path`, so that a test may edit it as its author would.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.lib.planning.impact import downstream_impact
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
from backfill_assets.location import encoding, snapshot
from backfill_assets.location.view import LocationView, view_of
from tests.test_adoption import PROJECT, REPO, seed

# The console script's own entry point, then whether the location's module was imported. The
# commands' clock is fixed: two plans made a minute apart differ in their first batch's slot
# (the next minute inside the window), and the tests compare the plans of two commands.
PROBE = (
    "import datetime as dt, sys\n"
    "import backfill_assets.cli.common as common\n"
    "common._now = lambda: dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)\n"
    "from backfill_assets.cli import main\n"
    "rc = main(sys.argv[2:])\n"
    "print('IMPORTED' if sys.argv[1] in sys.modules else 'SNAPSHOT', file=sys.stderr)\n"
    "sys.exit(rc)\n"
)
PLAN = ["--window", "05:00-23:00", "--rollback", "backup"]


def snapshots(project: Path) -> list[Path]:
    """The snapshot files in the project's DAGSTER_HOME (the default place)."""
    return list((project.parent / "home" / ".backfill_assets" / "locations").glob("location-*"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the shop project, its own DAGSTER_HOME and warehouse beside it."""
    copy = tmp_path / "shop_project"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return copy


def run(project: Path, args: list[str], **env: str) -> tuple[int, str, str]:
    """One command, as the shop's operator runs it; returns (exit code, stdout, how it read
    the location: IMPORTED or SNAPSHOT)."""
    full_env = {
        **os.environ,
        "DAGSTER_HOME": str(project.parent / "home"),
        WAREHOUSE_ENV: str(project.parent / "shop.duckdb"),
        "PYTHONWARNINGS": "ignore",
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "shop.definitions", *args],
        cwd=project,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    how = done.stderr.strip().splitlines()[-1]
    assert how in ("IMPORTED", "SNAPSHOT"), done.stderr[-3000:]
    return done.returncode, done.stdout, how


def imports_sqlglot(project: Path, args: list[str]) -> bool:
    """Whether the command, reading the snapshot, imported sqlglot (about 0.1 s): the
    predicates were validated when the snapshot was written, and nothing else needs it."""
    probe = PROBE.replace(
        "print('IMPORTED' if sys.argv[1] in sys.modules else 'SNAPSHOT', file=sys.stderr)",
        "print('SQLGLOT' if 'sqlglot' in sys.modules else 'NONE', file=sys.stderr)",
    )
    assert probe != PROBE
    done = subprocess.run(
        [sys.executable, "-c", probe, "shop.definitions", *args],
        cwd=project,
        env={
            **os.environ,
            "DAGSTER_HOME": str(project.parent / "home"),
            WAREHOUSE_ENV: str(project.parent / "shop.duckdb"),
            "PYTHONWARNINGS": "ignore",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1] == "SQLGLOT"


def plan_json(project: Path, table: str, **env: str) -> tuple[dict, str]:
    out = project.parent / "plan.json"
    rc, _, how = run(
        project,
        ["plan", table, "--start", "2026-01-05", "--end", "2026-01-18", *PLAN, "--out", str(out)],
        **env,
    )
    assert rc == 0
    plan = json.loads(out.read_text())
    plan.pop("created_at")
    return plan, how


@pytest.mark.slow
def test_the_second_command_reads_the_snapshot_and_plans_exactly_as_the_imported_location(
    project,
):
    first, how = plan_json(project, "events")
    assert how == "IMPORTED"
    files = snapshots(project)
    assert len(files) == 1 and oct(files[0].stat().st_mode & 0o777) == "0o600"
    second, how = plan_json(project, "events")
    assert how == "SNAPSHOT"
    assert second == first
    # The table built by a pandas function plans from the snapshot too (it builds no rows).
    assert plan_json(project, "stores")[1] == "SNAPSHOT"
    # Turned off: every command imports the location.
    off, how = plan_json(project, "events", BACKFILL_ASSETS_LOCATION_CACHE="0")
    assert how == "IMPORTED" and off == first


@pytest.mark.slow
def test_approve_status_and_abandon_read_the_snapshot_against_the_real_warehouse(project, tmp_path):
    sys.path.insert(0, str(PROJECT))
    try:
        import shop.tables as shop
    finally:
        sys.path.remove(str(PROJECT))
    seed(shop, tmp_path / "shop.duckdb")
    # The old pipeline's table is adopted first: a plan for a table not adopted is refused.
    assert run(project, ["adopt", "events"])[0] == 0
    plan_file = tmp_path / "p.json"
    rc, _, _ = run(
        project,
        ["plan", "events", "--start", "2026-01-05", "--end", "2026-01-11", *PLAN, "--out",
         str(plan_file)],
    )  # fmt: skip
    assert rc == 0
    plan_id = json.loads(plan_file.read_text())["plan_id"]
    rc, out, how = run(project, ["approve", str(plan_file)])
    assert (rc, how) == (0, "SNAPSHOT") and "approved" in out
    rc, out, how = run(project, ["status", plan_id, "--format", "json"])
    assert (rc, how) == (0, "SNAPSHOT")
    assert json.loads(out)["status"] == "approved"
    # What the snapshot gives is not checked again: the table's predicates are not parsed.
    assert not imports_sqlglot(project, ["status", plan_id])
    assert not imports_sqlglot(project, ["list"])
    rc, out, how = run(project, ["abandon", plan_id])
    assert (rc, how) == (0, "SNAPSHOT") and "abandoned" in out


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.slow
def test_an_edited_yaml_declaration_is_read_again_not_taken_from_the_snapshot(project):
    plan, _ = plan_json(project, "clicks")
    assert plan["criteria"]["sample"]["size"] == 5
    assert plan_json(project, "clicks")[1] == "SNAPSHOT"
    _edit(project / "shop" / "defs" / "clicks" / "defs.yaml", "size: 5,", "size: 7,")
    plan, how = plan_json(project, "clicks")
    assert how == "IMPORTED" and plan["criteria"]["sample"]["size"] == 7


@pytest.mark.slow
def test_an_edited_module_is_imported_again(project):
    assert plan_json(project, "events")[0]["criteria"]["sample"]["size"] == 50
    _edit(project / "shop" / "tables.py", "size=50,", "size=60,")
    plan, how = plan_json(project, "events")
    assert how == "IMPORTED" and plan["criteria"]["sample"]["size"] == 60


@pytest.mark.slow
def test_a_new_daily_job_typo_is_refused_after_the_edit_not_missed_by_the_snapshot(project):
    assert plan_json(project, "events")[1] == "IMPORTED"
    # The component no longer defines the daily job it names: no job of the location has it.
    _edit(project / "shop" / "defs" / "clicks" / "defs.yaml",
          "daily_job: clicks_daily\n  define_daily_job: true",
          "daily_job: clicks_dialy\n  define_daily_job: false")  # fmt: skip
    rc, _, how = run(project, ["plan", "events", "--start", "2026-01-05", "--end", "2026-01-18",
                               *PLAN])  # fmt: skip
    assert (rc, how) == (2, "IMPORTED")
    # Refused from the snapshot too, until the job exists.
    assert run(project, ["plan", "events", "--start", "2026-01-05", "--end", "2026-01-18",
                         *PLAN])[::2] == (2, "SNAPSHOT")  # fmt: skip


@pytest.mark.parametrize("change", ["environment", "damaged snapshot", "another working directory"])
@pytest.mark.slow
def test_anything_else_the_snapshot_was_built_from_makes_the_command_import_again(project, change):
    first, _ = plan_json(project, "events")
    env: dict[str, str] = {}
    if change == "environment":
        env = {"SHOP_SOMETHING": "1"}
    elif change == "damaged snapshot":
        for f in snapshots(project):
            f.write_text(f.read_text()[:100])
    else:
        project.rename(moved := project.with_name("moved"))
        project = moved
    again, how = plan_json(project, "events", **env)
    assert how == "IMPORTED" and again == first
    assert plan_json(project, "events", **env)[1] == "SNAPSHOT"


@pytest.mark.slow
def test_the_shell_s_own_variables_do_not_count(project):
    plan_json(project, "events")
    assert plan_json(project, "events", OLDPWD="/elsewhere", SHLVL="7")[1] == "SNAPSHOT"


# -- the snapshot's lineage answers as the asset graph does ------------------------------------


def _roundtrip(defs: dg.Definitions) -> LocationView:
    view = view_of(defs)
    return encoding.view_from(json.loads(json.dumps(encoding.describe(view))))


RANGES = [
    (dt.date(2026, 1, 1), dt.date(2026, 1, 1)),
    (dt.date(2026, 1, 5), dt.date(2026, 1, 18)),
    (dt.date(2025, 12, 30), dt.date(2026, 3, 2)),
    (dt.date(2025, 1, 1), dt.date(2025, 1, 9)),
]


def test_the_impact_from_the_snapshot_equals_the_asset_graph_s_for_the_example(defs):
    view = view_of(defs)
    back = _roundtrip(defs)
    assert back.tables == view.tables  # the example's builds are SQL: equal, field by field
    assert back.daily_job_problems == view.daily_job_problems == []
    assert back.warehouse.url.env_var_name == WAREHOUSE_ENV
    for start, end in RANGES:
        days = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
        expected = downstream_impact(view.graph, "orders_daily", days, ["orders_daily__shadow"])
        assert downstream_impact(back.graph, "orders_daily", days, ["orders_daily__shadow"]) == (
            expected
        )
        assert {i.asset_key for i in expected} >= {"fct_weekly_revenue", "dim_customers"}


def test_the_snapshot_orders_its_assets_parents_first_as_the_asset_graph_does(defs):
    # The snapshot's graph answers the whole AssetGraphLike protocol, the order the downstream
    # refresh sorts its runs by included.
    graph = _roundtrip(defs).graph
    order = graph.toposorted_asset_keys
    real = [k for k in view_of(defs).graph.toposorted_asset_keys if graph.has(k)]
    assert sorted(order) == sorted(real) and len(order) > 1
    seen: set[dg.AssetKey] = set()
    for key in order:
        assert graph.get(key).parent_keys <= seen | {key}
        seen.add(key)


def test_definitions_whose_lineage_cannot_be_written_down_are_not_cached(
    defs, tmp_path, monkeypatch
):
    from backfill_assets.location.loader import LocationSpec

    dynamic = dg.DynamicPartitionsDefinition(name="shipments")

    @dg.asset(partitions_def=dynamic, deps=["orders_daily"])
    def shipments() -> None: ...

    merged = dg.Definitions.merge(defs, dg.Definitions(assets=[shipments]))
    monkeypatch.setenv(snapshot.CACHE_ENV, str(tmp_path / "cache"))
    spec = LocationSpec(module="backfill_assets.example.definitions", working_directory="/x")
    key = snapshot.context_key(spec)
    assert snapshot.store(spec, key, view_of(merged), snapshot.Reads()) is None
    assert snapshot.load(spec) is None
    assert snapshot.store(spec, key, view_of(defs), snapshot.Reads()) is not None
    assert snapshot.load(spec) is not None


def test_the_snapshot_keeps_a_tables_budget():
    """`plan` reads the snapshot: a budget lost there would let a plan go over it."""
    from dataclasses import replace

    from backfill_assets import Budget, backfill_definitions
    from backfill_assets.example.declaration import ORDERS

    budgeted = replace(ORDERS, backfill_budget=Budget(max_seconds=600, max_rows=10_000))
    back = _roundtrip(backfill_definitions([budgeted]))
    assert back.tables[ORDERS.key].backfill_budget == Budget(max_seconds=600, max_rows=10_000)
    assert _roundtrip(backfill_definitions([ORDERS])).tables[ORDERS.key].backfill_budget is None


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this machine")
def test_files_on_a_tmpfs_under_dev_shm_are_fingerprinted_and_devices_are_not():
    # Regression: everything under /dev/ was left out, so a project on /dev/shm (a tmpfs) kept
    # its first snapshot after an edit.
    folder = Path("/dev/shm") / f"backfill_assets-snapshot-{os.getpid()}"
    folder.mkdir()
    try:
        module = folder / "tables.py"
        module.write_text("SIZE = 50\n")
        reads = snapshot.Reads(files={str(module), "/dev/null"}, folders=set())
        seen = snapshot._files_read(reads)
        assert str(module) in seen and "/dev/null" not in seen
        assert snapshot._unchanged(seen)
        module.write_text("SIZE = 600\n")
        assert not snapshot._unchanged(seen)
    finally:
        shutil.rmtree(folder)
