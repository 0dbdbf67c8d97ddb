"""Contention: the DuckDB file held by another process, and two plans for one target at once."""

from __future__ import annotations

import json
import time

import pytest

from backfill_assets.cli import main
from backfill_assets.errors import ExecutionRefused, WarehouseError
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.states import PlanStatus
from backfill_assets.lib.warehouse.connect import LOCK_TIMEOUT_ENV
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.approval import approve_plan
from backfill_assets.service.plans import load_plan
from backfill_assets.service.swap import abandon_plan
from tests.conftest import HISTORY_END, HISTORY_START, make_plan
from tests.reliability.harness import Child, bad_input, expect_target, fault, fingerprint, state
from tests.reliability.harness import target_checksums as checksums

CHILD_HOLD = """
import os, sys, duckdb
con = duckdb.connect(os.environ["WAREHOUSE"])  # a write connection, held until stdin closes
print("held", flush=True)
sys.stdin.read()
con.close()
print("released", flush=True)
"""


@pytest.mark.slow
def test_a_warehouse_held_by_another_process_is_refused_within_the_bound_and_never_corrupted(
    defs, instance, history, warehouse_path, tmp_path, capsys, monkeypatch
):
    plan = make_plan(defs, instance, history, "2026-01-05", "2026-01-18")
    old = checksums(history, HISTORY_START, HISTORY_END)
    before = fingerprint(warehouse_path)
    holder = Child(CHILD_HOLD, {"WAREHOUSE": str(warehouse_path)}, tmp_path / "holder.log")
    holder.wait_for("held")
    fault()
    try:
        for read_only in (False, True):  # DuckDB refuses even a read-only open meanwhile
            t0 = time.monotonic()
            wh = DuckDBWarehouse(warehouse_path, lock_timeout_s=1)
            with pytest.raises(WarehouseError, match="held by another process") as err:
                wh.query("select 1") if read_only else wh.execute("select 1")
            waited = time.monotonic() - t0
            assert 1 <= waited < 4, f"waited {waited:.1f}s for a 1s bound"
            assert "stayed locked for 1s" in str(err.value)

        monkeypatch.setenv(LOCK_TIMEOUT_ENV, "1")
        capsys.readouterr()
        assert main(["abandon", plan.plan_id]) == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith("refused: ") and "held by another process" in last
        assert (
            load_plan(instance, plan.plan_id)[1] == PlanStatus.APPROVED
        )  # nothing recorded either
        # Regression: planning fell back to default row estimates when the warehouse was held.
        args = [
            "plan",
            "orders_daily",
            "--start",
            "2026-01-05",
            "--end",
            "2026-01-11",
            "--window",
            "02:00-06:00",
            "--rollback",
            "backup",
        ]
        assert main(args) == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith("refused: ") and "held by another process" in last
    finally:
        assert holder.proc.stdin is not None
        holder.proc.stdin.close()
        holder.wait_for("released")
        holder.reap()

    assert fingerprint(warehouse_path) == before
    expect_target(
        "warehouse held by another process", checksums(history, HISTORY_START, HISTORY_END), old
    )
    assert main(["abandon", plan.plan_id]) == 0  # after release everything works
    assert load_plan(instance, plan.plan_id)[1] == PlanStatus.ABANDONED


def test_a_second_plan_for_the_same_target_is_refused_until_the_first_is_abandoned(
    defs, instance, history, warehouse_path, tmp_path, capsys
):
    first = make_plan(defs, instance, history, "2026-01-05", "2026-01-11")
    second = make_plan(defs, instance, history, "2026-01-12", "2026-01-18", approve=False)
    before = state(instance, warehouse_path)

    with pytest.raises(ExecutionRefused, match=f"plan {first.plan_id} for orders_daily is still"):
        approve_plan(instance, history, ORDERS, second, "tests")
    path = tmp_path / "second.json"
    path.write_text(second.to_json())
    assert main(["approve", str(path)]) == 2
    assert f"abandon {first.plan_id}" in capsys.readouterr().err
    bad_input(2)
    assert state(instance, warehouse_path) == before

    abandon_plan(instance, {ORDERS.key: ORDERS}, history, first.plan_id)
    assert approve_plan(instance, history, ORDERS, second, "tests") == PlanStatus.APPROVED
    # Approving the same plan again is idempotent, not a second active plan.
    assert approve_plan(instance, history, ORDERS, second, "tests") == PlanStatus.APPROVED
    third = make_plan(defs, instance, history, "2026-01-05", "2026-01-18", approve=False)
    with pytest.raises(ExecutionRefused, match=f"plan {second.plan_id}"):
        approve_plan(instance, history, ORDERS, third, "tests")
    assert json.loads(path.read_text())["plan_id"] == second.plan_id
