"""`python -m bench [--size small|default] [--repeats N] [--only NAME] [--out DIR]`

Runs every measure in this one process tree (contenders in child processes), then writes
`latest.json` and `latest.md` into --out and prints the Markdown. Before each timed round it
waits for the machine to go quiet (up to --quiet-wait-max seconds; --no-quiet-wait skips that),
and it leaves out the rounds in which other processes used more than --others-limit cores
(bench.harness.load). With --only, the other
measures' entries are kept from the existing latest.json of the same size (each entry says when
it was measured); ratios never mix runs, since each measure's contenders run side by side.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.config import DEFAULT_OUT, NOT_YET_MEASURED, SIZES, BenchContext
from bench.harness.data import Templates
from bench.harness.load import OTHERS_LIMIT_CORES, QUIET_WAIT_MAX_S, LoadMonitor, agree
from bench.harness.measure import rounded
from bench.harness.report import machine, markdown
from bench.measures import (
    adoption,
    cli_latency,
    daemon,
    dbt_refresh,
    driver,
    gates,
    planning,
    postgres,
    readers,
    safety_overhead,
    swap_scaling,
)

Measure = Callable[[BenchContext, Templates], dict[str, Any]]
# The keys are the measures' names in `--only`, latest.json and the report, so they stay as they
# are when a module is renamed: `cli` is bench.measures.cli_latency (a module named `cli` would
# read as the project's own CLI), and `--only` keeps an existing latest.json's `cli` entry.
MEASURES: dict[str, Measure] = {
    "safety_overhead": safety_overhead.run,
    "swap_scaling": lambda ctx, _templates: swap_scaling.run(ctx),
    "gates": gates.run,
    "planning": lambda ctx, _templates: planning.run(ctx),
    "readers": lambda ctx, _templates: readers.run(ctx),
    "driver": lambda ctx, _templates: driver.run(ctx),
    "cli": lambda ctx, _templates: cli_latency.run(ctx),
    "dbt_refresh": lambda ctx, _templates: dbt_refresh.run(ctx),
    "postgres": postgres.run,
    "adoption": lambda ctx, _templates: adoption.run(ctx),
    "daemon": lambda ctx, _templates: daemon.run(ctx),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="rounds per measure; figures are medians (use >= 3 for real numbers)",
    )
    ap.add_argument("--only", choices=sorted(MEASURES), help="run just this measure")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where latest.json/.md go")
    ap.add_argument(
        "--workdir",
        type=Path,
        help="scratch folder for DuckDB files (default: a temp dir, removed afterwards)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument(
        "--no-quiet-wait",
        dest="quiet_wait",
        action="store_false",
        help="do not wait for the machine to go quiet before each timed round (the smoke test); "
        "the others' CPU is still measured and noisy rounds still marked and left out",
    )
    ap.add_argument(
        "--others-limit",
        type=float,
        default=OTHERS_LIMIT_CORES,
        metavar="CORES",
        help="other processes may use at most this many cores before and during a round "
        "(default %(default)s)",
    )
    ap.add_argument(
        "--quiet-wait-max",
        type=float,
        default=QUIET_WAIT_MAX_S,
        metavar="S",
        help="give up waiting for quiet after this long; the round runs and is judged by what "
        "happened in it (default %(default)s)",
    )
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.others_limit <= 0 or args.quiet_wait_max < 0:
        ap.error("--others-limit must be positive and --quiet-wait-max not negative")
    return args


def _previous(out: Path, size: str) -> dict[str, Any]:
    """The existing latest.json, if it was measured at the same size (for --only)."""
    try:
        doc = json.loads((out / "latest.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if doc.get("run", {}).get("size") == size else {}


def run_measures(ctx: BenchContext, names: list[str], started_at: str) -> dict[str, Any]:
    templates = Templates(ctx)
    entries: dict[str, Any] = {}
    for name in names:
        print(f"[bench] {name} ({ctx.size.name}, {ctx.repeats} rounds)", flush=True)
        t0 = time.perf_counter()
        results = MEASURES[name](ctx, templates)
        seconds = time.perf_counter() - t0
        if results.get("status") == NOT_YET_MEASURED:
            entries[name] = {"status": NOT_YET_MEASURED}
        elif "status" in results:
            # A measure that could not run here (e.g. no PostgreSQL binaries) says why.
            entries[name] = {"status": results["status"], "reason": results.get("reason", "")}
        else:
            entries[name] = {
                "status": "measured",
                "measured_at": started_at,
                "seconds": seconds,
                "results": results,
            }
        print(f"[bench] {name} done in {seconds:.1f} s", flush=True)
    entries["_template_build_s"] = templates.build_seconds
    return entries


# The measures reported in parts, each part with its own rounds and load.
_PARTS = {
    "postgres": ("backfill", "swap", "blocked_readers", "reader_queries"),
    "adoption": ("duckdb", "postgres"),
    "daemon": ("sqlite", "postgres"),
}


def timed_parts(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, results) of every measured part that records its rounds' load: one per measure,
    four for `postgres` (its backfill, swap, readers during swaps, reader queries), two for
    `adoption` (DuckDB, PostgreSQL) and `daemon` (SQLite and PostgreSQL storage)."""
    out = []
    for name in MEASURES:
        entry = doc.get(name, {})
        if entry.get("status") != "measured":
            continue
        r = entry["results"]
        if name in _PARTS:
            for part in _PARTS[name]:
                if "load" in r.get(part, {}):
                    out.append((f"{name} {part}", r[part]))
        elif "load" in r:
            out.append((name, r))
    return out


def run_load(doc: dict[str, Any], monitor: LoadMonitor) -> dict[str, Any]:
    """The load over the whole document: the policy, every part's rounds (how many were noisy),
    and whether the rounds agree, part by part and overall (None: cannot tell)."""
    parts = {}
    for label, r in timed_parts(doc):
        load = r["load"]
        parts[label] = {
            "rounds": load["n"],
            "noisy": load["noisy"],
            "verdict": load["verdict"],
            "others_cores_max": load["others_cores_max"],
            "waited_s": load["waited_s"],
            "rounds_agree": r.get("rounds_agree"),
        }
    return {
        "policy": monitor.policy(),
        "rounds": sum(p["rounds"] for p in parts.values()),
        "noisy_rounds": sum(p["noisy"] for p in parts.values()),
        "waited_s": sum(p["waited_s"] for p in parts.values()),
        "others_cores_max": max((p["others_cores_max"] for p in parts.values()), default=0.0),
        "all_noisy": [label for label, p in parts.items() if p["verdict"]],
        "disagree": [label for label, p in parts.items() if p["rounds_agree"] is False],
        "rounds_agree": agree(
            {"agree": p["rounds_agree"]} for p in parts.values() if not p["verdict"]
        ),
        "parts": parts,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = SIZES[args.size]
    started_at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.perf_counter()
    # Other people's jobs share these cores: the load around the run says how to read it.
    load_start = os.getloadavg()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    names = [args.only] if args.only else list(MEASURES)
    monitor = LoadMonitor(
        wait=args.quiet_wait, limit_cores=args.others_limit, max_wait_s=args.quiet_wait_max
    )
    try:
        entries = run_measures(
            BenchContext(size, args.repeats, workdir, monitor), names, started_at
        )
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    doc = _previous(args.out, size.name) if args.only else {}
    doc.update(
        {
            "machine": machine(),
            "run": {
                "size": size.name,
                "sizes": size.to_dict(),
                "repeats": args.repeats,
                "only": args.only,
                "started_at": started_at,
                "total_wall_s": time.perf_counter() - t0,
                "loadavg_1_5_15_start": list(load_start),
                "loadavg_1_5_15_end": list(os.getloadavg()),
                "template_build_s": entries.pop("_template_build_s"),
            },
        }
    )
    doc.update(entries)
    for name in MEASURES:
        doc.setdefault(name, {"status": "not run"})
    doc["run"]["load"] = run_load(doc, monitor)
    doc = rounded(doc)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = markdown(doc)
    (args.out / "latest.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
