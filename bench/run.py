"""`python -m bench.run [--size small|default] [--repeats N] [--only NAME] [--out DIR]`

Runs every measure in this one process tree (contenders in child processes), then writes
`latest.json` and `latest.md` into --out and prints the Markdown. With --only, the other
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

from bench import gates, planning, postgres, safety_overhead, swap_scaling
from bench.config import DEFAULT_OUT, NOT_YET_MEASURED, SIZES, BenchContext
from bench.data import Templates
from bench.measure import rounded
from bench.report import machine, markdown

Measure = Callable[[BenchContext, Templates], dict[str, Any]]
MEASURES: dict[str, Measure] = {
    "safety_overhead": safety_overhead.run,
    "swap_scaling": lambda ctx, _templates: swap_scaling.run(ctx),
    "gates": gates.run,
    "planning": lambda ctx, _templates: planning.run(ctx),
    "postgres": postgres.run,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.run",
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
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
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
    try:
        entries = run_measures(BenchContext(size, args.repeats, workdir), names, started_at)
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
    doc = rounded(doc)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = markdown(doc)
    (args.out / "latest.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
