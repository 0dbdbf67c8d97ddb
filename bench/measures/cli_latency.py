"""Measure: how long `backfill-assets` takes to answer on the demo's code location.

The performance issue's goal: `status`, `plan` and `approve` answer in <= 1.5 s on the demo.
Each command runs as an operator runs it: the console script in a fresh process (interpreter
start included), against a real SQLite instance (the shipped dagster.yaml) and a DuckDB
warehouse holding one week of `orders_daily` (500 orders a day) per round. Next to them, in the
same rounds:
- `import location`: a fresh interpreter importing the example's code location and building its
  Definitions (the example imports dagster-dbt, which imports dbt): what `run`, `swap` and
  `rollback` pay first, and every other command when the location's snapshot is not current;
- `open instance`: a fresh interpreter importing Dagster and opening the instance, which every
  command needs (all that `list` and `pause` need): the floor of the goal's commands.

A round plans a new week, approves the plan file, asks its status and lists the plans (timed),
then abandons the plan (untimed), so the next round's approval finds the table free.

The commands read the code location's snapshot (backfill_assets/location/snapshot.py) once one
command has imported it: before the rounds, one untimed `doctor` does, as an operator's first
command after a deploy or an edit would; its time is reported as `first command` (no goal), and
the rounds measure the commands an operator runs after it.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.config import PYTHON, REPO_DIR, BenchContext
from bench.harness.load import (
    agree,
    agreement,
    all_noisy,
    clean_values,
    kept,
    print_noisy,
    round_load,
)
from bench.harness.load import summary as load_summary
from bench.harness.measure import BenchError, goal, median, timed_process

CLI = str(Path(PYTHON).with_name("backfill-assets"))
GOAL_S = 1.5
HISTORY_START = dt.date(2026, 1, 5)  # a Monday
# Each floor leaves without the interpreter's teardown, as the commands do (cli `main`).
FLOORS = {
    "import location": "import backfill_assets.example.definitions as d; d.example_definitions()"
    "; import os; os._exit(0)",
    "open instance": "import dagster as dg; dg.DagsterInstance.get(); import os; os._exit(0)",
}
GOAL_COMMANDS = ("plan", "approve", "status")

SEED = """
import datetime as dt, sys
import dagster as dg
from backfill_assets.example.definitions import example_definitions
from backfill_assets.example.seed import land_days, write_history
from backfill_assets.defs.resources import DEFAULT_WAREHOUSE
start, end = (dt.date.fromisoformat(a) for a in sys.argv[1:3])
defs, instance = example_definitions(), dg.DagsterInstance.get()
land_days(defs, instance, start, end, int(sys.argv[3]))
write_history(instance, DEFAULT_WAREHOUSE.process_config_and_initialize().adapter(), start, end)
"""


def _timed(cmd: list[str], env: dict[str, str], log: Path) -> float:
    with log.open("a") as out:
        code, seconds = timed_process(
            cmd, 600, cwd=REPO_DIR, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-20:])
        raise BenchError(f"{' '.join(cmd[:3])} failed (exit {code}); {log}:\n{tail}")
    return seconds


def run(ctx: BenchContext) -> dict[str, Any]:
    n_rounds = max(ctx.size.cli_rounds_min, ctx.repeats)
    days = 7 * n_rounds  # a week per round: plan ids are content hashes, approved once each
    root = Path(tempfile.mkdtemp(prefix="bench_cli_", dir=ctx.workdir))
    try:
        home = root / "home"
        home.mkdir()
        shutil.copy(REPO_DIR / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "BACKFILL_ASSETS_WAREHOUSE": str(root / "warehouse.duckdb"),
            "BACKFILL_ASSETS_DBT_PROJECT": str(REPO_DIR / "dbt_project"),
            "PYTHONWARNINGS": "ignore",
        }
        log = root / "cli.log"
        last = HISTORY_START + dt.timedelta(days=days - 1)
        t0 = time.perf_counter()
        _timed([PYTHON, "-c", SEED, HISTORY_START.isoformat(), last.isoformat(), "500"], env, log)
        seed_s = time.perf_counter() - t0
        # The first command imports the location and writes its snapshot; the rounds read it.
        first_s = _timed([CLI, "doctor"], env, log)
        times: dict[str, list[float]] = {k: [] for k in (*FLOORS, *GOAL_COMMANDS, "list")}
        rounds: list[dict[str, Any]] = []
        for rnd in range(n_rounds):
            week0 = HISTORY_START + dt.timedelta(days=7 * rnd)
            plan_file = root / f"plan{rnd}.json"
            plan = [
                CLI, "plan", "orders_daily", "--start", week0.isoformat(),
                "--end", (week0 + dt.timedelta(days=6)).isoformat(), "--window", "02:00-23:00",
                "--timezone", "UTC", "--rollback", "backup", "--out", str(plan_file),
            ]  # fmt: skip
            with ctx.load.span() as span:
                for name, code in FLOORS.items():
                    times[name].append(_timed([PYTHON, "-c", code], env, log))
                times["plan"].append(_timed(plan, env, log))
                plan_id = _plan_id(plan_file)
                times["approve"].append(_timed([CLI, "approve", str(plan_file)], env, log))
                times["status"].append(_timed([CLI, "status", plan_id], env, log))
                times["list"].append(_timed([CLI, "list"], env, log))
            _timed([CLI, "abandon", plan_id], env, log)  # untimed: frees the table
            rounds.append(round_load(rnd, [span]))
            print_noisy(f"cli round {rnd + 1}", rounds[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    use = kept(rounds)
    seconds = {k: median([v[i] for i in use]) for k, v in times.items()}
    floor = seconds["open instance"]
    agreements = {
        f"{c} s": agreement(clean_values(dict(enumerate(times[c])), rounds)) for c in GOAL_COMMANDS
    }
    result: dict[str, Any] = {
        "history_days": days,
        "seed_s": round(seed_s, 1),
        "first_command_s": round(first_s, 2),
        "seconds": seconds,
        "seconds_runs": times,
        "beyond_open_instance_s": {c: seconds[c] - floor for c in (*GOAL_COMMANDS, "list")},
        "load": load_summary(rounds, "measured per round (every command and floor)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
    }
    result["goals"] = [
        goal(f"cli {c} s", seconds[c], GOAL_S, no_verdict=all_noisy(rounds)) for c in GOAL_COMMANDS
    ]
    return result


def _plan_id(plan_file: Path) -> str:
    import json

    return str(json.loads(plan_file.read_text())["plan_id"])
