"""A batch's gates and diff on PostgreSQL: this checkout's against an earlier commit's.

    python -m bench.experiments.pg_gates_ab [--base af9b6d0] [--rounds 15] [--rows-per-day 20000]

On a throwaway server: two ISO weeks of the example's raw orders, `orders_daily` built by v1,
then the second week's shadow built by v2 (the bench's batch: 7 days of `--rows-per-day`). Then
`gates_and_diff` of that week, as a batch's gates read it, alternately by this checkout's
`backfill_assets/lib/warehouse/postgres/gates.py` and by the same file at `--base` (loaded from
git, with everything else this checkout's), `--rounds` times each after one untimed read each.
Prints each one's median and every round. The shadow write is timed once for scale.

The default base is the commit before the duplicate-key count ran only when a day of the batch
is not found the same by the diff (docs/performance.md, "The diff gate on PostgreSQL").
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.config import REPO_DIR

GATES = "backfill_assets/lib/warehouse/postgres/gates.py"
START, SHADOW, END = dt.date(2024, 1, 1), dt.date(2024, 1, 8), dt.date(2024, 1, 15)


def _module_at(commit: str, where: Path) -> Any:
    source = subprocess.run(
        ["git", "show", f"{commit}:{GATES}"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = where / "gates_base.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("gates_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--base", default="af9b6d0", help="the commit to compare with")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--rows-per-day", type=int, default=20_000)
    args = ap.parse_args()

    from backfill_assets.example import orders as o
    from backfill_assets.example.spec import ORDERS_CRITERIA, ORDERS_SPEC
    from backfill_assets.lib.gates.evaluate import diff_tolerance, gate_reads
    from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
    from backfill_assets.lib.warehouse.postgres import gates as current
    from backfill_assets.testing.throwaway_postgres import throwaway_postgres
    from bench.harness.pg_data import PgServer, land_sources, vacuum_analyze

    # What a batch of the example's plan reads, as `evaluate_gates` asks for it.
    reads = {
        **gate_reads(ORDERS_CRITERIA, "ab"),
        "tolerance": diff_tolerance(ORDERS_CRITERIA),
    }
    with tempfile.TemporaryDirectory(prefix="pg-gates-ab-") as tmp, throwaway_postgres() as server:
        base = _module_at(args.base, Path(tmp))
        pg = PgServer(server)
        pg.configure()
        url = pg.create("ab")
        wh = PostgresWarehouse(url)
        land_sources(wh, START, END, args.rows_per_day)
        wh.replace_partitions(ORDERS_SPEC, START, END, build=o.ORDERS_DAILY_SQL_V1)
        vacuum_analyze(url)
        wh.claim_plan(ORDERS_SPEC.name, "ab")
        t0 = time.perf_counter()
        wh.replace_partitions(
            ORDERS_SPEC, SHADOW, END, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id="ab"
        )
        write_ms = (time.perf_counter() - t0) * 1000
        contenders = {f"base {args.base}": base, "this checkout": current}
        times: dict[str, list[float]] = {name: [] for name in contenders}
        answers = {}
        for name, module in contenders.items():  # untimed: the first read warms the caches
            facts, diff = module.gates_and_diff(wh, ORDERS_SPEC, SHADOW, END, **reads)
            answers[name] = (facts, diff)
        if answers[f"base {args.base}"] != answers["this checkout"]:
            sys.exit("the two read different gates or diffs: compare what they read first")
        for _ in range(args.rounds):
            for name, module in contenders.items():
                t = time.perf_counter()
                module.gates_and_diff(wh, ORDERS_SPEC, SHADOW, END, **reads)
                times[name].append((time.perf_counter() - t) * 1000)
    print(f"one week's shadow write (v2, {7 * args.rows_per_day:,} rows): {write_ms:.0f} ms")
    for name, values in times.items():
        print(
            f"{name}: gates and diff {statistics.median(values):.1f} ms (median of "
            f"{args.rounds}); rounds: {', '.join(f'{v:.0f}' for v in values)}"
        )


if __name__ == "__main__":
    main()
