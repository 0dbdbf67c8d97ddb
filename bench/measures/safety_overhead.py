"""Measure 1: what safety costs — one backfill of `orders_daily` done four ways on identical data.

Each round copies the templates afresh and runs every contender once, each in a fresh
subprocess. The floor runs right between (d) and (d'), the two the goals compare with it, so
that a drift of the machine's speed over a round (a minute and a half) touches both sides of
those ratios alike; every other round runs in the reverse order, so no contender always runs
first (cold page cache) or last, and (d) and (d') take turns before the floor. Each run waits
for the machine to go quiet first and is measured for the others' CPU; a round with a noisy run
is left out of the medians and ratios (bench.harness.load). Every result is checked against the v2
build's checksum (count and sum of row hashes, so a duplicated row shows) before it counts: a
fast wrong backfill is not a result.
"""

from __future__ import annotations

import os
from typing import Any

import duckdb

from bench.harness import plain
from bench.harness.config import NOT_YET_MEASURED, BenchContext
from bench.harness.data import Templates, fresh_copy, remove_db
from bench.harness.load import (
    agree,
    agreement,
    all_noisy,
    clean_values,
    kept,
    note,
    print_noisy,
    round_load,
    summary,
)
from bench.harness.measure import BenchError, goal, median, run_contender

# (name, uses backfill_assets' weekly layout, what it is), in the order of even rounds.
CONTENDERS: list[tuple[str, bool, str]] = [
    ("naive_dagster", False, "Dagster in place, BackfillPolicy.multi_run(7), runs in sequence"),
    ("backfill_assets", True, "shadow per ISO week + gates, one pointer swap (warehouse level)"),
    ("floor", False, "plain SQL, one DELETE+INSERT…SELECT transaction per ISO week"),
    (
        "backfill_assets_dagster",
        True,
        "backfill_assets through its Dagster executor, the target published alone",
    ),
    ("dbt_microbatch", False, "dbt-duckdb microbatch in place, batch_size=day"),
    (
        "backfill_assets_dagster_downstream",
        True,
        "the same, the swap building and publishing the impacted dbt models with the target",
    ),
]
# The report's order.
SHOWN = (
    "floor",
    "naive_dagster",
    "dbt_microbatch",
    "backfill_assets",
    "backfill_assets_dagster",
    "backfill_assets_dagster_downstream",
)
SUBJECT = "backfill_assets"
# The goals are checked for two: the warehouse-level loop, and the whole path through Dagster
# (one run per batch with per-partition check records in a real instance, then the swap job),
# each rewriting the target alone, as the others do. The swap that also builds the dbt models
# downstream does work none of the others does: its ratio to the floor is reported, with no
# goal (the `dbt_refresh` measure compares that build with a plain `dbt build`).
SUBJECTS = ("backfill_assets", "backfill_assets_dagster", "backfill_assets_dagster_downstream")
# subject -> (denominator, comparison, limit) on the wall-time ratio subject/denominator: the
# performance issue's goals (d/a <= 1.25, d'/a <= 1.5) and the original ones against the others.
# A limit of None: the ratio is reported, no goal judges it.
Goals = dict[str, list[tuple[str, str, float | None]]]
_PEERS: list[tuple[str, str, float | None]] = [
    ("naive_dagster", "<=", 1.2),
    ("dbt_microbatch", "<", 1.0),
]
GOALS: Goals = {
    "backfill_assets": [("floor", "<=", 1.25), *_PEERS],
    "backfill_assets_dagster": [("floor", "<=", 1.5), *_PEERS],
    "backfill_assets_dagster_downstream": [("floor", "", None)],
}


def _check(db: Any, name: str, templates: Templates) -> None:
    size = templates.size
    with duckdb.connect(str(db), read_only=True) as con:
        got = plain.range_checksum(con, plain.TABLE, size.start, size.end)
    if got != templates.expected_checksum:
        raise BenchError(
            f"{name} left {got} in orders_daily, expected "
            f"{templates.expected_checksum}: the backfill is wrong"
        )


def run(ctx: BenchContext, templates: Templates) -> dict[str, Any]:
    size = ctx.size
    logs = ctx.workdir / "logs"
    logs.mkdir(exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in CONTENDERS}
    skipped: dict[str, str] = {}
    rounds: list[dict[str, Any]] = []
    # Both templates before the first round: one built between two timed runs was still being
    # written back to disk during the next run.
    for weekly in {weekly for _, weekly, _ in CONTENDERS}:
        _ = templates.weekly if weekly else templates.plain
    for rnd in range(ctx.repeats):
        order = CONTENDERS if rnd % 2 == 0 else CONTENDERS[::-1]
        spans: list[dict[str, Any]] = []
        for name, weekly, _ in order:
            if name in skipped:
                continue
            db = fresh_copy(
                templates.weekly if weekly else templates.plain, ctx.workdir / f"so_{name}.duckdb"
            )
            os.sync()  # the copy on disk before the run: its write-back is not the run's
            # Each contender run is timed on its own: wait for quiet before each, and measure
            # the others' CPU during each; the round is noisy if any of its runs was.
            with ctx.load.span() as span:
                result = run_contender(name, db, size.start, size.end, logs)
            if result["status"] == "not_implemented":
                skipped[name] = result["reason"]
            else:
                _check(db, name, templates)
                runs[name].append({**result, "round": rnd, "load": span})
                spans.append(span)
                print(
                    f"  safety_overhead round {rnd + 1}: {name} {result['wall_s']:.2f}s "
                    f"{result['peak_rss_mb']:.0f} MiB{note(span)}",
                    flush=True,
                )
            remove_db(db)
        rounds.append(round_load(rnd, spans))
        print_noisy(f"safety_overhead round {rnd + 1}", rounds[-1])
    return summarise(runs, skipped, rounds)


def summarise(
    runs: dict[str, list[dict[str, Any]]],
    skipped: dict[str, str],
    rounds: list[dict[str, Any]],
    *,
    described: list[tuple[str, str]] | None = None,
    subjects: tuple[str, ...] = SUBJECTS,
    goals_on: Goals = GOALS,
) -> dict[str, Any]:
    """Medians per contender (name, what it is), and the paired ratios of each subject to each
    denominator of its `goals_on` entry with their goals, over the clean rounds only (every run
    has a `round`; `rounds` says which were noisy). When every round was noisy, the figures use them
    all and the goals get no verdict. Defaults: this measure's contenders and goals (the
    `postgres` measure passes its own)."""
    if described is None:
        what = {name: w for name, _, w in CONTENDERS}
        described = [(name, what[name]) for name in SHOWN]
    use = set(kept(rounds))
    no_verdict = all_noisy(rounds)
    contenders: dict[str, Any] = {}
    for name, what in described:
        if name in skipped or not runs[name]:
            contenders[name] = {
                "status": NOT_YET_MEASURED,
                "what": what,
                "reason": skipped.get(name, ""),
            }
            continue
        every = runs[name]
        rs = [r for r in every if r["round"] in use]
        contenders[name] = {
            "status": "measured",
            "what": what,
            "n": len(rs),
            "n_noisy_left_out": len(every) - len(rs),
            "wall_s": median([r["wall_s"] for r in rs]),
            "import_s": median([r["import_s"] for r in rs]),
            "process_s": median([r["process_s"] for r in rs]),
            "peak_rss_mb": median([r["peak_rss_mb"] for r in rs]),
            # Every run, noisy ones too, in round order, with the others' CPU during it.
            "wall_s_runs": [r["wall_s"] for r in every],
            "others_cores_runs": [r["load"]["others_cores"] for r in every],
            "noisy_runs": [r["load"]["noisy"] for r in every],
            "extra": rs[-1]["extra"],
        }
        phases = [r["extra"].get("phases") for r in rs if r["extra"].get("phases")]
        if phases:
            contenders[name]["phases_s"] = {k: median([p[k] for p in phases]) for k in phases[0]}
    ratios, goals, agreements = {}, [], {}
    for subject_name in subjects:
        subject = {r["round"]: r["wall_s"] for r in runs[subject_name]}
        for den, op, limit in goals_on[subject_name]:
            other = {r["round"]: r["wall_s"] for r in runs[den]}
            both = sorted(set(subject) & set(other))
            used = [i for i in both if i in use]
            if not used:
                continue
            per_round = {i: subject[i] / other[i] for i in both}
            key = f"{subject_name}/{den}"
            ratios[key] = {
                "paired_median": median([per_round[i] for i in used]),
                "of_medians": median([subject[i] for i in used]) / median([other[i] for i in used]),
                "per_round": [per_round[i] for i in both],
            }
            agreements[key] = agreement(clean_values(per_round, rounds))
            if limit is None:
                continue
            goals.append(
                goal(
                    f"wall {key}",
                    ratios[key]["paired_median"],
                    limit,
                    op=op,
                    no_verdict=no_verdict,
                )
            )
    return {
        "contenders": contenders,
        "ratios": ratios,
        "goals": goals,
        "load": summary(
            rounds, "a round runs each contender once; each run is measured on its own"
        ),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
        "note": "wall_s is measured in the contender's own process from before its imports "
        "to the end (imports included); ratios are medians of per-round ratios over the clean "
        "rounds (noisy rounds are kept in *_runs and per_round, and left out)",
    }
