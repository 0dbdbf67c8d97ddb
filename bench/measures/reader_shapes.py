"""Timing reader query shapes on the backfillable target and on a plain table with the same
rows, shared by the DuckDB (`readers`) and PostgreSQL (`postgres` reader_queries) measures.

Each shape has parameter sets (days, keys) spread over the history, the same for both tables
and in every round. The caller's session reads them all once, untimed (`time_query`'s warm-up
call); each round then times every one on each table, alternating which table goes first, so
every round measures the same steady state: that of a session that has read those weeks
before. A query is timed as often as it takes to spend MIN_TIMED_S on it (at most MAX_TIMES,
or the shape's own cap), so sub-millisecond shapes get enough timings. A shape's figure per
round is the median of its timings, its ratio the median over the clean rounds of
target/plain (each round waits for quiet and is measured; noisy rounds are left out:
bench.harness.load).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
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

RATIO_GOAL = 1.2
MIN_TIMED_S = 0.1  # per query and table, per round
MAX_TIMES = 40
# The query shapes of the performance issue. key -> (what it asks, SQL over {t} with
# parameters written {name}, has a goal).
SHAPES: dict[str, tuple[str, str, bool]] = {
    "revenue_by_day_90d": (
        "last 90 days' revenue by day",
        "SELECT order_date, sum(net_revenue_usd) FROM {t} WHERE order_date >= {s} "
        "AND order_date < {e} AND NOT is_cancelled GROUP BY order_date ORDER BY order_date",
        True,
    ),
    "one_day_count": (
        "one day's count",
        "SELECT count(*) FROM {t} WHERE order_date = {d}",
        True,
    ),
    "key_lookup": (
        "point lookup by key, no date",
        "SELECT * FROM {t} WHERE order_id = {id}",
        True,
    ),
    "full_scan_aggregate": (
        "full-scan aggregate by country",
        "SELECT country, count(*), sum(net_revenue_usd) FROM {t} GROUP BY country",
        True,
    ),
    "week_self_join": (
        "one week joined to itself (customers ordering on consecutive days)",
        "SELECT count(*) FROM {t} AS a JOIN {t} AS b ON b.customer_id = a.customer_id "
        "AND b.order_date = a.order_date + 1 WHERE a.order_date >= {s} "
        "AND a.order_date < {e} AND b.order_date >= {s} AND b.order_date < {e}",
        True,
    ),
}
PARAMETERS = ("s", "e", "d", "id")


def render(sql: str, table: str, marker: Callable[[str], str]) -> str:
    """`sql` over `table` with each parameter written as the driver wants (`$d`, `%(d)s`)."""
    return sql.format(t=table, **{p: marker(p) for p in PARAMETERS})


def params(shape: str, run: int, first: dt.date, last: dt.date, rows_per_day: int) -> dict:
    """Run `run`'s parameters: days and keys spread over the history, the same for both
    tables. Keys are real: order_id = days since 2000-01-01 * 1e6 + n, n < rows_per_day."""
    span = (last - first).days
    day = first + dt.timedelta(days=(span * (2 * run + 1)) // 11 % (span + 1))
    monday = day - dt.timedelta(days=day.weekday())
    monday = max(monday, first)
    if shape == "revenue_by_day_90d":
        return {"s": last - dt.timedelta(days=89), "e": last + dt.timedelta(days=1)}
    if "one_day_count" in shape:
        return {"d": day}
    if shape == "key_lookup":
        n = (run * 7919) % rows_per_day
        return {"id": (day - dt.date(2000, 1, 1)).days * 1_000_000 + n}
    if shape == "week_self_join":
        return {"s": monday, "e": monday + dt.timedelta(days=7)}
    return {}


def parameter_sets(
    shapes: Mapping[str, Any], history: Mapping[str, Any], rows_per_day: int, reps: int
) -> dict[str, list[dict]]:
    """`reps` parameter sets per shape over a measure's loaded history (its first_day and
    last_day, ISO strings), the same for both tables and every round."""
    first = dt.date.fromisoformat(history["first_day"])
    last = dt.date.fromisoformat(history["last_day"])
    return {
        shape: [params(shape, rep, first, last, rows_per_day) for rep in range(reps)]
        for shape in shapes
    }


def measure(
    ctx: BenchContext,
    shapes: Mapping[str, tuple[str, str, bool]],
    tables: Mapping[str, str],
    parameter_sets: Mapping[str, list[dict]],
    time_query: Callable[[str, str, dict], float],
    label: str,
    caps: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Time every shape on `tables` ({"target" or "partitioned": name, "plain": name}; the
    first is the subject, the second the base) with `time_query(shape, table, params)`."""
    subject, base = list(tables)
    rounds = ctx.repeats
    per_round: dict[str, dict[str, list[float]]] = {s: {t: [] for t in tables} for s in shapes}
    loads: list[dict[str, Any]] = []
    times_per_query: dict[str, int] = {}
    for shape in shapes:  # the session reads every query's weeks once
        warm = [time_query(shape, t, p) for t in tables.values() for p in parameter_sets[shape]]
        most = (caps or {}).get(shape, MAX_TIMES)
        times_per_query[shape] = max(1, min(most, math.ceil(MIN_TIMED_S / median(warm))))
    for rnd in range(rounds):
        with ctx.load.span() as span:
            for shape in shapes:
                times: dict[str, list[float]] = {t: [] for t in tables}
                for rep, p in enumerate(parameter_sets[shape]):
                    for i in range(times_per_query[shape]):
                        flip = (rnd + rep + i) % 2
                        for name in list(tables)[:: -1 if flip else 1]:
                            times[name].append(time_query(shape, tables[name], p))
                for name in tables:
                    per_round[shape][name].append(median(times[name]))
        loads.append(round_load(rnd, [span]))
        print_noisy(f"{label} round {rnd + 1}", loads[-1])
    use = kept(loads)
    no_verdict = all_noisy(loads)
    out: dict[str, Any] = {}
    goals, agreements = [], {}
    for shape, (what, _, has_goal) in shapes.items():
        mine, plain = per_round[shape][subject], per_round[shape][base]
        ratios = {i: mine[i] / plain[i] for i in range(rounds)}
        ratio = median([ratios[i] for i in use])
        out[shape] = {
            "what": what,
            f"{subject}_ms": median([mine[i] for i in use]) * 1000,
            f"{base}_ms": median([plain[i] for i in use]) * 1000,
            "ratio": ratio,
            "ratio_runs": list(ratios.values()),
            "times_per_query": times_per_query[shape],
            "has_goal": has_goal,
        }
        if has_goal:
            agreements[shape] = agreement(clean_values(ratios, loads))
            goals.append(
                goal(f"reader {shape} {subject}/{base}", ratio, RATIO_GOAL, no_verdict=no_verdict)
            )
    return {
        "rounds": rounds,
        "reps": len(next(iter(parameter_sets.values()))),
        "shapes": out,
        "goals": goals,
        "load": summary(loads, "measured per round (every shape on both tables)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
    }
