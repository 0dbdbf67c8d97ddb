"""What the CLI shows an operator: `--format json` shapes (checked against the shipped JSON
Schemas), every exit code, the partition x gate grid, and live progress while a batch runs.

Everything runs against a real instance and a real DuckDB file; the progress test runs the
installed console script as a child process and reads its stderr as it is written.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import jsonschema
import pytest

from backfill_assets.cli import main
from backfill_assets.cli.output import MODELS, schema_of, shipped_schema
from backfill_assets.constants import PLAN_ID_TAG
from tests.conftest import NOW, make_plan

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def at_noon(monkeypatch):
    from backfill_assets.cli import common

    monkeypatch.setattr(common, "_now", lambda: NOW)


def _json(capsys, name: str) -> dict:
    out = capsys.readouterr().out
    doc = json.loads(out)
    jsonschema.validate(doc, shipped_schema(name))
    return doc


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_shipped_schemas_are_the_models_schemas(name):
    """A shape change must be deliberate: regenerate with `python -m backfill_assets.cli.output`
    (and bump format_version when a field changes meaning or goes away)."""
    assert shipped_schema(name) == json.loads(json.dumps(schema_of(name), sort_keys=True))


@pytest.mark.slow
def test_every_command_that_reports_state_prints_json_of_its_documented_shape(
    defs, instance, history, at_noon, capsys
):
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-18")
    assert main(["run", plan.plan_id, "--format", "json", "--batches", "1"]) == 0
    partial = _json(capsys, "run")
    assert partial["outcome"] == "partial" and partial["batches_total"] == 2
    assert [b["status"] for b in partial["batches"]] == ["passed"]
    assert partial["next"] == f"backfill-assets run {plan.plan_id}"

    assert main(["run", plan.plan_id, "--format", "json"]) == 0
    done = _json(capsys, "run")
    assert done["outcome"] == "done"
    assert [b["status"] for b in done["batches"]] == ["skipped", "passed"]
    assert done["batches"][1]["run_id"] and done["batches"][1]["seconds"] > 0

    assert main(["status", plan.plan_id, "--format", "json"]) == 0
    status = _json(capsys, "status")
    assert status["batches_passed"] == 2 and not status["halted"]
    assert status["gates"] == ["row_count_gate", "sample_gate", "invariants_gate", "diff_gate"]
    assert len(status["grid"]) == 14
    assert {s for row in status["grid"].values() for s in row.values()} == {"passed"}

    assert main(["swap", plan.plan_id, "--no-refresh", "--format", "json"]) == 0
    swap = _json(capsys, "swap")
    assert (swap["command"], swap["partitions"], swap["refresh"]) == ("swap", 14, "skipped")
    assert "fct_daily_revenue" in swap["stale"]
    # Dagster's own row metadata, per partition, on the shadow's and the target's events.
    rows = dict(
        history.query(
            "select cast(order_date as varchar), count(*) from orders_daily "
            "where order_date between '2026-01-05' and '2026-01-18' group by 1"
        )
    )
    for key in ("orders_daily__shadow", "orders_daily"):
        mats = instance.fetch_materializations(dg.AssetKey(key), limit=14).records
        assert {
            m.partition_key: m.asset_materialization.metadata["dagster/partition_row_count"].value
            for m in mats
            if m.asset_materialization is not None
        } == rows
    # And the whole table's rows after the swap, as Dagster's dagster/row_count.
    total = history.query("select count(*) from orders_daily")[0][0]
    latest = instance.fetch_materializations(dg.AssetKey("orders_daily"), limit=1).records[0]
    assert latest.asset_materialization is not None
    assert latest.asset_materialization.metadata["dagster/row_count"].value == total

    assert main(["rollback", plan.plan_id, "--no-refresh", "--format", "json"]) == 0
    assert _json(capsys, "swap")["command"] == "rollback"

    assert main(["list", "--format", "json"]) == 0
    listed = _json(capsys, "list")
    assert listed == [{"plan_id": plan.plan_id, "target": "orders_daily", "status": "rolled_back"}]


def test_exit_1_a_gate_failed_the_plan_is_halted_and_json_says_so(
    defs, instance, history, at_noon, capsys
):
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-18")
    bad_day = dt.date(2026, 1, 13)
    history.execute(
        "update raw_orders set amount = amount + 1 where order_date = $d and order_id % 10 = 0",
        {"d": bad_day},
    )
    assert main(["run", plan.plan_id, "--format", "json"]) == 1
    out = capsys.readouterr()
    doc = json.loads(out.out)
    jsonschema.validate(doc, shipped_schema("run"))
    assert doc["outcome"] == "halted"
    failed = doc["batches"][-1]
    assert failed["status"] == "failed" and failed["index"] == 2
    assert {(f["partition"], f["gate"]) for f in failed["failures"]} == {
        (bad_day.isoformat(), "sample_gate")
    }
    assert "halted at batch 2" in out.err

    assert main(["status", plan.plan_id]) == 0
    text = capsys.readouterr().out
    # The grid: the passed days on one line each side of the bad day, which has its own.
    assert re.search(r"2026-01-05\.\.2026-01-12 +ok +ok +ok +ok\n", text)
    assert re.search(r"2026-01-13 +ok +FAIL +ok +ok\n", text)
    assert re.search(r"2026-01-14\.\.2026-01-18 +ok +ok +ok +ok\n", text)
    assert main(["status", plan.plan_id, "--format", "json"]) == 0
    grid = _json(capsys, "status")["grid"]
    assert grid[bad_day.isoformat()]["sample_gate"] == "failed"
    assert grid["2026-01-12"]["sample_gate"] == "passed"


def test_exit_2_refused_prints_nothing_on_stdout_even_in_json(defs, instance, history, capsys):
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-11", approve=False)
    assert main(["run", plan.plan_id, "--format", "json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.strip().splitlines()[-1].startswith("refused: ")


def test_exit_2_the_only_rollback_strategy_is_offered_and_others_are_refused(capsys):
    args = ["plan", "orders_daily", "--start", "2026-01-05", "--end", "2026-01-11",
            "--window", "02:00-06:00", "--rollback", "snapshot"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("refused: ") and "choose from 'backup'" in err[0]
    # A value argparse takes for an option is refused the same way, not with a usage dump.
    assert main(["plan", "orders_daily", "--window", "-:"]) == 2
    assert capsys.readouterr().err.startswith("refused: argument --window: expected one")
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_ = " ".join(capsys.readouterr().out.split())
    assert "{backup}" in help_ and "exit codes: 0 done; 1 a gate failed" in help_
    assert "3 swapped (or rolled back) but the downstream refresh failed" in help_


@pytest.mark.slow
def test_a_broken_mart_refuses_the_swap_and_exit_3_when_a_refresh_in_place_fails(
    defs, instance, history_with_marts, at_noon, capsys
):
    wh = history_with_marts
    spec = defs_table(defs).spec
    plan = make_plan(defs, instance, wh, "2026-01-05", "2026-01-11")
    assert main(["run", plan.plan_id]) == 0
    capsys.readouterr()
    # A mart whose columns no longer match its model: dbt's incremental insert fails on it.
    wh.execute("alter table fct_daily_revenue rename column orders to orders_renamed_by_hand")
    # Built in shadow first, it fails there: the swap is refused and nothing is published.
    assert main(["swap", plan.plan_id, "--format", "json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "downstream dbt models failed in shadow" in out.err
    assert wh.swap_state(spec, plan.plan_id) is None
    # --no-refresh publishes the target alone; the rollback then refreshes the marts in place
    # (the swap published none), which fails: exit 3, rolled back, the marts flagged stale.
    assert main(["swap", plan.plan_id, "--no-refresh", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["refresh"] == "skipped" and "fct_daily_revenue" in doc["stale"]
    assert main(["rollback", plan.plan_id, "--format", "json"]) == 3
    out = capsys.readouterr()
    doc = json.loads(out.out)
    jsonschema.validate(doc, shipped_schema("swap"))
    assert doc["refresh"] == "failed" and doc["partitions"] == 7
    assert "fct_daily_revenue" in doc["stale"]
    assert any(not r["ok"] for r in doc["refreshed"])
    assert "the downstream refresh failed" in out.err
    assert wh.swap_state(spec, plan.plan_id) == "rolled_back"


def defs_table(defs):
    from backfill_assets.service.tables import backfill_tables

    return backfill_tables(defs)["orders_daily"]


def test_the_terminal_shows_a_live_bar_with_partitions_elapsed_and_eta(
    defs, instance, history, monkeypatch
):
    """The rich display, driven by a real plan's real events, on a (forced) terminal."""
    from backfill_assets.cli.progress import PlanProgress
    from backfill_assets.service.executor import execute_plan
    from backfill_assets.service.tables import backfill_tables

    monkeypatch.setenv("NO_COLOR", "1")
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-18")
    screen = io.StringIO()
    with PlanProgress(plan, screen, tty=True) as shown:
        execute_plan(
            defs, instance, history, backfill_tables(defs), plan.plan_id,
            clock=lambda: NOW, progress=shown, log_level="ERROR",
        )  # fmt: skip
    text = screen.getvalue()
    assert "partitions 14/14" in text and "ETA" in text and "0:00:" in text
    assert "] 2/2 batch 2 2026-01-12..2026-01-18: passed" in text
    assert "\x1b[3" not in text  # NO_COLOR: no colour codes (cursor moves only)


@pytest.mark.slow
def test_a_non_tty_run_prints_progress_lines_while_the_batch_runs(
    defs, instance, history, tmp_path
):
    """`run` in a pipe (as in CI): one plain line per event, each read by this test before the
    batch's run ended, not all at the end."""
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-11")
    exe = Path(sys.executable).with_name("backfill-assets")
    env = {**os.environ, "NO_COLOR": "1"}
    child = subprocess.Popen(
        [str(exe), "run", plan.plan_id, "--ignore-window"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            lines.append((time.time(), line.rstrip("\n")))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        child.wait(timeout=180)
    finally:
        child.kill()
        reader.join(timeout=10)
    assert child.stdout is not None
    out = child.stdout.read()
    assert child.returncode == 0, "\n".join(x for _, x in lines)
    assert "Next: backfill-assets swap" in out
    text = [x for _, x in lines]
    assert not any("\x1b" in x for x in text)
    started = next(
        i for i, x in enumerate(text) if "batch 1/1 2026-01-05..2026-01-11: started" in x
    )
    checked = [i for i, x in enumerate(text) if "gates passed; partitions" in x]
    written = [i for i, x in enumerate(text) if re.search(r"written to the shadow, \d+ rows", x)]
    finished = next(i for i, x in enumerate(text) if "] 1/1 batch 1" in x)
    assert len(checked) == 7 and len(written) == 7
    assert started < min(written) <= max(checked) < finished
    assert "partitions 7/7" in text[max(checked)] and "ETA" in text[started]
    run = instance.get_run_records(dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}))
    ended = run[0].end_time
    assert ended is not None
    # The line that the batch started reached this test while the batch's run was going.
    assert lines[started][0] < ended


def test_the_plan_records_its_batches_as_a_dagster_table(defs, instance, history):
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-18")
    records = instance.fetch_materializations(dg.AssetKey("backfill_plans"), limit=1).records
    mat = records[0].asset_materialization
    assert mat is not None and mat.partition == plan.plan_id
    table = mat.metadata["batches_table"]
    assert isinstance(table, dg.TableMetadataValue)
    assert [c.name for c in table.schema.columns][:4] == ["batch", "start", "end", "partitions"]
    rows = [r.data for r in table.records]
    assert [(r["batch"], r["start"], r["end"], r["partitions"]) for r in rows] == [
        (b.index, b.start.isoformat(), b.end.isoformat(), len(b.partitions)) for b in plan.batches
    ]
    assert all(
        r["gates"] == "row_count_gate, sample_gate, invariants_gate, diff_gate" for r in rows
    )
