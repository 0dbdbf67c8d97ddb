"""What the daemon's path costs a batch: a plan started for the batch driver under `dagster dev`.

    python -m bench.experiments.daemon_path [--batches 10] [--orders-per-day 300] [--repeats 1]
        [--storage sqlite|postgres]

Each repeat: a fresh DAGSTER_HOME holding the shipped dagster.yaml (SQLite storage, the
default run launcher and queue) and a fresh DuckDB warehouse with the example's history; with
`--storage postgres`, the shipped dagster.postgres.yaml (dagster-postgres storage) and the
warehouse, each in a database of its own on a throwaway server. Then `dagster dev` over the
example's workspace with the sensors at their default interval (15 s). A plan of
`--batches` ISO weeks, its window around now, is approved and started as `backfill-assets start`
does; the driver then launches the plan's runner run (service.plan_runner), which runs the
batches. When every batch passed, `dagster dev` is stopped and each batch's warehouse work (the
shadow write and the gates, as the batch's step does them) is done again in this process, on the
same data, and timed. Per batch:

- launch to end: from the batch run's creation to its end (the runner creates it);
- orchestration: launch to end less the batch's warehouse work (issue #46: goal <= 2 s);
- between batches: from a batch run's end to the next one's creation;
- the last 20 batches' launch to end against the first 20's (median over each; fewer on a
  shorter plan): flat as the instance fills (issue #46's goal <= 1.1, for five years), and
  where a batch run's time went, first 20 against last 20, split by its events: creation to
  the run's start, start to its step, the step, the step's end to the run's end;
- and over the plan: from the start to the last batch's end, divided by the batches (this
  includes the first tick, up to 15 s, and the runner run's own start-up).

`make bench`'s `daemon` measure runs `one_repeat` per round and storage at 10 batches; this runs
it alone, at other sizes. The same path before the runner, one run per batch launched at each
tick, took 15-16 s a batch (#46, by hand).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import itertools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from bench.harness.config import REPO_DIR

UTC = dt.UTC
STARTUP_TIMEOUT_S = 120
PLAN_TIMEOUT_S = 900


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--orders-per-day", type=int, default=300, metavar="N")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite")
    args = ap.parse_args()
    for i in range(args.repeats):
        with contextlib.ExitStack() as stack:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="daemon-path-")))
            server = None
            if args.storage == "postgres":
                from backfill_assets.testing.throwaway_postgres import throwaway_postgres
                from bench.harness.pg_data import PgServer

                server = PgServer(stack.enter_context(throwaway_postgres()))
                server.configure()
            figures = one_repeat(tmp, args.batches, args.orders_per_day, server).describe()
        print(f"repeat {i + 1}: " + ", ".join(f"{k} {v}" for k, v in figures.items()), flush=True)


@dataclasses.dataclass(frozen=True)
class Repeat:
    """One repeat's figures, per batch in the plan's order (seconds)."""

    storage: str
    batches: int
    launch_to_end: list[float]  # the batch run's creation to its end
    work: list[float]  # its warehouse work, done again afterwards and timed
    between: list[float]  # a batch run's end to the next one's creation
    phases: list[dict[str, float]]  # where each batch run's time went, by its events
    start_to_done_s: float  # the plan's start to the last batch's end (ticks included)

    @property
    def orchestration(self) -> list[float]:
        """What Dagster adds to each batch: launch to end less its warehouse work."""
        return [t - w for t, w in zip(self.launch_to_end, self.work, strict=True)]

    @property
    def k(self) -> int:
        """The batches compared at each end of the plan: 20, or half a shorter plan."""
        return min(20, self.batches // 2) or 1

    @property
    def last_over_first(self) -> float:
        """The last k batches' launch to end against the first k's (medians)."""
        ms = statistics.median
        return ms(self.launch_to_end[-self.k :]) / ms(self.launch_to_end[: self.k])

    def describe(self) -> dict[str, Any]:
        ms, k = statistics.median, self.k
        growth = {}
        for name in self.phases[0]:
            first = ms([p[name] for p in self.phases[:k]])
            last = ms([p[name] for p in self.phases[-k:]])
            growth[name] = f"{first:.3f} -> {last:.3f} s"
        return {
            "storage": self.storage,
            "batches": self.batches,
            "launch to end (median)": f"{ms(self.launch_to_end):.2f} s",
            "warehouse work (median)": f"{ms(self.work):.2f} s",
            "orchestration per batch (median)": f"{ms(self.orchestration):.2f} s",
            "orchestration (worst)": f"{max(self.orchestration):.2f} s",
            "between batches (median)": f"{ms(self.between):.2f} s" if self.between else "n/a",
            f"last {k} / first {k} (launch to end)": f"{self.last_over_first:.2f}",
            f"first {k} -> last {k}, per phase (median)": growth,
            "start to last batch's end": f"{self.start_to_done_s:.1f} s",
            "per batch over the plan": f"{self.start_to_done_s / self.batches:.2f} s",
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check: Any, timeout: float, poll_s: float = 0.5) -> Any:
    from backfill_assets.testing.waiting import poll

    value = poll(check, timeout, poll_s)
    if not value:
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
    return value


def one_repeat(
    tmp: Path,
    batches: int,
    orders_per_day: int,
    server: Any,
    sensor_interval_s: int | None = None,
    timed: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> Repeat:
    """One repeat; `sensor_interval_s`: the sensors' interval, the default 15 s if None (it only
    sets how long the first tick takes to come: the runner run runs the batches); `timed`: a
    context the part from `dagster dev`'s start to the last batch's end runs in."""
    import dagster as dg
    import requests

    from backfill_assets.constants import BATCH_TAG, PLAN_ID_TAG
    from backfill_assets.example.declaration import ORDERS
    from backfill_assets.example.definitions import example_definitions
    from backfill_assets.example.seed import land_days, write_history
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV, open_warehouse
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.batch_driver import start_plan
    from backfill_assets.service.executor import passed_batches
    from backfill_assets.service.planner import plan_backfill

    home = tmp / "dagster_home"
    home.mkdir()
    shipped = "dagster.yaml" if server is None else "dagster.postgres.yaml"
    (home / "dagster.yaml").write_text((REPO_DIR / "dagster_home" / shipped).read_text())
    warehouse = str(tmp / "warehouse.duckdb")
    if server is not None:
        from backfill_assets.testing.throwaway_postgres import dagster_pg_env

        os.environ.update(dagster_pg_env(server.create("dagster")))
        warehouse = server.create("warehouse")
    os.environ["DAGSTER_HOME"], os.environ[WAREHOUSE_ENV] = str(home), warehouse
    defs = example_definitions()
    instance = dg.DagsterInstance.get()
    today = dt.datetime.now(UTC).date()
    # The plan's weeks, ending more than the daily job's lookback ago (no daily run starts).
    last_monday = today - dt.timedelta(days=today.weekday() + 14)
    first = last_monday - dt.timedelta(weeks=batches - 1)
    last = last_monday + dt.timedelta(days=6)
    land_days(defs, instance, first, last, orders_per_day)
    write_history(instance, open_warehouse(warehouse), first, last, logic="1")
    now = dt.datetime.now(UTC)
    daily_at = (now + dt.timedelta(hours=12)).time().replace(second=0, microsecond=0)
    table = dataclasses.replace(ORDERS, daily_expected_start=daily_at)
    window = f"{now - dt.timedelta(hours=1):%H:%M}-{now + dt.timedelta(hours=3):%H:%M}"
    wh = open_warehouse(warehouse)
    plan = plan_backfill(
        PlanRequest(ORDERS.key, first.isoformat(), last.isoformat(), window, "UTC", "backup"),
        asset_graph=defs.resolve_asset_graph(),
        tables={ORDERS.key: table},
        instance=instance,
        warehouse=wh,
        now=now,
    )
    assert len(plan.batches) == batches, len(plan.batches)
    approve_plan(instance, wh, table, plan, "bench")
    del wh

    proc: subprocess.Popen[bytes] | None = None
    try:
        # The span a caller times (the `daemon` measure's load span): from `dagster dev`'s start
        # to the last batch's end. Its stop comes after: the code servers it leaves to stop on
        # their own are no longer the caller's descendants, so their CPU would read as others'.
        with timed():
            port = str(_free_port())
            dagster = str(Path(sys.executable).with_name("dagster"))
            env = dict(os.environ)
            if sensor_interval_s is not None:
                from backfill_assets.defs.factory import SENSOR_INTERVAL_ENV

                env[SENSOR_INTERVAL_ENV] = str(sensor_interval_s)
            with open(tmp / "dagster-dev.log", "ab") as log:
                workspace = str(REPO_DIR / "workspace.yaml")
                proc = subprocess.Popen(
                    [dagster, "dev", "-w", workspace, "-h", "127.0.0.1", "-p", port],
                    cwd=REPO_DIR,
                    env=env,
                    # A shell's background job (or pytest) may leave SIGINT ignored, and dagster
                    # dev would inherit that: it must stop on SIGINT, and on SIGTERM (which it
                    # turns into one).
                    preexec_fn=_default_sigint,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            url = f"http://127.0.0.1:{port}/server_info"

            def answers() -> bool:
                try:
                    return requests.get(url, timeout=2).ok
                except requests.RequestException:
                    return False

            _wait("the webserver", answers, STARTUP_TIMEOUT_S)
            started = time.time()
            start_plan(instance, plan.plan_id, "bench", dt.datetime.now(UTC))
            _wait(
                "every batch to pass",
                # One read of the plan's gates a second, not one per batch: this polls beside
                # the runs it measures.
                lambda: len(passed_batches(instance, plan)) == batches,
                PLAN_TIMEOUT_S,
                1.0,
            )
            done = time.time()
            time.sleep(2)  # the runner's last tick of its own, and the run's end
    finally:
        if proc is not None:
            _stop(proc)

    recs = [
        r
        for r in instance.get_run_records(dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}))
        if BATCH_TAG in r.dagster_run.tags
        and r.dagster_run.status == dg.DagsterRunStatus.SUCCESS
        and r.end_time is not None
    ]
    recs.sort(key=lambda r: int(r.dagster_run.tags[BATCH_TAG]))
    assert len(recs) == batches, [r.dagster_run.tags[BATCH_TAG] for r in recs]
    work = _warehouse_work(table, plan, warehouse)
    launch_to_end = [r.end_time - r.create_timestamp.timestamp() for r in recs]  # type: ignore[operator]
    between = [
        b.create_timestamp.timestamp() - a.end_time  # type: ignore[operator]
        for a, b in itertools.pairwise(recs)
    ]
    phases = [_phases(instance, r) for r in recs]
    storage = type(instance.run_storage).__name__
    instance.dispose()
    return Repeat(storage, batches, launch_to_end, work, between, phases, done - started)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop `dagster dev` as Ctrl-C does: it stops the webserver, the daemon and the code
    servers and waits for them, so that their CPU is reaped inside the bench's process tree (the
    load monitor counts it as the bench's own; a process killed with its parent gone is counted
    as the others'). The whole process group is terminated if it has not stopped in 30 s, and
    killed if that did not stop it in 30 s more."""
    for sig, group in ((signal.SIGINT, False), (signal.SIGTERM, True), (signal.SIGKILL, True)):
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        try:
            proc.wait(30)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait(30)


def _phases(instance: Any, rec: Any) -> dict[str, float]:
    """Where a batch run's time went, from its events: creation to start, start to its step,
    the step, and the step's end to the run's end."""
    import dagster as dg

    names = {
        dg.DagsterEventType.RUN_START.value: "RUN_START",
        dg.DagsterEventType.STEP_START.value: "STEP_START",
        dg.DagsterEventType.STEP_SUCCESS.value: "STEP_SUCCESS",
        dg.DagsterEventType.RUN_SUCCESS.value: "RUN_SUCCESS",
    }
    at: dict[str, float] = {}
    for e in instance.all_logs(rec.dagster_run.run_id):
        kind = names.get(e.dagster_event.event_type_value if e.dagster_event else "")
        if kind is not None and (kind.endswith("SUCCESS") or kind not in at):
            at[kind] = e.timestamp
    return {
        "created to run start": at["RUN_START"] - rec.create_timestamp.timestamp(),
        "run start to step": at["STEP_START"] - at["RUN_START"],
        "step": at["STEP_SUCCESS"] - at["STEP_START"],
        "step end to run end": at["RUN_SUCCESS"] - at["STEP_SUCCESS"],
    }


def _warehouse_work(table: Any, plan: Any, warehouse: str) -> list[float]:
    """Each batch's shadow write and gates again, as the batch's step does them, timed."""
    from backfill_assets.lib.gates import evaluate_gates
    from backfill_assets.lib.warehouse.connect import open_warehouse
    from backfill_assets.service.writes import prepared_build, write_partitions

    wh = open_warehouse(warehouse)
    out = []
    for batch in plan.batches:
        start, end = batch.start, batch.end + dt.timedelta(days=1)
        t0 = time.perf_counter()
        build = prepared_build(table, start, end)
        with wh.session():
            write_partitions(wh, table, start, end, shadow=True, plan_id=plan.plan_id, build=build)
            evaluate_gates(wh, table.spec, plan.criteria, start, end, plan.plan_id)
        out.append(time.perf_counter() - t0)
    return out


if __name__ == "__main__":
    main()
