"""The diff of a plan's shadow against the live rows, before the swap, checked against what the
swap then does: on the demo's FX fix (logic v1 -> v2), on DuckDB and PostgreSQL, with a real
instance and real runs.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import jsonschema
import pytest

from backfill_assets.cli import main
from backfill_assets.cli.output import shipped_schema
from backfill_assets.example.declaration import ORDERS
from backfill_assets.service.swap import perform_swap
from tests.conftest import make_plan
from tests.helpers import execute

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


def test_the_diff_before_the_swap_is_what_the_swap_changes(defs, instance, history, capsys):
    wh = history
    plan = make_plan(defs, instance, wh, START.isoformat(), END.isoformat())
    execute(defs, instance, wh, plan)
    before = _rows(wh)
    diff = wh.diff(SPEC, START, END + dt.timedelta(days=1))
    assert diff.schema.empty
    assert (diff.rows_in_both, diff.only_in_shadow, diff.only_in_live) == (len(before), 0, 0)

    assert main(["diff", plan.plan_id, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, shipped_schema("diff"))
    assert main(["diff", plan.plan_id]) == 0
    text = capsys.readouterr().out
    assert "2 of 2 batches written" in text and "unchanged on every row: order_id" in text
    assert main(["diff", plan.plan_id, "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    assert "| `fx_rate` |" in markdown
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


def test_a_change_in_a_column_declared_unchanged_shows_in_the_diff(defs, instance, history):
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
