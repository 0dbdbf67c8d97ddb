"""One state of record: no click and no crash may cost a swapped plan its rollback.

An independent probe found the live table never wrong, but the bookkeeping around it lost: a
plan's state lived in Dagster's event log of `backfill_plans` and in the warehouse, and nothing
reconciled them. Each case it reproduced is a test here:

- the UI's "Report materialization event" on a plan's partition replaced the plan's record, and
  every command then lost the plan (`doctor --repair` even freed its table while its backup
  lived, so a second plan could swap over it); "Wipe materializations" erased it the same way;
- a process killed right after the warehouse committed a swap, a rollback, a release or an
  abandon, before Dagster recorded it, left every later command acting on the old status.

The warehouse is now the state of record. The crash is injected exactly there: a child runs the
real command, and the instance's record of the new status kills it (SIGKILL) as it starts.
Then every command a user might run next is run, and each must tell the truth, with the
rollback still restoring the exact pre-swap checksums.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from backfill_assets.cli import common, main
from backfill_assets.constants import PLANS_ASSET
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.planning.plan import BackfillPlan
from tests.conftest import NOW, dagster_database, dagster_storage_url, make_plan, seed_home
from tests.reliability.harness import (
    PROJECT_ROOT,
    SPEC,
    Child,
    after_swap,
    expect_target,
    fault,
    record_case,
    target_checksums,
)

pytestmark = pytest.mark.backends("embedded", "postgres")

FIRST, LAST = dt.date(2026, 1, 1), dt.date(2026, 1, 21)
WEEK2 = ("2026-01-05", "2026-01-11")  # ISO week 2026-W02: one batch
WEEK3 = ("2026-01-12", "2026-01-18")
PLAN_KEY = dg.AssetKey(PLANS_ASSET)


@pytest.fixture
def instance(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A real instance with the shipped concurrency settings, on the backend's storage (this
    folder's conftest has SQLite alone): Dagster's PostgreSQL storage with the PostgreSQL
    warehouse."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shipped = yaml.safe_load((PROJECT_ROOT / "dagster_home" / "dagster.yaml").read_text())
    overrides: dict[str, Any] = {"concurrency": shipped["concurrency"]}
    if backend == "postgres":
        url = dagster_database(request, home)
        overrides["storage"] = {"postgres": {"postgres_url": dagster_storage_url(url)}}
    else:
        seed_home(request, home)
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as inst:
        yield inst


class Cli:
    """`backfill-assets` in this process, as an operator runs it next, with its output."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(list(args))
        out = self.capsys.readouterr()
        return code, out.out, out.err

    def ok(self, *args: str) -> str:
        code, out, err = self(*args)
        assert code == 0, f"{args}: exit {code}: {err[-800:]}"
        return out

    def refused(self, needle: str, *args: str) -> str:
        code, _, err = self(*args)
        assert code == 2, f"{args}: exit {code}, not refused: {err[-800:]}"
        line = err.strip().splitlines()[-1]
        assert line.startswith("refused: ") and needle in line, line
        return line

    def status(self, plan_id: str) -> str:
        """The plan's status as `status` tells it (its first line ends with it)."""
        first = self.ok("status", plan_id).splitlines()[0]
        return first.rsplit(": ", 1)[1].split(" ")[0]

    def listed(self, plan_id: str) -> str:
        rows = json.loads(self.ok("list", "--format", "json"))
        return next(r["status"] for r in rows if r["plan_id"] == plan_id)

    def stale_days(self, tmp: Path) -> set[str]:
        """The partitions `plan --stale` proposes to backfill."""
        out = tmp / f"stale-{dt.datetime.now().timestamp()}.json"
        self.ok("plan", ORDERS.key, "--stale", "--window", "02:00-23:00", "--rollback",
                "backup", "--out", str(out))  # fmt: skip
        files = [out] if out.exists() else sorted(tmp.glob(f"{out.stem}-*.json"))
        return {p for f in files for p in json.loads(f.read_text())["partitions"]}

    def doctor_finds_nothing(self) -> None:
        assert "nothing wrong found" in self.ok("doctor")


CHILD = """
import os, signal, sys
import backfill_assets.service.swap as swap
from backfill_assets.cli import main

recorded = swap.record_status

def record_status(instance, plan, status, **kw):
    # The warehouse has committed; the instance has not recorded it yet: die exactly here.
    if str(status) == os.environ["DIE_AT"]:
        os.write(1, b"committed\\n")  # fd 1: the command sends sys.stdout to its log here
        os.kill(os.getpid(), signal.SIGKILL)
    return recorded(instance, plan, status, **kw)

swap.record_status = record_status
sys.exit(main(os.environ["ARGS"].split()))
"""


def crash(tmp: Path, status: str, *args: str) -> None:
    """Run `backfill-assets ARGS` in a child that dies by SIGKILL between the warehouse's commit
    and the instance's record of `status`."""
    child = Child(CHILD, {"DIE_AT": status, "ARGS": " ".join(args)}, tmp / f"{args[0]}.log")
    child.wait_for("committed", timeout=240)
    assert child.reap() == -9, child.tail()
    fault()


def plan_file(defs: Any, instance: Any, wh: Any, tmp: Path, rng: tuple[str, str], window: str):
    plan = make_plan(defs, instance, wh, *rng, approve=False, window=window)
    path = tmp / f"{plan.plan_id}.json"
    path.write_text(plan.to_json())
    return plan, str(path)


def target(wh: Any) -> dict[dt.date, str]:
    return target_checksums(wh, FIRST, LAST)


def days(plan: BackfillPlan) -> list[dt.date]:
    return [dt.date.fromisoformat(p) for p in plan.partitions]


def test_a_crash_between_the_warehouse_and_the_instance_leaves_every_command_telling_the_truth(
    defs, instance, history, capsys, monkeypatch, tmp_path, backend
):
    monkeypatch.setattr(common, "_now", lambda: NOW)
    run = Cli(capsys)
    wh = history
    old = target(wh)
    p1, p1_file = plan_file(defs, instance, wh, tmp_path, WEEK2, "02:00-23:00")
    run.ok("approve", p1_file)
    run.ok("run", p1.plan_id)
    shadow = wh.checksums(SPEC, p1.start, p1.end + dt.timedelta(days=1), shadow=True)
    new = after_swap(old, shadow, days(p1))
    assert new != old

    # 1. The swap's commit, then the process is gone.
    crash(tmp_path, "swapped", "swap", p1.plan_id, "--no-refresh")
    expect_target(f"{backend}: crash after the swap's commit", target(wh), new)
    code, out, err = run("status", p1.plan_id)
    assert code == 0 and out.splitlines()[0].endswith(": swapped"), out
    assert f"recorded from the warehouse: {p1.plan_id} swapped" in err
    assert run.listed(p1.plan_id) == "swapped"
    run.refused("roll it back", "abandon", p1.plan_id)
    again = json.loads(run.ok("swap", p1.plan_id, "--no-refresh", "--format", "json"))
    assert again["partitions"] == 0  # already swapped: nothing moved
    assert "swapped" in run.ok("approve", p1_file)
    run.doctor_finds_nothing()
    # The swapped days were built by the table's code version now: not stale.
    stale = run.stale_days(tmp_path)
    assert stale and not stale & set(p1.partitions)
    record_case(8)

    # 2. The rollback's commit, then the process is gone.
    crash(tmp_path, "rolled_back", "rollback", p1.plan_id, "--no-refresh")
    expect_target(f"{backend}: crash after the rollback's commit", target(wh), old)
    assert run.status(p1.plan_id) == "rolled_back"
    assert run.listed(p1.plan_id) == "rolled_back"
    run.refused("rolled_back", "release", p1.plan_id)
    again = json.loads(run.ok("rollback", p1.plan_id, "--no-refresh", "--format", "json"))
    assert again["partitions"] == 0  # already rolled back: nothing moved
    expect_target(f"{backend}: rollback again", target(wh), old)
    run.refused("rolled_back", "abandon", p1.plan_id)
    run.refused("rolled_back", "swap", p1.plan_id)
    run.refused("already rolled_back", "approve", p1_file)
    run.doctor_finds_nothing()
    # The rolled-back days hold the old version's rows again: stale.
    assert set(p1.partitions) <= run.stale_days(tmp_path)
    record_case(9)

    # 3. A release's commit, then the process is gone.
    p2, p2_file = plan_file(defs, instance, wh, tmp_path, WEEK3, "02:00-23:00")
    run.ok("approve", p2_file)
    run.ok("run", p2.plan_id)
    run.ok("swap", p2.plan_id, "--no-refresh")
    swapped = target(wh)
    crash(tmp_path, "released", "release", p2.plan_id)
    assert run.status(p2.plan_id) == "released"
    assert run.listed(p2.plan_id) == "released"
    run.refused("released", "rollback", p2.plan_id)
    run.refused("released", "release", p2.plan_id)
    run.refused("released", "abandon", p2.plan_id)
    run.refused("released", "swap", p2.plan_id)
    run.refused("already released", "approve", p2_file)
    run.doctor_finds_nothing()
    expect_target(f"{backend}: crash after the release's commit", target(wh), swapped)
    assert not run.stale_days(tmp_path) & set(p2.partitions)
    record_case(9)

    # 4. An abandon's commit, then the process is gone.
    p3, p3_file = plan_file(defs, instance, wh, tmp_path, WEEK2, "03:00-23:00")
    run.ok("approve", p3_file)
    run.ok("run", p3.plan_id)
    crash(tmp_path, "abandoned", "abandon", p3.plan_id)
    assert run.status(p3.plan_id) == "abandoned"
    assert run.listed(p3.plan_id) == "abandoned"
    run.refused("abandoned", "swap", p3.plan_id)
    run.refused("abandoned", "rollback", p3.plan_id)
    run.refused("abandoned", "release", p3.plan_id)
    run.refused("already abandoned", "approve", p3_file)
    run.doctor_finds_nothing()
    expect_target(f"{backend}: crash after the abandon's commit", target(wh), swapped)
    # The table is free for the next plan.
    _, p4_file = plan_file(defs, instance, wh, tmp_path, WEEK2, "04:00-23:00")
    assert "approved" in run.ok("approve", p4_file)
    record_case(8)


def test_a_reported_or_wiped_plan_record_costs_a_swapped_plan_nothing(
    defs, instance, history, capsys, monkeypatch, tmp_path, backend
):
    monkeypatch.setattr(common, "_now", lambda: NOW)
    run = Cli(capsys)
    wh = history
    old = target(wh)
    p1, p1_file = plan_file(defs, instance, wh, tmp_path, WEEK2, "02:00-23:00")
    run.ok("approve", p1_file)
    run.ok("run", p1.plan_id)
    run.ok("swap", p1.plan_id, "--no-refresh")
    new = target(wh)

    # The UI's "Report materialization event" on the plan's partition (what GraphQL's
    # reportRunlessAssetEvents records: a description, no metadata) is not a plan record.
    instance.report_runless_asset_event(
        dg.AssetMaterialization(PLAN_KEY, partition=p1.plan_id, description="reported in the UI")
    )
    assert run.status(p1.plan_id) == "swapped"
    assert run.listed(p1.plan_id) == "swapped"
    run.doctor_finds_nothing()
    record_case(3)

    # "Wipe materializations" of backfill_plans: the instance loses every record of the plan.
    instance.wipe_assets([PLAN_KEY])
    code, out, _ = run("doctor")
    assert code == 0 and f"plan {p1.plan_id} of {ORDERS.key} is swapped in the warehouse" in out
    run.ok("doctor", "--repair")
    assert wh.active_plan(ORDERS.key) == p1.plan_id  # never freed while its backup lives
    run.doctor_finds_nothing()
    assert run.listed(p1.plan_id) == "swapped"
    # No second plan over it.
    _, p2_file = plan_file(defs, instance, wh, tmp_path, WEEK2, "03:00-23:00")
    run.refused(f"plan {p1.plan_id} for {ORDERS.key} is still swapped", "approve", p2_file)
    # Wiped again: approving the first plan's file again tells the truth, and its rollback
    # restores the exact pre-swap rows.
    instance.wipe_assets([PLAN_KEY])
    assert f"plan {p1.plan_id} swapped" in run.ok("approve", p1_file)
    instance.wipe_assets([PLAN_KEY])
    assert run.status(p1.plan_id) == "swapped"
    expect_target(f"{backend}: wiped records", target(wh), new)
    run.ok("rollback", p1.plan_id, "--no-refresh")
    expect_target(f"{backend}: rollback after wiped records", target(wh), old)
    assert run.status(p1.plan_id) == "rolled_back"
    record_case(8)
