"""The reliability cases on a target with five years of history, on each warehouse: a swap killed
inside its transaction, a daily write against a swap, and a rollback that restores every day.

The target holds 1,827 days: on DuckDB in one plain table (a swap makes it a view over that
table, renamed to its base table, and the week tables it publishes, until its release folds them
back), on PostgreSQL in 261 ISO-week tables under six ISO-year tables.
The plan crosses a year boundary: it starts on a Wednesday of 2024-W52 and ends on the Tuesday of
2025-W03, and 2025-W01 begins on 2024-12-30, so its first and last weeks are partial and its
weeks sit under two ISO years. Every check compares all 1,827 days.

The swap runs in a child process that holds the table's writer lease, as every swap does, and is
made to wait inside its open transaction: on DuckDB by a hook after one of its renames, on
PostgreSQL behind a session reading the plan's last shadow week (as a long reader would).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg.sql
import pytest

from backfill_assets.example import orders as o
from backfill_assets.example.sources import land_fx_rates, land_raw_orders
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV, open_warehouse
from backfill_assets.service.lease import holder_for_command, writer_lease
from tests.reliability.harness import SPEC, Child, after_swap, expect_target, fault
from tests.reliability.pg_sessions import backend_alive, session, wait_until, waiting_backends

pytestmark = [pytest.mark.backends("embedded", "postgres"), pytest.mark.slow]

D = dt.date
FIRST, END = D(2021, 1, 4), D(2026, 1, 5)  # 2021-W01 .. 2026-W01: 261 ISO weeks
DAYS = (END - FIRST).days
PLAN_START, PLAN_DAYS = D(2024, 12, 25), 21  # Wed 2024-W52 .. Tue 2025-W03
PLAN = [PLAN_START + dt.timedelta(days=i) for i in range(PLAN_DAYS)]
PLAN_END = PLAN[-1] + dt.timedelta(days=1)
DAILY_DAY = D(2025, 1, 16)  # Thursday of 2025-W03: in a week the swap moves, not in the plan
PLAN_ID = "p5y"

CHILD_SWAP = """
import datetime as dt, os, sys
import dagster as dg
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV, open_warehouse
from backfill_assets.service.lease import holder_for_command, writer_lease

url = os.environ["WAREHOUSE"]
if url.startswith("postgresql"):
    from backfill_assets.lib.warehouse.postgres import PostgresWarehouse

    wh = PostgresWarehouse(url, lock_timeout_s=120, swap_lock_wait_s=60)
else:
    from tests.reliability.faults import install

    wh = open_warehouse(url, lock_timeout_s=120)

    def at_step(step):
        if step.startswith("renamed " + os.environ["PAUSE_AT"]):
            print("paused at " + step, flush=True)
            sys.stdin.readline()  # a line lets the swap go on; the test may SIGKILL it instead

    install(at_step, wh)
start, n = dt.date.fromisoformat(os.environ["START"]), int(os.environ["DAYS"])
days = [start + dt.timedelta(days=i) for i in range(n)]
plan = os.environ["PLAN_ID"]
holder = holder_for_command("swap", plan_id=plan)
with writer_lease(dg.DagsterInstance.ephemeral(), wh, ORDERS.spec.name, holder, wait_s=120):
    print("swapping", flush=True)
    wh.swap(ORDERS.spec, plan, days)
print("committed", flush=True)
"""


def _everything(wh: Warehouse) -> dict[dt.date, str]:
    return wh.checksums(SPEC, FIRST, END)


def _years(wh: Warehouse) -> dict[str, str] | None:
    """On PostgreSQL, every week table of the target with the table it is attached to."""
    if wh.dialect != "postgres":
        return None
    rows = wh.query(
        "select c.relname, p.relname from pg_partition_tree('orders_daily'::regclass) t "
        "join pg_class c on c.oid = t.relid join pg_class p on p.oid = t.parentrelid "
        "where t.isleaf and t.level > 0"
    )
    return dict(rows)


@contextmanager
def swap_waiting_inside(url: str, tmp_path: Path, name: str) -> Iterator[Child]:
    """A child holding the writer lease, inside the swap's open transaction with some weeks
    already moved, waiting. Leaving the block lets it go on; if the test killed it, leaving
    waits until its transaction is over."""
    env = {
        "WAREHOUSE": url,
        "START": PLAN_START.isoformat(),
        "DAYS": str(PLAN_DAYS),
        "PLAN_ID": PLAN_ID,
        "PAUSE_AT": "orders_daily__shadow__w2025w02",
    }
    if url.startswith("postgresql"):
        with session(url) as blocker:
            blocker.execute(
                psycopg.sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
                    psycopg.sql.Identifier("orders_daily__shadow__w2025w03")
                )
            )
            child = Child(CHILD_SWAP, env, tmp_path / f"{name}.log")
            child.wait_for("swapping")
            (pid,) = wait_until("the swap to wait for the reader", lambda: waiting_backends(url))
            yield child
        if child.proc.poll() is not None:  # killed: the server ends its transaction once it
            # notices the client is gone
            wait_until("the killed session to end", lambda: not backend_alive(url, pid))
        return
    child = Child(CHILD_SWAP, env, tmp_path / f"{name}.log")
    child.wait_for("paused at")
    yield child
    if child.proc.poll() is None:
        assert child.proc.stdin is not None
        child.proc.stdin.write("\n")
        child.proc.stdin.flush()


def test_five_years_a_killed_swap_a_daily_write_against_a_swap_and_an_exact_rollback(
    wh, instance, tmp_path
):
    url = os.environ[WAREHOUSE_ENV]
    land_fx_rates(wh)
    land_raw_orders(wh, FIRST, END, 2)
    wh.replace_partitions(SPEC, FIRST, END, build=o.ORDERS_DAILY_SQL_V1)
    assert wh.claim_plan(SPEC.name, PLAN_ID) == PLAN_ID
    wh.replace_partitions(
        SPEC, PLAN_START, PLAN_END, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id=PLAN_ID
    )  # fmt: skip
    old = _everything(wh)
    assert len(old) == DAYS == 1827
    shadow = wh.checksums(SPEC, PLAN_START, PLAN_END, shadow=True)
    assert sorted(shadow) == PLAN
    new = after_swap(old, shadow, PLAN)
    years = _years(wh)
    if years is not None:
        assert len(years) == 261 and len(set(years.values())) == 6
    else:
        assert wh.live_week_count(SPEC) == 0  # five years in one table

    # 1. A swap killed inside its transaction: the target is all old, and the plan swaps again.
    with swap_waiting_inside(url, tmp_path, "killed") as child:
        child.kill()
        fault()
    expect_target("five years, swap killed inside", _everything(wh), old)
    assert wh.swap_state(SPEC, PLAN_ID) is None

    # 2. A daily write against the swap. The day is in the plan's last week (a partial one, whose
    # other days the swap carries over from the live week), so a write that slipped in between
    # would be lost. It waits for the table's writer, then lands on the swapped week.
    land_raw_orders(wh, DAILY_DAY, DAILY_DAY + dt.timedelta(days=1), 5)
    daily_wh = open_warehouse(url, lock_timeout_s=120)
    errors: list[BaseException] = []

    def daily_write() -> None:
        try:
            holder = holder_for_command("daily")
            with writer_lease(instance, daily_wh, SPEC.name, holder, wait_s=120):
                daily_wh.replace_partitions(
                    SPEC, DAILY_DAY, DAILY_DAY + dt.timedelta(days=1), build=o.ORDERS_DAILY_SQL
                )
        except BaseException as e:  # asserted below
            errors.append(e)

    with swap_waiting_inside(url, tmp_path, "raced") as child:  # takes over the dead lease
        writer = threading.Thread(target=daily_write)
        writer.start()
        writer.join(timeout=2)
        assert writer.is_alive(), "the daily write did not wait for the swap"
    child.wait_for("committed", timeout=120)
    writer.join(timeout=120)
    assert not writer.is_alive() and not errors, errors
    after = _everything(wh)
    written = after[DAILY_DAY]
    assert written != old[DAILY_DAY] and written.startswith("5:"), written
    expect_target("five years, swapped with a daily write", after, {**new, DAILY_DAY: written})
    assert wh.swap_state(SPEC, PLAN_ID) == "swapped"
    assert _years(wh) == years

    # 3. The rollback restores every day exactly, and keeps the daily write outside the plan.
    assert wh.rollback(SPEC, PLAN_ID).action == "rolled_back"
    expect_target("five years, rolled back", _everything(wh), {**old, DAILY_DAY: written})
    assert _years(wh) == years

    # 4. A new plan swaps the range again and is released: the target keeps every day as the
    # swap left it; on DuckDB the swapped weeks fold back into the base table.
    rolled_back = _everything(wh)
    assert wh.claim_plan(SPEC.name, "p5y2") == "p5y2"
    wh.replace_partitions(
        SPEC, PLAN_START, PLAN_END, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id="p5y2"
    )  # fmt: skip
    shadow = wh.checksums(SPEC, PLAN_START, PLAN_END, shadow=True)
    assert wh.swap(SPEC, "p5y2", PLAN).action == "swapped"
    swapped = after_swap(rolled_back, shadow, PLAN)
    expect_target("five years, swapped again", _everything(wh), swapped)
    if years is None:
        assert wh.live_week_count(SPEC) == 4  # 2024-W52 .. 2025-W03
    assert wh.release_backup(SPEC, "p5y2") == 4
    expect_target("five years, released", _everything(wh), swapped)
    assert _years(wh) == years
    if years is None:
        assert wh.live_week_count(SPEC) == 0
