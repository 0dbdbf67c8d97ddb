"""The framework as a package a Dagster user adopts: its public API, its one factory, its layers,
and an install that does not need this repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import dagster as dg
import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLIC = (
    "BackfillableTable",
    "TableSpec",
    "Column",
    "SourceRef",
    "Criteria",
    "RowCountCriterion",
    "SampleCriterion",
    "ChangedColumn",
    "Invariant",
    "backfill_definitions",
    "BackfillableTableComponent",
    "BackfillControlComponent",
)


def test_the_public_api_is_importable_from_the_package():
    import backfill_assets

    for name in PUBLIC:
        assert getattr(backfill_assets, name) is not None, name
        assert name in backfill_assets.__all__
    with pytest.raises(AttributeError):
        backfill_assets.NotAThing  # type: ignore[attr-defined]  # noqa: B018


def test_the_lean_dbt_resource_is_imported_from_its_module_not_from_the_package():
    # It overrides private methods of dagster-dbt: a dagster-dbt upgrade may break it, so the
    # package does not promise it as public API.
    import backfill_assets
    from backfill_assets.defs.dbt_resource import LeanDbtCliResource

    assert LeanDbtCliResource.__module__ == "backfill_assets.defs.dbt_resource"
    assert "LeanDbtCliResource" not in backfill_assets.__all__
    with pytest.raises(AttributeError):
        backfill_assets.LeanDbtCliResource  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_package_does_not_import_dagster():
    # The command line starts fast because the public names load lazily.
    code = "import sys, backfill_assets.lib.dates; print('dagster' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_calling_the_factory_twice_gives_definitions_that_merge_cleanly(defs):
    from backfill_assets import backfill_definitions
    from backfill_assets.example.declaration import ORDERS

    first, second = backfill_definitions([ORDERS]), backfill_definitions([ORDERS])
    merged = dg.Definitions.merge(first, second)
    keys = {k.to_user_string() for k in merged.resolve_asset_graph().get_all_asset_keys()}
    assert {"orders_daily", "orders_daily__shadow", "backfill_plans"} <= keys
    assert {j.name for j in merged.jobs or []} >= {
        "orders_daily__shadow_job",
        "plan_backfill_job",
    }
    merged.get_repository_def()  # loads: no conflicting definitions


def test_the_factory_refuses_what_is_not_a_table():
    from backfill_assets import InvalidInput, backfill_definitions

    with pytest.raises(InvalidInput, match="takes BackfillableTable declarations"):
        backfill_definitions(["orders_daily"])  # type: ignore[list-item]


def _sensor_intervals(defs: dg.Definitions) -> dict[str, int | None]:
    repo = defs.get_repository_def()
    return {
        s.name: s.minimum_interval_seconds
        for s in repo.sensor_defs
        if s.name in ("orders_daily__batch_driver", "orders_daily__refresh_after_swap")
    }


def test_the_sensors_interval_comes_from_the_factory_or_the_environment_and_bad_ones_are_refused(
    monkeypatch: pytest.MonkeyPatch,
):
    from backfill_assets import InvalidInput, backfill_definitions
    from backfill_assets.defs.factory import SENSOR_INTERVAL_ENV
    from backfill_assets.example.declaration import ORDERS

    monkeypatch.delenv(SENSOR_INTERVAL_ENV, raising=False)
    default = _sensor_intervals(backfill_definitions([ORDERS]))
    assert default == {"orders_daily__batch_driver": 15, "orders_daily__refresh_after_swap": 15}
    given = _sensor_intervals(backfill_definitions([ORDERS], sensor_interval_s=7))
    assert set(given.values()) == {7}
    monkeypatch.setenv(SENSOR_INTERVAL_ENV, " 9 ")
    assert set(_sensor_intervals(backfill_definitions([ORDERS])).values()) == {9}
    # The argument wins over the environment.
    given = _sensor_intervals(backfill_definitions([ORDERS], sensor_interval_s=60))
    assert set(given.values()) == {60}

    for text in ("soon", "7.5", "0", "4", "3601", "-15"):
        monkeypatch.setenv(SENSOR_INTERVAL_ENV, text)
        with pytest.raises(InvalidInput, match=rf"{SENSOR_INTERVAL_ENV}='{text}' must be a whole"):
            backfill_definitions([ORDERS])
    monkeypatch.delenv(SENSOR_INTERVAL_ENV)
    for value in (7.5, True, 4, 3601, "x"):
        with pytest.raises(InvalidInput, match=r"sensor_interval_s=.* from 5 .* to 3600"):
            backfill_definitions([ORDERS], sensor_interval_s=value)  # type: ignore[arg-type]


def test_a_daily_job_that_does_not_exist_or_write_the_table_is_refused(defs):
    from dataclasses import replace

    from backfill_assets.errors import BackfillError
    from backfill_assets.example.declaration import ORDERS
    from backfill_assets.service.tables import refuse_bad_daily_jobs

    refuse_bad_daily_jobs(defs, {ORDERS.key: ORDERS})
    # A typo would let batches run beside the real daily run: the guards find it by name.
    typo = replace(ORDERS, daily_job="orders_daly_job")
    with pytest.raises(BackfillError, match="jobs that do: \\['orders_daily_job'\\]"):
        refuse_bad_daily_jobs(defs, {ORDERS.key: typo})
    marts = replace(ORDERS, daily_job="orders_marts_job")
    with pytest.raises(BackfillError, match="does not materialize orders_daily"):
        refuse_bad_daily_jobs(defs, {ORDERS.key: marts})


def _contracts_config(tmp_path: Path) -> Path:
    """The project's import-linter contracts, as an ini file lint-imports reads."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = ["[importlinter]", f"root_package = {contracts['root_package']}", ""]
    for i, c in enumerate(contracts["contracts"]):
        lines.append(f"[importlinter:contract:{i}]")
        for key, value in c.items():
            if isinstance(value, list):
                lines.append(f"{key} =")
                lines += [f"    {v}" for v in value]
            else:
                lines.append(f"{key} = {value}")
        lines.append("")
    path = tmp_path / ".importlinter"
    path.write_text("\n".join(lines))
    return path


def _lint_imports(tree: Path, config: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(exe), "--config", str(config), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_fail_when_a_framework_module_imports_the_example(tmp_path):
    config = _contracts_config(tmp_path)
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "backfill_assets", tree / "backfill_assets")
    kept = _lint_imports(tree, config)
    assert kept.returncode == 0, kept.stdout[-2000:]
    # Plant the forbidden import in a framework module: the contracts must catch it.
    dates = tree / "backfill_assets" / "lib" / "dates.py"
    dates.write_text(dates.read_text() + "\nimport backfill_assets.example.orders  # planted\n")
    broken = _lint_imports(tree, config)
    assert broken.returncode != 0
    assert "The framework never imports the example BROKEN" in broken.stdout
    assert "backfill_assets.lib.dates -> backfill_assets.example.orders" in broken.stdout


def test_the_import_contracts_fail_when_a_framework_module_imports_the_test_support(tmp_path):
    # backfill_assets.testing ships in the wheel for the demo; the framework must not use it.
    config = _contracts_config(tmp_path)
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "backfill_assets", tree / "backfill_assets")
    lease = tree / "backfill_assets" / "service" / "lease.py"
    lease.write_text(lease.read_text() + "\nimport backfill_assets.testing.throwaway_postgres\n")
    broken = _lint_imports(tree, config)
    assert broken.returncode != 0
    assert "The framework never imports the test support BROKEN" in broken.stdout
    assert "backfill_assets.service.lease -> backfill_assets.testing" in broken.stdout


@pytest.mark.slow
def test_a_wheel_installs_and_runs_without_this_repository(tmp_path):
    dist, target = tmp_path / "dist", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("backfill_assets-*.whl")
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    # From another folder, with the installed copy first on the path: the plan contract ships
    # with it, and the example finds its dbt project from configuration, not from its own path.
    code = (
        "import backfill_assets, backfill_assets.lib.planning.plan as p\n"
        "from backfill_assets.example.definitions import example_definitions\n"
        f"assert backfill_assets.__file__.startswith({str(target)!r}), backfill_assets.__file__\n"
        "assert p.shipped_plan_schema()['title'] == 'BackfillPlan'\n"
        "defs = example_definitions()\n"
        "print(sorted(backfill_assets.backfill_tables(defs)))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(target),
        "BACKFILL_ASSETS_DBT_PROJECT": str(REPO / "dbt_project"),
        "PYTHONWARNINGS": "ignore",
    }
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "['orders_daily']"


def test_the_plan_contract_shipped_with_the_package_is_the_plans_own_schema():
    from backfill_assets.lib.planning.plan import plan_json_schema, shipped_plan_schema

    # Regenerate with: python -c "import json; from backfill_assets.lib.planning.plan import
    # plan_json_schema as s; print(json.dumps(s(), indent=2, sort_keys=True))"
    assert shipped_plan_schema() == plan_json_schema()


def test_the_plan_and_approve_jobs_refuse_a_daily_job_the_code_location_does_not_have(
    defs, instance, history
):
    # The Launchpad's jobs check the daily job as the CLI's commands do: the guards find the
    # daily runs by that name, so a typo would let batches run beside them.
    from dataclasses import replace

    from backfill_assets import backfill_definitions
    from backfill_assets.constants import APPROVE_JOB, APPROVE_OP, PLAN_JOB, PLAN_OP
    from backfill_assets.example.declaration import ORDERS
    from backfill_assets.lib.states import PlanStatus
    from backfill_assets.service.approval import propose_plan
    from backfill_assets.service.plans import load_plan, plan_statuses
    from backfill_assets.service.runs import run_job
    from tests.conftest import make_plan

    typo = dg.Definitions.merge(
        backfill_definitions([replace(ORDERS, daily_job="orders_daly_job")]),
        dg.Definitions(jobs=[dg.define_asset_job("orders_daily_job", selection=[ORDERS.key])]),
    )
    why = "names 'orders_daly_job' as its daily job, but the code location has no such job"
    plan_config = {"target": ORDERS.key, "start": "2026-01-05", "end": "2026-01-11"}
    planned = run_job(
        typo,
        PLAN_JOB,
        instance,
        run_config={
            "ops": {
                PLAN_OP: {"config": {**plan_config, "window": "02:00-23:00", "rollback": "backup"}}
            }
        },
        raise_on_error=False,
    )
    assert not planned.success and why in _errors(planned)
    assert plan_statuses(instance) == {}  # nothing proposed

    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-11", approve=False)
    propose_plan(instance, plan)
    approved = run_job(
        typo,
        APPROVE_JOB,
        instance,
        run_config={"ops": {APPROVE_OP: {"config": {"plan_id": plan.plan_id}}}},
        raise_on_error=False,
    )
    assert not approved.success and why in _errors(approved)
    assert load_plan(instance, plan.plan_id, allow_proposed=True)[1] == PlanStatus.PROPOSED
    assert history.active_plan(ORDERS.key) is None  # the table is not held


def _errors(result: dg.ExecuteInProcessResult) -> str:
    """Every message in the error chains of a run's failed steps (what the UI shows)."""
    out = []
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            err = event.event_specific_data.error  # type: ignore[union-attr]
            while err is not None:
                out.append(err.message)
                err = err.cause
    return "\n".join(out)
