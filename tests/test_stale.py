"""Planning what is stale (`backfill-assets plan --stale`, the planning job's `stale: true`).

A real instance records how each partition of orders_daily was built: the seeded history by code
version 1 (as the buggy daily runs did), a real daily run by the current version 2, the swap by
the version that built the shadow, the rollback by the version it restores. The scan reads it back
from Dagster's materialization history; plans are built by the real planner and checked against
the project's own copy of the plan contract.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.cli import main
from backfill_assets.constants import CODE_VERSION_TAG, ROLE_ROLLBACK
from backfill_assets.errors import InvalidInput
from backfill_assets.example.declaration import DAILY_JOB, ORDERS
from backfill_assets.example.seed import land_days, write_history
from backfill_assets.lib.planning.markdown import render_markdown
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.service.runs import run_job
from backfill_assets.service.stale import find_stale
from tests.conftest import HISTORY_END, HISTORY_START, NOW, make_plan
from tests.contract import problems
from tests.helpers import execute, swap_or_rollback

FIXED = (dt.date(2026, 1, 8), dt.date(2026, 1, 10))  # rebuilt by the fixed logic (v2)
STALE = [(HISTORY_START, dt.date(2026, 1, 7)), (dt.date(2026, 1, 11), HISTORY_END)]
PLAN = ["plan", "orders_daily", "--stale", "--window", "02:00-23:00", "--timezone", "UTC"]
PLAN_ARGS = [*PLAN, "--rollback", "backup"]


def _days(start: dt.date, end: dt.date) -> list[dt.date]:
    return [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]


def _code_versions(instance: dg.DagsterInstance, days: list[dt.date]) -> dict[dt.date, str | None]:
    """The code version on each day's latest materialization of the target, read event by event
    (not through the code under test)."""
    out = {}
    for day in days:
        recs = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(ORDERS.key), asset_partitions=[day.isoformat()]
            ),
            limit=1,
        ).records
        mat = recs[0].asset_materialization if recs else None
        out[day] = (mat.tags or {}).get(CODE_VERSION_TAG) if mat else None
    return out


@pytest.mark.backends("embedded", "postgres")
@pytest.mark.slow
def test_the_scan_finds_the_v1_days_in_ranges_and_the_swap_and_rollback_keep_it_true(
    defs, instance, history
):
    """History by v1, three middle days rebuilt by v2: two stale ranges. After a plan of the
    first range is swapped, only the second is stale; after its rollback, the first is again."""
    write_history(instance, history, *FIXED, logic="2")
    scan = find_stale(instance, ORDERS, now=NOW)
    assert scan.ranges == STALE
    assert set(scan.stale) == {d for r in STALE for d in _days(*r)}
    assert scan.built == len(_days(HISTORY_START, HISTORY_END))
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert set(scan.why(*STALE[0]).values()) == {f"built by code version 1 on {today}"}
    # Never built: every partition of the table before and after the history; none is planned.
    assert HISTORY_START - dt.timedelta(days=1) in scan.never_built
    assert HISTORY_END + dt.timedelta(days=1) in scan.never_built
    assert not set(scan.never_built) & set(scan.stale)
    # A named old version finds the same days; the current one is refused, clearly.
    assert find_stale(instance, ORDERS, now=NOW, built_by="1").ranges == STALE
    assert find_stale(instance, ORDERS, now=NOW, built_by="7").stale == {}
    with pytest.raises(InvalidInput, match="current code version"):
        find_stale(instance, ORDERS, now=NOW, built_by=ORDERS.code_version)

    # The first range, planned, run and swapped: its days now carry the shadow's version.
    start, end = STALE[0]
    plan = make_plan(defs, instance, history, start.isoformat(), end.isoformat())
    assert [r.status for r in execute(defs, instance, history, plan)] == ["passed"] * 2
    assert swap_or_rollback(defs, instance, history, plan.plan_id).success
    assert set(_code_versions(instance, _days(*STALE[0])).values()) == {ORDERS.code_version}
    assert find_stale(instance, ORDERS, now=NOW).ranges == STALE[1:]

    # Rolled back: the rows built by v1 are back, and so is their code version.
    assert swap_or_rollback(defs, instance, history, plan.plan_id, ROLE_ROLLBACK).success
    assert set(_code_versions(instance, _days(*STALE[0])).values()) == {"1"}
    assert find_stale(instance, ORDERS, now=NOW).ranges == STALE


@pytest.mark.slow
def test_a_real_daily_run_records_the_current_version_and_is_not_stale(defs, instance, wh):
    """The daily job's run materializes the target with the table's code version (Dagster
    tags it), so a day the daily run rebuilt after the fix is not stale."""
    yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    before = yesterday - dt.timedelta(days=1)
    land_days(defs, instance, before, yesterday, 50)
    write_history(instance, wh, before, yesterday, logic="1")
    assert run_job(defs, DAILY_JOB, instance, partition_key=yesterday.isoformat()).success
    assert _code_versions(instance, [before, yesterday]) == {before: "1", yesterday: "2"}
    scan = find_stale(instance, ORDERS, now=dt.datetime.now(dt.UTC))
    assert list(scan.stale) == [before]


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow
def test_plan_stale_writes_one_plan_per_range_saying_why_and_nothing_once_it_is_swapped(
    defs, instance, history, tmp_path, capsys
):
    write_history(instance, history, *FIXED, logic="2")
    out = tmp_path / "stale.json"
    capsys.readouterr()
    assert main([*PLAN_ARGS, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "orders_daily: 18 of 21 built partitions built by a code version other than 2" in err
    assert "2026-01-01..2026-01-07 (7 days, code version 1)" in err
    assert "never built, not planned" in err
    assert "2 plans, one per stale range" in err
    assert "approve the next once the one before it is swapped and its backup released" in err
    files = [tmp_path / "stale-1.json", tmp_path / "stale-2.json"]
    assert not out.exists() and all(f.exists() for f in files)
    plans = [_read(f) for f in files]
    for data, (start, end) in zip(plans, STALE, strict=True):
        assert problems(data) == []
        assert (data["start"], data["end"]) == (start.isoformat(), end.isoformat())
        assert data["partitions"] == [d.isoformat() for d in _days(start, end)]
        assert sorted(data["why"]) == data["partitions"]
        assert all(w.startswith("built by code version 1 on ") for w in data["why"].values())
    markdown = render_markdown(BackfillPlan.from_dict(plans[0]))
    assert "## Why these partitions (stale)" in markdown
    assert "- 2026-01-01..2026-01-07: built by code version 1 on " in markdown

    # The reasons are part of the plan: edited or dropped, approve refuses the file.
    for edit in ("reworded", "dropped"):
        edited = dict(plans[0])
        if edit == "dropped":
            del edited["why"]
        else:
            edited["why"] = {**edited["why"], "2026-01-01": "built by code version 2 on 2026-01-01"}
        path = tmp_path / f"edited-{edit}.json"
        path.write_text(json.dumps(edited))
        capsys.readouterr()
        assert main(["approve", str(path)]) == 2, edit
        assert "does not match its target, range" in capsys.readouterr().err, edit

    # JSON of several plans to stdout would be two documents: refused, pointing at --out.
    assert main(PLAN_ARGS) == 2
    assert "pass --out" in capsys.readouterr().err

    # Both plans approved, run, swapped and released, one after the other: nothing is stale.
    for f in files:
        plan = BackfillPlan.from_dict(_read(f))
        assert main(["approve", str(f)]) == 0
        assert all(r.status == "passed" for r in execute(defs, instance, history, plan))
        assert swap_or_rollback(defs, instance, history, plan.plan_id).success
        assert main(["release", plan.plan_id]) == 0
    capsys.readouterr()
    again = tmp_path / "again.json"
    assert main([*PLAN_ARGS, "--out", str(again)]) == 0
    err = capsys.readouterr().err
    assert "nothing to backfill: no partition of orders_daily is built by a code version" in err
    assert not again.exists() and not (tmp_path / "again-1.json").exists()


def test_the_planning_job_proposes_one_plan_per_stale_range(defs, instance, history):
    from backfill_assets.service.plans import latest_plan_record

    write_history(instance, history, *FIXED, logic="2")
    config = {
        "target": "orders_daily",
        "stale": True,
        "window": "02:00-23:00",
        "rollback": "backup",
    }
    result = run_job(
        defs,
        "plan_backfill_job",
        instance,
        run_config={"ops": {"plan_backfill_op": {"config": config}}},
    )
    ids = result.output_for_node("plan_backfill_op").split(",")
    assert len(ids) == 2
    for plan_id, (start, end) in zip(ids, STALE, strict=True):
        record = latest_plan_record(instance, plan_id)
        assert record is not None and record["status"] == "proposed"
        assert (record["plan"]["start"], record["plan"]["end"]) == (str(start), str(end))
        assert "Why these partitions (stale)" in record["plan_markdown"]


def test_the_refusals_stay_whatever_stale_finds(defs, instance, history, tmp_path, capsys):
    """No rollback, no window, a window over the daily run: refused (exit 2, nothing written),
    as for a named range; so are --stale with a range, and a plan with neither."""
    write_history(instance, history, *FIXED, logic="2")
    out = tmp_path / "p.json"
    window_at = PLAN.index("--window") + 1
    cases = {
        "no rollback": (PLAN, "rollback"),
        "no window": (
            [*PLAN[: window_at - 1], *PLAN[window_at + 1 :], "--rollback", "backup"],
            "window",
        ),
        "daily overlap": (
            [*PLAN[:window_at], "00:00-23:59", *PLAN[window_at + 1 :], "--rollback", "backup"],
            "daily run",
        ),
        "with a range": ([*PLAN_ARGS, "--start", "2026-01-01"], "leave out --start"),
        "neither": (
            ["plan", "orders_daily", "--window", "02:00-23:00", "--rollback", "backup"],
            "--stale",
        ),
        "current version": (
            [*PLAN_ARGS, "--built-by", ORDERS.code_version],
            "current code version",
        ),
    }
    runs_before = len(instance.get_runs())
    for name, (args, needle) in cases.items():
        capsys.readouterr()
        assert main([*args, "--out", str(out)]) == 2, name
        err = capsys.readouterr().err
        assert needle.lower() in err.lower(), (name, err[-300:])
        assert not out.exists() and not (tmp_path / "p-1.json").exists(), name
    assert len(instance.get_runs()) == runs_before


def test_nothing_stale_is_said_and_exits_0(defs, instance, landed, tmp_path, capsys):
    write_history(instance, landed, HISTORY_START, HISTORY_END, logic="2")
    capsys.readouterr()
    assert main([*PLAN_ARGS, "--out", str(tmp_path / "p.json")]) == 0
    err = capsys.readouterr().err
    assert "nothing to backfill" in err
    assert "0 of 21 built partitions" in err
    assert not (tmp_path / "p.json").exists()


def test_a_build_without_a_recorded_code_version_is_stale_and_says_so(instance):
    """A materialization with no code version (e.g. a swap made before swaps recorded one) is
    stale by the default rule, says so, and is left out by --built-by naming the old version."""
    day = dt.date(2026, 3, 4)
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=ORDERS.key, partition=day.isoformat())
    )
    scan = find_stale(instance, ORDERS, now=NOW)
    assert scan.ranges == [(day, day)]
    assert scan.why(day, day)[day.isoformat()].startswith("built by no recorded code version on ")
    assert "(1 day, code version none recorded)" in "\n".join(scan.summary())
    assert find_stale(instance, ORDERS, now=NOW, built_by="1").stale == {}
