"""What `LeanDbtCliResource` saves against dagster-dbt's `DbtCliResource`, side by side: an
experiment behind the README's "dbt models downstream" paragraph, not a measure of `make bench`.

    python -m bench.experiments.dbt_resource_gain [--rounds 3]

One DuckDB warehouse holds four weeks of the example's orders (2,000 a day) and their marts.
Each round times one `dbt build` of the swap's models (stg_orders, fct_daily_revenue,
fct_weekly_revenue, dim_customers) over a two-week window, four ways, in an order reversed
every other round:
- `base` and `lean`: one resource object of each kind, reused across the rounds, as a long-lived
  process would;
- `base new` and `lean new`: a new object for every build, as each Dagster run has one.
Prints each way's seconds and their medians.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

MODELS = "stg_orders fct_daily_revenue fct_weekly_revenue dim_customers"
WINDOW = {"min_date": "2026-01-12", "max_date": "2026-01-26"}
WAYS = ("base", "lean", "base new", "lean new")


def main() -> None:
    from dagster_dbt import DbtCliResource

    from backfill_assets.defs.dbt_resource import LeanDbtCliResource
    from backfill_assets.example.dbt import dbt_project_dir
    from backfill_assets.example.dbt_manifest import dbt_executable
    from bench.experiments.dbt_history import dbt_history
    from bench.harness.measure import median

    ap = argparse.ArgumentParser(description="dbt builds through both resources, side by side")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    project = str(dbt_project_dir())
    manifest = json.loads((Path(project) / "target" / "manifest.json").read_text())
    build = ["build", "--select", MODELS, "--exclude-resource-type", "unit_test"]
    build += ["--vars", json.dumps(WINDOW)]

    def new(cls: type[DbtCliResource]) -> DbtCliResource:
        return cls(project_dir=project, profiles_dir=project, dbt_executable=dbt_executable())

    with dbt_history("bench-dbt-resource-"):
        kept = {"base": new(DbtCliResource), "lean": new(LeanDbtCliResource)}
        times: dict[str, list[float]] = {w: [] for w in WAYS}
        for rnd in range(args.rounds):
            for way in WAYS if rnd % 2 == 0 else reversed(WAYS):
                kind = DbtCliResource if way.startswith("base") else LeanDbtCliResource
                resource = kept.get(way) or new(kind)
                t0 = time.perf_counter()
                invocation = resource.cli(build, manifest=manifest, raise_on_error=False)
                invocation.wait()
                times[way].append(time.perf_counter() - t0)
                if not invocation.is_successful():
                    raise SystemExit(f"dbt build failed: {invocation.get_error()}")
                print(f"round {rnd + 1}: {way} {times[way][-1]:.2f} s", flush=True)
    for way in WAYS:
        runs = ", ".join(f"{t:.2f}" for t in times[way])
        print(f"{way}: median {median(times[way]):.2f} s ({runs})")


if __name__ == "__main__":
    main()
