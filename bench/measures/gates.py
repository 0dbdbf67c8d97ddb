"""Measure 3: what the gates cost, and what they catch.

(i) Cost: for the first `gate_timing_weeks` ISO-week batches, the shadow write and the gate
evaluation of each batch are timed back to back; the figure is gate time as a share of that
batch's write time. A timing proxy around the warehouse shows which gate query the time goes to.

(ii) Power: on a clean shadow week, one corruption is planted per trial (a seed picks the day
and the rows), the gates are evaluated for that day, and the day is rebuilt clean. The share of
trials where any gate failed is the detection rate. A clean control shows the false-alarm rate:
gates that always fail would "catch" everything.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backfill_assets.constants import SAMPLE_CHECK, WEEK_INFIX
from backfill_assets.example.orders import ORDERS_DAILY_SQL as ORDERS_SQL
from backfill_assets.example.spec import ORDERS_CRITERIA, ORDERS_SPEC
from backfill_assets.lib.dates import iso_weeks, week_id
from backfill_assets.lib.gates.evaluate import GateOutcome, evaluate_gates
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.lib.warehouse.identifiers import column_list, quote_ident
from bench.contenders.backfill_assets import timed_batch
from bench.harness.config import BenchContext
from bench.harness.data import Templates, fresh_copy
from bench.harness.load import agree, agreement, clean_values, kept, note, round_load, summary
from bench.harness.measure import BenchError, goal, median


class TimedWarehouse:
    """Forwards to a warehouse and adds up the seconds spent in each method it calls."""

    def __init__(self, wh: DuckDBWarehouse):
        self._wh = wh
        self.seconds: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._wh, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

        return timed


# -- (i) cost ----------------------------------------------------------------------------------


def measure_cost(ctx: BenchContext, templates: Templates) -> dict[str, Any]:
    path = fresh_copy(templates.weekly, ctx.workdir / "gates_cost.duckdb")
    wh = DuckDBWarehouse(path)
    weeks = list(iso_weeks(ctx.size.start, ctx.size.end))[: ctx.size.gate_timing_weeks]
    samples: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    for rnd in range(ctx.repeats):
        plan_id = f"gate_cost_r{rnd}"
        with ctx.load.span() as span:
            for w0, w1 in weeks:
                timed = TimedWarehouse(wh)
                write_s, gates_s, outcomes = timed_batch(wh, w0, w1, plan_id, gates_wh=timed)
                if not all(g.passed for g in outcomes):
                    raise BenchError(f"gates failed on a correct shadow for {w0}..{w1}")
                # The diff of the shadow against the live rows runs with the gates (the
                # diff gate); its share is reported on its own, and the other gates' apart.
                diff_s = timed.seconds.get("diff", 0.0)
                samples.append(
                    {
                        "round": rnd,
                        "week": week_id(w0),
                        "days": (w1 - w0).days,
                        "write_s": write_s,
                        "gates_s": gates_s,
                        "share": (gates_s - diff_s) / write_s,
                        "diff_share": diff_s / write_s,
                        "with_diff_share": gates_s / write_s,
                        "by_query_s": timed.seconds,
                    }
                )
        rounds.append(round_load(rnd, [span]))
        print(
            f"  gates cost round {rnd + 1}: share "
            f"{median([s['share'] for s in samples[-len(weeks) :]]):.1%}{note(span)}",
            flush=True,
        )
    use = set(kept(rounds))
    every = samples
    samples = [s for s in every if s["round"] in use]
    share_by_round = {
        r["round"]: median([s["share"] for s in every if s["round"] == r["round"]]) for r in rounds
    }
    queries = samples[0]["by_query_s"].keys()
    return {
        "batches_timed": len(samples),
        "rows_per_batch": ctx.size.rows_per_day * 7,
        "write_s_per_batch": median([s["write_s"] for s in samples]),
        "gates_s_per_batch": median([s["gates_s"] for s in samples]),
        "share_median": median([s["share"] for s in samples]),
        "share_max": max(s["share"] for s in samples),
        "diff_share_median": median([s["diff_share"] for s in samples]),
        "with_diff_share_median": median([s["with_diff_share"] for s in samples]),
        "share_runs": list(share_by_round.values()),
        "gates_s_by_query": {q: median([s["by_query_s"][q] for s in samples]) for q in queries},
        "load": summary(rounds, "measured per round (every timed batch); detection is not timed"),
        "agreement": {"gate share": agreement(clean_values(share_by_round, rounds))},
    }


# -- (ii) detection power ------------------------------------------------------------------------


@dataclass(frozen=True)
class Corruption:
    name: str
    rows: Callable[[int], int]  # rows to corrupt, given the partition's row count
    sql: str  # {t}: shadow week table; {pick}: subquery yielding the chosen order_ids
    min_caught: float | None  # goal: share of trials caught; None = reported only


_COLS = column_list(ORDERS_SPEC.column_names)
CORRUPTIONS = [
    Corruption("missing_row", lambda n: 1, "DELETE FROM {t} WHERE order_id IN ({pick})", 1.0),
    Corruption(
        "duplicated_key",
        lambda n: 1,
        f"INSERT INTO {{t}} ({_COLS}) SELECT {_COLS} FROM {{t}} WHERE order_id IN ({{pick}})",
        1.0,
    ),
    Corruption(
        "unchanged_column_1pct",
        lambda n: max(1, round(n * 0.01)),
        "UPDATE {t} SET gross_amount = gross_amount + 0.01 WHERE order_id IN ({pick})",
        0.99,
    ),
    Corruption(
        "unchanged_column_0.1pct",
        lambda n: max(1, round(n * 0.001)),
        "UPDATE {t} SET gross_amount = gross_amount + 0.01 WHERE order_id IN ({pick})",
        0.99,
    ),
    Corruption(
        "invariant_1pct",
        lambda n: max(1, round(n * 0.01)),
        "UPDATE {t} SET net_amount = -1 WHERE order_id IN ({pick})",
        0.99,
    ),
]
CONTROL = "clean_control"


def shadow_week_table(wh: DuckDBWarehouse, day: dt.date) -> str:
    """The physical shadow table holding `day`, looked up in the catalog (not assumed)."""
    want = f"{ORDERS_SPEC.shadow_name}{WEEK_INFIX}{week_id(day)}"
    rows = wh.query(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = $n",
        {"n": want},
    )
    if not rows:
        raise BenchError(f"shadow table {want} for {day} does not exist")
    return rows[0][0]


def plant(wh: DuckDBWarehouse, c: Corruption, day: dt.date, rng: random.Random) -> int:
    """Corrupt `c.rows(n)` rows of `day` in the shadow, chosen by Python's RNG.

    Not by `ORDER BY hash(order_id, salt)`: DuckDB's two-argument hash is hash(x) combined with
    a function of the salt by XOR, so two such picks with different salts select (nearly)
    disjoint hash ranges, and the gate samples rows exactly that way. Corruption picked like
    that would never land in the sample, which says nothing about real corruption.
    """
    t = quote_ident(shadow_week_table(wh, day))
    ids = [
        r[0]
        for r in wh.query(
            f"SELECT order_id FROM {t} WHERE order_date = $d ORDER BY order_id", {"d": day}
        )
    ]
    k = c.rows(len(ids))
    chosen = rng.sample(ids, k)
    changed = wh.execute(c.sql.format(t=t, pick="SELECT unnest($ids::BIGINT[])"), {"ids": chosen})[
        0
    ][0]
    if changed != k:
        raise BenchError(f"{c.name}: planted {changed} rows, meant {k}")
    return k


def _sampled_rows_caught(outcomes: list[GateOutcome]) -> bool:
    """Would the sample gate have failed on its sampled rows alone, without the fingerprint?"""
    for g in outcomes:
        if g.check_name == SAMPLE_CHECK:
            m = g.metadata
            return bool(
                m["missing_in_target"]
                or any(m["mismatches_by_column"].values())
                or any(m["rule_violations"].values())
            )
    return False


def _rows_sampled(outcomes: list[GateOutcome]) -> int:
    return next(int(g.metadata["sampled_rows"]) for g in outcomes if g.check_name == SAMPLE_CHECK)


def measure_detection(ctx: BenchContext, templates: Templates) -> dict[str, Any]:
    path = fresh_copy(templates.weekly, ctx.workdir / "gates_detect.duckdb")
    wh = DuckDBWarehouse(path)
    weeks = list(iso_weeks(ctx.size.start, ctx.size.end))
    w0, w1 = weeks[1] if len(weeks) > 1 else weeks[0]
    wh.replace_partitions(ORDERS_SPEC, w0, w1, build=ORDERS_SQL, shadow=True, plan_id="detect")
    trials: dict[str, list[dict[str, Any]]] = {c.name: [] for c in CORRUPTIONS}
    trials[CONTROL] = []
    for seed in range(ctx.size.detection_seeds):
        rng = random.Random(seed)
        # A different gate sample per seed: the sample is seeded with the plan (and takes
        # n / the shadow's rows of each day).
        plan_id = f"detect_s{seed}"
        for c in [None, *CORRUPTIONS]:
            day = w0 + dt.timedelta(days=rng.randrange((w1 - w0).days))
            planted = plant(wh, c, day, random.Random(f"{seed}-{c.name}")) if c else 0
            outcomes = evaluate_gates(
                wh, ORDERS_SPEC, ORDERS_CRITERIA, day, day + dt.timedelta(days=1), plan_id
            )
            if c:  # put the clean day back for the next trial
                wh.replace_partitions(
                    ORDERS_SPEC,
                    day,
                    day + dt.timedelta(days=1),
                    build=ORDERS_SQL,
                    shadow=True,
                    plan_id=plan_id,
                )
            failed = sorted({g.check_name for g in outcomes if not g.passed})
            trials[c.name if c else CONTROL].append(
                {
                    "seed": seed,
                    "day": day.isoformat(),
                    "rows_planted": planted,
                    "caught": bool(failed),
                    "failed_gates": failed,
                    "sampled_rows_caught": _sampled_rows_caught(outcomes),
                    "rows_sampled": _rows_sampled(outcomes),
                }
            )
        print(f"  gates detection seed {seed + 1}/{ctx.size.detection_seeds}", flush=True)
    return summarise_detection(trials)


def summarise_detection(trials: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for name, ts in trials.items():
        by_gate: dict[str, int] = {}
        for t in ts:
            for g in t["failed_gates"]:
                by_gate[g] = by_gate.get(g, 0) + 1
        kinds[name] = {
            "trials": len(ts),
            "rows_planted_median": median([t["rows_planted"] for t in ts]),
            "caught_share": sum(t["caught"] for t in ts) / len(ts),
            "sampled_rows_alone_share": sum(t["sampled_rows_caught"] for t in ts) / len(ts),
            "rows_sampled_median": median([t["rows_sampled"] for t in ts]),
            "failed_gate_counts": by_gate,
        }
    goals = [
        goal(
            f"{c.name} caught",
            kinds[c.name]["caught_share"] * 100,
            c.min_caught * 100,
            op=">=",
            unit="%",
        )
        for c in CORRUPTIONS
        if c.min_caught is not None
    ]
    goals.append(goal("clean shadow flagged", kinds[CONTROL]["caught_share"] * 100, 0.0, unit="%"))
    return {"kinds": kinds, "goals": goals}


def run(ctx: BenchContext, templates: Templates) -> dict[str, Any]:
    cost = measure_cost(ctx, templates)
    detection = measure_detection(ctx, templates)
    noisy = bool(cost["load"]["verdict"])
    goals = [
        *(
            goal(
                f"{what} / shadow write time per batch",
                cost[key] * 100,
                limit,
                unit="%",
                no_verdict=noisy,
            )
            for what, key, limit in (
                ("gate time (without the diff)", "share_median", 20.0),
                ("diff time", "diff_share_median", 25.0),
                ("gates and diff time", "with_diff_share_median", 35.0),
            )
        ),
        *detection.pop("goals"),
    ]
    # Only the cost is timed; detection counts outcomes, which noise does not change.
    load, agreements = cost.pop("load"), cost.pop("agreement")
    return {
        "cost": cost,
        "detection": detection,
        "goals": goals,
        "load": load,
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
    }
