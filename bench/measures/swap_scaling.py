"""Measure 2: does swap/rollback cost follow the backfilled range or the whole table?

The same range (`swap_weeks` ISO weeks) is swapped into a target holding 1x and 10x as much
history OUTSIDE the range (1x: history as big as the range; 10x: ten times that). With a pointer
swap both should cost the same; a copy-based swap would too (it scales with the range), but a
swap that scans or rewrites the table would not. The two variants alternate within each round.

Each round waits for the machine to go quiet and is measured for the others' CPU; noisy rounds
are left out of the medians and ratios (bench.harness.load). The rollback is checked by the
bench's own row checksum (count and sum of row hashes through the target's view), not the
adapter's.

History is built fast: one week of real v1 rows is copied with shifted dates and ids
(INSERT…SELECT through the adapter's own partition writer), so only the range needs raw data.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from backfill_assets.example import orders as o
from backfill_assets.example.orders import ORDERS_DAILY_SQL as ORDERS_BUILD
from backfill_assets.example.spec import ORDERS_SPEC
from backfill_assets.lib.dates import days
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from bench.harness import plain
from bench.harness.config import BenchContext
from bench.harness.data import checkpoint, fresh_copy, load_sources
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
from bench.harness.measure import BenchError, goal, median

SEED_TABLE = "bench_seed_week"
# The performance issue's goal for a swap, and for a rollback, of `swap_weeks` (13) weeks.
SWAP_GOAL_MS = 50.0
# Weeks of history written per transaction while building (keeps each transaction modest).
BUILD_CHUNK_WEEKS = 13
# One week of real rows, copied to every week of [$start, $end) ($start a Monday): ids move with
# the date, since order_id = days since 2000-01-01 * 1e6 + n, so keys stay unique across copies.
SHIFTED_WEEK_SQL = f"""
with shift as (
    select date_diff('day', (select min(order_date) from {SEED_TABLE}), w::date)::integer as k
    from range($start::timestamp, $end::timestamp, interval 7 day) as r(w)
)
select
    s.order_id + shift.k * 1000000 as order_id,
    s.order_date + shift.k as order_date,
    s.ordered_at + to_days(shift.k) as ordered_at,
    s.customer_id, s.country, s.currency, s.gross_amount, s.discount_amount, s.tax_amount,
    s.net_amount, s.fx_rate, s.net_revenue_usd, s.status, s.is_cancelled
from {SEED_TABLE} as s, shift
"""


def _range(ctx: BenchContext) -> tuple[dt.date, dt.date]:
    start = ctx.size.start
    return start, start + dt.timedelta(weeks=ctx.size.swap_weeks)


def build_base(ctx: BenchContext) -> Path:
    """raw data and live v1 rows for the range only; both variants start from a copy of it."""
    r0, r1 = _range(ctx)
    path = ctx.workdir / "swap_base.duckdb"
    load_sources(path, r0, r1, ctx.size.swap_rows_per_day)
    DuckDBWarehouse(path).replace_partitions(ORDERS_SPEC, r0, r1, build=o.ORDERS_DAILY_SQL_V1)
    checkpoint(path)
    return path


def add_history(path: Path, r0: dt.date, weeks: int) -> None:
    """`weeks` full ISO weeks of live rows right before r0, copied from the range's first week."""
    wh = DuckDBWarehouse(path)
    wh.execute(
        f"CREATE OR REPLACE TABLE {SEED_TABLE} AS SELECT * FROM {ORDERS_SPEC.name} "
        "WHERE order_date >= $s AND order_date < $e",
        {"s": r0, "e": r0 + dt.timedelta(weeks=1)},
    )
    h0 = r0 - dt.timedelta(weeks=weeks)
    for i in range(0, weeks, BUILD_CHUNK_WEEKS):
        c0 = h0 + dt.timedelta(weeks=i)
        c1 = min(c0 + dt.timedelta(weeks=BUILD_CHUNK_WEEKS), r0)
        wh.replace_partitions(ORDERS_SPEC, c0, c1, build=SHIFTED_WEEK_SQL)
    wh.execute(f"DROP TABLE {SEED_TABLE}")
    checkpoint(path)


def _table_facts(path: Path) -> dict[str, int]:
    wh = DuckDBWarehouse(path)
    rows = wh.query(f"SELECT count(*) FROM {ORDERS_SPEC.name}")[0][0]
    return {"live_rows": int(rows), "live_week_tables": wh.live_week_count(ORDERS_SPEC)}


def range_checksum(path: Path, r0: dt.date, r1: dt.date) -> str:
    """The live range's rows (count and sum of row hashes, so a duplicated row shows), read
    through the target's view by the bench itself, not by the adapter under test."""
    with duckdb.connect(str(path), read_only=True) as con:
        return plain.range_checksum(con, ORDERS_SPEC.name, r0, r1)


def swap_once(path: Path, r0: dt.date, r1: dt.date, plan_id: str) -> dict[str, float]:
    """Build a shadow for the range (untimed), then time the swap and the rollback."""
    wh = DuckDBWarehouse(path)
    before = range_checksum(path, r0, r1)
    wh.claim_plan(ORDERS_SPEC.name, plan_id)  # what approving the plan does
    wh.replace_partitions(ORDERS_SPEC, r0, r1, build=ORDERS_BUILD, shadow=True, plan_id=plan_id)
    t0 = time.perf_counter()
    swapped = wh.swap(ORDERS_SPEC, plan_id, days(r0, r1))
    t1 = time.perf_counter()
    rolled = wh.rollback(ORDERS_SPEC, plan_id)
    t2 = time.perf_counter()
    if swapped.action != "swapped" or rolled.action != "rolled_back":
        raise BenchError(f"swap/rollback of {plan_id}: {swapped.action}, {rolled.action}")
    if range_checksum(path, r0, r1) != before:
        raise BenchError(f"rollback of {plan_id} did not restore the range's rows")
    # The daily job rewriting the range's last day with the logic that built it (the rows stay
    # the same): what a day's write costs against 1x and 10x history.
    last = r1 - dt.timedelta(days=1)
    t3 = time.perf_counter()
    wh.replace_partitions(ORDERS_SPEC, last, r1, build=o.ORDERS_DAILY_SQL_V1)
    t4 = time.perf_counter()
    return {
        "swap_s": t1 - t0,
        "rollback_s": t2 - t1,
        "daily_s": t4 - t3,
        "swap_inner_s": swapped.seconds,
        "rollback_inner_s": rolled.seconds,
    }


def swap_rounds(
    ctx: BenchContext,
    factors: tuple[int, int],
    swap: Callable[[int, int], dict[str, float]],
    label: str,
) -> tuple[dict[int, list[dict[str, float]]], list[dict[str, Any]]]:
    """Timed rounds of `swap(factor, round)` (a swap and its rollback) for both history
    factors, their order alternating between rounds; the samples per factor and each round's
    load. Shared by the DuckDB and PostgreSQL swap measures."""
    lo, hi = factors
    samples: dict[int, list[dict[str, float]]] = {lo: [], hi: []}
    rounds: list[dict[str, Any]] = []
    for rnd in range(max(ctx.repeats, ctx.size.swap_rounds_min)):
        with ctx.load.span() as span:
            for factor in (lo, hi) if rnd % 2 == 0 else (hi, lo):
                s = swap(factor, rnd)
                samples[factor].append(s)
                print(
                    f"  {label} round {rnd + 1}: {factor}x swap {s['swap_s'] * 1000:.0f} ms, "
                    f"rollback {s['rollback_s'] * 1000:.0f} ms",
                    flush=True,
                )
        rounds.append(round_load(rnd, [span]))
        print_noisy(f"{label} round {rnd + 1}", rounds[-1])
    return samples, rounds


def run(ctx: BenchContext) -> dict[str, Any]:
    r0, r1 = _range(ctx)
    lo, hi = ctx.size.swap_history_factors
    base = build_base(ctx)
    paths: dict[int, Path] = {}
    facts: dict[int, dict[str, int]] = {}
    t0 = time.perf_counter()
    for factor in (lo, hi):
        paths[factor] = fresh_copy(base, ctx.workdir / f"swap_{factor}x.duckdb")
        add_history(paths[factor], r0, factor * ctx.size.swap_weeks)
        facts[factor] = _table_facts(paths[factor])
    build_s = time.perf_counter() - t0
    samples, rounds = swap_rounds(
        ctx,
        (lo, hi),
        lambda factor, rnd: swap_once(paths[factor], r0, r1, f"swap_{factor}x_r{rnd}"),
        "swap_scaling",
    )
    out = summarise_swaps(
        samples,
        rounds,
        (lo, hi),
        weeks=ctx.size.swap_weeks,
        ms_goal=SWAP_GOAL_MS,
        reported=("daily",),
    )
    for f in (lo, hi):
        out["variants"][f"{f}x"] = {**facts[f], **out["variants"][f"{f}x"]}
    return {
        "range": {
            "start": r0.isoformat(),
            "end": r1.isoformat(),
            "weeks": ctx.size.swap_weeks,
            "rows_per_day": ctx.size.swap_rows_per_day,
        },
        **out,
        "build_s": build_s,
    }


def summarise_swaps(
    samples: dict[int, list[dict[str, float]]],
    rounds: list[dict[str, Any]],
    factors: tuple[int, int],
    *,
    weeks: int,
    ms_goal: float,
    reported: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Medians per history factor and the paired hi/lo ratios of swap and rollback, over the
    clean rounds (sample i of each factor ran in round i); their goals, with each one's time at
    `weeks` weeks (the worse of the two histories) against `ms_goal`; the rounds' load and
    agreement. `reported`: more timed operations (`<op>_s` in each sample) whose ratio is
    shown without a goal. Shared with the `postgres` measure's swap part."""
    lo, hi = factors
    use = kept(rounds)
    no_verdict = all_noisy(rounds)
    variants = {
        f"{f}x": {
            "n": len(use),
            **{k: median([samples[f][i][k] for i in use]) for k in samples[f][0]},
            "swap_s_runs": [s["swap_s"] for s in samples[f]],
            "rollback_s_runs": [s["rollback_s"] for s in samples[f]],
            "noisy_runs": [r["noisy"] for r in rounds],
        }
        for f in (lo, hi)
    }
    ratios, agreements = {}, {}
    for op in ("swap", "rollback", *reported):
        key = f"{op} {hi}x/{lo}x"
        per_round = {
            i: samples[hi][i][f"{op}_s"] / samples[lo][i][f"{op}_s"] for i in range(len(rounds))
        }
        ratios[key] = median([per_round[i] for i in use])
        agreements[key] = agreement(clean_values(per_round, rounds))
    goals = [
        goal(f"wall {op} {hi}x/{lo}x", ratios[f"{op} {hi}x/{lo}x"], 1.2, no_verdict=no_verdict)
        for op in ("swap", "rollback")
    ]
    for op in ("swap", "rollback"):
        worst = max(variants[f"{f}x"][f"{op}_s"] for f in (lo, hi)) * 1000
        goals.append(
            goal(
                f"{op} ms at {weeks} weeks (worse of {lo}x/{hi}x)",
                worst,
                ms_goal,
                no_verdict=no_verdict,
            )
        )
    return {
        "variants": variants,
        "ratios": ratios,
        "goals": goals,
        "load": summary(rounds, "measured per round (both variants' swaps and rollbacks)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
    }
