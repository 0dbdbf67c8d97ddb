"""Parent-side helpers: launch a contender subprocess, medians, ratios, goals."""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.harness.config import PYTHON, REPO_DIR
from bench.harness.contenders import RESULT_PREFIX
from bench.harness.load import NO_VERDICT

CONTENDER_TIMEOUT_S = 1800


class BenchError(RuntimeError):
    """A contender or a measure did not do what the bench expects (not a slow result)."""


def timed_process(cmd: Sequence[str], timeout_s: float, **popen: Any) -> tuple[int, float]:
    """Run `cmd` to its end: (exit code, seconds from its start to its exit). Waited for in
    one blocking `waitpid`, the timeout kept by a timer that kills it: `subprocess.run` with a
    timeout polls the child every 50 ms at most, which rounded a 1.4 s command up by 0-50 ms
    (the CLI's figures fell on steps of 0.05 s)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(cmd), **popen)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        code = proc.wait()  # no timeout: one blocking waitpid
        seconds = time.perf_counter() - t0
    finally:
        timer.cancel()
    if code != 0 and seconds >= timeout_s:  # killed by the timer
        raise BenchError(f"{' '.join(cmd[:3])} did not end within {timeout_s:.0f} s")
    return code, seconds


def run_contender(
    name: str, db: Path | str, start: dt.date, end: dt.date, log_dir: Path
) -> dict[str, Any]:
    """Run one contender in a fresh interpreter; return its result plus the parent's view.
    `db` is a DuckDB file, or a PostgreSQL URL for the `_pg` contenders.

    `process_s` is the whole subprocess as the parent saw it (interpreter start included);
    `wall_s` is measured inside the child from before its contender imports to the end.
    """
    log = log_dir / f"{name}.log"
    cmd = [
        PYTHON,
        "-m",
        "bench.harness.contenders",
        name,
        "--db",
        str(db),
        "--start",
        start.isoformat(),
        "--end",
        end.isoformat(),
    ]
    t0 = time.perf_counter()
    with log.open("a") as err:
        proc = subprocess.run(
            cmd,
            cwd=REPO_DIR,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=CONTENDER_TIMEOUT_S,
            check=False,
        )
    process_s = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise BenchError(f"contender {name} failed (exit {proc.returncode}); log {log}:\n{tail}")
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    result["process_s"] = process_s
    if result["status"] == "ok":
        kb = max(result["peak_rss_self_kb"], result["peak_rss_children_kb"])
        result["peak_rss_mb"] = kb / 1024
    return result


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def goal(
    name: str,
    value: float,
    limit: float,
    *,
    op: str = "<=",
    unit: str = "",
    no_verdict: bool = False,
) -> dict:
    """One goal, met or missed, with the numbers that decided it. `no_verdict`: every round
    behind `value` was noisy, so it decides nothing (`met` is None; the value is still shown)."""
    out = {"goal": f"{name} {op} {limit:g}{unit}", "value": round(value, 4)}
    if no_verdict:
        return {**out, "met": None, "verdict": NO_VERDICT}
    met = {"<=": value <= limit, "<": value < limit, ">=": value >= limit}[op]
    return {**out, "met": bool(met)}


def rounded(obj: Any, digits: int = 4) -> Any:
    """Round floats in nested results so the JSON stays readable."""
    if isinstance(obj, float):
        return round(obj, digits)
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [rounded(v, digits) for v in obj]
    return obj


# What a measure sets for an instance of its own (DAGSTER_HOME, the warehouse, Dagster's
# PostgreSQL storage); put back after each (env_kept).
INSTANCE_ENV = (
    "DAGSTER_HOME",
    "BACKFILL_ASSETS_WAREHOUSE",
    "DAGSTER_PG_HOST",
    "DAGSTER_PG_PORT",
    "DAGSTER_PG_USERNAME",
    "DAGSTER_PG_PASSWORD",
    "DAGSTER_PG_DB",
)


def saved_env(names: Sequence[str]) -> dict[str, str | None]:
    """The environment variables `names` as they are (None: unset), for `restore_env`."""
    return {k: os.environ.get(k) for k in names}


def restore_env(saved: dict[str, str | None]) -> None:
    """Put back what `saved_env` saved: a variable that was unset is removed."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextmanager
def env_kept(*names: str) -> Iterator[None]:
    """The environment variables `names` put back as they were when the block ends."""
    saved = saved_env(names)
    try:
        yield
    finally:
        restore_env(saved)
