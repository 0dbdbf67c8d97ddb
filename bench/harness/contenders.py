"""Run ONE contender in this process and print its result:
`python -m bench.harness.contenders NAME …`.

Each contender runs in a fresh interpreter so its peak RSS is its own (VmHWM of this process, and
the ru_maxrss of any child it waited for, e.g. the `dbt` process), and so imports it pays for
(Dagster, dbt) are not already warm from an earlier contender. The parent reads the last line,
`BENCH_RESULT {json}`.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before any contender import: imports are part of its cost

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

RESULT_PREFIX = "BENCH_RESULT "

# name -> (module, function); every function is fn(db, start, end) -> dict of extra details, where
# db is a DuckDB file's Path, or a PostgreSQL URL (str) for the `_pg` contenders.
CONTENDERS: dict[str, tuple[str, str]] = {
    "floor": ("bench.contenders.floor", "run_floor"),
    "naive_dagster": ("bench.contenders.naive_dagster", "run_naive_dagster"),
    "dbt_microbatch": ("bench.contenders.dbt_microbatch", "run_dbt_microbatch"),
    "backfill_assets": ("bench.contenders.backfill_assets", "run_backfill_assets"),
    "backfill_assets_dagster": ("bench.contenders.backfill_assets", "run_backfill_assets_dagster"),
    "backfill_assets_dagster_downstream": (
        "bench.contenders.backfill_assets",
        "run_backfill_assets_dagster_downstream",
    ),
    # PostgreSQL (the `postgres` measure): --db is a postgresql:// URL.
    "floor_pg": ("bench.contenders.floor_pg", "run_floor_pg"),
    "backfill_assets_pg": ("bench.contenders.backfill_assets", "run_backfill_assets_pg"),
    "backfill_assets_dagster_pg": (
        "bench.contenders.backfill_assets",
        "run_backfill_assets_dagster_pg",
    ),
    "backfill_assets_dagster_downstream_pg": (
        "bench.contenders.backfill_assets",
        "run_backfill_assets_dagster_downstream_pg",
    ),
}


def _vm_hwm_kb() -> int:
    """Peak resident set size of this process (kB), from the kernel."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _load(name: str) -> Callable[[Any, dt.date, dt.date], dict[str, Any]]:
    module, func = CONTENDERS[name]
    return getattr(importlib.import_module(module), func)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("name", choices=sorted(CONTENDERS))
    ap.add_argument("--db", required=True, help="a DuckDB file, or a postgresql:// URL")
    ap.add_argument("--start", type=dt.date.fromisoformat, required=True)
    ap.add_argument("--end", type=dt.date.fromisoformat, required=True, help="exclusive")
    args = ap.parse_args(argv)

    # A URL stays a string: Path() would fold its `//`.
    db = args.db if args.db.startswith(("postgresql://", "postgres://")) else Path(args.db)
    fn = _load(args.name)
    t_imported = time.perf_counter()
    try:
        extra = fn(db, args.start, args.end)
    except NotImplementedError as e:
        # A contender that is declared but not built yet: recorded, not failed.
        print(RESULT_PREFIX + json.dumps({"status": "not_implemented", "reason": str(e)}))
        return
    # Reads a contender makes only to be measured apart (`set_aside_s`) are not its time.
    t_done = time.perf_counter() - float(extra.get("set_aside_s", 0.0))
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = {
        "status": "ok",
        "wall_s": t_done - _T0,
        "import_s": t_imported - _T0,
        "work_s": t_done - t_imported,
        "peak_rss_self_kb": _vm_hwm_kb(),
        "peak_rss_children_kb": children_kb,
        "extra": extra,
    }
    print(RESULT_PREFIX + json.dumps(result, default=str))


if __name__ == "__main__":
    main()
