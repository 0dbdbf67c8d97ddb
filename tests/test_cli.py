"""The command line: planning (with every refusal), approving, running, status, swap, rollback.

The CLI runs in this process (`main([...])`) against a real instance (DAGSTER_HOME set by the
`instance` fixture) and a real DuckDB file; one test runs the installed console script.
"""

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.cli import main
from tests.contract import problems

BASE = ["plan", "orders_daily", "--start", "2026-01-01", "--end", "2026-03-31"]
GOOD = [*BASE, "--window", "02:00-06:00", "--timezone", "UTC", "--rollback", "backup"]


def _without(args: list[str], flag: str) -> list[str]:
    i = args.index(flag)
    return args[:i] + args[i + 2 :]


def _with(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


@pytest.fixture
def cli_env(instance, warehouse_path):
    return instance


def _state(instance, warehouse_path: Path) -> tuple[int, bytes | None]:
    data = warehouse_path.read_bytes() if warehouse_path.exists() else None
    return len(instance.get_runs()), data


def test_a_90_day_plan_is_batched_weekly_around_the_daily_run_and_holds_the_contract(
    cli_env, tmp_path, capsys
):
    out = tmp_path / "plan.json"
    assert main([*GOOD, "--out", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert len(plan["partitions"]) == 90
    assert "why" not in plan  # only a plan of what is stale says why
    assert len(plan["batches"]) == 14  # ISO weeks touched by 2026-01-01..03-31
    assert plan["shadow"] == "orders_daily__shadow" != plan["target"]
    assert all("row_count_gate" in b["gates"] for b in plan["batches"])
    assert plan["rollback"]["strategy"] == "backup"
    assert plan["window"] == {"start": "02:00", "end": "06:00", "timezone": "UTC"}
    assert plan["contention"]["daily_job"] == "orders_daily_job"
    assert problems(plan) == []


def test_impact_lists_every_dbt_model_downstream_with_the_right_weekly_partitions(
    cli_env, tmp_path
):
    out = tmp_path / "plan.json"
    assert main([*GOOD, "--out", str(out)]) == 0
    impact = {i["asset_key"]: i["partitions"] for i in json.loads(out.read_text())["impact"]}
    assert set(impact) == {"stg_orders", "fct_daily_revenue", "fct_weekly_revenue", "dim_customers"}
    assert impact["stg_orders"] == "all" and impact["dim_customers"] == "all"
    assert len(impact["fct_daily_revenue"]) == 90
    weeks = impact["fct_weekly_revenue"]
    assert weeks[0] == "2025-12-29" and weeks[-1] == "2026-03-30" and len(weeks) == 14
    assert all(dt.date.fromisoformat(w).weekday() == 0 for w in weeks)


def test_markdown_plan_has_the_four_steps_batches_and_a_timeline(cli_env, capsys):
    assert main([*GOOD, "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    for needle in (
        "Criteria",
        "impact",
        "Cost",
        "Batches",
        "imeline",
        "fct_weekly_revenue",
        "backfill-assets rollback",
    ):
        assert needle in md


REFUSALS = {
    "no_rollback": (_without(GOOD, "--rollback"), "rollback"),
    "no_window": (_without(GOOD, "--window"), "window"),
    "window_overlaps_daily": (_with(GOOD, "--window", "00:45-03:00"), "daily"),
    "zero_length_window": (_with(GOOD, "--window", "03:00-03:00"), "zero"),
    "malformed_window": (_with(GOOD, "--window", "3am-6am"), "HH:MM"),
    "end_before_start": (_with(GOOD, "--end", "2025-12-01"), "before"),
    "impossible_date": (_with(GOOD, "--end", "2026-02-30"), "not a real calendar date"),
    "malformed_date": (_with(GOOD, "--start", "01/01/2026"), "YYYY-MM-DD"),
    "outside_partitions": (_with(GOOD, "--start", "2024-06-01"), "partition"),
    "not_landed": (_with(GOOD, "--end", "2031-01-01"), "landed"),
    "unknown_timezone": (_with(GOOD, "--timezone", "Mars/Olympus"), "timezone"),
}


def _with_target(args, old, new):
    return [new if a == old else a for a in args]


REFUSALS["unknown_target"] = (_with_target(GOOD, "orders_daily", "orders_weekly"), "unknown")
REFUSALS["not_backfillable"] = (
    _with_target(GOOD, "orders_daily", "raw_orders"),
    "not backfillable",
)


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_every_refusal_exits_2_with_one_clear_line_and_writes_nothing(
    cli_env, warehouse_path, tmp_path, capsys, case
):
    args, needle = REFUSALS[case]
    out = tmp_path / "plan.json"
    before = _state(cli_env, warehouse_path)
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("refused: ")
    assert needle.lower() in err[-1].lower()
    assert not out.exists()
    assert _state(cli_env, warehouse_path) == before


def test_the_console_script_exits_2_on_a_refusal(tmp_path, warehouse_path):
    import os

    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    exe = Path(sys.executable).with_name("backfill-assets")
    done = subprocess.run(
        [str(exe), *_without(GOOD, "--rollback")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("refused: ")


def test_a_criteria_file_overrides_the_declared_defaults_and_bad_ones_are_refused(
    cli_env, tmp_path, capsys
):
    crit = tmp_path / "criteria.yml"
    crit.write_text("sample:\n  size: 50\nrow_count:\n  tolerance_pct: 1.5\n")
    out = tmp_path / "plan.json"
    assert main([*GOOD, "--criteria", str(crit), "--out", str(out)]) == 0
    criteria = json.loads(out.read_text())["criteria"]
    assert criteria["sample"]["size"] == 50
    assert criteria["row_count"]["tolerance_pct"] == 1.5
    crit.write_text('invariants:\n  - name: evil\n    predicate: "1=1; drop table orders_daily"\n')
    assert main([*GOOD, "--criteria", str(crit), "--out", str(tmp_path / "x.json")]) == 2
    assert "refused" in capsys.readouterr().err


@pytest.mark.slow
def test_plan_approve_run_status_swap_rollback_through_the_cli(
    defs, instance, history, tmp_path, capsys, monkeypatch
):
    from backfill_assets.cli import common

    # Inside the plan's window whatever the real clock says.
    monkeypatch.setattr(common, "_now", lambda: dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC))
    out = tmp_path / "plan.json"
    args = [
        "plan",
        "orders_daily",
        "--start",
        "2026-01-05",
        "--end",
        "2026-01-18",
        "--window",
        "02:00-23:00",
        "--rollback",
        "backup",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    plan_id = json.loads(out.read_text())["plan_id"]
    assert main(["run", plan_id]) == 2  # not approved yet: a plan file alone launches nothing
    assert "not approved" in capsys.readouterr().err
    assert main(["approve", str(out)]) == 0
    assert main(["run", str(out)]) == 0
    err = capsys.readouterr().err
    assert "batch 2 2026-01-12..2026-01-18: passed" in err and "[####" in err
    assert main(["status", plan_id]) == 0
    assert "batches passed: 2/2" in capsys.readouterr().out
    assert main(["swap", plan_id, "--no-refresh"]) == 0
    assert "NOT refreshed" in capsys.readouterr().out
    assert main(["rollback", plan_id, "--no-refresh"]) == 0
    assert main(["swap", plan_id]) == 2  # rolled back: this plan cannot be swapped again
    assert "rolled_back" in capsys.readouterr().err


def test_the_launchpad_planning_job_records_a_proposed_plan_with_markdown(
    defs, instance, warehouse_path
):
    from backfill_assets.service.plans import latest_plan_record
    from backfill_assets.service.runs import run_job

    config = {
        "target": "orders_daily",
        "start": "2026-01-01",
        "end": "2026-01-31",
        "window": "02:00-06:00",
        "rollback": "backup",
    }
    result = run_job(
        defs,
        "plan_backfill_job",
        instance,
        run_config={"ops": {"plan_backfill_op": {"config": config}}},
    )
    plan_id = result.output_for_node("plan_backfill_op")
    record = latest_plan_record(instance, plan_id)
    assert record is not None
    assert record["status"] == "proposed"
    assert "Batches" in record["plan_markdown"]
    approved = run_job(
        defs,
        "approve_backfill_job",
        instance,
        run_config={"ops": {"approve_backfill_op": {"config": {"plan_id": plan_id}}}},
    )
    assert approved.success
    assert latest_plan_record(instance, plan_id)["status"] == "approved"  # type: ignore[index]
    mats = instance.fetch_materializations(dg.AssetKey("backfill_plans"), limit=10).records
    assert {m.partition_key for m in mats} == {plan_id}


def test_start_hands_a_plan_to_the_daemon_and_run_refuses_to_take_turns_until_paused(
    defs, instance, history, capsys, monkeypatch, tmp_path
):
    from backfill_assets.cli import common
    from tests.conftest import NOW, make_plan

    monkeypatch.setattr(common, "_now", lambda: NOW)
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-11")
    # pause and list work on the instance alone: they do not import the code location (seconds,
    # with dbt), so a location that cannot even be found does not stop them. start does: it
    # hands the plan to the daemon, so it checks the location's daily jobs first.
    nowhere = ["-f", str(tmp_path / "no_such_definitions.py")]
    assert main([*nowhere, "start", plan.plan_id]) == 2
    assert "no_such_definitions.py" in capsys.readouterr().err
    assert main(["start", plan.plan_id]) == 0
    assert "the batch driver launches its next batch" in capsys.readouterr().out
    assert main([*nowhere, "list"]) == 0
    assert f"{plan.plan_id}  orders_daily" in capsys.readouterr().out
    assert main(["run", plan.plan_id]) == 2
    assert "being driven by the daemon" in capsys.readouterr().err
    assert instance.get_runs() == [] or all(
        "backfill_assets/batch" not in r.tags for r in instance.get_runs()
    )
    assert main([*nowhere, "pause", plan.plan_id]) == 0
    assert main(["run", plan.plan_id]) == 0


@pytest.mark.backends("postgres")
@pytest.mark.slow
def test_run_holds_its_instance_connections_instead_of_a_server_process_per_event(
    defs, instance, history, capsys, monkeypatch
):
    """Dagster's PostgreSQL storage opens a server connection (a server process) for each read
    and write unless told to hold them, as dagster-webserver does. `run` stores about 54 events
    per batch: it holds one connection per storage for the command instead."""
    import time

    import psycopg

    from backfill_assets.cli import common
    from tests.conftest import NOW, make_plan

    monkeypatch.setattr(common, "_now", lambda: NOW)
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-11")  # one batch of 7 days
    url = instance.event_log_storage.postgres_url.replace("+psycopg2", "")  # type: ignore[attr-defined]
    database = url.rsplit("/", 1)[1]

    def sessions() -> int:
        time.sleep(1.5)  # a server process reports its session's statistics as it ends
        with psycopg.connect(url, autocommit=True) as con:
            row = con.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = %s", (database,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    before = sessions()
    assert main(["run", plan.plan_id]) == 0
    assert "batch 1 2026-01-05..2026-01-11: passed" in capsys.readouterr().err
    opened = sessions() - before - 1  # the count's own connection
    # Holding them, this run opened 17; opening one per read or write, 211 (2026-12-05).
    assert opened <= 40, f"run opened {opened} connections to the instance's database"
