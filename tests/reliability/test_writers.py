"""One writer per table, under real use: what an independent fault probe broke, each a regression.

- a killed swap (or its refresh) left a run STARTED holding the writer, and the next swap,
  rollback or daily run waited forever, spinning, deaf to SIGTERM and Ctrl-C;
- a daily run and a batch started in the same instant overlapped;
- two approvals for one table in the same second were both approved, and their rollbacks left
  the target in neither state;
- `status` and the swap counted gate results of another (rolled back) plan;
- a held warehouse was reported as a gate halt after 36 s, for a 3 s bound;
- `run` could not see runs executing on other machines.

Processes are real (`python -c`, the installed console scripts) and are killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.cli import main
from backfill_assets.constants import BATCH_TAG, PLAN_ID_TAG
from backfill_assets.errors import ExecutionRefused, SwapRefused
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.orders import ORDERS_DAILY_SQL
from backfill_assets.lib.states import PlanStatus
from backfill_assets.lib.warehouse.connect import LOCK_TIMEOUT_ENV, WAREHOUSE_ENV
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.plans import load_plan
from tests.conftest import HISTORY_END, HISTORY_START, make_plan
from tests.helpers import execute
from tests.reliability.harness import (
    PROJECT_ROOT,
    SPEC,
    Child,
    after_swap,
    bad_input,
    expect_target,
    fault,
    state,
    target_checksums,
)

START, END = "2026-01-07", "2026-01-18"  # two batches: part of ISO week 2 and week 3
BIN = Path(sys.executable).parent


def _history(wh) -> dict[dt.date, str]:
    return target_checksums(wh, HISTORY_START, HISTORY_END)


def _ended_or_stacks(child: subprocess.Popen[str], err: list[str], timeout: float) -> None:
    """Wait for the child; if it outlives `timeout`, fail with its threads' stacks (it runs
    with PYTHONFAULTHANDLER, which dumps them on SIGABRT)."""
    try:
        child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)
        time.sleep(0.5)
        pytest.fail(f"still running {timeout:.0f} s after the signal; stderr:\n{''.join(err)}")


def _sigint_ignored_as_in_the_background() -> None:
    """What a command inherits from a parent in a script's background that ran Dagster: SIGINT
    ignored by the shell, and SIGTERM ignored because Dagster mapped it to SIGINT's handler."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _lines(child: subprocess.Popen[str]) -> list[str]:
    """The child's stderr lines, collected by a thread as they are written."""
    lines: list[str] = []

    def read() -> None:
        assert child.stderr is not None
        for line in iter(child.stderr.readline, ""):
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for_line(lines: list[str], needle: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = next((x for x in list(lines) if needle in x), None)
        if found is not None:
            return found
        time.sleep(0.2)
    pytest.fail(f"no line with {needle!r} in {timeout:.0f} s; stderr so far:\n{''.join(lines)}")


def _env(instance: dg.DagsterInstance, warehouse: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DAGSTER_HOME": instance.root_directory,
        WAREHOUSE_ENV: str(warehouse),
        "PYTHONWARNINGS": "ignore",
        "PYTHONFAULTHANDLER": "1",  # a hung child's stacks, on SIGABRT (_ended_or_stacks)
        **extra,
    }


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CHILD_SWAP_CLI = """
import os, sys, time
from backfill_assets.cli import main
from tests.reliability.faults import install

def at_step(step):
    if step.startswith(os.environ["PAUSE_AT"]):
        # The CLI sends run output to its log file meanwhile: write to the real stdout.
        print("paused at " + step, file=sys.__stdout__, flush=True)
        time.sleep(600)

if os.environ.get("PAUSE_AT"):
    install(at_step)
sys.exit(main([os.environ["KIND"], os.environ["PLAN_ID"], *os.environ["ARGS"].split()]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["inside the swap", "during the shadow build"])
def test_a_killed_swap_leaves_nothing_that_blocks_the_next_swap_rollback_or_daily_run(
    defs, instance, history, warehouse_path, tmp_path, capsys, where
):
    plan = make_plan(defs, instance, history, START, END)
    execute(defs, instance, history, plan)
    old = _history(history)
    shadow = history.checksums(SPEC, plan.start, plan.end_exclusive, shadow=True)
    new = after_swap(old, shadow, [dt.date.fromisoformat(p) for p in plan.partitions])
    inside = where == "inside the swap"
    child = Child(
        CHILD_SWAP_CLI,
        _env(
            instance,
            warehouse_path,
            KIND="swap",
            PLAN_ID=plan.plan_id,
            ARGS="--no-refresh" if inside else "",
            PAUSE_AT="renamed orders_daily__shadow__w2026w02" if inside else "",
        ),
        tmp_path / "swap.log",
    )
    if inside:
        child.wait_for("paused at")  # the swap's transaction is open
        child.kill()
    else:
        # dbt is building the marts in shadow, before anything moved: the machine dies (the
        # command and its dbt process both SIGKILLed).
        dbt = _wait_for_child_process(child.proc.pid, "backfill_assets_shadow")
        os.kill(dbt, signal.SIGKILL)
        child.kill()
    holder = history.writer(ORDERS.key)
    assert holder is not None and holder.pid == child.proc.pid  # the dead run holds the table
    expect_target(f"swap killed {where}", _history(history), old)

    # `status` names what holds the table and that it is free to take.
    capsys.readouterr()
    assert main(["status", plan.plan_id]) == 0
    out = capsys.readouterr().out
    assert f"writer lease of orders_daily: left by run {holder.holder_id[:8]}" in out
    assert f"process {child.proc.pid} is gone" in out

    # The next command does not wait for the dead run: it marks it failed and takes over.
    t0 = time.monotonic()
    # Then the swap (building the marts in shadow again, over what the killed one left).
    assert main(["swap", plan.plan_id, *(["--no-refresh"] if inside else [])]) == 0
    expect_target("swap after the killed one", _history(history), new)
    leftovers = history.query(
        "select table_name from information_schema.tables where strpos(table_name, '__bf_') > 0"
    )
    assert leftovers == [], leftovers
    assert main(["rollback", plan.plan_id, "--no-refresh"]) == 0
    assert time.monotonic() - t0 < 60
    expect_target(f"rollback after a swap killed {where}", _history(history), old)
    assert instance.get_run_by_id(holder.holder_id).status == dg.DagsterRunStatus.FAILURE
    # And the daily run is not refused either.
    yesterday = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat()
    daily = subprocess.run(
        [str(BIN / "backfill-assets-example"), "daily", yesterday],
        cwd=PROJECT_ROOT,
        env=_env(instance, warehouse_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert daily.returncode == 0, daily.stdout + daily.stderr[-2000:]


def _wait_for_child_process(parent: int, marker: str, timeout: float = 120.0) -> int:
    """The pid of a process started by `parent` whose command line contains `marker`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == parent and marker in args:
                return int(entry.name)
        time.sleep(0.05)
    raise AssertionError(f"no process with {marker!r} under pid {parent} in {timeout:g}s")


CHILD_HOLD_LEASE = """
import os, sys
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.lease import holder_for_command

wh = DuckDBWarehouse(os.environ["BACKFILL_ASSETS_WAREHOUSE"])
holder = holder_for_command("a long writer", plan_id="")
assert wh.claim_writer("orders_daily", holder).holder_id == holder.holder_id
print("holding", flush=True)
sys.stdin.read()
wh.release_writer("orders_daily", holder.holder_id)
print("released", flush=True)
"""


@pytest.mark.slow
def test_a_writer_waiting_for_the_table_sleeps_answers_ctrl_c_and_gives_up_at_its_bound(
    defs, instance, history, warehouse_path, tmp_path
):
    plan = make_plan(defs, instance, history, START, END)
    before = state(instance, warehouse_path)
    holder = Child(CHILD_HOLD_LEASE, _env(instance, warehouse_path), tmp_path / "holder.log")
    holder.wait_for("holding")
    fault()
    try:
        # 1. A long bound: it waits, without spinning, and Ctrl-C ends it at once.
        waiter = subprocess.Popen(
            [str(BIN / "backfill-assets"), "abandon", plan.plan_id],
            cwd=PROJECT_ROOT,
            env=_env(instance, warehouse_path, **{LOCK_TIMEOUT_ENV: "600"}),
            stderr=subprocess.PIPE,
            text=True,
            # Started as a script's background command is (`backfill-assets … &`): with SIGINT
            # ignored. It must still answer Ctrl-C, and SIGTERM below.
            preexec_fn=_sigint_ignored_as_in_the_background,
        )
        waiter_err = _lines(waiter)
        # It says at once that it waits, and for whom (not after start-up's guessed length).
        said = _wait_for_line(waiter_err, "waiting for the writer of orders_daily", 120)
        assert "held by command (a long writer" in said and "Ctrl-C" in said
        cpu0 = _cpu_seconds(waiter.pid)
        time.sleep(4)
        cpu = _cpu_seconds(waiter.pid) - cpu0
        assert cpu < 0.5, f"the waiting process used {cpu:.2f} s of CPU in 4 s: it spins"
        t0 = time.monotonic()
        waiter.send_signal(signal.SIGINT)
        _ended_or_stacks(waiter, waiter_err, 15)
        assert time.monotonic() - t0 < 10
        err = "".join(waiter_err)
        assert waiter.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        # 2. `run`, waiting to claim the table for its first batch run (claimed before the
        # run is created), ends at SIGTERM too, and leaves no run in progress behind.
        runner = subprocess.Popen(
            [str(BIN / "backfill-assets"), "run", plan.plan_id, "--ignore-window"],
            cwd=PROJECT_ROOT,
            env=_env(instance, warehouse_path, **{LOCK_TIMEOUT_ENV: "600"}),
            stderr=subprocess.PIPE,
            text=True,
            # Dagster maps SIGTERM to SIGINT's handler: with SIGINT inherited ignored, SIGTERM
            # was ignored too, and this `run` could only be SIGKILLed.
            preexec_fn=_sigint_ignored_as_in_the_background,
        )
        runner_err = _lines(runner)
        _wait_for_line(runner_err, "waiting for the writer of orders_daily", 120)
        cpu0 = _cpu_seconds(runner.pid)
        time.sleep(4)
        cpu = _cpu_seconds(runner.pid) - cpu0
        assert cpu < 0.5, f"the waiting run used {cpu:.2f} s of CPU in 4 s: it spins"
        t0 = time.monotonic()
        runner.send_signal(signal.SIGTERM)
        _ended_or_stacks(runner, runner_err, 30)
        err = "".join(runner_err)
        assert time.monotonic() - t0 < 15
        assert runner.returncode != 0 and "Traceback" not in err, err
        runs = instance.get_runs(dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}))
        assert all(r.is_finished for r in runs), [r.status for r in runs]
        # 3. A short bound: it gives up after it, naming the holder and how to free it.
        t0 = time.monotonic()
        done = subprocess.run(
            [str(BIN / "backfill-assets"), "abandon", plan.plan_id],
            cwd=PROJECT_ROOT,
            env=_env(instance, warehouse_path, **{LOCK_TIMEOUT_ENV: "3"}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("refused: orders_daily is being written by command (a long writer")
        assert "doctor --repair" in last
        assert time.monotonic() - t0 < 30
    finally:
        assert holder.proc.stdin is not None
        holder.proc.stdin.close()
        holder.wait_for("released")
        holder.reap()
    assert state(instance, warehouse_path) == before  # nothing was abandoned meanwhile
    assert load_plan(instance, plan.plan_id)[1] == PlanStatus.APPROVED


def _overlap(a: dg.RunRecord, b: dg.RunRecord) -> float:
    assert a.start_time and a.end_time and b.start_time and b.end_time
    return min(a.end_time, b.end_time) - max(a.start_time, b.start_time)


@pytest.mark.slow
def test_the_daily_run_and_a_batch_started_in_the_same_instant_never_overlap(
    defs, instance, history, warehouse_path, tmp_path
):
    from backfill_assets.example.seed import land_days

    yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    land_days(defs, instance, yesterday, yesterday, 100)
    plan = make_plan(defs, instance, history, START, END)
    env = _env(instance, warehouse_path, **{LOCK_TIMEOUT_ENV: "120"})
    commands = [
        [str(BIN / "backfill-assets-example"), "daily", yesterday.isoformat()],
        [str(BIN / "backfill-assets"), "run", plan.plan_id, "--ignore-window"],
    ]
    procs = [
        subprocess.Popen(c, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for c in commands
    ]  # fmt: skip
    outcomes = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in procs]
    for code, err in outcomes:
        # Each either did its work or refused to run beside the other; neither failed.
        assert code in (0, 2), err[-2000:]
        assert "Traceback" not in err
    daily = instance.get_run_records(dg.RunsFilter(job_name=ORDERS.daily_job))
    batches = instance.get_run_records(dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}))
    assert (daily and daily[0].dagster_run.status == dg.DagsterRunStatus.SUCCESS) or outcomes[0][0]
    for d in daily:
        for b in batches:
            if d.start_time and b.start_time:
                assert _overlap(d, b) <= 0, (
                    f"batch {b.dagster_run.tags.get(BATCH_TAG)} overlapped the daily run"
                )


@pytest.mark.slow
def test_two_approvals_racing_for_one_table_exactly_one_wins(
    defs, instance, history, warehouse_path, tmp_path
):
    # Regression: two `approve` commands for overlapping plans, started in the same second, were
    # both approved in 3 of 5 tries.
    env = _env(instance, warehouse_path)
    for attempt in range(3):
        window = f"02:{10 + attempt:02d}-23:00"  # a new window: new plans every round
        plans = [
            make_plan(defs, instance, history, start, end, approve=False, window=window)
            for start, end in (("2026-01-05", "2026-01-11"), ("2026-01-07", "2026-01-18"))
        ]
        for plan in plans:
            (tmp_path / f"{plan.plan_id}.json").write_text(plan.to_json())
        procs = [
            subprocess.Popen(
                [str(BIN / "backfill-assets"), "approve", str(tmp_path / f"{p.plan_id}.json")],
                cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True,
            )
            for p in plans
        ]  # fmt: skip
        codes = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]
        bad_input()
        assert sorted(c for c, _ in codes) == [0, 2], codes
        loser = next(err for c, err in codes if c == 2)
        assert "refused: plan p" in loser and "for orders_daily is" in loser, loser
        winner, other = plans if codes[0][0] == 0 else plans[::-1]
        assert load_plan(instance, winner.plan_id)[1] == PlanStatus.APPROVED
        with pytest.raises(ExecutionRefused, match="not approved"):
            load_plan(instance, other.plan_id)
        assert DuckDBWarehouse(warehouse_path).active_plan(ORDERS.key) == winner.plan_id
        assert main(["abandon", winner.plan_id]) == 0  # free the table for the next round


def test_a_rollback_a_later_swap_would_undo_is_refused_and_reverse_order_restores_exactly(
    tmp_path,
):
    from backfill_assets.example import orders as o

    wh = DuckDBWarehouse(tmp_path / "wh.duckdb")
    wh.replace_reference_table(
        o.FX_RATES, [("currency", "VARCHAR"), ("rate_to_usd", "DOUBLE")], o.RATES_TO_USD
    )
    wh.replace_reference_table(
        o.COUNTRY_CURRENCY, [("country", "VARCHAR"), ("currency", "VARCHAR")], o.COUNTRIES
    )
    wh.replace_plain_partitions(
        o.RAW_ORDERS, o.RAW_ORDER_COLUMNS, "order_date", o.RAW_ORDERS_SQL,
        dt.date(2026, 1, 1), dt.date(2026, 2, 1), {"n": 50},
    )  # fmt: skip
    wh.replace_partitions(
        SPEC, dt.date(2026, 1, 1), dt.date(2026, 2, 1), build=o.ORDERS_DAILY_SQL_V1
    )
    span = (dt.date(2026, 1, 1), dt.date(2026, 2, 1))
    original = wh.checksums(SPEC, *span)
    a_days = [dt.date(2026, 1, 5) + dt.timedelta(days=i) for i in range(14)]
    b_days = [dt.date(2026, 1, 12) + dt.timedelta(days=i) for i in range(14)]

    def swap(plan_id: str, days: list[dt.date]) -> None:
        assert wh.claim_plan(SPEC.name, plan_id) == plan_id
        wh.replace_partitions(
            SPEC, days[0], days[-1] + dt.timedelta(days=1), build=ORDERS_DAILY_SQL,
            shadow=True, plan_id=plan_id,
        )  # fmt: skip
        assert wh.swap(SPEC, plan_id, days).action == "swapped"

    swap("pa", a_days)
    after_a = wh.checksums(SPEC, *span)
    # Whatever freed the table (here, by hand), a second plan now swaps over the same weeks.
    wh.release_plan(SPEC.name, "pa")
    swap("pb", b_days)
    after_b = wh.checksums(SPEC, *span)
    bad_input()
    with pytest.raises(SwapRefused, match="plan pb swapped the same weeks of orders_daily after"):
        wh.rollback(SPEC, "pa")
    assert wh.checksums(SPEC, *span) == after_b  # refused: nothing changed
    wh.rollback(SPEC, "pb")
    assert wh.checksums(SPEC, *span) == after_a
    wh.rollback(SPEC, "pa")
    expect_target("rollbacks in reverse swap order", wh.checksums(SPEC, *span), original)


def test_status_and_the_swap_count_only_the_gates_of_the_plan_that_wrote_the_shadow(
    defs, instance, history, capsys
):
    from backfill_assets.service.swap import perform_rollback, perform_swap

    first = make_plan(defs, instance, history, START, END)
    execute(defs, instance, history, first)
    perform_swap(instance, ORDERS, history, first.plan_id)
    perform_rollback(instance, ORDERS, history, first.plan_id)
    # The same days, planned again (another window: another plan).
    second = make_plan(defs, instance, history, START, END, window="03:00-23:00")
    assert second.plan_id != first.plan_id
    capsys.readouterr()
    assert main(["status", second.plan_id]) == 0
    out = capsys.readouterr().out
    assert "batches passed: 0/2" in out  # the first plan's passed gates do not count
    before = _history(history)
    with pytest.raises(SwapRefused, match="row_count_gate not run"):
        perform_swap(instance, ORDERS, history, second.plan_id)
    assert _history(history) == before


CHILD_HOLD_FILE = """
import os, sys, duckdb
con = duckdb.connect(os.environ["WAREHOUSE"])  # a write connection, held until stdin closes
con.execute("BEGIN TRANSACTION")
print("held", flush=True)
sys.stdin.read()
con.close()
print("released", flush=True)
"""


@pytest.mark.slow
def test_run_on_a_held_warehouse_exits_2_within_its_bound_saying_so(
    defs, instance, history, warehouse_path, tmp_path
):
    plan = make_plan(defs, instance, history, START, END)
    before_runs = len(instance.get_runs())
    holder = Child(CHILD_HOLD_FILE, {"WAREHOUSE": str(warehouse_path)}, tmp_path / "hold.log")
    holder.wait_for("held")
    fault()
    try:
        t0 = time.monotonic()
        done = subprocess.run(
            [str(BIN / "backfill-assets"), "run", plan.plan_id, "--ignore-window"],
            cwd=PROJECT_ROOT,
            env=_env(instance, warehouse_path, **{LOCK_TIMEOUT_ENV: "3"}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        took = time.monotonic() - t0
    finally:
        assert holder.proc.stdin is not None
        holder.proc.stdin.close()
        holder.wait_for("released")
        holder.reap()
    # Regression: exit 1 after 36 s, reported as a gate halt.
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("refused: ") and "held by another process" in last
    assert "halted" not in done.stderr
    assert took < 20, f"{took:.1f} s for a 3 s bound"
    assert len(instance.get_runs()) == before_runs  # no batch run was even created


def test_run_refuses_an_instance_whose_runs_execute_on_other_machines(defs, history, tmp_path):
    overrides = {
        "run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}
    }
    home = tmp_path / "remote_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as remote:
        plan = make_plan(defs, remote, history, START, END)
        bad_input()
        with pytest.raises(ExecutionRefused, match="backfill-assets start PLAN_ID"):
            execute(defs, remote, history, plan)
        assert remote.get_runs() == []


def test_doctor_finds_and_repairs_a_pool_left_without_slots_by_a_wipe(instance, capsys):
    # Regression: the demo's reset wiped the instance, which deletes a pool's slots and keeps
    # its limit; every step in the pool then waited forever, and `make demo` hung the 2nd time.
    storage = instance.event_log_storage
    storage.set_concurrency_slots("their_pool", 1)
    instance.wipe()
    assert storage.get_concurrency_info("their_pool").slot_count == 0
    from backfill_assets.service.doctor import diagnose

    (finding,) = [f for f in diagnose(instance, None, {}) if f.check == "pools"]
    assert "their_pool" in finding.problem and "limit 1 but 0 slots" in finding.problem
    diagnose(instance, None, {}, repair=True)
    assert storage.get_concurrency_info("their_pool").slot_count == 1
    assert not [f for f in diagnose(instance, None, {}) if f.check == "pools"]


def test_doctor_reports_a_run_queue_without_the_per_table_writer_limit(instance, tmp_path):
    from backfill_assets.service.doctor import diagnose

    # This module's instance has the shipped dagster.yaml's limits: nothing to report.
    assert not [f for f in diagnose(instance, None, {}) if f.check == "queue"]
    (tmp_path / "plain").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "plain")) as plain:
        (finding,) = [f for f in diagnose(plain, None, {}) if f.check == "queue"]
    assert "applyLimitPerUniqueValue" in finding.fix


def test_approving_the_same_plan_twice_is_idempotent_and_a_claim_left_by_a_crash_is_freed(
    defs, instance, history
):
    from backfill_assets.service.approval import approve_plan

    plan = make_plan(defs, instance, history, START, END)
    assert approve_plan(instance, history, ORDERS, plan, "again") == PlanStatus.APPROVED
    # An approval cut short between the warehouse and the instance: the table is claimed by a
    # plan the instance never recorded. `abandon` frees it.
    from backfill_assets.service.swap import abandon_plan

    abandon_plan(instance, {ORDERS.key: ORDERS}, history, plan.plan_id)
    assert history.claim_plan(ORDERS.key, "pcrashed000") == "pcrashed000"
    other = make_plan(defs, instance, history, START, END, approve=False, window="03:00-23:00")
    with pytest.raises(ExecutionRefused, match="being approved right now"):
        approve_plan(instance, history, ORDERS, other, "tests")
    assert abandon_plan(instance, {ORDERS.key: ORDERS}, history, "pcrashed000") == (
        ORDERS.key,
        0,
    )
    assert approve_plan(instance, history, ORDERS, other, "tests") == PlanStatus.APPROVED
    assert json.loads(other.to_json())["plan_id"] == other.plan_id


def test_a_pid_reused_by_a_later_process_does_not_keep_a_dead_holders_lease(
    instance, tmp_path, capsys
):
    """Regression: liveness was the host and `os.kill(pid, 0)`. After a restart, a process that
    carried the dead holder's pid kept the lease held forever: `status` said held, `doctor
    --repair` did nothing, and every writer waited out its timeout."""
    from backfill_assets.constants import HOST_TAG, PID_TAG, PROCESS_TAG
    from backfill_assets.lib.warehouse.base import LeaseHolder
    from backfill_assets.service.doctor import diagnose
    from backfill_assets.service.lease import (
        acquire_writer,
        gone_reason,
        holder_for_command,
        process_start,
        this_host,
    )

    wh = DuckDBWarehouse(tmp_path / "warehouse.duckdb", lock_timeout_s=2)
    # A live process that carries the pid now; the holder that claimed with that pid started
    # at another time (the start ticks of the process that died).
    carrier = subprocess.Popen(["sleep", "300"])
    try:
        now_there = process_start(carrier.pid)
        boot, ticks = now_there.rsplit(":", 1)
        dead_start = f"{boot}:{int(ticks) - 1}"
        run_id = "0ddba11-dead-run-0000-000000000000"
        tags = {PID_TAG: str(carrier.pid), HOST_TAG: this_host(), PROCESS_TAG: dead_start}
        instance.add_run(
            dg.DagsterRun(
                job_name=ORDERS.daily_job,
                run_id=run_id,
                status=dg.DagsterRunStatus.STARTED,
                tags=tags,
            )
        )
        dead = LeaseHolder(run_id, role="daily", job_name=ORDERS.daily_job, host=this_host(),
                           pid=carrier.pid, process=dead_start)  # fmt: skip
        assert wh.claim_writer(ORDERS.key, dead).holder_id == run_id
        fault()
        # The process with the pid is alive, but it is not the holder.
        assert gone_reason(instance, wh.writer(ORDERS.key), reap=False) is not None  # type: ignore[arg-type]
        findings = diagnose(instance, wh, {ORDERS.key: ORDERS}, repair=False)
        assert any(f.check == "leases" and "is gone" in f.problem for f in findings), findings
        assert any(f.check == "runs" and run_id[:8] in f.problem for f in findings), findings
        diagnose(instance, wh, {ORDERS.key: ORDERS}, repair=True)
        assert wh.writer(ORDERS.key) is None
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.FAILURE  # reaped
        # A holder that is alive and is who it says keeps its lease.
        live = holder_for_command("swap")
        t0 = time.monotonic()
        acquire_writer(instance, wh, ORDERS.key, live, wait_s=5)
        assert time.monotonic() - t0 < 2
        assert gone_reason(instance, wh.writer(ORDERS.key), reap=False) is None  # type: ignore[arg-type]
    finally:
        carrier.kill()
        carrier.wait()


def test_two_runs_of_one_plan_waiting_for_the_table_never_run_a_batch_twice(
    defs, instance, history, warehouse_path, tmp_path
):
    """Regression: two `run`s of one plan started while the daily run held the table both
    waited, then both ran batch 1 (no overlap, no harm to data, but the work and the record
    doubled). One runner per plan: the second is refused at once."""
    from backfill_assets.service.lease import holder_for_command

    plan = make_plan(defs, instance, history, START, END)
    daily = holder_for_command("daily")  # the daily run holds the table's writer lease
    assert history.claim_writer(ORDERS.key, daily).holder_id == daily.holder_id
    env = _env(instance, warehouse_path, **{LOCK_TIMEOUT_ENV: "120"})
    command = [str(BIN / "backfill-assets"), "run", plan.plan_id, "--ignore-window"]
    procs = [
        subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        refused = [p for p in procs if p.poll() is not None]
        assert len(refused) == 1, "neither run was refused while the other waited"
        err = refused[0].stderr.read() if refused[0].stderr else ""
        assert refused[0].returncode == 2, err[-2000:]
        assert f"plan {plan.plan_id} is already being run by process" in err
    finally:
        history.release_writer(ORDERS.key, daily.holder_id)  # the daily run ends
    (other,) = [p for p in procs if p is not refused[0]]
    assert other.wait(timeout=600) == 0, (other.stderr.read() if other.stderr else "")[-2000:]
    runs = instance.get_run_records(dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}))
    by_batch = sorted(r.dagster_run.tags[BATCH_TAG] for r in runs)
    assert by_batch == ["1", "2"]  # each batch ran once
