"""Measure 4: planning at scale. A synthetic asset graph (default 10,000 assets) downstream of a
daily target, with a realistic fan-out and dbt-like chains of daily, weekly and unpartitioned
models, and a 5-year daily range. We time the whole plan (impact through every edge's partition
mapping + the pure plan build) against the time Dagster itself takes to resolve
`AssetSelection.downstream()` on the same graph, in the same process, medians of N runs (each
waits for quiet and is measured; noisy runs are left out: bench.harness.load).
"""

from __future__ import annotations

import datetime as dt
import random
import time
from typing import Any

from bench.harness.config import BenchContext
from bench.harness.load import (
    agree,
    agreement,
    all_noisy,
    clean_values,
    kept,
    print_noisy,
    round_load,
    summary,
)
from bench.harness.measure import goal, median

TARGET = "orders_daily"
RANGE = (dt.date(2021, 1, 1), dt.date(2025, 12, 31))  # 5 years, inclusive
NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def synthetic_graph(n_assets: int, seed: int = 7) -> Any:
    """A target and n_assets - 1 assets downstream of it: chains (staging -> marts) with
    fan-out; ~60% daily, ~10% weekly, ~30% unpartitioned; each asset reads 1-3 earlier ones."""
    import dagster as dg

    rng = random.Random(seed)
    daily = dg.DailyPartitionsDefinition(start_date="2020-01-01")
    weekly = dg.WeeklyPartitionsDefinition(start_date="2019-12-30", day_offset=1)
    specs = [dg.AssetSpec(TARGET, partitions_def=daily)]
    kinds = {TARGET: "daily"}
    names = [TARGET]
    for i in range(1, n_assets):
        roll = rng.random()
        kind = "daily" if roll < 0.6 else "weekly" if roll < 0.7 else "none"
        # Recent assets are likelier parents (chains); the target and early ones fan out.
        parents = {
            names[max(0, len(names) - 1 - int(rng.expovariate(0.05)))]
            for _ in range(rng.randint(1, 3))
        }
        if kind == "daily":  # a daily model cannot sit downstream of a weekly/unpartitioned one
            parents = {p for p in parents if kinds[p] == "daily"} or {TARGET}
        name = f"model_{i:05d}"
        pd = daily if kind == "daily" else weekly if kind == "weekly" else None
        specs.append(
            dg.AssetSpec(
                name, deps=sorted(parents), partitions_def=pd, kinds={"dbt"} if i % 2 else set()
            )
        )
        kinds[name] = kind
        names.append(name)
    return dg.Definitions(assets=specs).resolve_asset_graph()


def _plan(graph: Any) -> Any:
    from backfill_assets.example.declaration import ORDERS
    from backfill_assets.lib.planning.build import PlanInputs, PlanRequest, build_plan
    from backfill_assets.lib.planning.impact import downstream_impact

    start, end = RANGE
    days = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
    impact = downstream_impact(graph, TARGET, days)
    info = ORDERS.target_info()
    info = type(info)(**{**info.__dict__, "partitions_start": dt.date(2020, 1, 1)})
    inputs = PlanInputs(
        targets={TARGET: info},
        known_assets=frozenset([TARGET]),
        impact=impact,
        partition_rows=dict.fromkeys(days, 200_000),
        seconds_per_row=None,
        batch_overhead_seconds=None,
        daily_durations_seconds=(),
        now=NOW,
    )
    request = PlanRequest(
        TARGET, start.isoformat(), end.isoformat(), "02:00-23:59", "UTC", "backup"
    )
    return build_plan(request, inputs)


def run(ctx: BenchContext) -> dict[str, Any]:
    import dagster as dg

    n_assets = ctx.size.planning_assets
    build_s, dagster_s, plan_s = [], [], []
    rounds: list[dict[str, Any]] = []
    plan = None
    down: Any = ()
    # One untimed plan on a small graph first: the first plan in a process pays one-off costs
    # (the example's declaration imported, Dagster's and Python's caches warmed), so round 1
    # would not be comparable with the others and the rounds could never agree.
    _plan(synthetic_graph(50))
    for rnd in range(max(3, ctx.repeats)):
        with ctx.load.span() as span:
            # A fresh graph for each timing: the asset graph caches partition mappings and the
            # topological order, so a second plan on the same graph would look faster than the
            # first plan a code location ever makes.
            t0 = time.perf_counter()
            graph = synthetic_graph(n_assets)
            build_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            plan = _plan(graph)
            plan_s.append(time.perf_counter() - t0)
            graph = synthetic_graph(n_assets)
            t0 = time.perf_counter()
            down = dg.AssetSelection.assets(TARGET).downstream(include_self=False).resolve(graph)
            dagster_s.append(time.perf_counter() - t0)
        rounds.append(round_load(rnd, [span]))
        print_noisy(f"planning round {rnd + 1}", rounds[-1])
    use = kept(rounds)
    build_graph_s = median([build_s[i] for i in use])
    plan_med = median([plan_s[i] for i in use])
    dagster_med = median([dagster_s[i] for i in use])
    assert plan is not None
    assert len(plan.impact) == len(down), "the plan's impact must be Dagster's downstream set"
    weekly_impacted = sum(
        1
        for i in plan.impact
        if i.partitions != "all"
        and i.partitions
        and dt.date.fromisoformat(i.partitions[0]).weekday() == 0
        and len(i.partitions) < 300
    )
    # The goal judges the plan's own seconds, so that is what the rounds must agree on.
    agreements = {"plan s": agreement(clean_values(dict(enumerate(plan_s)), rounds))}
    result = {
        "assets": n_assets,
        "downstream_assets": len(down),
        "partitions": len(plan.partitions),
        "batches": len(plan.batches),
        "weekly_assets_impacted": weekly_impacted,
        "graph_build_s": round(build_graph_s, 3),
        "dagster_downstream_s": dagster_med,
        "plan_s": plan_med,
        "plan_over_dagster": plan_med / dagster_med,
        "runs": len(use),
        "plan_s_runs": plan_s,
        "dagster_downstream_s_runs": dagster_s,
        "load": summary(rounds, "measured per round (graph builds, the plan, Dagster's resolve)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
    }
    result["goals"] = [
        goal(
            f"plan {n_assets} assets x 5 years (s)",
            result["plan_s"],
            0.5,
            no_verdict=all_noisy(rounds),
        )
    ]
    return result
