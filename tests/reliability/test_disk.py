"""A warehouse whose disk fills up, or that becomes read-only, during a shadow write.

The warehouse lives on a small tmpfs the test mounts (the tests run as root, as CI does): it is
shrunk to what the file already holds so the batch's write cannot fit, or remounted read-only.
The batch must stop with a clear error (exit 2 in the CLI, not a gate verdict), the target must
be untouched and the file must open again, and once space is back (or the file writable) the
same command completes the plan.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backfill_assets.errors import WarehouseError
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.swap import perform_rollback, perform_swap
from tests.conftest import HISTORY_END, HISTORY_START, make_plan
from tests.helpers import execute
from tests.reliability.harness import (
    SPEC,
    after_swap,
    expect_target,
    fault,
    fingerprint,
    target_checksums,
)

pytestmark = pytest.mark.slow
START, END = "2026-01-07", "2026-01-18"


def _mount(mnt: Path, options: str) -> None:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"mounting a tmpfs needs root: {done.stderr}"


def _remount(mnt: Path, options: str) -> None:
    done = subprocess.run(
        ["mount", "-o", f"remount,{options}", str(mnt)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    _mount(mnt, "size=64m")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def moved(defs, instance, history, warehouse_path, small_disk, monkeypatch):
    """The history warehouse and an approved plan, the file moved onto the small disk."""
    plan = make_plan(defs, instance, history, START, END)
    path = small_disk / "warehouse.duckdb"
    with DuckDBWarehouse(warehouse_path).connect() as con:
        con.execute("CHECKPOINT")
    shutil.copy(warehouse_path, path)
    monkeypatch.setenv(WAREHOUSE_ENV, str(path))
    return plan, path


def _used_kib(mnt: Path) -> int:
    out = subprocess.run(["du", "-sk", str(mnt)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def _finish(case: str, defs, instance, plan, path: Path, old) -> None:
    """Once the disk is fine again: the same plan runs, swaps and rolls back cleanly."""
    wh = DuckDBWarehouse(path, lock_timeout_s=5)
    reports = execute(defs, instance, wh, plan)
    assert [r.status for r in reports] == ["passed", "passed"], reports
    shadow = wh.checksums(SPEC, plan.start, plan.end_exclusive, shadow=True)
    perform_swap(instance, _orders(), wh, plan.plan_id)
    days = [dt.date.fromisoformat(p) for p in plan.partitions]
    expect_target(f"{case}, swapped", target_checksums(wh, HISTORY_START, HISTORY_END),
                  after_swap(old, shadow, days))  # fmt: skip
    perform_rollback(instance, _orders(), wh, plan.plan_id)
    expect_target(f"{case}, rolled back", target_checksums(wh, HISTORY_START, HISTORY_END), old)


def _orders():
    from backfill_assets.example.declaration import ORDERS

    return ORDERS


def test_a_full_disk_during_a_shadow_write_stops_cleanly_and_a_rerun_completes(
    defs, instance, moved, small_disk
):
    plan, path = moved
    wh = DuckDBWarehouse(path, lock_timeout_s=5)
    old = target_checksums(wh, HISTORY_START, HISTORY_END)
    # Shrink the disk to what it holds now: the batch's shadow week cannot be written.
    _remount(small_disk, f"size={_used_kib(small_disk) + 16}k")
    fault()
    with pytest.raises(WarehouseError, match="disk is full") as err:
        execute(defs, instance, wh, plan)
    assert "Nothing of this write was committed" in str(err.value)
    assert "halted" not in str(err.value)
    expect_target("disk full mid shadow write", target_checksums(wh, HISTORY_START, HISTORY_END),
                  old)  # fmt: skip
    _remount(small_disk, "size=256m")  # space is back
    _finish("disk full, then space again", defs, instance, plan, path, old)


def test_a_read_only_warehouse_during_a_shadow_write_stops_cleanly_and_a_rerun_completes(
    defs, instance, moved, small_disk
):
    plan, path = moved
    wh = DuckDBWarehouse(path, lock_timeout_s=5)
    old = target_checksums(wh, HISTORY_START, HISTORY_END)
    before = fingerprint(path)
    _remount(small_disk, "ro")
    fault()
    with pytest.raises(WarehouseError, match="read-only"):
        execute(defs, instance, wh, plan)
    _remount(small_disk, "rw")
    assert fingerprint(path) == before  # not a byte of meaning changed
    _finish("read-only, then writable", defs, instance, plan, path, old)


def test_the_cli_reports_a_full_disk_with_exit_2(defs, instance, moved, small_disk, capsys):
    from backfill_assets.cli import main

    plan, path = moved
    _remount(small_disk, f"size={_used_kib(small_disk) + 16}k")
    fault()
    capsys.readouterr()
    code = main(["run", plan.plan_id, "--ignore-window"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert err[-1].startswith("refused: batch 1 of plan") and "disk is full" in err[-1]
    _remount(small_disk, "size=256m")
    assert os.path.exists(path)
    assert main(["run", plan.plan_id, "--ignore-window"]) == 0
