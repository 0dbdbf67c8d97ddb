"""Measure: the swap's build of the impacted dbt models, against a plain `dbt build` of them.

The performance issue's goal: the downstream refresh of a swap is one dbt invocation for all
grains, and costs <= 1.2x a single `dbt build` of the impacted models with the same partition
filters. The example's impact set has three grains: fct_daily_revenue (daily), fct_weekly_revenue
(weekly), stg_orders and dim_customers (unpartitioned). Per round, on one DuckDB warehouse
holding `dbt_history_days` days of `orders_daily` and its marts, and an executed plan of
`dbt_plan_days` days (its second week partial), side by side:
- `shadow build`: what the swap runs before it publishes (`build_in_shadow`): the overlay view,
  copies of the incremental models, one `dbt build` in shadow with its tests, the overlay
  dropped. Its shadow tables are then dropped, untimed (one such build, untimed, comes before
  the rounds: the first one after the seed pays one-off costs the later ones do not);
- `single dbt build`: `dbt build --select <the same models> --vars <the same window>` on the
  live models, as one would rebuild them by hand;
- `per grain`: one `dbt build` per grain, each with its grain's own window, upstream grains
  first: what the shadow build ran before it took one invocation.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.harness.config import REPO_DIR, BenchContext
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
from bench.harness.measure import BenchError, goal, median, restore_env, saved_env

GOAL_RATIO = 1.2
HISTORY_START = dt.date(2026, 1, 5)  # a Monday
PLAN_START = dt.date(2026, 1, 12)  # a Monday: the plan's first week is whole, its second not
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
CONTENDERS = ("shadow build", "single dbt build", "per grain")


def _dbt_build(dbt: Any, manifest: Any, target_args: list[str], inv: Any, window_vars: Any) -> None:
    args = ["build", *target_args, "--select", " ".join(inv.names)]
    args += ["--exclude-resource-type", "unit_test"]
    if inv.window:
        lo, hi = (d.isoformat() for d in inv.window)
        args += ["--vars", json.dumps({window_vars[0]: lo, window_vars[1]: hi})]
    invocation = dbt.cli(args, manifest=manifest, raise_on_error=False)
    invocation.wait()
    if not invocation.is_successful():
        raise BenchError(f"dbt {' '.join(args)} failed: {invocation.get_error()}")


def run(ctx: BenchContext) -> dict[str, Any]:
    import dagster as dg

    from backfill_assets.example.dbt import dbt_target
    from backfill_assets.example.declaration import ORDERS
    from backfill_assets.example.definitions import example_definitions
    from backfill_assets.example.seed import build_history, land_days
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
    from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.downstream import (
        DbtDownstream,
        build_in_shadow,
        classify,
        drop_shadows,
        grain_invocations,
        plan_invocations,
    )
    from backfill_assets.service.executor import execute_plan
    from backfill_assets.service.planner import plan_backfill
    from backfill_assets.service.tables import backfill_tables

    size = ctx.size
    n_rounds = ctx.repeats
    history_end = HISTORY_START + dt.timedelta(days=size.dbt_history_days - 1)
    plan_end = PLAN_START + dt.timedelta(days=size.dbt_plan_days - 1)
    times: dict[str, list[float]] = {c: [] for c in CONTENDERS}
    rounds: list[dict[str, Any]] = []
    root = Path(tempfile.mkdtemp(prefix="bench_dbt_", dir=ctx.workdir))
    path = root / "warehouse.duckdb"
    saved = saved_env((WAREHOUSE_ENV, "BACKFILL_ASSETS_DBT_PROJECT"))
    os.environ[WAREHOUSE_ENV] = str(path)
    os.environ["BACKFILL_ASSETS_DBT_PROJECT"] = str(REPO_DIR / "dbt_project")
    try:
        with ExitStack() as stack:
            home = root / "home"
            home.mkdir()
            instance = stack.enter_context(dg.instance_for_test(temp_dir=str(home)))
            defs = example_definitions()
            graph = defs.resolve_asset_graph()
            tables = backfill_tables(defs)
            wh = DuckDBWarehouse(path, lock_timeout_s=30)
            t0 = time.perf_counter()
            land_days(defs, instance, HISTORY_START, history_end, size.dbt_rows_per_day)
            build_history(defs, instance, wh, HISTORY_START, history_end, logic="1")
            request = PlanRequest(
                ORDERS.key,
                PLAN_START.isoformat(),
                plan_end.isoformat(),
                "02:00-23:00",
                "UTC",
                "backup",
            )
            plan = plan_backfill(
                request, asset_graph=graph, tables=tables, instance=instance, warehouse=wh, now=NOW
            )
            approve_plan(instance, wh, tables[ORDERS.key], plan, "bench")
            execute_plan(defs, instance, wh, tables, plan.plan_id, clock=lambda: NOW)
            seed_s = time.perf_counter() - t0

            config = DbtDownstream(resource_key="dbt", cli_target=dbt_target)
            dbt = (defs.resources or {})["dbt"]
            downstream = classify(plan, graph)
            one, split = plan_invocations(plan, graph, downstream, config)
            if split or len(one) != 1:
                raise BenchError(f"the example's plan should take one dbt invocation: {split}")
            per_grain = grain_invocations(plan, graph, downstream)
            target_args, env = dbt_target(str(path))
            os.environ.update(env)

            def shadow_build() -> None:
                build = build_in_shadow(plan, ORDERS, graph, wh, dbt, config, str(path))
                if not build.passed or build.invocations != 1:
                    raise BenchError(f"shadow build: {build.summary()}")
                drop_shadows(wh, build)

            def single() -> None:
                _dbt_build(dbt, downstream.manifest, target_args, one[0], config.window_vars)

            def grains() -> None:
                for inv in per_grain:
                    _dbt_build(dbt, downstream.manifest, target_args, inv, config.window_vars)

            contenders = {"shadow build": shadow_build, "single dbt build": single}
            contenders["per grain"] = grains
            shadow_build()  # untimed: the first build after the seed pays one-off costs
            for rnd in range(n_rounds):
                with ctx.load.span() as span:
                    for name, fn in contenders.items():
                        t = time.perf_counter()
                        fn()
                        times[name].append(time.perf_counter() - t)
                rounds.append(round_load(rnd, [span]))
                print_noisy(f"dbt_refresh round {rnd + 1}", rounds[-1])
    finally:
        restore_env(saved)
    use = kept(rounds)
    ratios = [times["shadow build"][i] / times["single dbt build"][i] for i in range(n_rounds)]
    grain_ratios = [times["per grain"][i] / times["single dbt build"][i] for i in range(n_rounds)]
    seconds = {c: median([times[c][i] for i in use]) for c in CONTENDERS}
    ratio = median([ratios[i] for i in use])
    agreements = {"shadow / single": agreement(clean_values(dict(enumerate(ratios)), rounds))}
    return {
        "rows_per_day": size.dbt_rows_per_day,
        "history_days": size.dbt_history_days,
        "plan": f"{PLAN_START}..{plan_end}",
        "invocation": {
            "models": list(one[0].names),
            "window": [str(d) for d in one[0].window or ()],
        },
        "per_grain_invocations": len(per_grain),
        "seed_s": round(seed_s, 1),
        "seconds": seconds,
        "seconds_runs": times,
        "shadow_over_single": ratio,
        "shadow_over_single_runs": ratios,
        "per_grain_over_single": median([grain_ratios[i] for i in use]),
        "load": load_summary(rounds, "measured per round (all three contenders)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
        "goals": [
            goal(
                "shadow build / single dbt build",
                ratio,
                GOAL_RATIO,
                no_verdict=all_noisy(rounds),
            )
        ],
    }
