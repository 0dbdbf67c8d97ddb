"""Faults and races on a real PostgreSQL server: readers during swaps, a swap killed half-way, a
reader that holds the table past the swap's bound, a connection dropped in the middle of a batch.

The swap's locks are made to wait by a second session that holds a lock on one of the tables
(as a long reader would), never by hooks in the adapter: the child that is killed is inside a
real, open transaction, blocked in a real lock wait.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from typing import Any

import dagster as dg
import psycopg
import psycopg.sql
import pytest

from backfill_assets.errors import WarehouseError
from backfill_assets.example import orders as o
from backfill_assets.example.sources import land_fx_rates, land_raw_orders
from backfill_assets.lib.warehouse.connect import open_warehouse
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
from backfill_assets.service.lease import holder_for_command
from tests.reliability.harness import SPEC, Child, after_swap, expect_target, fault
from tests.reliability.pg_sessions import backend_alive, session, wait_until, waiting_backends

D = dt.date
FIRST, END = D(2026, 1, 1), D(2026, 2, 1)
N = 200
PLAN_DAYS = [D(2026, 1, 7) + dt.timedelta(days=i) for i in range(19)]  # Wed W02 .. Sun W04
PLAN_START, PLAN_END = PLAN_DAYS[0], PLAN_DAYS[-1] + dt.timedelta(days=1)
LAST_SHADOW_WEEK = "orders_daily__shadow__w2026w04"


@pytest.fixture
def pg(postgres_url: str) -> PostgresWarehouse:
    """January's orders, orders_daily by v1, and plan pk's shadow by v2 over three weeks."""
    wh = open_warehouse(postgres_url, lock_timeout_s=10)
    assert isinstance(wh, PostgresWarehouse)
    land_fx_rates(wh)
    land_raw_orders(wh, FIRST, END, N)
    wh.replace_partitions(SPEC, FIRST, END, build=o.ORDERS_DAILY_SQL_V1)
    assert wh.claim_plan(SPEC.name, "pk") == "pk"
    wh.replace_partitions(
        SPEC, PLAN_START, PLAN_END, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id="pk"
    )
    return wh


def states(wh: PostgresWarehouse) -> tuple[dict[dt.date, str], dict[dt.date, str]]:
    """The target all old (now), and all new (what the swap must give)."""
    old = wh.checksums(SPEC, FIRST, END)
    new = after_swap(old, wh.checksums(SPEC, PLAN_START, PLAN_END, shadow=True), PLAN_DAYS)
    return old, new


def test_readers_during_swaps_and_rollbacks_see_all_old_or_all_new_never_a_mix(pg, postgres_url):
    old, new = states(pg)
    seen: list[str] = []
    errors: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        wh = open_warehouse(postgres_url)
        while not stop.is_set():
            try:
                now = wh.checksums(SPEC, FIRST, END)  # one statement: one snapshot
            except Exception as e:  # any error breaks the promise
                errors.append(repr(e))
                continue
            seen.append("old" if now == old else "new" if now == new else "MIXED")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(5):
            plan = "pk" if i == 0 else f"pk{i}"
            if i:  # a rolled-back plan is over: each round is a new plan with a new shadow
                assert pg.claim_plan(SPEC.name, plan) == plan
                pg.replace_partitions(
                    SPEC, PLAN_START, PLAN_END, build=o.ORDERS_DAILY_SQL, shadow=True,
                    plan_id=plan,
                )  # fmt: skip
            assert pg.swap(SPEC, plan, PLAN_DAYS).action == "swapped"
            expect_target("postgres swap under readers", pg.checksums(SPEC, FIRST, END), new)
            assert pg.rollback(SPEC, plan).action == "rolled_back"
            expect_target("postgres rollback under readers", pg.checksums(SPEC, FIRST, END), old)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors[:3]
    assert "MIXED" not in seen
    assert {"old", "new"} <= set(seen)


CHILD_SWAP = """
import os
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
import datetime as dt

wh = PostgresWarehouse(os.environ["URL"], lock_timeout_s=120, swap_lock_wait_s=60)
days = [dt.date(2026, 1, 7) + dt.timedelta(days=i) for i in range(19)]
print("swapping", flush=True)
wh.swap(ORDERS.spec, "pk", days)
print("committed", flush=True)
"""


def test_a_swap_killed_half_way_leaves_the_target_all_old_and_swaps_again(
    pg, postgres_url, tmp_path
):
    old, new = states(pg)
    with session(postgres_url) as blocker:
        # A long reader of the plan's last shadow week: the swap moves the first two weeks
        # inside its transaction, then waits for this lock.
        blocker.execute(
            psycopg.sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
                psycopg.sql.Identifier(LAST_SHADOW_WEEK)
            )
        )
        child = Child(CHILD_SWAP, {"URL": postgres_url}, tmp_path / "swap.log")
        child.wait_for("swapping")
        (pid,) = wait_until("the swap to wait for the lock", lambda: waiting_backends(postgres_url))
        with psycopg.connect(postgres_url.split("?")[0], autocommit=True) as probe:
            query = probe.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,))
            assert "DETACH PARTITION" in (query.fetchone() or [""])[0]
        child.kill()  # SIGKILL: its transaction is open, two weeks already moved in it
    # The server ends the killed session's transaction once it notices the client is gone.
    wait_until(
        "the killed session to end",
        lambda: not backend_alive(postgres_url, pid),
    )
    expect_target("postgres swap killed half-way", pg.checksums(SPEC, FIRST, END), old)
    assert pg.swap_state(SPEC, "pk") is None
    backups = pg.query(
        "select count(*) from information_schema.tables where table_schema = current_schema() "
        "and table_name like '%backup%'"
    )
    assert backups == [(0,)]
    assert pg.swap(SPEC, "pk", PLAN_DAYS).action == "swapped"
    expect_target("postgres swap after the killed one", pg.checksums(SPEC, FIRST, END), new)
    pg.rollback(SPEC, "pk")
    expect_target("postgres rollback after the killed swap", pg.checksums(SPEC, FIRST, END), old)


def test_a_live_write_between_the_swaps_copy_and_its_moves_waits_and_is_not_lost(
    pg, postgres_url, tmp_path
):
    """Even from a writer that skips the writer lease. Early in its transaction the swap copies
    the days of a partial week outside the plan (here Jan 5-6) from the live week into the
    shadow week, and only later moves the weeks. A live write of Jan 6 committed in between
    would go to the backup with the old live week, and the target would keep the copy made
    before it. Every write transaction of a table holds the table's write lock until it ends,
    so the write waits for the swap and then lands on the swapped week."""
    old, new = states(pg)
    day = D(2026, 1, 6)
    land_raw_orders(pg, day, day + dt.timedelta(days=1), 7)
    outcome: list[Any] = []
    with session(postgres_url) as blocker:
        # The swap records each week in swap_log right after copying its days: it waits there,
        # with week 2's days copied.
        blocker.execute("LOCK TABLE backfill_meta.swap_log IN SHARE MODE")
        child = Child(CHILD_SWAP, {"URL": postgres_url}, tmp_path / "swap.log")
        child.wait_for("swapping")
        wait_until("the swap to wait for swap_log", lambda: waiting_backends(postgres_url))

        def live_write() -> None:
            try:
                outcome.append(
                    open_warehouse(postgres_url, lock_timeout_s=60).replace_partitions(
                        SPEC, day, day + dt.timedelta(days=1), build=o.ORDERS_DAILY_SQL
                    )
                )
            except Exception as e:  # asserted below
                outcome.append(e)

        writer = threading.Thread(target=live_write)
        writer.start()
        writer.join(timeout=2)
        assert writer.is_alive(), f"the live write did not wait for the swap: {outcome}"
    child.wait_for("committed")
    writer.join(timeout=60)
    assert outcome == [{day: 7}], outcome
    after = pg.checksums(SPEC, FIRST, END)
    written = after[day]
    assert written.startswith("7:"), written
    expect_target("postgres live write against a swap", after, {**new, day: written})
    pg.rollback(SPEC, "pk")
    expect_target("postgres rollback after the live write", pg.checksums(SPEC, FIRST, END),
                  {**old, day: written})  # fmt: skip


def test_a_write_of_one_table_waiting_inside_its_transaction_holds_up_no_other_table(
    pg, postgres_url
):
    """The write lock is per table: while a shadow write of orders_daily waits inside its
    transaction (behind a long reader), another table of the same database is written, its
    writer lease claimed and a plan approved for it, none of them waiting (their lock bound is
    5 s: when one lock was shared by every table's writes, the first write timed out)."""
    other = dataclasses.replace(SPEC, name="orders_copy")
    quick = open_warehouse(postgres_url, lock_timeout_s=5)
    quick.ensure_table(other)
    outcome: list[Any] = []
    with session(postgres_url) as reader:
        reader.execute("LOCK TABLE orders_daily__shadow IN SHARE MODE")

        def shadow_write() -> None:
            try:
                build = o.ORDERS_DAILY_SQL
                outcome.append(
                    pg.replace_partitions(
                        SPEC, PLAN_START, PLAN_END, build=build, shadow=True, plan_id="pk"
                    )
                )
            except Exception as e:  # asserted below
                outcome.append(e)

        writer = threading.Thread(target=shadow_write)
        writer.start()
        wait_until("the shadow write to wait", lambda: waiting_backends(postgres_url))
        assert quick.replace_partitions(other, FIRST, END, build=o.ORDERS_DAILY_SQL_V1)
        holder = holder_for_command("daily")
        assert quick.claim_writer(other.name, holder).holder_id == holder.holder_id
        assert quick.claim_plan(other.name, "pother") == "pother"
        assert writer.is_alive() and not outcome
    writer.join(timeout=60)
    assert len(outcome) == 1 and isinstance(outcome[0], dict), outcome


def test_a_reader_holding_the_table_past_the_bound_fails_the_swap_clearly(pg, postgres_url):
    old, new = states(pg)
    bounded = PostgresWarehouse(postgres_url, lock_timeout_s=2, swap_lock_wait_s=0.3)
    with session(postgres_url) as reader:
        reader.execute("SELECT count(*) FROM orders_daily").fetchall()  # holds ACCESS SHARE
        fault()
        t0 = time.monotonic()
        with pytest.raises(WarehouseError) as refused:
            bounded.swap(SPEC, "pk", PLAN_DAYS)
        took = time.monotonic() - t0
        message = str(refused.value)
        assert "the swap of orders_daily waited 2s for sessions using it" in message
        assert "nothing was changed" in message and "Held by: pid" in message
        assert took < 10
        # Other readers were never blocked for longer than one attempt meanwhile.
        expect_target("postgres swap refused behind a reader", pg.checksums(SPEC, FIRST, END), old)
    assert pg.swap_state(SPEC, "pk") is None
    assert bounded.swap(SPEC, "pk", PLAN_DAYS).action == "swapped"  # once the reader is gone
    expect_target("postgres swap after the reader left", pg.checksums(SPEC, FIRST, END), new)


def test_a_session_holding_only_the_tables_write_lock_is_named_when_the_swap_gives_up(
    pg, postgres_url
):
    """A writer that skipped the lease holds, between its statements, the table's write lock
    and maybe none of its relations: the refusal still names it."""
    old, new = states(pg)
    bounded = PostgresWarehouse(postgres_url, lock_timeout_s=1, swap_lock_wait_s=0.3)
    with session(postgres_url) as writer:
        writer.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (pg._write_lock(SPEC),))
        pid = writer.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        fault()
        with pytest.raises(WarehouseError) as refused:
            bounded.swap(SPEC, "pk", PLAN_DAYS)
        message = str(refused.value)
        assert "nothing was changed" in message
        assert f"Held by: pid {pid} (idle in transaction, " in message
        expect_target(
            "postgres swap refused behind the write lock", pg.checksums(SPEC, FIRST, END), old
        )
    assert pg.swap_state(SPEC, "pk") is None
    assert bounded.swap(SPEC, "pk", PLAN_DAYS).action == "swapped"  # once the writer is gone
    expect_target("postgres swap after the writer left", pg.checksums(SPEC, FIRST, END), new)


@pytest.mark.backends("postgres")
def test_a_connection_dropped_mid_batch_fails_the_batch_and_a_rerun_resumes(
    defs, instance, history, backend, postgres_url
):
    from backfill_assets.example.declaration import ORDERS
    from tests.conftest import HISTORY_END, HISTORY_START, make_plan
    from tests.helpers import execute

    wh, url = history, postgres_url
    assert wh.dialect == "postgres"
    plan = make_plan(defs, instance, wh, "2026-01-05", "2026-01-18")  # two whole weeks
    old = wh.checksums(SPEC, HISTORY_START, HISTORY_END + dt.timedelta(days=1))
    wh.ensure_table(SPEC)
    outcome: list[Any] = []
    with session(url) as blocker:
        # Writes of the shadow wait behind this lock; the batch's connection is then dropped.
        blocker.execute(
            psycopg.sql.SQL("LOCK TABLE {} IN SHARE MODE").format(
                psycopg.sql.Identifier(ORDERS.spec.shadow_name)
            )
        )

        def run() -> None:
            try:
                outcome.append(execute(defs, instance, wh, plan))
            except Exception as e:  # asserted below
                outcome.append(e)

        worker = threading.Thread(target=run)
        worker.start()
        (pid,) = wait_until("the batch to wait for the lock", lambda: waiting_backends(url))
        with psycopg.connect(url.split("?")[0], autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        fault()
        worker.join(timeout=120)
    (failed,) = outcome
    assert isinstance(failed, WarehouseError), failed
    assert "the connection failed mid-write" in str(failed)
    assert "nothing of this write was committed" in str(failed)
    assert wh.checksums(SPEC, HISTORY_START, HISTORY_END + dt.timedelta(days=1)) == old
    # The same plan, run again: both batches pass, once each.
    reports = execute(defs, instance, wh, plan)
    assert [r.status for r in reports] == ["passed", "passed"]
    runs = instance.get_runs(dg.RunsFilter(tags={"backfill_assets/plan_id": plan.plan_id}))
    ok = [r for r in runs if r.status == dg.DagsterRunStatus.SUCCESS]
    assert sorted(r.tags["backfill_assets/batch"] for r in ok) == ["1", "2"]
    assert wh.checksums(SPEC, HISTORY_START, HISTORY_END + dt.timedelta(days=1)) == old
