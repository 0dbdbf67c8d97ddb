"""render_markdown: the reviewer's view of a plan. Pure."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from backfill_assets.lib.planning.build import (
    ImpactedAsset,
    PlanInputs,
    PlanRequest,
    TargetInfo,
    build_plan,
)
from backfill_assets.lib.planning.criteria import (
    ChangedColumn,
    Criteria,
    Invariant,
    RowCountCriterion,
    SampleCriterion,
)
from backfill_assets.lib.planning.markdown import render_markdown
from backfill_assets.lib.planning.plan import BackfillPlan

UTC = dt.UTC
CRITERIA = Criteria(
    row_count=RowCountCriterion(compare_to=("source",), tolerance_pct=0.5),
    sample=SampleCriterion(
        size=150,
        unchanged_columns=("order_id", "customer_id"),
        changed_columns=(
            ChangedColumn("net_revenue_usd", "net_revenue_usd = round(net_amount * fx_rate, 2)"),
        ),
    ),
    invariants=(Invariant("net_amount_non_negative", "net_amount >= 0"),),
)


def make_plan(
    *, window: str = "03:00-06:00", daily: dt.time = dt.time(1, 0), **inputs: Any
) -> BackfillPlan:
    target = TargetInfo(
        key="orders_daily",
        shadow_key="orders_daily__shadow",
        partitions_start=dt.date(2020, 1, 1),
        partitions_end=None,
        timezone="UTC",
        daily_job="orders_daily_job",
        daily_expected_start=daily,
        columns=("order_id", "customer_id", "net_amount", "fx_rate", "net_revenue_usd"),
        default_criteria=CRITERIA,
    )
    facts = PlanInputs(
        targets={"orders_daily": target},
        known_assets=frozenset({"orders_daily"}),
        impact=(
            ImpactedAsset("stg_orders", "all", "dbt"),
            ImpactedAsset(
                "fct_weekly_revenue", tuple(f"2026-{m:02d}-01" for m in (1, 2, 3, 4)), "dbt"
            ),
        ),
        partition_rows={},
        seconds_per_row=None,
        batch_overhead_seconds=None,
        daily_durations_seconds=(),
        now=dt.datetime(2026, 4, 10, 12, tzinfo=UTC),
    )
    facts = dataclasses.replace(facts, **inputs)
    return build_plan(
        PlanRequest(
            target="orders_daily",
            start="2026-01-01",
            end="2026-03-31",
            window=window,
            timezone=None,
            rollback="backup",
            criteria=None,
        ),
        facts,
    )


def test_the_markdown_opens_with_the_target_the_range_and_a_summary() -> None:
    plan = make_plan()
    text = render_markdown(plan)
    lines = text.splitlines()
    assert lines[0] == f"# Backfill plan `{plan.plan_id}`: orders_daily 2026-01-01..2026-03-31"
    summary = next(line for line in lines if line.startswith("**Summary:**"))
    assert "90 partitions" in summary
    assert "14 weekly batches" in summary
    assert "orders_daily__shadow" in summary
    assert f"backfill-assets rollback {plan.plan_id}" in summary


def test_the_four_planning_steps_appear_in_order_with_rollback_and_timeline() -> None:
    text = render_markdown(make_plan())
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## 1. Criteria (written first)",
        "## 2. Downstream impact",
        "## 3. Cost and contention",
        "## 4. Batches",
        "## Rollback",
        "## Timeline",
    ]


def test_criteria_show_counts_sample_columns_and_invariants() -> None:
    text = render_markdown(make_plan())
    assert "shadow vs source, tolerance 0.5 %" in text
    assert "Sample of 150 rows per partition: unchanged `order_id`, `customer_id`" in text
    assert "changed `net_revenue_usd` (must hold: `net_revenue_usd = round(" in text
    assert "`net_amount_non_negative`: `net_amount >= 0`" in text


def test_impact_lists_each_downstream_asset_and_its_partitions() -> None:
    text = render_markdown(make_plan())
    assert "| `stg_orders` | dbt | all (full refresh) |" in text
    assert "| `fct_weekly_revenue` | dbt | 4 (2026-01-01..2026-04-01) |" in text
    # Models of a table that does not declare downstream_dbt are refreshed after the swap.
    assert "| `stg_orders` | dbt | all (full refresh) | refreshed after the swap; flagged" in text
    assert "published with the target" not in text.split("## 3.")[0]


def test_cost_and_contention_state_their_basis() -> None:
    text = render_markdown(make_plan())
    assert "- Cost basis: rows: no partition of the range has rows yet" in text
    assert "default 2.0 us/row (no batch run history)" in text
    assert "slot kept clear 00:30-01:45 UTC" in text
    assert "- Contention basis: daily duration: default 900 s" in text


def test_the_batches_table_has_one_row_per_batch_with_slot_and_gates() -> None:
    plan = make_plan()
    rows = [
        line
        for line in render_markdown(plan).splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().isdigit()
    ]
    assert len(rows) == len(plan.batches) == 14
    assert rows[0] == (
        "| 1 | 2026-01-01..2026-01-04 | 4 | 40,000 | 10 s | 2026-04-11 03:00:00 +0000..03:00:11 "
        "| row_count_gate, sample_gate, invariants_gate, diff_gate |"
    )


def _timeline_lines(plan: BackfillPlan) -> list[str]:
    """The timeline's text lines: the last fenced block (after the picture)."""
    return render_markdown(plan).split("## Timeline", 1)[1].split("```")[3].strip("\n").splitlines()


def test_the_timeline_shows_each_night_used_with_the_daily_slot() -> None:
    plan = make_plan(
        window="22:00-04:00",
        daily=dt.time(6, 0),
        seconds_per_row=0.0,
        batch_overhead_seconds=3000.0,
    )
    timeline = _timeline_lines(plan)
    # Batches after midnight belong to the night that opened the evening before.
    assert timeline == [
        "2026-04-10  daily 05:30-06:45 | window 22:00-04:00: batches 1-7 (22:00-03:50)",
        "2026-04-11  daily 05:30-06:45 | window 22:00-04:00: batches 8-14 (22:00-03:50)",
    ]


def test_the_timeline_lists_a_few_batches_one_by_one() -> None:
    plan = make_plan(seconds_per_row=0.0, batch_overhead_seconds=3000.0)
    timeline = _timeline_lines(plan)
    assert timeline[0] == (
        "2026-04-11  daily 00:30-01:45 | window 03:00-06:00: batch 1 (03:00-03:50), "
        "batch 2 (03:50-04:40), batch 3 (04:40-05:30)"
    )
    assert len(timeline) == 5  # 14 batches, 3 a night


def test_the_timeline_picture_draws_batches_against_the_daily_slot_and_the_window() -> None:
    text = render_markdown(make_plan(window="20:00-00:15", seconds_per_row=0.05))
    picture = text.split("## Timeline")[1].split("```")[1].strip("\n").splitlines()
    assert picture[0].split() == ["00", "03", "06", "09", "12", "15", "18", "21"]
    rows = dict(line.split("  ", 1) for line in picture[1:])
    assert list(rows) == ["2026-04-10", "2026-04-11", "2026-04-12", "2026-04-13"]
    for row in rows.values():
        assert len(row) == 48  # half hours
        assert row[1:4] == "DDD"  # the daily slot 00:30-01:45, never a batch
        assert set(row[4:40]) == {"."}  # outside the window
    # Batch 1 opens the window at 20:00; batch 14 (e) is the last; the rest of its window idles.
    assert rows["2026-04-10"][40] == "1" and rows["2026-04-13"][42] == "e"
    assert rows["2026-04-13"].endswith("-----")
    marks = "".join(rows.values())
    assert all(m in marks for m in "123456789abcde")


def test_the_timeline_picture_marks_batches_sharing_a_half_hour() -> None:
    text = render_markdown(make_plan())  # 14 short batches from 03:00
    picture = text.split("## Timeline")[1].split("```")[1].strip("\n").splitlines()
    assert picture[1] == "2026-04-11  .DDD..#-----" + "." * 36
