"""Companions: downstream relations a swap publishes with its target, in the same transaction.

Each test runs on a DuckDB file and on a real PostgreSQL server: a companion's shadow (built
beforehand, as the dbt models' shadow build does) replaces its live table in the swap's
transaction, the old table kept as the plan's backup; the rollback restores it exactly in the
rollback's transaction; release_backup drops the backup; a missing shadow refuses the swap and
changes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from backfill_assets.errors import InvalidInput, SwapRefused
from backfill_assets.example import orders as o
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.sources import land_fx_rates, land_raw_orders
from backfill_assets.lib.warehouse.base import Companion, companion_backup
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse

SPEC = ORDERS.spec
D = dt.date
FIRST, END = D(2026, 1, 1), D(2026, 2, 1)
N = 40  # orders a day
START, STOP = D(2026, 1, 5), D(2026, 1, 19)  # the plan: two whole ISO weeks
DAYS = [START + dt.timedelta(days=i) for i in range((STOP - START).days)]

LIVE, SHADOW = "fct_daily_revenue", "fct_daily_revenue__bf_shadow"
COLUMNS = [("revenue_date", "DATE"), ("revenue", "DECIMAL(12,2)"), ("orders", "BIGINT")]
OLD_ROWS = [(FIRST + dt.timedelta(days=i), 100 + i, 10 + i) for i in range(31)]
NEW_ROWS = [(FIRST + dt.timedelta(days=i), 200 + 2 * i, 20 + i) for i in range(31)]

Wh = DuckDBWarehouse | PostgresWarehouse


@pytest.fixture(params=["duckdb", "postgres"])
def wh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Wh]:
    """January's orders landed and orders_daily built (v1), on each kind of warehouse."""
    if request.param == "duckdb":
        w: Wh = DuckDBWarehouse(tmp_path / "wh.duckdb", lock_timeout_s=5)
    else:
        w = PostgresWarehouse(request.getfixturevalue("postgres_url"), lock_timeout_s=5)
    land_fx_rates(w)
    land_raw_orders(w, FIRST, END, N)
    w.replace_partitions(SPEC, FIRST, END, build=o.ORDERS_DAILY_SQL_V1)
    yield w


def build_shadow(wh: Wh, plan_id: str) -> None:
    """What an approved plan's batches leave: the plan holds the table, its shadow is built."""
    assert wh.claim_plan(SPEC.name, plan_id) == plan_id
    wh.replace_partitions(SPEC, START, STOP, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id=plan_id)


def rows(wh: Wh, table: str) -> list[tuple]:
    return wh.query(f"select * from {table} order by revenue_date, revenue, orders")


def checksum(wh: Wh, table: str) -> tuple:
    """Rows and sums: a cheap fingerprint to compare with the sorted rows."""
    return wh.query(f"select count(*), sum(revenue), sum(orders) from {table}")[0]


def target(wh: Wh) -> dict[dt.date, str]:
    return wh.checksums(SPEC, FIRST, END)


def test_a_swap_publishes_the_companion_and_keeps_the_old_table_as_backup(wh: Wh) -> None:
    wh.replace_reference_table(LIVE, COLUMNS, OLD_ROWS)
    old_rows, old_sum = rows(wh, LIVE), checksum(wh, LIVE)
    build_shadow(wh, "pc1")
    built = wh.checksums(SPEC, START, STOP, shadow=True)
    wh.replace_reference_table(SHADOW, COLUMNS, NEW_ROWS)
    new_rows = rows(wh, SHADOW)
    assert new_rows != old_rows

    result = wh.swap(SPEC, "pc1", DAYS, [Companion(LIVE, SHADOW)])

    assert (result.action, result.published) == ("swapped", (LIVE,))
    assert {d: target(wh)[d] for d in DAYS} == built
    assert rows(wh, LIVE) == new_rows
    backup = companion_backup(LIVE, "pc1")
    assert backup == f"{LIVE}__bfb_pc1"
    assert rows(wh, backup) == old_rows and checksum(wh, backup) == old_sum
    assert not wh.relation_exists(SHADOW)
    # A retry is answered from the swap log; the companions are not touched again.
    again = wh.swap(SPEC, "pc1", DAYS, [Companion(LIVE, SHADOW)])
    assert (again.action, again.published) == ("already_swapped", ())
    assert rows(wh, LIVE) == new_rows and rows(wh, backup) == old_rows


def test_rollback_restores_the_companion_and_the_target_exactly(wh: Wh) -> None:
    wh.replace_reference_table(LIVE, COLUMNS, OLD_ROWS)
    before_rows, before_sum, before_target = rows(wh, LIVE), checksum(wh, LIVE), target(wh)
    build_shadow(wh, "pc2")
    wh.replace_reference_table(SHADOW, COLUMNS, NEW_ROWS)
    wh.swap(SPEC, "pc2", DAYS, [Companion(LIVE, SHADOW)])
    assert target(wh) != before_target and rows(wh, LIVE) != before_rows

    result = wh.rollback(SPEC, "pc2")

    assert (result.action, result.restored) == ("rolled_back", (LIVE,))
    assert rows(wh, LIVE) == before_rows and checksum(wh, LIVE) == before_sum
    assert target(wh) == before_target
    assert not wh.relation_exists(companion_backup(LIVE, "pc2"))
    assert wh.rollback(SPEC, "pc2").action == "already_rolled_back"
    assert rows(wh, LIVE) == before_rows


def test_a_missing_companion_shadow_refuses_the_swap_and_changes_nothing(wh: Wh) -> None:
    wh.replace_reference_table(LIVE, COLUMNS, OLD_ROWS)
    before_rows, before_target = rows(wh, LIVE), target(wh)
    build_shadow(wh, "pc3")
    built = wh.checksums(SPEC, START, STOP, shadow=True)
    # The other companion's shadow exists: it must not be published either.
    wh.replace_reference_table("fct_weekly_revenue__bf_shadow", COLUMNS, NEW_ROWS)
    companions = [
        Companion("fct_weekly_revenue", "fct_weekly_revenue__bf_shadow"),
        Companion(LIVE, SHADOW),
    ]

    with pytest.raises(SwapRefused, match=rf"{SHADOW}, does not exist; run the downstream shadow"):
        wh.swap(SPEC, "pc3", DAYS, companions)

    assert target(wh) == before_target and rows(wh, LIVE) == before_rows
    assert wh.swap_state(SPEC, "pc3") is None
    assert wh.active_plan(SPEC.name) == "pc3"
    assert not wh.relation_exists("fct_weekly_revenue")
    assert wh.relation_exists("fct_weekly_revenue__bf_shadow")
    assert not wh.relation_exists(companion_backup(LIVE, "pc3"))
    assert wh.checksums(SPEC, START, STOP, shadow=True) == built  # the target's shadow is intact
    # Once the downstream shadow is built, the same swap goes through.
    wh.replace_reference_table(SHADOW, COLUMNS, NEW_ROWS)
    result = wh.swap(SPEC, "pc3", DAYS, companions)
    assert result.action == "swapped"
    assert result.published == ("fct_weekly_revenue", LIVE)
    assert {d: target(wh)[d] for d in DAYS} == built
    assert rows(wh, LIVE) == rows(wh, "fct_weekly_revenue") == sorted(NEW_ROWS)


def test_release_backup_drops_the_companion_backup(wh: Wh) -> None:
    wh.replace_reference_table(LIVE, COLUMNS, OLD_ROWS)
    build_shadow(wh, "pc4")
    wh.replace_reference_table(SHADOW, COLUMNS, NEW_ROWS)
    wh.swap(SPEC, "pc4", DAYS, [Companion(LIVE, SHADOW)])
    backup = companion_backup(LIVE, "pc4")
    assert wh.relation_exists(backup)

    assert wh.release_backup(SPEC, "pc4") == 2  # the target's backup weeks

    assert not wh.relation_exists(backup)
    assert rows(wh, LIVE) == sorted(NEW_ROWS)
    with pytest.raises(SwapRefused, match="cannot be rolled back"):
        wh.rollback(SPEC, "pc4")
    assert rows(wh, LIVE) == sorted(NEW_ROWS)


def test_a_companion_new_with_the_swap_is_published_and_dropped_by_the_rollback(wh: Wh) -> None:
    before_target = target(wh)
    build_shadow(wh, "pc5")
    wh.replace_reference_table(SHADOW, COLUMNS, NEW_ROWS)
    assert not wh.relation_exists(LIVE)

    result = wh.swap(SPEC, "pc5", DAYS, [Companion(LIVE, SHADOW)])

    assert result.published == (LIVE,)
    assert rows(wh, LIVE) == sorted(NEW_ROWS)
    assert not wh.relation_exists(SHADOW)
    assert not wh.relation_exists(companion_backup(LIVE, "pc5"))
    assert wh.rollback(SPEC, "pc5").restored == (LIVE,)
    assert not wh.relation_exists(LIVE)
    assert target(wh) == before_target


def test_a_missing_companion_backup_refuses_the_rollback_and_changes_nothing(wh: Wh) -> None:
    wh.replace_reference_table(LIVE, COLUMNS, OLD_ROWS)
    build_shadow(wh, "pc6")
    wh.replace_reference_table(SHADOW, COLUMNS, NEW_ROWS)
    wh.swap(SPEC, "pc6", DAYS, [Companion(LIVE, SHADOW)])
    after_target = target(wh)
    wh.execute(f"drop table {companion_backup(LIVE, 'pc6')}")

    with pytest.raises(SwapRefused, match=f"backup .*{LIVE}__bfb_pc6 of companion .* is missing"):
        wh.rollback(SPEC, "pc6")

    assert target(wh) == after_target and rows(wh, LIVE) == sorted(NEW_ROWS)
    assert wh.swap_state(SPEC, "pc6") == "swapped"


def test_companion_names_are_checked_before_any_sql(wh: Wh) -> None:
    build_shadow(wh, "pc7")
    before = target(wh)
    bad = [
        [Companion('x"; drop table orders_daily; --', SHADOW)],
        [Companion(LIVE, LIVE)],
        [Companion(SPEC.name, SHADOW)],
        [Companion(LIVE, f"{SPEC.name}__w2026w02")],
    ]
    for companions in bad:
        with pytest.raises(InvalidInput):
            wh.swap(SPEC, "pc7", DAYS, companions)
    assert target(wh) == before and wh.swap_state(SPEC, "pc7") is None


def test_the_backup_name_fits_postgres_and_stays_distinct() -> None:
    long_a, long_b = "a" * 60 + "_x", "a" * 60 + "_y"
    names = {companion_backup(n, "p0123456789") for n in (long_a, long_b, LIVE)}
    assert len(names) == 3 and all(len(n) <= 63 for n in names)
    assert companion_backup(long_a, "p0123456789") == companion_backup(long_a, "p0123456789")
    assert companion_backup(LIVE, "p0123456789") == f"{LIVE}__bfb_p0123456789"


def test_a_view_over_the_companion(wh: Wh) -> None:
    """DuckDB binds a view by name: it reads the published table. PostgreSQL binds it to the
    table itself, which the swap would rename to the backup: the swap refuses instead."""
    wh.replace_reference_table(LIVE, COLUMNS, OLD_ROWS)
    wh.execute(f"create view revenue_report as select * from {LIVE}")
    before_rows, before_target = rows(wh, LIVE), target(wh)
    build_shadow(wh, "pc8")
    wh.replace_reference_table(SHADOW, COLUMNS, NEW_ROWS)
    if isinstance(wh, PostgresWarehouse):
        with pytest.raises(SwapRefused, match=r"read by t_\w+\.revenue_report: PostgreSQL views"):
            wh.swap(SPEC, "pc8", DAYS, [Companion(LIVE, SHADOW)])
        assert rows(wh, LIVE) == before_rows and target(wh) == before_target
        assert wh.swap_state(SPEC, "pc8") is None and wh.relation_exists(SHADOW)
        return
    wh.swap(SPEC, "pc8", DAYS, [Companion(LIVE, SHADOW)])
    assert rows(wh, "revenue_report") == sorted(NEW_ROWS)
    wh.rollback(SPEC, "pc8")
    assert rows(wh, "revenue_report") == before_rows


def test_a_warehouse_from_before_companions_gets_their_table(wh: Wh) -> None:
    build_shadow(wh, "pc9")  # the metadata tables exist now
    wh.execute("drop table backfill_meta.swap_companions")
    wh.replace_reference_table(SHADOW, COLUMNS, NEW_ROWS)
    assert wh.swap(SPEC, "pc9", DAYS, [Companion(LIVE, SHADOW)]).published == (LIVE,)
    assert wh.rollback(SPEC, "pc9").restored == (LIVE,)
    assert not wh.relation_exists(LIVE)
