"""`python -m bench.measures.five_years [--days 1826] [--orders-per-day 20] [--storage
sqlite,postgres] [--reads 3] [--out DIR] [--no-wait] [--keep]`: one plan over five years of
daily partitions, end to end (issue #46, part 2). `make bench-five-years` runs it at the issue's
size: about 15 minutes on 2 cores. Not part of `make bench`, for its length.

Per storage, in a fresh DAGSTER_HOME and a fresh warehouse:
- sqlite: the shipped dagster.yaml (SQLite storage), a DuckDB warehouse file;
- postgres: the shipped dagster.postgres.yaml, Dagster's storage and the warehouse in two
  databases of one throwaway server.

The code location is `bench.measures.five_years_location` (the example's table, partitions
from 2020), passed to every command as a user passes theirs (`-m`). The story, as an operator
runs it:
1. seed: the sources for the range, and `orders_daily` built by logic v1, recorded in the
   instance as one materialization per day (untimed);
2. plan: the planner in-process on the five years, warm (the goal's figure), then the same plan
   by `backfill-assets plan` and `approve` (their wall time, interpreter start included);
3. run: `backfill-assets run PLAN --ignore-window --format json` to the end, each batch a Dagster
   run with its per-partition gates (`--ignore-window`: the measure runs at any hour). The
   figures come from the command's own per-batch seconds;
4. with the plan and its runs in the instance: `status` and `list` (each three times), and the
   batch driver's tick (the real sensor, evaluated in-process, five times after one untimed),
   with the plan as `run` left it and again after `backfill-assets start` (every batch passed:
   the first tick after the start reads every partition's gates, the next ones keep its
   answer while the plan's runs and the shadow's writes stay as they were), then `pause`;
5. `swap --no-refresh`, then `rollback`: each command's wall time and the warehouse
   transaction's own seconds, as the instance records them;
6. the same fix again as a new plan (a rolled-back plan is done; its window differs by a minute,
   so its id does): `plan`, `approve`, `run` to the end, `swap --no-refresh`, `release`.

The bench checks the range by its own checksum after each swap and rollback (the rollback
restores the v1 rows exactly; the second swap publishes the first one's rows). On PostgreSQL a
reader in another process queries the target from the first swap to the release
(bench.measures.pg_reader_child): the longest extra wait a swap or rollback caused it.

The instance's growth is read around each run: events per batch (every event of the plan's runs)
and bytes per batch (the DAGSTER_HOME's files, or the storage database's size).

The whole story runs in one load span per storage (bench.harness.load): it waits for quiet first
(unless --no-wait), and a storage whose span was noisy gets figures but no verdicts. Results go
to DIR/five_years.json (default bench/results).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.config import DEFAULT_OUT, PYTHON, REPO_DIR
from bench.harness.load import LoadMonitor, note
from bench.harness.measure import INSTANCE_ENV, BenchError, env_kept, goal, timed_process
from bench.harness.pg_data import vacuum_analyze
from bench.harness.report import machine
from bench.measures.pg_swap import reader_process

CLI = str(Path(PYTHON).with_name("backfill-assets"))
LOCATION = ("-m", "bench.measures.five_years_location")
STORAGES = ("sqlite", "postgres")
WINDOW = "02:00-23:59"
SECOND_WINDOW = "02:00-23:58"
SECOND_RUN_KEYS = (
    "run_s", "batch_s", "phases_s", "first_batches_s", "last_batches_s", "last_over_first",
    "events_per_batch", "bytes_per_batch",
)  # fmt: skip
# The first and the last batches compared (fewer when the plan is short: the smoke test).
ENDS = 20
READS = 3  # `status` and `list`, each
TICKS = 5
# Quiet for the reader around each swap and rollback, so its normal latency is sampled.
QUIET_S = 1.0
GOALS = {
    "last_over_first": 1.1,
    "plan_s": 1.0,
    "status_s": 1.5,
    "list_s": 1.5,
    "tick_s": 0.2,
    "tick_started_s": 0.2,
    "swap_s": 1.0,
    "reader_wait_s": 0.2,
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.measures.five_years", description=__doc__)
    ap.add_argument("--days", type=int, default=1826, help="daily partitions in the plan")
    ap.add_argument("--orders-per-day", type=int, default=20)
    ap.add_argument("--storage", default=",".join(STORAGES), help="sqlite,postgres or either")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--reads", type=int, default=READS, help="times `status` and `list` each run")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for quiet (smoke test)")
    ap.add_argument(
        "--keep", action="store_true", help="keep each storage's instance, warehouse and logs"
    )
    args = ap.parse_args(argv)
    args.storages = [s for s in args.storage.split(",") if s]
    bad = [s for s in args.storages if s not in STORAGES]
    if bad or not args.storages:
        ap.error(f"--storage takes {' or '.join(STORAGES)}, comma-separated; got {args.storage}")
    if args.days < 14:
        ap.error("--days must be at least 14 (two weeks: a first and a last batch)")
    if args.reads < 1:
        ap.error("--reads must be at least 1")
    return args


def plan_range(days: int, today: dt.date) -> tuple[dt.date, dt.date]:
    """[first, last] of `days` days ending on the Sunday at least two weeks ago (clear of the
    daily job's lookback)."""
    last = today - dt.timedelta(days=today.weekday() + 1 + 14)
    return last - dt.timedelta(days=days - 1), last


# -- the operator's commands ----------------------------------------------------------------------


class Commands:
    """`backfill-assets` with the measure's location and environment; each call's wall time."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env
        self.log = root / "commands.log"
        self.n = 0

    def __call__(self, *args: str) -> tuple[float, str]:
        self.n += 1
        out = self.root / f"out{self.n}.txt"
        cmd = [CLI, *LOCATION, *args]
        with out.open("w") as stdout, self.log.open("a") as err:
            err.write(f"$ {' '.join(cmd)}\n")
            err.flush()
            code, seconds = timed_process(
                cmd, 3600, cwd=REPO_DIR, env=self.env, stdout=stdout, stderr=err
            )
        text = out.read_text()
        if code != 0:
            tail = "\n".join(self.log.read_text().splitlines()[-30:])
            raise BenchError(f"{' '.join(args[:2])} failed (exit {code}):\n{text}\n{tail}")
        return seconds, text


# -- what the bench reads for itself ---------------------------------------------------------------


def checksum(warehouse: str, first: dt.date, last: dt.date) -> str:
    """The range's rows through the target (count and sum of row hashes), read by the bench."""
    end = last + dt.timedelta(days=1)
    if warehouse.startswith("postgresql://"):
        from bench.harness.pg_data import range_checksum

        return range_checksum(warehouse, "orders_daily", first, end)
    import duckdb

    from bench.harness import plain

    with duckdb.connect(warehouse, read_only=True) as con:
        return plain.range_checksum(con, "orders_daily", first, end)


def instance_bytes(home: Path, dagster_db: str | None) -> int:
    if dagster_db is None:
        return sum(p.stat().st_size for p in home.rglob("*") if p.is_file())
    import psycopg

    with psycopg.connect(dagster_db, autocommit=True) as con:
        row = con.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


# -- one storage -----------------------------------------------------------------------------------


def one_storage(
    storage: str, root: Path, args: argparse.Namespace, monitor: LoadMonitor
) -> dict[str, Any]:
    import dagster as dg

    from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
    from backfill_assets.testing.throwaway_postgres import dagster_pg_env, throwaway_postgres
    from bench.harness.pg_data import PgServer

    with contextlib.ExitStack() as stack:
        stack.enter_context(env_kept(*INSTANCE_ENV))
        home = root / "home"
        home.mkdir()
        shipped = "dagster.yaml" if storage == "sqlite" else "dagster.postgres.yaml"
        shutil.copy(REPO_DIR / "dagster_home" / shipped, home / "dagster.yaml")
        dagster_db: str | None = None
        warehouse = str(root / "warehouse.duckdb")
        if storage == "postgres":
            server = PgServer(stack.enter_context(throwaway_postgres()))
            # Not `server.configure()`: it turns autovacuum off, which the other PostgreSQL
            # measures want for steady timings. Here the instance grows by 262 runs, and
            # without planner statistics Dagster's read of the gates' partitions ran as a
            # nested loop (the gates' read took 5.3 s, 0.53 s analyzed). Production has it on.
            monitor.attribute(server.server.pid(), "postgresql server")
            stack.callback(monitor.forget, server.server.pid())
            dagster_db = server.create("dagster")
            os.environ.update(dagster_pg_env(dagster_db))
            warehouse = server.create("warehouse")
        os.environ["DAGSTER_HOME"], os.environ[WAREHOUSE_ENV] = str(home), warehouse
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        with dg.DagsterInstance.get() as instance:
            return _story(storage, root, home, warehouse, dagster_db, env, instance, args,
                          monitor)  # fmt: skip


def _story(
    storage: str,
    root: Path,
    home: Path,
    warehouse: str,
    dagster_db: str | None,
    env: dict[str, str],
    instance: Any,
    args: argparse.Namespace,
    monitor: LoadMonitor,
) -> dict[str, Any]:
    from backfill_assets.example.seed import write_history
    from backfill_assets.example.sources import land_fx_rates, land_raw_orders
    from backfill_assets.lib.warehouse.connect import open_warehouse

    days, orders_per_day = args.days, args.orders_per_day
    first, last = plan_range(days, dt.datetime.now(dt.UTC).date())
    print(f"five_years {storage}: {days} days, {first}..{last}, {orders_per_day} orders a day")
    t0 = time.perf_counter()
    wh = open_warehouse(warehouse)
    land_raw_orders(wh, first, last + dt.timedelta(days=1), orders_per_day)
    land_fx_rates(wh)
    write_history(instance, wh, first, last)
    seed_s = time.perf_counter() - t0
    print(f"  seeded in {seed_s:.0f} s", flush=True)
    story = Story(
        instance, warehouse, Commands(root, env), home, dagster_db, first, last, root, args.reads
    )
    out: dict[str, Any] = {"storage": storage, "days": days, "orders_per_day": orders_per_day}
    out["range"] = f"{first}..{last}"
    out["seed_s"] = seed_s
    with monitor.span() as span:
        out.update(story.all())
    out["load"] = span
    print(f"  {storage}: the story took {span['wall_s']:.0f} s{note(span)}", flush=True)
    out["goals"] = _goals(out, no_verdict=span["noisy"])
    return out


# A batch's seconds (as `run` reports them), split by its run's record and events.
PHASES = ("runner", "to_step", "step", "after_step")


def batch_phases(
    instance: Any, run_id: str, seconds: float, logs: Sequence[Any]
) -> dict[str, float]:
    """runner: the batch's seconds outside its run (the runner's own reads and writes, the
    writer lease); to_step: the run's creation to its step's start; step: the step (the shadow
    write, the gates, their events); after_step: the step's end to the run's end."""
    record = instance.get_run_record_by_id(run_id)
    created = record.create_timestamp.timestamp()
    ended = record.end_time or created
    steps = [e.timestamp for e in logs if e.is_dagster_event and e.dagster_event.is_step_event]
    step_start, step_end = (min(steps), max(steps)) if steps else (created, created)
    return {
        "runner": seconds - (ended - created),
        "to_step": step_start - created,
        "step": step_end - step_start,
        "after_step": ended - step_end,
    }


@dataclasses.dataclass
class Story:
    """One storage's story after the seed: plan, run, reads, swap, rollback; a second plan of the
    same range (a rolled-back plan is done: swapping the fix again takes a new plan), its run,
    swap and release."""

    instance: Any
    warehouse: str
    cli: Commands
    home: Path
    dagster_db: str | None
    first: dt.date
    last: dt.date
    root: Path
    n_reads: int = READS
    # When each swap or rollback ran, and when the bench itself read the target (monotonic).
    ops: dict[str, list[tuple[float, float]]] = dataclasses.field(
        default_factory=lambda: {"swap": [], "rollback": []}
    )
    busy: list[tuple[float, float]] = dataclasses.field(default_factory=list)

    @property
    def pg(self) -> bool:
        return self.warehouse.startswith("postgresql://")

    def all(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        v1 = self.checksum()
        out.update(self.plan(WINDOW))
        plan_id = out["plan_id"]
        out.update(self.run(plan_id))
        out.update(self.reads(plan_id))
        step = range(0, (self.last - self.first).days, 97)
        sample_days = [self.first + dt.timedelta(days=i) for i in step]
        with contextlib.ExitStack() as stack:
            log = self.root / "reader.log"
            got = (
                stack.enter_context(reader_process(self.warehouse, sample_days, log))
                if self.pg
                else []
            )
            out["cli_swap_s"], out["swap_s"] = self.op("swap", plan_id)
            v2 = self.checksum()
            if v2 == v1:
                raise BenchError("the swap left the range as it was: nothing was measured")
            out["cli_rollback_s"], out["rollback_s"] = self.op("rollback", plan_id)
            if self.checksum() != v1:
                raise BenchError("the rollback did not restore the range's v1 rows")
            # The same fix again, as a new plan (its window differs, so its id does).
            t0 = time.monotonic()
            again = self.plan(SECOND_WINDOW, planner=False)
            ran = self.run(again["plan_id"])
            self.busy.append((t0, time.monotonic()))
            out["second_run"] = {k: ran[k] for k in SECOND_RUN_KEYS}
            out["second_run_last_over_first_run_first"] = (
                ran["last_batches_s"] / out["first_batches_s"]
            )
            out["cli_swap_again_s"], out["swap_again_s"] = self.op("swap", again["plan_id"])
            if self.checksum() != v2:
                raise BenchError("the second plan's swap did not publish the first one's rows")
            out["cli_release_s"], _ = self.cli("release", again["plan_id"])
        if self.pg:
            out.update(self.reader_waits(got[-1]))
        return out

    def checksum(self) -> str:
        t0 = time.monotonic()
        try:
            return checksum(self.warehouse, self.first, self.last)
        finally:
            self.busy.append((t0, time.monotonic()))

    def plan(self, window: str, *, planner: bool = True) -> dict[str, Any]:
        """`plan` and `approve` by the CLI; with `planner`, the planner in-process first (warm:
        after an untimed week's plan), whose time is the goal's figure."""
        from backfill_assets.lib.planning.build import PlanRequest
        from backfill_assets.lib.warehouse.connect import open_warehouse
        from backfill_assets.service.planner import plan_backfill
        from bench.measures.five_years_location import TABLE, five_year_definitions

        out: dict[str, Any] = {}
        if planner:
            graph = five_year_definitions().resolve_asset_graph()
            wh = open_warehouse(self.warehouse)

            def plan(start: dt.date) -> tuple[float, Any]:
                request = PlanRequest(
                    TABLE.key, start.isoformat(), self.last.isoformat(), window, "UTC", "backup"
                )
                t = time.perf_counter()
                p = plan_backfill(
                    request, asset_graph=graph, tables={TABLE.key: TABLE},
                    instance=self.instance, warehouse=wh, now=dt.datetime.now(dt.UTC),
                )  # fmt: skip
                return time.perf_counter() - t, p

            plan(self.last - dt.timedelta(days=6))  # untimed: the first call pays its imports
            out["plan_s"], planned = plan(self.first)
            out["batches"] = len(planned.batches)
            out["partitions"] = sum(len(b.partitions) for b in planned.batches)
        plan_file = self.root / f"plan-{window.replace(':', '')}.json"
        cli_plan_s, _ = self.cli(
            "plan", TABLE.key, "--start", self.first.isoformat(), "--end",
            self.last.isoformat(), "--window", window, "--timezone", "UTC", "--rollback",
            "backup", "--out", str(plan_file),
        )  # fmt: skip
        out["plan_id"] = str(json.loads(plan_file.read_text())["plan_id"])
        out["cli_plan_s"] = cli_plan_s
        out["cli_approve_s"], _ = self.cli("approve", str(plan_file))
        print(
            (f"  planned {out['batches']} batches in {out['plan_s']:.2f} s (planner, warm); "
             if planner else f"  planned {out['plan_id']} again; ")
            + f"`plan` {cli_plan_s:.2f} s, `approve` {out['cli_approve_s']:.2f} s",
            flush=True,
        )  # fmt: skip
        return out

    def run(self, plan_id: str) -> dict[str, Any]:
        bytes0 = instance_bytes(self.home, self.dagster_db)
        run_s, text = self.cli("run", plan_id, "--ignore-window", "--format", "json")
        report = json.loads(text)
        if report["outcome"] != "done":
            raise BenchError(f"run of {plan_id} ended {report['outcome']}, not done")
        seconds = [b["seconds"] for b in report["batches"]]
        run_ids = [b["run_id"] for b in report["batches"] if b["run_id"]]
        logs = {run_id: self.instance.all_logs(run_id) for run_id in run_ids}
        events = sum(len(v) for v in logs.values())
        phases = [
            batch_phases(self.instance, b["run_id"], b["seconds"], logs[b["run_id"]])
            for b in report["batches"]
        ]
        grown = instance_bytes(self.home, self.dagster_db) - bytes0
        if self.dagster_db is not None:
            # What autovacuum does within a minute of the run's end, done now so the reads
            # below do not depend on whether it has yet.
            vacuum_analyze(self.dagster_db)
        k = min(ENDS, len(seconds) // 2)
        first, last = statistics.median(seconds[:k]), statistics.median(seconds[-k:])
        print(
            f"  ran {len(seconds)} batches in {run_s:.0f} s: first {k} {first:.2f} s, last {k} "
            f"{last:.2f} s a batch; {events / len(run_ids):.0f} events and "
            f"{grown / len(run_ids) / 1024:.0f} KiB of instance a batch",
            flush=True,
        )
        split = {
            name: {
                "first": statistics.median(p[name] for p in phases[:k]),
                "last": statistics.median(p[name] for p in phases[-k:]),
            }
            for name in PHASES
        }
        print(
            "  of which, first -> last: "
            + ", ".join(f"{n} {v['first']:.3f} -> {v['last']:.3f} s" for n, v in split.items()),
            flush=True,
        )
        return {
            "run_s": run_s,
            "batch_s": statistics.median(seconds),
            "phases_s": split,
            "batch_s_runs": seconds,
            "ends": k,
            "first_batches_s": first,
            "last_batches_s": last,
            "last_over_first": last / first,
            "events_per_batch": events / len(run_ids),
            "bytes_per_batch": grown / len(run_ids),
        }

    def reads(self, plan_id: str) -> dict[str, Any]:
        """`status` and `list` by the CLI, and the driver's tick in-process, with the plan and
        its runs in the instance: as `run` left it (not started for the driver), then started
        by `backfill-assets start` (its batches all passed), then paused again. Of the started
        tick: the read of every partition's gates (`passed_batches`), timed alone."""
        import dagster as dg

        from backfill_assets.constants import driver_sensor
        from backfill_assets.service.executor import passed_batches
        from backfill_assets.service.plans import load_plan
        from bench.measures.five_years_location import TABLE, five_year_definitions

        status = [self.cli("status", plan_id)[0] for _ in range(self.n_reads)]
        listed = [self.cli("list")[0] for _ in range(self.n_reads)]
        definitions = five_year_definitions()
        sensor = definitions.get_sensor_def(driver_sensor(TABLE.key))

        def tick() -> float:
            context = dg.build_sensor_context(instance=self.instance, definitions=definitions)
            with contextlib.redirect_stderr(io.StringIO()):  # the sensor's log lines
                t = time.perf_counter()
                sensor(context)
                return time.perf_counter() - t

        def timed_ticks() -> list[float]:
            tick()  # untimed: the first tick pays one-off imports
            return [tick() for _ in range(TICKS)]

        ticks = timed_ticks()
        start_s, _ = self.cli("start", plan_id)
        # The first tick after the start reads every partition's gates; the next ones find the
        # plan's runs and the shadow's writes as that tick did, and keep its answer.
        first_started = tick()
        started = [tick() for _ in range(TICKS)]
        plan, _ = load_plan(self.instance, plan_id)
        gates: list[float] = []
        done: set[int] = set()
        for _ in range(TICKS):
            t = time.perf_counter()
            done = passed_batches(self.instance, plan)
            gates.append(time.perf_counter() - t)
        if len(done) != len(plan.batches):
            raise BenchError(f"{len(done)} of {len(plan.batches)} batches read as passed")
        pause_s, _ = self.cli("pause", plan_id)
        out = {
            "status_s": statistics.median(status),
            "list_s": statistics.median(listed),
            "tick_s": statistics.median(ticks),
            "tick_started_s": statistics.median(started),
            "tick_started_first_s": first_started,
            "tick_started_gates_s": statistics.median(gates),
            "cli_start_s": start_s,
            "cli_pause_s": pause_s,
            "status_s_runs": status,
            "list_s_runs": listed,
            "tick_s_runs": ticks,
            "tick_started_s_runs": started,
        }
        print(
            f"  with the plan's runs: `status` {out['status_s']:.2f} s, `list` "
            f"{out['list_s']:.2f} s; driver tick {out['tick_s'] * 1000:.0f} ms, "
            f"{out['tick_started_s'] * 1000:.0f} ms once started, the first one after the start "
            f"{out['tick_started_first_s'] * 1000:.0f} ms (the gates read "
            f"{out['tick_started_gates_s'] * 1000:.0f} ms)",
            flush=True,
        )
        return out

    def op(self, kind: str, plan_id: str) -> tuple[float, float]:
        """`swap --no-refresh` or `rollback`: the command's wall time, and its transaction's
        seconds as the plan's record holds them. On PostgreSQL, quiet before and after, so the
        reader's normal latency is sampled."""
        from backfill_assets.service.plans import latest_plan_record

        time.sleep(QUIET_S if self.pg else 0)
        t0 = time.monotonic()
        seconds, _ = self.cli(kind, plan_id, *(("--no-refresh",) if kind == "swap" else ()))
        self.ops[kind].append((t0, time.monotonic()))
        time.sleep(QUIET_S if self.pg else 0)
        record = latest_plan_record(self.instance, plan_id) or {}
        inner = float(record[f"{kind}_seconds"])
        print(f"  `{kind}` {seconds:.2f} s, its transaction {inner * 1000:.0f} ms", flush=True)
        return seconds, inner

    def reader_waits(self, report: dict[str, Any]) -> dict[str, Any]:
        from bench.measures.pg_swap import reader_waits

        if report["errors"]:
            raise BenchError(f"readers failed during the swaps: {report['errors'][:3]}")
        waits = reader_waits([tuple(s) for s in report["samples"]], self.busy, self.ops)
        print(f"  reader: longest wait behind a swap or rollback {waits['longest_wait_ms']:.0f} ms")
        return {"reader": waits, "reader_wait_s": waits["longest_wait_ms"] / 1000}


def _goals(out: dict[str, Any], *, no_verdict: bool) -> list[dict[str, Any]]:
    names = {
        "last_over_first": f"median of the last {out['ends']} batches / the first {out['ends']}",
        "plan_s": "planning the plan (planner, warm), s",
        "status_s": "`status` with the plan's runs, s",
        "list_s": "`list` with the plan's runs, s",
        "tick_s": "batch driver tick, the plan run by `run`, s",
        "tick_started_s": "batch driver tick, the plan started, s",
        "swap_s": f"swap of {out['batches']} weeks (its transaction), s",
        "reader_wait_s": "longest reader wait behind a swap or rollback, s",
    }
    return [
        goal(f"{out['storage']}: {names[k]}", out[k], limit, no_verdict=no_verdict)
        for k, limit in GOALS.items()
        if k in out
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")  # Dagster's beta and deprecation notes, once per process
    monitor = LoadMonitor(wait=not args.no_wait)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="bench_five_years_"))
    try:
        for storage in args.storages:
            root = work / storage
            root.mkdir()
            results[storage] = one_storage(storage, root, args, monitor)
    finally:
        if args.keep:
            print(f"five_years: kept {work} (PostgreSQL storage: its server is gone)")
        else:
            shutil.rmtree(work, ignore_errors=True)
    doc = {
        "started_at": started,
        "command": " ".join(
            ["python -m bench.measures.five_years", *(sys.argv[1:] if argv is None else argv)]
        ),
        "machine": machine(),
        "load_policy": monitor.policy(),
        "wall_s": time.perf_counter() - t0,
        "storages": results,
        "goals": [g for r in results.values() for g in r["goals"]],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "five_years.json"
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    for g in doc["goals"]:
        verdict = {True: "met", False: "MISSED", None: "no verdict (noisy)"}[g.get("met")]
        print(f"  {g['goal']}: {g['value']:g} ({verdict})")
    print(f"five_years: {doc['wall_s']:.0f} s; results in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
