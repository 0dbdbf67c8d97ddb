"""What sharing one opening of the DuckDB file between a batch's write and its gates saves, side
by side: an experiment behind the README's (d) row, not a measure of `make bench`.

    python -m bench.experiments.session_gain [--pairs 3] [--workdir DIR]

The loop of (d) (`backfill_in_weeks`: a shadow write and the gates per ISO week, then the
swap) over 13 weeks of 200k orders a day, with and without `session()`, in turns, each on a
fresh copy of the same file. Prints each pair's seconds; the opening and closing of the file
count as the write's, as in the `gates` and `safety_overhead` measures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

START, END = dt.date(2025, 1, 6), dt.date(2025, 4, 6)
ROWS_PER_DAY = 200_000


def main() -> None:
    from backfill_assets.example.orders import ORDERS_DAILY_SQL_V1
    from backfill_assets.example.spec import ORDERS_SPEC
    from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
    from bench.contenders.backfill_assets import backfill_in_weeks
    from bench.harness.data import checkpoint, fresh_copy, load_sources

    ap = argparse.ArgumentParser(description="(d) with and without the session, side by side")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-session-"))
    workdir.mkdir(parents=True, exist_ok=True)
    template = workdir / "template.duckdb"
    if not template.exists():
        load_sources(template, START, END, ROWS_PER_DAY)
        DuckDBWarehouse(template).replace_partitions(
            ORDERS_SPEC, START, END, build=ORDERS_DAILY_SQL_V1
        )
        checkpoint(template)
    for pair in range(1, args.pairs + 1):
        seconds = {}
        for session in (False, True):
            wh = DuckDBWarehouse(fresh_copy(template, workdir / "run.duckdb"))
            t0 = time.perf_counter()
            phases = backfill_in_weeks(wh, START, END, f"p{pair}", session=session)["phases"]
            seconds[session] = time.perf_counter() - t0
            split = ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
            print(f"pair {pair}, session {'on ' if session else 'off'}: {seconds[session]:.2f} s "
                  f"({split})", flush=True)  # fmt: skip
        print(f"pair {pair}: on/off {seconds[True] / seconds[False]:.3f}", flush=True)


if __name__ == "__main__":
    main()
