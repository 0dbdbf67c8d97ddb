"""The warehouse contract, run against both adapters: a DuckDB file and a real PostgreSQL server.

Writes, versions, the shadow, the gates, the swap, the rollback, the refusals, bad identifiers
and predicates, the writer lease and the plan claims behave the same on both. (DuckDB-only
concerns, file paths and the single-writer file lock, are in tests/test_warehouse.py; the
PostgreSQL-only ones, readers during a swap and lock timeouts, in tests/reliability.)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backfill_assets.errors import InvalidInput, SwapRefused
from backfill_assets.example import orders as o
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.sources import land_fx_rates, land_raw_orders
from backfill_assets.lib.spec import Column, TableSpec
from backfill_assets.lib.warehouse.base import JointGateSource, LeaseHolder, Warehouse
from backfill_assets.lib.warehouse.connect import open_warehouse
from backfill_assets.lib.warehouse.postgres.gates import diff_gate_alone

SPEC = ORDERS.spec
D = dt.date
FIRST, END = D(2026, 1, 1), D(2026, 2, 1)  # January, 5 ISO weeks (W01 starts Mon 2025-12-29)
N = 100  # orders a day
UNCHANGED = ("gross_amount", "currency", "status")
GATE_ARGS = dict(
    sample_size=30,
    unchanged=UNCHANGED,
    changed_predicates={"fx_rate": "fx_rate > 0"},
    invariants={"net_non_negative": "net_amount >= 0", "small": "gross_amount < 100"},
    full_compare=True,
)


@pytest.fixture(params=["duckdb", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def empty(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Warehouse:
    """A new, empty warehouse of each kind (PostgreSQL: a schema of its own)."""
    if kind == "duckdb":
        return open_warehouse(str(tmp_path / "wh.duckdb"), lock_timeout_s=5)
    return open_warehouse(request.getfixturevalue("postgres_url"), lock_timeout_s=5)


@pytest.fixture
def seeded(empty: Warehouse) -> Iterator[Warehouse]:
    """January's orders landed, and orders_daily as the buggy v1 logic built it."""
    land_fx_rates(empty)
    land_raw_orders(empty, FIRST, END, N)
    empty.replace_partitions(SPEC, FIRST, END, build=o.ORDERS_DAILY_SQL_V1)
    yield empty


def january(wh: Warehouse) -> dict[dt.date, str]:
    return wh.checksums(SPEC, FIRST, END)


def days_of(start: dt.date, end: dt.date) -> list[dt.date]:
    return [start + dt.timedelta(days=i) for i in range((end - start).days)]


def shadow(wh: Warehouse, plan_id: str, start: dt.date, end: dt.date) -> None:
    """What an approved plan's batches leave: the plan holds the table, its shadow is built."""
    assert wh.claim_plan(SPEC.name, plan_id) == plan_id
    wh.replace_partitions(SPEC, start, end, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id=plan_id)


# -- writes and versions ---------------------------------------------------------------------


def test_a_write_replaces_its_days_counts_them_and_is_idempotent(seeded):
    before = january(seeded)
    assert len(before) == 31 and all(c.startswith(f"{N}:") for c in before.values())
    counts = seeded.replace_partitions(
        SPEC, D(2026, 1, 5), D(2026, 1, 8), build=o.ORDERS_DAILY_SQL_V1
    )
    assert counts == {D(2026, 1, 5): N, D(2026, 1, 6): N, D(2026, 1, 7): N}
    assert january(seeded) == before  # the same rows again
    assert seeded.query("select count(*) from orders_daily") == [(31 * N,)]
    # Readers query one relation named like the table, by date.
    rows = seeded.query(
        "select count(*) from orders_daily where order_date >= $s and order_date < $e",
        {"s": D(2026, 1, 5), "e": D(2026, 1, 12)},
    )
    assert rows == [(7 * N,)]


def test_a_live_write_bumps_each_days_version_and_a_shadow_write_does_not(seeded):
    v0 = seeded.partition_versions(SPEC, FIRST, END)
    assert sorted(v0) == days_of(FIRST, END)
    seeded.replace_partitions(SPEC, D(2026, 1, 10), D(2026, 1, 12), build=o.ORDERS_DAILY_SQL)
    v1 = seeded.partition_versions(SPEC, FIRST, END)
    assert {d for d in v0 if v1[d] != v0[d]} == {D(2026, 1, 10), D(2026, 1, 11)}
    assert all(v1[d] > v0[d] for d in (D(2026, 1, 10), D(2026, 1, 11)))
    shadow(seeded, "pv", D(2026, 1, 5), D(2026, 1, 19))
    assert seeded.partition_versions(SPEC, FIRST, END) == v1


def test_a_shadow_write_leaves_the_target_untouched(seeded):
    before = january(seeded)
    shadow(seeded, "ps", D(2026, 1, 5), D(2026, 1, 19))
    assert january(seeded) == before
    built = seeded.checksums(SPEC, FIRST, END, shadow=True)
    assert sorted(built) == days_of(D(2026, 1, 5), D(2026, 1, 19))
    # v2 fixes the FX rate of cross-border orders: every day differs, row counts do not.
    assert all(built[d] != before[d] and built[d].split(":")[0] == str(N) for d in built)


def test_a_frame_build_writes_what_sql_writes(seeded):
    sql_rows = seeded.query(
        "select * from orders_daily where order_date = $d order by order_id", {"d": D(2026, 1, 9)}
    )
    import pandas as pd

    frame = pd.DataFrame(sql_rows, columns=list(SPEC.column_names))
    seeded.replace_partitions(SPEC, D(2026, 1, 9), D(2026, 1, 10), build=frame)
    again = seeded.query(
        "select * from orders_daily where order_date = $d order by order_id", {"d": D(2026, 1, 9)}
    )
    assert again == sql_rows


# -- gates ----------------------------------------------------------------------------------


def test_the_gates_see_the_same_counts_and_a_clean_sample_passes(seeded):
    shadow(seeded, "pg", D(2026, 1, 5), D(2026, 1, 12))
    gi = seeded.gate_inputs(SPEC, D(2026, 1, 5), D(2026, 1, 12), plan_id="pg", **GATE_ARGS)
    week = days_of(D(2026, 1, 5), D(2026, 1, 12))
    assert gi.shadow_rows == gi.target_rows == dict.fromkeys(week, N)
    assert gi.source_rows == dict.fromkeys(week, N)
    assert gi.duplicates == dict.fromkeys(week, 0)
    # Invariant violations are exact counts, the same as a direct query.
    for day in week:
        small = seeded.query(
            "select count(*) from orders_daily__shadow where order_date = $d and "
            "not coalesce(gross_amount < 100, false)",
            {"d": day},
        )[0][0]
        assert gi.invariants[day] == {"net_non_negative": 0, "small": small}
        sample = gi.samples[day]
        assert 0 < sample.sampled <= N and sample.missing_in_target == 0
        assert sample.mismatches == dict.fromkeys(UNCHANGED, 0)
        assert sample.fingerprint_equal is True
    # The sample is reproducible.
    again = seeded.gate_inputs(SPEC, D(2026, 1, 5), D(2026, 1, 12), plan_id="pg", **GATE_ARGS)
    assert again.samples == gi.samples


def test_the_gates_catch_a_restated_source_day(seeded):
    bad = D(2026, 1, 7)
    seeded.execute(
        "update raw_orders set amount = amount + 1 where order_date = $d and order_id % 10 = 0",
        {"d": bad},
    )
    shadow(seeded, "pr", D(2026, 1, 5), D(2026, 1, 12))
    args = {**GATE_ARGS, "sample_size": N}  # every row of the day
    gi = seeded.gate_inputs(SPEC, D(2026, 1, 5), D(2026, 1, 12), plan_id="pr", **args)
    failed = gi.samples[bad]
    assert failed.sampled == N and failed.mismatches["gross_amount"] == N // 10
    assert failed.fingerprint_equal is False
    assert len(failed.rows) == 10 and "target_gross_amount" in failed.rows[0]
    fine = gi.samples[D(2026, 1, 8)]
    assert fine.mismatches["gross_amount"] == 0 and fine.fingerprint_equal is True


def test_duplicate_keys_are_counted(seeded):
    dup_build = (
        "select * from (" + o.ORDERS_DAILY_SQL + ") x union all select * from ("
        + o.ORDERS_DAILY_SQL + ") y where order_id % 2 = 0"
    )  # fmt: skip
    assert seeded.claim_plan(SPEC.name, "pu") == "pu"
    seeded.replace_partitions(SPEC, D(2026, 1, 5), D(2026, 1, 6), build=dup_build, shadow=True,
                              plan_id="pu")  # fmt: skip
    gi = seeded.gate_inputs(SPEC, D(2026, 1, 5), D(2026, 1, 6), plan_id="pu", **GATE_ARGS)
    evens = seeded.query(
        "select count(*) from raw_orders where order_date = $d and order_id % 2 = 0",
        {"d": D(2026, 1, 5)},
    )[0][0]
    assert gi.duplicates[D(2026, 1, 5)] == evens > 0
    assert gi.shadow_rows[D(2026, 1, 5)] == N + evens


VISITS = (
    "select * from (values "
    "(1::bigint, 1::bigint, 1::bigint, 1::bigint, date '2026-01-05'), "
    "(1, 1, 1, 2, date '2026-01-05'), (1, null, 1000000000000, 3, date '2026-01-05'), "
    "(1, null, 1000000000000, 4, date '2026-01-05'), (null, null, null, 5, date '2026-01-05'), "
    "(2, 1, 5, 6, date '2026-01-05'), "
    "(1, 1, 1000000000000, 7, date '2026-01-06'), (null, 2, null, 8, date '2026-01-06'), "
    "(2, null, 7, 9, date '2026-01-06'), "
    "(null, 3, null, 10, date '2026-01-07'), (null, 3, null, 11, date '2026-01-07')"
    ") as v (store_id, seq, far, n, visit_date) where visit_date >= $start and visit_date < $end"
)


@pytest.mark.parametrize(
    "key, expected",
    [
        # A row key: rows with the same NULLs are the same key; (1, 1) on two days is no
        # duplicate, since a key is per partition.
        (("store_id", "seq"), [2, 0, 1]),
        # One column: count(*) - count(DISTINCT store_id), so every NULL key counts (DuckDB
        # counts a narrow integer range on a bitmap, a wide one like `far` from sorted keys).
        (("store_id",), [4, 1, 2]),
        (("far",), [3, 1, 2]),
    ],
)
def test_duplicate_keys_are_counted_as_count_distinct_counts_them_nulls_included(
    empty, key, expected
):
    spec = TableSpec(
        "visits",
        (
            *(Column(c, "BIGINT") for c in ("store_id", "seq", "far", "n")),
            Column("visit_date", "DATE"),
        ),
        "visit_date",
        key,
    )
    start, end = D(2026, 1, 5), D(2026, 1, 8)
    assert empty.claim_plan(spec.name, "pk") == "pk"
    empty.replace_partitions(spec, start, end, build=VISITS, shadow=True, plan_id="pk")
    gi = empty.gate_inputs(
        spec, start, end, plan_id="pk", sample_size=10, unchanged=(), changed_predicates={},
        invariants={}, full_compare=False,
    )  # fmt: skip
    assert gi.shadow_rows == dict(zip(days_of(start, end), [6, 3, 2], strict=True))
    assert gi.duplicates == dict(zip(days_of(start, end), expected, strict=True))


def gates_apart_and_together(
    wh: Warehouse, spec: TableSpec, start: dt.date, end: dt.date, plan_id: str, **args: Any
) -> tuple[Any, Any, Any, Any]:
    """PostgreSQL's gates read with the diff (`gates_and_diff`), and apart: `gate_inputs` with
    its fingerprints, then the whole diff in one query."""
    assert isinstance(wh, JointGateSource)
    facts, diff = wh.gates_and_diff(spec, start, end, tolerance=1e-9, plan_id=plan_id, **args)
    apart = wh.gate_inputs(spec, start, end, plan_id=plan_id, **args)
    whole = wh.diff(spec, start, end, tolerance=1e-9, detail=False)
    return facts, apart, diff, whole


def fingerprints(gi: Any) -> dict[dt.date, bool | None]:
    return {d: s.fingerprint_equal for d, s in gi.samples.items()}


def test_postgres_gates_read_with_the_diff_answer_as_the_fingerprints_do(postgres_url):
    """The diff's row-by-row comparison stands for the fingerprints on PostgreSQL: the same
    verdict per day for a clean day, a restated one, one with duplicate keys and a missed load;
    every other input and the diff itself as read apart."""
    wh = open_warehouse(postgres_url, lock_timeout_s=5)
    land_fx_rates(wh)
    land_raw_orders(wh, FIRST, END, N)
    wh.replace_partitions(SPEC, FIRST, END, build=o.ORDERS_DAILY_SQL_V1)
    restated, doubled, missed = D(2026, 1, 6), D(2026, 1, 8), D(2026, 1, 10)
    wh.execute(
        "update raw_orders set amount = amount + 1 where order_date = $d and order_id % 10 = 0",
        {"d": restated},
    )
    wh.execute("delete from orders_daily where order_date = $d", {"d": missed})
    build = (
        f"select * from ({o.ORDERS_DAILY_SQL}) x union all select * from ({o.ORDERS_DAILY_SQL}) "
        f"y where order_id % 7 = 0 and order_date = date '{doubled}'"
    )
    start, end = D(2026, 1, 5), D(2026, 1, 12)
    assert wh.claim_plan(SPEC.name, "pj") == "pj"
    wh.replace_partitions(SPEC, start, end, build=build, shadow=True, plan_id="pj")

    facts, apart, diff, whole = gates_apart_and_together(wh, SPEC, start, end, "pj", **GATE_ARGS)
    expected = {d: d not in (restated, doubled, missed) for d in days_of(start, end)}
    assert fingerprints(apart) == expected  # what the fingerprints say
    assert fingerprints(facts) == expected
    assert facts.duplicates[doubled] > 0 and facts.target_rows[missed] == 0
    unhashed = {d: dataclasses.replace(s, fingerprint_equal=None) for d, s in facts.samples.items()}
    assert unhashed == {
        d: dataclasses.replace(s, fingerprint_equal=None) for d, s in apart.samples.items()
    }
    assert dataclasses.replace(facts, samples={}) == dataclasses.replace(apart, samples={})
    # A day declared unchanged differs, so the diff was read again column by column: it is the
    # diff read whole, in one query.
    assert diff == whole
    assert diff.column("gross_amount").changed_rows == N // 10
    assert (diff.only_in_shadow, diff.only_in_live) == (N, 0)  # the missed day's rows
    # On a clean day the unchanged columns are compared as one, not reported one by one.
    day = (start, start + dt.timedelta(days=1))
    _, clean = wh.gates_and_diff(SPEC, *day, tolerance=1e-9, plan_id="pj", **GATE_ARGS)  # type: ignore[attr-defined]
    apart = wh.diff(SPEC, *day, tolerance=1e-9, known_same=UNCHANGED, detail=False)
    assert clean == apart and clean.known_same == list(UNCHANGED)
    # The diff gate's queries alone (what the bench times apart) read the same diff.
    assert diff_gate_alone(wh, SPEC, *day, tolerance=1e-9, unchanged=UNCHANGED) == apart  # type: ignore[arg-type]


READINGS = TableSpec(
    "readings",
    (Column("id", "BIGINT"), Column("day", "DATE"), Column("v", "DOUBLE"), Column("w", "DOUBLE")),
    "day",
    ("id",),
)


def test_postgres_gates_read_with_the_diff_compare_an_unchanged_float_exactly(postgres_url):
    """A float column declared unchanged that moved by 1e-12: the fingerprints see it, and so
    does the diff's comparison that stands for them (exact). The diff it reports then compares
    the column within its tolerance, as the diff read whole does."""
    wh = open_warehouse(postgres_url, lock_timeout_s=5)
    start, end = D(2026, 1, 5), D(2026, 1, 7)
    rows = (
        "select i::bigint as id, date '{d}' as day, {v} as v, 2.0::float8 as w "
        "from generate_series(1, 50) g(i)"
    )
    live = " union all ".join(rows.format(d=d, v="1.0::float8") for d in days_of(start, end))
    wh.replace_partitions(READINGS, start, end, build=live)
    moved = (
        rows.format(d=start, v="(1.0 + 1e-12)::float8")
        + " union all "
        + rows.format(d=start + dt.timedelta(days=1), v="1.0::float8")
    )
    assert wh.claim_plan(READINGS.name, "pf") == "pf"
    wh.replace_partitions(READINGS, start, end, build=moved, shadow=True, plan_id="pf")
    args = dict(sample_size=10, unchanged=("v",), changed_predicates={}, invariants={},
                full_compare=True)  # fmt: skip
    facts, apart, diff, whole = gates_apart_and_together(wh, READINGS, start, end, "pf", **args)
    assert fingerprints(apart) == fingerprints(facts) == {start: False, end - dt.timedelta(1): True}
    assert diff == whole and diff.column("v").changed_rows == 0  # within the diff's tolerance


# -- swap and rollback ------------------------------------------------------------------------


def test_a_swap_of_partial_weeks_keeps_the_days_outside_the_plan(seeded):
    before = january(seeded)
    days = days_of(D(2026, 1, 7), D(2026, 1, 16))  # Wed of W02 .. Thu of W03
    shadow(seeded, "pa", days[0], days[-1] + dt.timedelta(days=1))
    built = seeded.checksums(SPEC, days[0], days[-1] + dt.timedelta(days=1), shadow=True)
    result = seeded.swap(SPEC, "pa", days)
    assert (result.action, result.weeks) == ("swapped", 2)
    after = january(seeded)
    assert {d for d in before if before[d] != after[d]} == set(days)
    assert {d: after[d] for d in days} == built
    # The swap reports what went in and out of each day.
    assert {d: p.checksum_in for d, p in result.partitions.items()} == built
    assert {d: p.checksum_out for d, p in result.partitions.items()} == {d: before[d] for d in days}
    assert all(p.rows_in == p.rows_out == N for p in result.partitions.values())
    assert seeded.query("select count(*) from orders_daily") == [(31 * N,)]
    assert seeded.swap(SPEC, "pa", days).action == "already_swapped"
    assert seeded.swap_state(SPEC, "pa") == "swapped"


def test_rollback_restores_the_plan_days_and_keeps_later_writes_to_other_days(seeded):
    start, end = D(2026, 1, 7), D(2026, 1, 16)
    days = days_of(start, end)
    before = january(seeded)
    shadow(seeded, "pb", start, end)
    seeded.swap(SPEC, "pb", days)
    # After the swap the daily job rewrites a day of the same (partial) week, outside the plan.
    later = D(2026, 1, 17)
    seeded.replace_partitions(SPEC, later, later + dt.timedelta(days=1), build=o.ORDERS_DAILY_SQL)
    rewritten = seeded.checksums(SPEC, later, later + dt.timedelta(days=1))
    result = seeded.rollback(SPEC, "pb")
    assert result.action == "rolled_back"
    now = january(seeded)
    assert {d: now[d] for d in days} == {d: before[d] for d in days}
    assert now[later] == rewritten[later] != before[later]
    assert seeded.query("select count(*) from orders_daily") == [(31 * N,)]
    assert seeded.rollback(SPEC, "pb").action == "already_rolled_back"
    assert seeded.active_plan(SPEC.name) is None  # the rollback freed the table


def test_the_table_rows_follow_every_write_swap_and_rollback_without_a_scan(seeded):
    """`table_rows` (Dagster's dagster/row_count) sums the per-day counts recorded by each
    write; it must equal count(*) whatever moved the rows."""

    def counted() -> int:
        return seeded.query("select count(*) from orders_daily")[0][0]

    assert seeded.table_rows(SPEC) == counted() == 31 * N
    # The source of one day is restated with fewer orders; the backfill swaps the smaller day in.
    seeded.execute(
        "delete from raw_orders where order_date = $d and order_id % 4 = 0", {"d": D(2026, 1, 8)}
    )
    start, end = D(2026, 1, 5), D(2026, 1, 12)
    shadow(seeded, "pr", start, end)
    seeded.swap(SPEC, "pr", days_of(start, end))
    assert seeded.table_rows(SPEC) == counted() < 31 * N
    seeded.replace_partitions(SPEC, D(2026, 1, 20), D(2026, 1, 21), build=o.ORDERS_DAILY_SQL)
    assert seeded.table_rows(SPEC) == counted()
    seeded.rollback(SPEC, "pr")
    assert seeded.table_rows(SPEC) == counted() == 31 * N


def test_a_swap_into_days_the_target_never_had_and_its_rollback(empty):
    land_fx_rates(empty)
    land_raw_orders(empty, D(2026, 3, 2), D(2026, 3, 9), 50)
    days = days_of(D(2026, 3, 2), D(2026, 3, 9))  # a missed load: one whole week
    shadow(empty, "pc", days[0], D(2026, 3, 9))
    empty.swap(SPEC, "pc", days)
    assert empty.query("select count(*) from orders_daily") == [(350,)]
    assert empty.table_rows(SPEC) == 350
    empty.rollback(SPEC, "pc")
    assert empty.query("select count(*) from orders_daily") == [(0,)]
    assert empty.table_rows(SPEC) == 0


def test_a_missing_shadow_week_refuses_the_swap_and_changes_nothing(seeded):
    days = days_of(D(2026, 1, 5), D(2026, 1, 19))
    shadow(seeded, "pd", D(2026, 1, 5), D(2026, 1, 12))  # week 3's batch never ran
    before = january(seeded)
    with pytest.raises(SwapRefused, match="not built by plan pd for 2026-01-12"):
        seeded.swap(SPEC, "pd", days)
    assert january(seeded) == before
    assert seeded.swap_state(SPEC, "pd") is None


def test_the_swap_refuses_when_the_live_day_changed_after_its_shadow(seeded):
    days = days_of(D(2026, 1, 5), D(2026, 1, 12))
    shadow(seeded, "pe", days[0], days[-1] + dt.timedelta(days=1))
    seeded.replace_partitions(SPEC, D(2026, 1, 8), D(2026, 1, 9), build=o.ORDERS_DAILY_SQL_V1)
    before = january(seeded)
    with pytest.raises(SwapRefused, match="written after its shadow was built for 2026-01-08"):
        seeded.swap(SPEC, "pe", days)
    assert january(seeded) == before


def test_only_the_plan_holding_the_table_swaps(seeded):
    days = days_of(D(2026, 1, 5), D(2026, 1, 12))
    shadow(seeded, "pf", days[0], days[-1] + dt.timedelta(days=1))
    before = january(seeded)
    with pytest.raises(SwapRefused, match=r"plan px does not hold orders_daily \(plan pf does\)"):
        seeded.swap(SPEC, "px", days)
    assert seeded.release_plan(SPEC.name, "pf") is True
    with pytest.raises(SwapRefused, match=r"\(no plan does\)"):
        seeded.swap(SPEC, "pf", days)
    assert january(seeded) == before


def test_rollbacks_go_in_reverse_swap_order_and_restore_exactly(seeded):
    original = january(seeded)
    a_days, b_days = days_of(D(2026, 1, 5), D(2026, 1, 19)), days_of(D(2026, 1, 12), D(2026, 1, 26))
    shadow(seeded, "pa", a_days[0], a_days[-1] + dt.timedelta(days=1))
    seeded.swap(SPEC, "pa", a_days)
    after_a = january(seeded)
    seeded.release_plan(SPEC.name, "pa")  # whatever freed the table, a second plan swaps over it
    shadow(seeded, "pb", b_days[0], b_days[-1] + dt.timedelta(days=1))
    seeded.swap(SPEC, "pb", b_days)
    after_b = january(seeded)
    with pytest.raises(SwapRefused, match="plan pb swapped the same weeks of orders_daily after"):
        seeded.rollback(SPEC, "pa")
    assert january(seeded) == after_b
    seeded.rollback(SPEC, "pb")
    assert january(seeded) == after_a
    seeded.rollback(SPEC, "pa")
    assert january(seeded) == original


def test_a_released_backup_cannot_be_rolled_back_and_refusals_say_why(seeded):
    days = days_of(D(2026, 1, 5), D(2026, 1, 12))
    with pytest.raises(SwapRefused, match="never swapped into orders_daily"):
        seeded.rollback(SPEC, "pg")
    with pytest.raises(SwapRefused, match="no backup in orders_daily"):
        seeded.release_backup(SPEC, "pg")
    shadow(seeded, "pg", days[0], days[-1] + dt.timedelta(days=1))
    seeded.swap(SPEC, "pg", days)
    after = january(seeded)
    assert seeded.release_backup(SPEC, "pg") == 1
    assert seeded.active_plan(SPEC.name) is None
    with pytest.raises(SwapRefused, match=r"cannot be rolled back: its backup is \['released'\]"):
        seeded.rollback(SPEC, "pg")
    assert january(seeded) == after


def test_dropping_the_shadow_frees_the_table_and_leaves_the_target(seeded):
    before = january(seeded)
    shadow(seeded, "ph", D(2026, 1, 5), D(2026, 1, 19))
    assert seeded.drop_shadow(SPEC, "ph") == 2
    assert seeded.active_plan(SPEC.name) is None
    assert seeded.checksums(SPEC, FIRST, END, shadow=True) == {}
    assert january(seeded) == before


# -- bad identifiers, keys and predicates ------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["2026-01-01'; drop table orders_daily; --", "2026-02-30", "yesterday", ""]
)
def test_a_malformed_partition_key_is_refused_before_any_sql(seeded, bad):
    before = january(seeded)
    with pytest.raises(InvalidInput, match="date"):
        seeded.replace_partitions(SPEC, bad, D(2026, 1, 2), build=o.ORDERS_DAILY_SQL)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="date"):
        seeded.swap(SPEC, "pz", [bad])  # type: ignore[list-item]
    assert january(seeded) == before


def test_an_unsafe_identifier_never_reaches_sql(seeded):
    before = january(seeded)
    with pytest.raises(InvalidInput, match="not a safe identifier"):
        seeded.claim_plan('orders_daily"; drop table orders_daily; --', "p1")
    with pytest.raises(InvalidInput, match="not a safe identifier"):
        seeded.swap(SPEC, "p0'; drop table orders_daily; --", [D(2026, 1, 5)])
    with pytest.raises(InvalidInput, match="not a safe identifier"):
        TableSpec("t", (Column("ok", "BIGINT"), Column("bad name", "BIGINT")), "ok", ("ok",))
    assert january(seeded) == before


@pytest.mark.parametrize(
    "predicate",
    ["net_amount >= 0; drop table orders_daily", "(select 1) = 1", "net_amount >= 0 and"],
)
def test_an_unsafe_predicate_is_refused_by_the_gates(seeded, predicate):
    shadow(seeded, "pp", D(2026, 1, 5), D(2026, 1, 6))
    with pytest.raises(InvalidInput):
        seeded.gate_inputs(
            SPEC, D(2026, 1, 5), D(2026, 1, 6), plan_id="pp",
            **{**GATE_ARGS, "invariants": {"bad": predicate}},
        )  # fmt: skip
    assert seeded.query("select count(*) from orders_daily") == [(31 * N,)]


# -- coordination: the writer lease and plan claims ---------------------------------------------


def test_the_writer_lease_has_one_holder_and_can_be_taken_over_only_by_name(empty):
    a = LeaseHolder("run-a", role="batch", pid=1, host="h")
    b = LeaseHolder("run-b", role="daily", pid=2, host="h")
    assert empty.writer(SPEC.name) is None
    assert empty.claim_writer(SPEC.name, a).holder_id == "run-a"
    assert empty.claim_writer(SPEC.name, b).holder_id == "run-a"  # busy: the holder is returned
    assert empty.claim_writer(SPEC.name, a).holder_id == "run-a"  # re-entrant
    assert empty.release_writer(SPEC.name, "run-b") is False
    assert empty.claim_writer(SPEC.name, b, takeover="run-a").holder_id == "run-b"
    holder = empty.writer(SPEC.name)
    assert holder is not None and (holder.role, holder.pid) == ("daily", 2)
    assert empty.release_writer(SPEC.name, "run-b") is True
    assert empty.writer(SPEC.name) is None


def test_one_plan_holds_a_table_at_a_time(empty):
    assert empty.active_plan(SPEC.name) is None
    assert empty.claim_plan(SPEC.name, "p1") == "p1"
    assert empty.claim_plan(SPEC.name, "p2") == "p1"
    assert empty.claim_plan(SPEC.name, "p1") == "p1"
    assert empty.release_plan(SPEC.name, "p2") is False
    assert empty.release_plan(SPEC.name, "p1") is True
    assert empty.claim_plan(SPEC.name, "p2") == "p2"
    assert empty.active_plan("another_table") is None


def test_a_table_declared_with_sql_per_dialect_runs_its_own(seeded, kind):
    native = {
        "duckdb": o.ORDERS_DAILY_SQL,
        # A hand-written PostgreSQL build: its own syntax, $start/$end parameters and a literal %.
        "postgres": o.ORDERS_DAILY_SQL.replace(
            "o.status in", "(o.order_id % 1 = 0) and o.status in"
        ),
    }
    seeded.replace_partitions(SPEC, D(2026, 1, 5), D(2026, 1, 6), build=native)
    one = seeded.checksums(SPEC, D(2026, 1, 5), D(2026, 1, 6))
    seeded.replace_partitions(SPEC, D(2026, 1, 5), D(2026, 1, 6), build=o.ORDERS_DAILY_SQL)
    assert seeded.checksums(SPEC, D(2026, 1, 5), D(2026, 1, 6)) == one
    assert seeded.dialect == kind
