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

Not a measure of `make bench` (it takes a minute a repeat and starts a server). The same path
before the runner, one run per batch launched at each tick, took 15-16 s a batch (#46, by hand).
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
            figures = one_repeat(tmp, args.batches, args.orders_per_day, server)
        print(f"repeat {i + 1}: " + ", ".join(f"{k} {v}" for k, v in figures.items()), flush=True)


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


def one_repeat(tmp: Path, batches: int, orders_per_day: int, server: Any) -> dict[str, Any]:
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

    port = str(_free_port())
    dagster = str(Path(sys.executable).with_name("dagster"))
    with open(tmp / "dagster-dev.log", "ab") as log:
        proc = subprocess.Popen(
            [dagster, "dev", "-w", str(REPO_DIR / "workspace.yaml"), "-h", "127.0.0.1", "-p", port],
            cwd=REPO_DIR,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)

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
    orchestration = [t - w for t, w in zip(launch_to_end, work, strict=True)]
    ms = statistics.median
    # Flat as the instance fills: the last batches' launch to end against the first ones'.
    k = min(20, batches // 2) or 1
    flat = ms(launch_to_end[-k:]) / ms(launch_to_end[:k])
    phases = [_phases(instance, r) for r in recs]
    growth = {}
    for name in phases[0]:
        first, last = ms([p[name] for p in phases[:k]]), ms([p[name] for p in phases[-k:]])
        growth[name] = f"{first:.3f} -> {last:.3f} s"
    instance.dispose()
    return {
        "storage": type(instance.run_storage).__name__,
        "batches": batches,
        "launch to end (median)": f"{ms(launch_to_end):.2f} s",
        "warehouse work (median)": f"{ms(work):.2f} s",
        "orchestration per batch (median)": f"{ms(orchestration):.2f} s",
        "orchestration (worst)": f"{max(orchestration):.2f} s",
        "between batches (median)": f"{ms(between):.2f} s" if between else "n/a",
        f"last {k} / first {k} (launch to end)": f"{flat:.2f}",
        f"first {k} -> last {k}, per phase (median)": growth,
        "start to last batch's end": f"{done - started:.1f} s",
        "per batch over the plan": f"{(done - started) / batches:.2f} s",
    }


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
