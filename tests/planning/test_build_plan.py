"""build_plan end to end on plain inputs: batches, slots, refusals, serialisation, integrity.

No Dagster, no warehouse: every fact the planner needs is passed in, including `now`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from backfill_assets.constants import GATE_NAMES, PLAN_SCHEMA_VERSION, ROW_COUNT_CHECK
from backfill_assets.errors import InvalidInput, PlanRefused
from backfill_assets.lib.planning.batches import Budget
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
from backfill_assets.lib.planning.plan import BackfillPlan, verify_integrity
from backfill_assets.lib.planning.windows import arcs_overlap, seconds_of_day
from backfill_assets.lib.warehouse.identifiers import validate_ident

VALIDATE_PLAN = Path(__file__).parents[2].parent / "shared" / "tools" / "validate_plan.py"
UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")
COLUMNS = (
    "order_id",
    "order_date",
    "customer_id",
    "gross_amount",
    "net_amount",
    "fx_rate",
    "net_revenue_usd",
)
CRITERIA = Criteria(
    row_count=RowCountCriterion(compare_to=("source", "target")),
    sample=SampleCriterion(
        size=200,
        unchanged_columns=("order_id", "customer_id", "gross_amount"),
        changed_columns=(ChangedColumn("net_revenue_usd", "net_revenue_usd >= 0"),),
    ),
    invariants=(Invariant("net_amount_non_negative", "net_amount >= 0"),),
)
IMPACT = (
    ImpactedAsset("stg_orders", "all", "dbt"),
    ImpactedAsset("fct_weekly_revenue", ("2025-12-29", "2026-01-05"), "dbt"),
)


def target(**changes: Any) -> TargetInfo:
    base = TargetInfo(
        key="orders_daily",
        shadow_key="orders_daily__shadow",
        partitions_start=dt.date(2020, 1, 1),
        partitions_end=None,
        timezone="UTC",
        daily_job="orders_daily_job",
        daily_expected_start=dt.time(1, 0),
        columns=COLUMNS,
        default_criteria=CRITERIA,
    )
    return dataclasses.replace(base, **changes)


def inputs(tgt: TargetInfo | None = None, **changes: Any) -> PlanInputs:
    tgt = tgt or target()
    base = PlanInputs(
        targets={tgt.key: tgt},
        known_assets=frozenset(
            {tgt.key, tgt.shadow_key, "raw_orders", *(a.asset_key for a in IMPACT)}
        ),
        impact=IMPACT,
        partition_rows={},
        seconds_per_row=None,
        batch_overhead_seconds=None,
        daily_durations_seconds=(),
        now=dt.datetime(2026, 4, 10, 12, 0, tzinfo=UTC),
    )
    return dataclasses.replace(base, **changes)


def request(**changes: Any) -> PlanRequest:
    base = PlanRequest(
        target="orders_daily",
        start="2026-01-01",
        end="2026-03-31",
        window="03:00-06:00",
        timezone=None,
        rollback="backup",
        criteria=None,
    )
    return dataclasses.replace(base, **changes)


def fixed_batches(seconds: float, tgt: TargetInfo | None = None, **changes: Any) -> PlanInputs:
    """Inputs in which every batch is estimated at exactly `seconds` (all overhead, no rows)."""
    return inputs(tgt, seconds_per_row=0.0, batch_overhead_seconds=seconds, **changes)


def assert_validate_plan_holds(plan: BackfillPlan, tmp_path: Path) -> None:
    """The plan holds the project's own contract (tests/contract.py: the shipped JSON Schema and
    the rules it cannot say); where the reference checker of ../shared exists, that too."""
    from tests.contract import problems

    assert problems(json.loads(plan.to_json())) == []
    if not VALIDATE_PLAN.exists():  # outside this repository: a cross-check, never required
        return
    path = tmp_path / f"{plan.plan_id}.json"
    path.write_text(plan.to_json())
    done = subprocess.run(
        [sys.executable, str(VALIDATE_PLAN), str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plan holds" in done.stdout


def local_slots(plan: BackfillPlan, tz: ZoneInfo) -> list[tuple[str, str]]:
    return [
        (b.slot.start.astimezone(tz).isoformat(), b.slot.end.astimezone(tz).isoformat())
        for b in plan.batches
    ]


# --- the main path ------------------------------------------------------------------------------


def test_a_90_day_backfill_gets_one_gated_batch_per_iso_week_inside_the_window(
    tmp_path: Path,
) -> None:
    plan = build_plan(request(), inputs())

    iso_weeks = {(dt.date(2026, 1, 1) + dt.timedelta(days=i)).isocalendar()[:2] for i in range(90)}
    assert len(iso_weeks) == 14
    assert len(plan.batches) == 14
    assert len(plan.partitions) == 90
    assert plan.partitions[0] == "2026-01-01"
    assert plan.partitions[-1] == "2026-03-31"
    assert [b.index for b in plan.batches] == list(range(1, 15))
    assert plan.batches[0].start == dt.date(2026, 1, 1)
    assert plan.batches[0].end == dt.date(2026, 1, 4)  # a Sunday: the first week is partial
    assert plan.batches[-1].partitions == ("2026-03-30", "2026-03-31")
    assert all(b.gates == GATE_NAMES and ROW_COUNT_CHECK in b.gates for b in plan.batches)
    assert plan.shadow == "orders_daily__shadow" != plan.target
    assert plan.rollback.strategy == "backup"
    assert plan.rollback.command == f"backfill-assets rollback {plan.plan_id}"
    assert (plan.window.start, plan.window.end, plan.window.timezone) == ("03:00", "06:00", "UTC")
    assert plan.impact == IMPACT
    # Slots follow `now`, back to back, and keep clear of the daily run's slot.
    assert plan.batches[0].slot.start == dt.datetime(2026, 4, 11, 3, 0, tzinfo=UTC)
    for prev, nxt in zip(plan.batches, plan.batches[1:], strict=False):
        assert nxt.slot.start == prev.slot.end
    c = plan.contention
    assert (c.daily_slot_start, c.daily_slot_end) == ("00:30", "01:45")
    daily_arc = (
        seconds_of_day(dt.time.fromisoformat(c.daily_slot_start)),
        c.daily_duration_seconds + 2 * c.margin_seconds,
    )
    for b in plan.batches:
        start = seconds_of_day(b.slot.start.timetz())
        assert not arcs_overlap(
            (start, int((b.slot.end - b.slot.start).total_seconds())),
            (daily_arc[0], int(daily_arc[1])),
        )
    assert c.occurrences_needed == 1
    assert c.expected_finish == plan.batches[-1].slot.end
    assert_validate_plan_holds(plan, tmp_path)


def test_the_plan_dict_carries_every_key_of_the_contract() -> None:
    d = build_plan(request(), inputs()).to_dict()
    assert d["schema_version"] == PLAN_SCHEMA_VERSION
    assert d["created_at"] == "2026-04-10T12:00:00+00:00"
    assert d["impact"][0] == {"asset_key": "stg_orders", "partitions": "all", "kind": "dbt"}
    assert d["impact"][1]["partitions"] == ["2025-12-29", "2026-01-05"]
    assert set(d["cost"]) >= {
        "basis",
        "rows",
        "bytes",
        "seconds",
        "per_batch_overhead_seconds",
        "seconds_per_row",
    }
    assert set(d["contention"]) >= {
        "daily_job",
        "daily_slot",
        "daily_expected_start",
        "daily_duration_seconds",
        "margin_seconds",
        "basis",
        "occurrences_needed",
        "expected_finish",
    }
    assert d["contention"]["daily_slot"] == {"start": "00:30", "end": "01:45"}
    assert d["window"] == {"start": "03:00", "end": "06:00", "timezone": "UTC"}
    batch = d["batches"][0]
    assert batch["slot"] == {
        "start": "2026-04-11T03:00:00+00:00",
        "end": "2026-04-11T03:00:11+00:00",
    }
    assert batch["gates"] == ["row_count_gate", "sample_gate", "invariants_gate", "diff_gate"]
    assert set(batch) >= {
        "index",
        "start",
        "end",
        "partitions",
        "estimated_seconds",
        "estimated_rows",
    }


def test_cost_uses_documented_defaults_without_history_and_says_so() -> None:
    plan = build_plan(request(), inputs())
    # 90 partitions x 10_000 rows x 2 us + 14 batches x 10 s
    assert plan.cost.rows == 900_000
    assert plan.cost.bytes == 900_000 * 100
    assert plan.cost.seconds == pytest.approx(90 * 10_000 * 2e-6 + 14 * 10)
    assert "default 2.0 us/row" in plan.cost.basis
    assert "default 10 s overhead per batch" in plan.cost.basis
    assert "default 10,000 rows per partition" in plan.cost.basis
    assert plan.contention.daily_duration_seconds == 900
    assert "default 900 s" in plan.contention.basis
    assert "margin 1800 s" in plan.contention.basis


def test_cost_and_contention_use_warehouse_stats_and_run_history_when_present() -> None:
    rows = {dt.date(2026, 1, 1) + dt.timedelta(days=i): 1_000 for i in range(89)}  # last day empty
    plan = build_plan(
        request(),
        inputs(
            partition_rows=rows,
            seconds_per_row=1e-3,
            batch_overhead_seconds=4.0,
            daily_durations_seconds=tuple(float(60 * m) for m in range(1, 21)),
        ),
    )
    assert plan.cost.rows == 90_000  # the empty day is estimated at the mean of the others
    assert plan.cost.seconds == pytest.approx(90_000 * 1e-3 + 14 * 4.0)
    assert plan.batches[0].estimated_seconds == pytest.approx(4_000 * 1e-3 + 4.0)
    assert "89 of 90 partitions" in plan.cost.basis
    assert "from past batch runs" in plan.cost.basis
    assert plan.contention.daily_duration_seconds == 19 * 60  # nearest-rank p95 of 20 runs
    assert "p95 (nearest rank) of 20 past runs" in plan.contention.basis
    assert plan.contention.daily_slot_end == "01:49"  # 01:00 + 19 min + 30 min margin


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rollback", [None, "", "  "])
def test_a_plan_without_a_rollback_path_is_refused(rollback: str | None) -> None:
    with pytest.raises(PlanRefused, match="no rollback path") as e:
        build_plan(request(rollback=rollback), inputs())
    assert "--rollback backup" in str(e.value)


def test_an_unknown_rollback_strategy_is_refused() -> None:
    with pytest.raises(PlanRefused, match=r"unknown rollback strategy 'snapshot'.*--rollback b"):
        build_plan(request(rollback="snapshot"), inputs())


@pytest.mark.parametrize("window", [None, ""])
def test_a_plan_without_a_window_is_refused(window: str | None) -> None:
    with pytest.raises(PlanRefused, match=r"no window: .*excludes the daily production run"):
        build_plan(request(window=window), inputs())


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ("3am-6am", "'3am-6am' is not HH:MM-HH:MM"),
        ("03:00-6", "is not HH:MM-HH:MM"),
        ("25:00-06:00", "impossible time 25:00: hours run 00..23"),
        ("03:00-03:75", "impossible time 03:75"),
        ("04:00-04:00", "zero length"),
    ],
)
def test_a_malformed_or_zero_length_window_is_refused(window: str, message: str) -> None:
    with pytest.raises(PlanRefused, match=message):
        build_plan(request(window=window), inputs())


@pytest.mark.parametrize(
    ("window", "daily_start"),
    [
        ("00:00-02:00", dt.time(1, 0)),  # plainly over the run
        ("01:40-04:00", dt.time(1, 0)),  # only over the margin after the run (ends 01:45)
        ("00:00-00:45", dt.time(1, 0)),  # only over the margin before the run (starts 00:30)
        ("23:00-01:00", dt.time(1, 0)),  # the window crosses midnight
        ("23:00-23:50", dt.time(0, 10)),  # the daily slot crosses midnight (23:40-00:55)
        ("22:00-02:00", dt.time(23, 30)),  # both cross midnight
    ],
)
def test_a_window_over_the_daily_run_or_its_margin_is_refused(
    window: str, daily_start: dt.time
) -> None:
    with pytest.raises(PlanRefused, match=r"overlaps the daily run orders_daily_job's slot") as e:
        build_plan(request(window=window), inputs(target(daily_expected_start=daily_start)))
    assert "choose a window outside it, e.g. --window" in str(e.value)


def test_the_overlap_refusal_suggests_the_window_between_two_daily_runs() -> None:
    with pytest.raises(PlanRefused, match=r"slot 00:30-01:45 \(UTC\).*--window 01:45-00:30"):
        build_plan(request(window="01:00-02:00"), inputs())


def test_a_window_touching_the_daily_slot_edge_is_accepted() -> None:
    plan = build_plan(request(window="01:45-04:00"), inputs())
    assert plan.batches[0].slot.start == dt.datetime(2026, 4, 11, 1, 45, tzinfo=UTC)


def test_a_window_in_another_timezone_is_checked_against_the_daily_run_in_winter_and_summer() -> (
    None
):
    # Daily 01:00 UTC is 20:00 in New York in winter, 21:00 in summer (slot 20:30-21:45).
    with pytest.raises(PlanRefused, match=r"overlaps the daily run .* slot 20:30-21:45"):
        build_plan(
            request(
                start="2025-12-01",
                end="2025-12-31",
                window="21:00-23:00",
                timezone="America/New_York",
            ),
            inputs(now=dt.datetime(2026, 1, 20, 12, tzinfo=UTC)),
        )
    plan = build_plan(
        request(
            start="2025-12-01", end="2025-12-31", window="22:00-04:00", timezone="America/New_York"
        ),
        inputs(now=dt.datetime(2026, 1, 20, 12, tzinfo=UTC)),
    )
    assert plan.window.timezone == "America/New_York"
    assert plan.batches[0].slot.start.isoformat() == "2026-01-20T22:00:00-05:00"


def test_criteria_without_a_sample_part_are_refused() -> None:
    only_counts = Criteria(row_count=RowCountCriterion())
    with pytest.raises(PlanRefused, match=r"criteria have no sample criterion.*--criteria FILE"):
        build_plan(request(criteria=only_counts), inputs())


def test_criteria_without_row_count_and_sample_are_refused_naming_both() -> None:
    with pytest.raises(PlanRefused, match="no row_count and no sample criterion"):
        build_plan(request(), inputs(target(default_criteria=Criteria())))


def test_criteria_naming_an_unknown_column_are_refused_with_the_known_columns() -> None:
    bad = dataclasses.replace(CRITERIA, sample=SampleCriterion(unchanged_columns=("order_idd",)))
    with pytest.raises(PlanRefused, match=r"criteria name column 'order_idd', not a column of"):
        build_plan(request(criteria=bad), inputs())


def test_an_end_before_the_start_is_refused() -> None:
    with pytest.raises(PlanRefused, match="end 2026-01-01 is before start 2026-03-31"):
        build_plan(request(start="2026-03-31", end="2026-01-01"), inputs())


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("2026-02-30", "2026-03-31", "start '2026-02-30' is not a real calendar date"),
        ("2026-01-01", "2026/03/31", "end '2026/03/31' is not a date: use YYYY-MM-DD"),
        ("yesterday", "2026-03-31", "start 'yesterday' is not a date"),
        ("2025-02-29", "2025-03-31", "is not a real calendar date"),  # not a leap year
    ],
)
def test_malformed_or_impossible_dates_are_refused(start: str, end: str, message: str) -> None:
    with pytest.raises(PlanRefused, match=message):
        build_plan(request(start=start, end=end), inputs())


def test_a_start_before_the_first_partition_is_refused() -> None:
    with pytest.raises(
        PlanRefused,
        match=r"start 2019-12-31 is before the first partition of "
        r"orders_daily \(2020-01-01\); use --start 2020-01-01",
    ):
        build_plan(request(start="2019-12-31"), inputs())


def test_an_end_after_the_last_partition_is_refused() -> None:
    tgt = target(partitions_end=dt.date(2026, 2, 28))
    with pytest.raises(
        PlanRefused,
        match=r"end 2026-03-31 is after the last partition of "
        r"orders_daily \(2026-02-28\); use --end 2026-02-28",
    ):
        build_plan(request(), inputs(tgt))


@pytest.mark.parametrize("end", ["2026-04-10", "2026-05-01"])
def test_partitions_that_have_not_landed_yet_are_refused(end: str) -> None:
    with pytest.raises(
        PlanRefused,
        match=rf"end {end} has not landed yet \(today is 2026-04-10 "
        r"in UTC\).*--end 2026-04-09",
    ):
        build_plan(request(end=end), inputs())


def test_today_is_taken_in_the_plan_timezone() -> None:
    # 23:30 UTC on 04-09 is already 04-10 in Berlin: 2026-04-09 has landed there, not in UTC.
    now = dt.datetime(2026, 4, 9, 23, 30, tzinfo=UTC)
    with pytest.raises(PlanRefused, match="today is 2026-04-09 in UTC"):
        build_plan(request(end="2026-04-09"), inputs(now=now))
    berlin = build_plan(
        request(end="2026-04-09", timezone="Europe/Berlin", window="04:00-07:00"), inputs(now=now)
    )
    assert berlin.end == dt.date(2026, 4, 9)


def test_an_unknown_target_and_a_known_but_not_backfillable_asset_get_different_messages() -> None:
    with pytest.raises(
        PlanRefused,
        match=r"unknown target 'ordres_daily': no asset with that key"
        r".*backfillable tables are \['orders_daily'\]",
    ):
        build_plan(request(target="ordres_daily"), inputs())
    with pytest.raises(
        PlanRefused,
        match=r"asset 'raw_orders' exists but is not backfillable: "
        r"it has no BackfillableTable declaration",
    ):
        build_plan(request(target="raw_orders"), inputs())


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "../etc/passwd", "Europe"])
def test_an_unknown_timezone_is_refused(tz: str) -> None:
    with pytest.raises(PlanRefused, match=r"unknown timezone .*IANA name"):
        build_plan(request(timezone=tz), inputs())


def test_a_batch_that_cannot_fit_in_one_window_occurrence_is_refused() -> None:
    with pytest.raises(
        PlanRefused,
        match=r"batch 1 \(2026-01-01\.\.2026-01-04\) needs an "
        r"estimated 3h 20m but the window 03:00-06:00 lasts "
        r"3h 00m.*widen the window",
    ):
        build_plan(request(), fixed_batches(12_000.0))


def test_a_naive_now_is_a_caller_bug_not_a_refusal() -> None:
    with pytest.raises(InvalidInput, match="timezone-aware"):
        build_plan(request(), inputs(now=dt.datetime(2026, 4, 10, 12)))


# --- not refused: midnight, DST, leap days ------------------------------------------------------


def test_a_window_crossing_midnight_places_batches_across_midnight(tmp_path: Path) -> None:
    plan = build_plan(
        request(window="22:00-04:00"),
        fixed_batches(3000.0, target(daily_expected_start=dt.time(6, 0))),
    )
    slots = local_slots(plan, ZoneInfo("UTC"))
    # 7 batches of 50 min fill 22:00-03:50; the 8th waits for the next night.
    assert slots[0] == ("2026-04-10T22:00:00+00:00", "2026-04-10T22:50:00+00:00")
    assert slots[2] == ("2026-04-10T23:40:00+00:00", "2026-04-11T00:30:00+00:00")
    assert slots[6] == ("2026-04-11T03:00:00+00:00", "2026-04-11T03:50:00+00:00")
    assert slots[7][0] == "2026-04-11T22:00:00+00:00"
    assert plan.contention.occurrences_needed == 2
    assert_validate_plan_holds(plan, tmp_path)


def test_a_spring_forward_night_holds_fewer_batches(tmp_path: Path) -> None:
    # 2026-03-29: 01:00-04:00 Berlin lasts 2 real hours; 3 batches of 50 min fit on other nights.
    tgt = target(timezone="Europe/Berlin", daily_expected_start=dt.time(6, 0))
    now = dt.datetime(2026, 3, 28, 12, tzinfo=BERLIN)
    plan = build_plan(
        request(start="2026-01-05", end="2026-02-15", window="01:00-04:00"),
        fixed_batches(3000.0, tgt, now=now),
    )
    slots = local_slots(plan, BERLIN)
    assert slots[:3] == [
        ("2026-03-29T01:00:00+01:00", "2026-03-29T01:50:00+01:00"),
        ("2026-03-29T01:50:00+01:00", "2026-03-29T03:40:00+02:00"),  # crosses the change
        ("2026-03-30T01:00:00+02:00", "2026-03-30T01:50:00+02:00"),
    ]
    assert plan.contention.occurrences_needed == 3  # 2 + 3 + 1 batches
    assert_validate_plan_holds(plan, tmp_path)


def test_a_fall_back_night_holds_more_batches(tmp_path: Path) -> None:
    # 2026-10-25: 01:00-04:00 Berlin lasts 4 real hours, room for 4 batches of 50 min.
    tgt = target(timezone="Europe/Berlin", daily_expected_start=dt.time(6, 0))
    now = dt.datetime(2026, 10, 24, 12, tzinfo=BERLIN)
    plan = build_plan(
        request(start="2026-01-05", end="2026-02-15", window="01:00-04:00"),
        fixed_batches(3000.0, tgt, now=now),
    )
    slots = local_slots(plan, BERLIN)
    assert [s for s in slots if s[0].startswith("2026-10-25")] == [
        ("2026-10-25T01:00:00+02:00", "2026-10-25T01:50:00+02:00"),
        ("2026-10-25T01:50:00+02:00", "2026-10-25T02:40:00+02:00"),
        ("2026-10-25T02:40:00+02:00", "2026-10-25T02:30:00+01:00"),  # the repeated hour
        ("2026-10-25T02:30:00+01:00", "2026-10-25T03:20:00+01:00"),
    ]
    assert slots[4][0] == "2026-10-26T01:00:00+01:00"
    assert_validate_plan_holds(plan, tmp_path)


def test_a_window_opening_in_the_skipped_hour_starts_at_the_first_valid_instant(
    tmp_path: Path,
) -> None:
    tgt = target(timezone="Europe/Berlin", daily_expected_start=dt.time(7, 0))
    now = dt.datetime(2026, 3, 28, 12, tzinfo=BERLIN)
    plan = build_plan(request(end="2026-03-20", window="02:30-05:00"), inputs(tgt, now=now))
    assert plan.batches[0].slot.start.isoformat() == "2026-03-29T03:00:00+02:00"
    assert_validate_plan_holds(plan, tmp_path)


def test_a_window_closing_in_the_skipped_hour_ends_before_the_gap(tmp_path: Path) -> None:
    # 00:00-02:30 Berlin on 2026-03-29 ends at 01:59:59 CET: 2 batches of 50 min, not 3.
    tgt = target(timezone="Europe/Berlin", daily_expected_start=dt.time(6, 0))
    now = dt.datetime(2026, 3, 28, 12, tzinfo=BERLIN)
    plan = build_plan(
        request(start="2026-01-05", end="2026-01-25", window="00:00-02:30"),
        fixed_batches(3000.0, tgt, now=now),
    )
    days = [b.slot.start.astimezone(BERLIN).date() for b in plan.batches]
    assert days == [dt.date(2026, 3, 29)] * 2 + [dt.date(2026, 3, 30)]
    assert_validate_plan_holds(plan, tmp_path)


def test_the_daily_run_drifting_into_the_window_on_a_dst_day_is_kept_clear(
    tmp_path: Path,
) -> None:
    # Daily 01:30 Berlin (slot 01:00-02:15) and window 02:15-06:00 touch on the clock. On
    # 2026-03-29 the run's real slot ends at 01:15 UTC = 03:15 CEST, past the window's 03:00 open.
    tgt = target(timezone="Europe/Berlin", daily_expected_start=dt.time(1, 30))
    now = dt.datetime(2026, 3, 28, 12, tzinfo=BERLIN)
    plan = build_plan(request(end="2026-03-20", window="02:15-06:00"), inputs(tgt, now=now))
    assert plan.batches[0].slot.start.isoformat() == "2026-03-29T03:15:00+02:00"
    assert_validate_plan_holds(plan, tmp_path)


def test_a_range_over_a_leap_day_has_every_partition(tmp_path: Path) -> None:
    plan = build_plan(
        request(start="2024-02-28", end="2024-03-01"),
        inputs(now=dt.datetime(2024, 3, 5, 12, tzinfo=UTC)),
    )
    assert plan.partitions == ("2024-02-28", "2024-02-29", "2024-03-01")
    assert len(plan.batches) == 1
    assert plan.batches[0].partitions == plan.partitions
    assert_validate_plan_holds(plan, tmp_path)


# --- identity, serialisation, integrity ---------------------------------------------------------


def test_the_plan_id_is_stable_across_calls_and_clocks_and_safe_as_an_identifier() -> None:
    a = build_plan(request(), inputs())
    b = build_plan(
        request(), inputs(now=dt.datetime(2026, 4, 12, 8, tzinfo=UTC), seconds_per_row=1e-6)
    )
    assert a.plan_id == b.plan_id
    assert re.fullmatch(r"p[0-9a-f]{10}", a.plan_id)
    assert validate_ident(a.plan_id) == a.plan_id


@pytest.mark.parametrize(
    "change",
    [
        {"end": "2026-03-30"},
        {"start": "2026-01-02"},
        {"window": "03:00-05:00"},
        {"timezone": "Asia/Tokyo"},
        {"criteria": dataclasses.replace(CRITERIA, invariants=())},
    ],
)
def test_the_plan_id_changes_when_the_request_changes(change: dict[str, Any]) -> None:
    original = build_plan(request(), inputs()).plan_id
    assert build_plan(request(**change), inputs()).plan_id != original


def test_a_plan_round_trips_through_json_exactly() -> None:
    # Daily 01:00 UTC is 02:00/03:00 in Berlin: the window moves after it.
    plan = build_plan(request(timezone="Europe/Berlin", window="04:00-07:00"), inputs())
    text = plan.to_json()
    again = BackfillPlan.from_json(text)
    assert again == plan
    assert again.to_json() == text
    assert plan.to_dict() == json.loads(text)
    assert BackfillPlan.from_dict(plan.to_dict()) == plan
    verify_integrity(again)


def _plan_dict() -> dict[str, Any]:
    return build_plan(request(), inputs()).to_dict()


def _set(key: str, value: Any) -> Any:
    return lambda t: json.dumps({**json.loads(t), key: value})


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda t: t[: len(t) // 2], "plan is not valid JSON .*truncated"),
        (lambda t: "", "plan is not valid JSON"),
        (lambda t: "[1, 2]", "a plan must be a JSON object"),
        (
            lambda t: t.replace('"schema_version": 1', '"schema_version": 99'),
            "plan schema_version 99 is not supported",
        ),
        (
            lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "batches"}),
            r"plan is missing keys \['batches'\]",
        ),
        (
            lambda t: t.replace('"start": "2026-01-01"', '"start": "January"'),
            "plan start 'January' is not an ISO date",
        ),
        (lambda t: t.replace('"slot": {', '"slit": {', 1), "missing key 'slot'"),
        (lambda t: t.replace('"batches": [', '"batches": 7, "x": [', 1), "batches must be a list"),
        # pydantic alone reads a number, or digits, as seconds since 1970.
        (_set("created_at", 0), "plan created_at 0 is not an ISO datetime"),
        (_set("created_at", "1700000000"), "plan created_at '1700000000' is not an ISO datetime"),
        # A key with a dot and a control character (found by hypothesis): the message named the
        # wrong owner and key, and carried the raw \x1e, which ends a line for str.splitlines.
        (
            lambda t: json.dumps({**json.loads(t), "criteria": {"\x1e.": None}}),
            r"^plan criteria has unknown key '\\x1e\.'; it was edited",
        ),
    ],
)
def test_reading_a_broken_plan_file_fails_with_a_clear_message(mangle: Any, message: str) -> None:
    text = build_plan(request(), inputs()).to_json()
    with pytest.raises(InvalidInput, match=message):
        BackfillPlan.from_json(mangle(text))


def _edited(plan: BackfillPlan, **changes: Any) -> BackfillPlan:
    return dataclasses.replace(plan, **changes)


def test_verify_integrity_accepts_the_plan_as_built() -> None:
    verify_integrity(build_plan(request(), inputs()))


def test_verify_integrity_catches_a_batch_edited_by_hand() -> None:
    plan = build_plan(request(), inputs())
    b1 = dataclasses.replace(
        plan.batches[0],
        end=dt.date(2026, 1, 5),
        partitions=(*plan.batches[0].partitions, "2026-01-05"),
    )
    with pytest.raises(
        InvalidInput,
        match=r"batch 1 \(2026-01-01\.\.2026-01-05\) should be "
        r"batch 1 \(2026-01-01\.\.2026-01-04\)",
    ):
        verify_integrity(_edited(plan, batches=(b1, *plan.batches[1:])))


def test_verify_integrity_catches_a_removed_gate() -> None:
    plan = build_plan(request(), inputs())
    b3 = dataclasses.replace(plan.batches[2], gates=("row_count_gate", "invariants_gate"))
    with pytest.raises(InvalidInput, match=r"batch 3 lacks gates \['sample_gate'\]"):
        verify_integrity(_edited(plan, batches=(*plan.batches[:2], b3, *plan.batches[3:])))


def test_verify_integrity_catches_a_removed_batch_partitions_and_shadow_edits() -> None:
    plan = build_plan(request(), inputs())
    with pytest.raises(InvalidInput, match="13 batches for 14 ISO weeks"):
        verify_integrity(_edited(plan, batches=plan.batches[:-1]))
    with pytest.raises(InvalidInput, match="partitions do not list every day"):
        verify_integrity(_edited(plan, partitions=plan.partitions[:-1]))
    with pytest.raises(InvalidInput, match="shadow 'orders_daily' is not 'orders_daily__shadow'"):
        verify_integrity(_edited(plan, shadow="orders_daily"))


def test_verify_integrity_catches_a_range_or_window_edited_without_a_new_plan_id() -> None:
    plan = build_plan(request(), inputs())
    widened = dataclasses.replace(plan.window, end="07:00")
    with pytest.raises(InvalidInput, match="does not match its target, range, window"):
        verify_integrity(_edited(plan, window=widened))


def test_a_five_year_plan_has_one_batch_per_iso_week() -> None:
    # Planning speed is measured in bench/ (make bench), not asserted here.
    plan = build_plan(request(start="2021-01-01", end="2025-12-31"), inputs())
    assert len(plan.partitions) == 1826
    assert len(plan.batches) == 262


# --- the table's backfill budget: per window occurrence -------------------------------------------


def test_a_budget_spreads_the_batches_over_more_occurrences(tmp_path: Path) -> None:
    # Without a budget, 7 batches of 50 min fill 22:00-03:50 of one night (see above); with at
    # most 2 h of warehouse time a night, 2 batches fit in each occurrence.
    tgt = target(daily_expected_start=dt.time(6, 0))
    free = build_plan(request(window="22:00-04:00"), fixed_batches(3000.0, tgt))
    bounded = dataclasses.replace(tgt, budget=Budget(max_seconds=7200))
    plan = build_plan(request(window="22:00-04:00"), fixed_batches(3000.0, bounded))
    assert free.contention.occurrences_needed == 2
    assert plan.contention.occurrences_needed == 7  # 13 batches, 2 a night
    nights: dict[str, int] = {}
    for start, _ in local_slots(plan, ZoneInfo("UTC")):
        nights[start[:10]] = nights.get(start[:10], 0) + 1
    assert max(nights.values()) == 2
    assert_validate_plan_holds(plan, tmp_path)


def test_the_plan_records_the_budget_it_was_placed_within() -> None:
    # The approver reads the bound the batches honour in the plan itself: JSON and Markdown.
    tgt = target(daily_expected_start=dt.time(6, 0), budget=Budget(max_seconds=7200))
    plan = build_plan(request(window="22:00-04:00"), fixed_batches(3000.0, tgt))
    data = json.loads(plan.to_json())
    assert data["contention"]["budget"] == {"max_seconds": 7200.0, "max_rows": None}
    again = BackfillPlan.from_json(plan.to_json())
    assert again == plan
    assert again.contention.budget == Budget(max_seconds=7200)
    assert "- Budget: 2h 00m of estimated warehouse time per window occurrence." in (
        render_markdown(plan)
    )
    # Without one, the key is absent (plans written before it read the same) and Markdown says so.
    free = build_plan(
        request(window="22:00-04:00"),
        fixed_batches(3000.0, target(daily_expected_start=dt.time(6, 0))),
    )
    assert "budget" not in json.loads(free.to_json())["contention"]
    assert free.contention.budget is None
    assert "- Budget: none declared (backfill_budget)." in render_markdown(free)


def test_a_rows_budget_counts_the_estimated_rows_of_each_occurrence() -> None:
    # 1,000 rows a day: a full week is 7,000 rows; at most 10,000 rows a night, one week a night.
    rows = {dt.date(2025, 12, 1) + dt.timedelta(days=i): 1000 for i in range(120)}
    tgt = target(daily_expected_start=dt.time(6, 0), budget=Budget(max_rows=10_000))
    plan = build_plan(request(window="22:00-04:00"), inputs(tgt, partition_rows=rows))
    assert len(plan.batches) == 14
    # Two weeks (14,000 rows) go over 10,000: one batch a night, but the last (2026-03-30..31,
    # 2,000 rows) joins the one before it (7,000).
    assert [b.estimated_rows for b in plan.batches][-2:] == [7000, 2000]
    assert plan.contention.occurrences_needed == 13
    assert all(b.estimated_rows <= 10_000 for b in plan.batches)


def test_a_batch_over_the_budget_alone_is_refused_saying_what_would_fit() -> None:
    tgt = target(daily_expected_start=dt.time(6, 0), budget=Budget(max_seconds=1800))
    why = (
        r"batch 1 .* needs an estimated 50m 00s and [0-9,]+ rows, more than the table's backfill "
        r"budget allows in one window occurrence \(30m 00s of estimated warehouse time per "
        r"window occurrence\).*raise the budget"
    )
    with pytest.raises(PlanRefused, match=why):
        build_plan(request(window="22:00-04:00"), fixed_batches(3000.0, tgt))


@pytest.mark.parametrize(
    "kw", [{"max_seconds": 0}, {"max_rows": -5}, {"max_rows": 1.5}, {"max_seconds": True}]
)
def test_a_budget_that_is_not_positive_is_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="backfill budget"):
        Budget(**kw)
