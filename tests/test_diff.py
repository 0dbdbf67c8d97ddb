"""The diff of a plan's shadow against the live rows, before the swap, checked against what the
swap then does: on the demo's FX fix (logic v1 -> v2), on DuckDB and PostgreSQL, with a real
instance and real runs.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import re
from decimal import Decimal

import jsonschema
import pytest

from backfill_assets.cli import main
from backfill_assets.cli.output import shipped_schema
from backfill_assets.errors import GateFailed
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.gates import evaluate_gates
from backfill_assets.lib.planning.criteria import DiffThresholds
from backfill_assets.service.swap import perform_swap
from tests.conftest import make_plan
from tests.helpers import execute, refused_message, swap_or_rollback

pytestmark = pytest.mark.backends("embedded", "postgres")
SPEC = ORDERS.spec
START, END = dt.date(2026, 1, 5), dt.date(2026, 1, 18)  # two ISO weeks
UNCHANGED = ORDERS.criteria.sample.unchanged_columns  # type: ignore[union-attr]


def _rows(wh) -> dict[int, dict[str, object]]:
    """The target's rows of the range by key, read apart from the diff."""
    cols = SPEC.column_names
    got = wh.query(
        f"SELECT {', '.join(cols)} FROM orders_daily WHERE order_date >= $s AND order_date <= $e",
        {"s": START, "e": END},
    )
    return {r[0]: dict(zip(cols, r, strict=True)) for r in got}


def _total(rows: dict[int, dict[str, object]], column: str) -> Decimal:
    return sum((Decimal(str(r[column])) for r in rows.values()), Decimal(0))


def test_the_diff_before_the_swap_is_what_the_swap_changes(
    defs, instance, history, capsys, tmp_path
):
    wh = history
    plan = make_plan(defs, instance, wh, START.isoformat(), END.isoformat())
    execute(defs, instance, wh, plan)
    before = _rows(wh)
    diff = wh.diff(SPEC, START, END + dt.timedelta(days=1))
    assert diff.schema.empty
    assert (diff.rows_in_both, diff.only_in_shadow, diff.only_in_live) == (len(before), 0, 0)
    # The gate's diff (counts and sums alone, the unchanged columns known equal) agrees.
    light = wh.diff(SPEC, START, END + dt.timedelta(days=1), known_same=UNCHANGED, detail=False)
    assert [(d.day, d.rows, d.rows_changed, d.changed) for d in light.days] == [
        (d.day, d.rows, d.rows_changed, d.changed) for d in diff.days
    ]
    assert [d.sums for d in light.days] == [
        {c: d.sums[c] for c in ("fx_rate", "net_revenue_usd")} for d in diff.days
    ]
    assert [(c.name, c.changed_rows) for c in light.columns] == [
        (c.name, c.changed_rows) for c in diff.columns
    ]
    assert light.column("net_revenue_usd").numeric.total_delta == pytest.approx(  # type: ignore[union-attr]
        diff.column("net_revenue_usd").numeric.total_delta  # type: ignore[union-attr]
    )

    assert main(["diff", plan.plan_id, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, shipped_schema("diff"))
    assert main(["diff", plan.plan_id]) == 0
    text = capsys.readouterr().out
    assert "2 of 2 batches written" in text and "unchanged on every row: order_id" in text
    chart = tmp_path / "diff.svg"
    assert main(["diff", plan.plan_id, "--format", "markdown", "--chart", str(chart)]) == 0
    markdown = capsys.readouterr().out
    assert "| `fx_rate` |" in markdown
    svg = chart.read_text()
    assert svg.count("<polyline") == 4  # fx_rate and net_revenue_usd, before and after
    assert ">net_revenue_usd</text>" in svg
    assert perform_swap(instance, ORDERS, wh, plan.plan_id).action == "swapped"
    after = _rows(wh)
    assert set(after) == set(before)

    # The rows it reports changed in fx_rate are the rows whose fx_rate the swap changed.
    moved = {k for k in before if before[k]["fx_rate"] != after[k]["fx_rate"]}
    assert moved, "the FX fix changes some rates"
    assert diff.column("fx_rate").changed_rows == len(moved)
    assert diff.column("fx_rate").changed_share == pytest.approx(len(moved) / len(before))
    # net_revenue_usd's total delta is the range's sum after the swap minus its sum before.
    revenue = diff.column("net_revenue_usd").numeric
    assert revenue is not None
    expected = _total(after, "net_revenue_usd") - _total(before, "net_revenue_usd")
    assert revenue.total_delta == pytest.approx(float(expected), abs=0.005)
    assert revenue.sum_before == pytest.approx(float(_total(before, "net_revenue_usd")))
    assert revenue.delta_quantiles["p01"] <= revenue.delta_quantiles["p50"]
    assert revenue.delta_quantiles["p50"] <= revenue.delta_quantiles["p99"]
    # Every column declared unchanged is the same on every row.
    for c in UNCHANGED:
        assert diff.column(c).changed_rows == 0, c
    # Per day, and the rows shown side by side, agree with the swap.
    by_day = {d.day: d for d in diff.days}
    for day in {r["order_date"] for r in before.values()}:
        keys = [k for k, r in before.items() if r["order_date"] == day]
        assert by_day[day].rows_changed == len([k for k in keys if k in moved])
    for row in diff.side_by_side:
        key = row["order_id"]
        assert key in moved
        assert float(row["fx_rate"]["old"]) == float(before[key]["fx_rate"])  # type: ignore[arg-type]
        assert float(row["fx_rate"]["new"]) == float(after[key]["fx_rate"])  # type: ignore[arg-type]
    # The CLI's JSON says the same, over the plan's whole range.
    fx = next(c for c in out["columns"] if c["name"] == "fx_rate")
    assert fx["changed_rows"] == len(moved)
    assert out["plan_id"] == plan.plan_id


def test_a_change_in_a_column_declared_unchanged_shows_in_the_diff_and_fails_its_threshold(
    defs, instance, history
):
    wh = history
    plan = make_plan(defs, instance, wh, START.isoformat(), START.isoformat())
    execute(defs, instance, wh, plan)
    # A build that also touches `status` (planted in the shadow's week table).
    week = next(
        r[0]
        for r in wh.query(
            "SELECT table_name FROM information_schema.tables WHERE "
            "table_schema = current_schema() AND table_name LIKE 'orders_daily__shadow__w%'"
        )
    )
    first = wh.query(f"SELECT min(order_id) FROM {week} WHERE order_date = $d", {"d": START})[0][0]
    wh.execute(f"UPDATE {week} SET status = 'refunded' WHERE order_id = {int(first)}")
    diff = wh.diff(SPEC, START, START + dt.timedelta(days=1))
    status = diff.column("status")
    assert status.changed_rows == 1
    assert status.top_pairs[0][1:] == ("refunded", 1)
    assert any(r["order_id"] == first and "status" in r for r in diff.side_by_side)

    # Declared, the threshold fails that day's diff gate, naming the column; the other days pass.
    strict = dataclasses.replace(ORDERS.criteria, diff=DiffThresholds(only_changed_columns=True))
    gates = evaluate_gates(wh, SPEC, strict, START, START + dt.timedelta(days=1), plan.plan_id)
    (outcome,) = [g for g in gates if g.check_name == "diff_gate"]
    assert not outcome.passed
    assert "columns not declared as changed changed: status (1 rows)" in outcome.description
    assert outcome.metadata["changed_by_column"]["status"] == 1
    gates = evaluate_gates(wh, SPEC, ORDERS.criteria, START, START + dt.timedelta(days=1), "x")
    assert all(g.passed for g in gates if g.check_name == "diff_gate")


def test_a_threshold_breached_by_the_fix_halts_the_plan_and_the_swap_refuses(
    defs, instance, history
):
    # The FX fix changes about 14% of the rows; at most 5% are allowed.
    criteria = dataclasses.replace(ORDERS.criteria, diff=DiffThresholds(max_changed_pct=5))
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat(), criteria=criteria)
    assert plan.to_dict()["criteria"]["diff"]["max_changed_pct"] == 5
    with pytest.raises(GateFailed) as failed:
        execute(defs, instance, history, plan)
    assert f"{START} diff_gate" in str(failed.value) and "halted at batch 1" in str(failed.value)
    swap = swap_or_rollback(defs, instance, history, plan.plan_id)
    assert not swap.success
    assert f"{START} diff_gate failed" in refused_message(swap)


def test_a_table_that_requires_a_review_refuses_the_swap_until_a_current_review_by_another(
    defs, instance, history
):
    from backfill_assets.constants import PLAN_ID_TAG, shadow_job
    from backfill_assets.errors import ExecutionRefused, SwapRefused
    from backfill_assets.service.batch_driver import pause_plan
    from backfill_assets.service.plans import latest_plan_record
    from backfill_assets.service.review import record_review
    from backfill_assets.service.runs import run_job
    from backfill_assets.service.status import plan_status, render_status

    wh = history
    strict = dataclasses.replace(ORDERS, swap_requires_review=True, reviewer_must_differ=True)
    tables = {"orders_daily": strict}
    plan = make_plan(defs, instance, wh, START.isoformat(), END.isoformat())  # approved by "tests"
    with pytest.raises(ExecutionRefused, match="no batch written yet"):
        record_review(instance, tables, wh, plan.plan_id, "bob")
    execute(defs, instance, wh, plan)
    before = wh.checksums(SPEC, START, END + dt.timedelta(days=1))

    with pytest.raises(SwapRefused, match="requires a review of the plan's diff before its swap"):
        perform_swap(instance, strict, wh, plan.plan_id)
    # The two-person rule: the approver may not review.
    with pytest.raises(ExecutionRefused, match="requires a reviewer other than the approver"):
        record_review(instance, tables, wh, plan.plan_id, "tests")
    reviewed = record_review(instance, tables, wh, plan.plan_id, "bob")
    assert reviewed.diff.column("fx_rate").changed_rows > 0
    # The review's record carries the picture: the chart inlined in its Markdown, one panel per
    # changed numeric column.
    md = str((latest_plan_record(instance, plan.plan_id) or {})["diff_markdown"])
    inlined = re.search(r"!\[[^\]]*\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", md)
    assert inlined, md[-500:]
    svg = base64.b64decode(inlined[1]).decode()
    assert svg.startswith("<svg") and svg.count("<polyline") == 4, svg[:300]
    assert ">fx_rate</text>" in svg and ">net_revenue_usd</text>" in svg
    text = render_status(plan_status(instance, tables, wh, plan.plan_id))
    assert "review: reviewed by bob at" in text and "diff (as reviewed):" in text

    # The shadow written again after the review (a real batch run of one day) voids it.
    day = START.isoformat()
    run_job(defs, shadow_job("orders_daily"), instance, partition_key=day,
            tags={PLAN_ID_TAG: plan.plan_id})  # fmt: skip
    with pytest.raises(SwapRefused, match=r"was written after bob's review at .* which is void"):
        perform_swap(instance, strict, wh, plan.plan_id)
    assert "is void: the shadow was written after it" in render_status(
        plan_status(instance, tables, wh, plan.plan_id)
    )
    assert wh.checksums(SPEC, START, END + dt.timedelta(days=1)) == before  # nothing swapped

    record_review(instance, tables, wh, plan.plan_id, "bob")
    pause_plan(instance, plan.plan_id, "carol")  # a later record of the plan keeps the review
    assert perform_swap(instance, strict, wh, plan.plan_id).action == "swapped"
