"""Measure: what Dagster adds to a batch on the daemon's path, the path a plan started from the UI
takes (issue #46: at most 2 s a batch, on both storages).

Each round, on SQLite storage (the shipped dagster.yaml, a DuckDB warehouse) and on PostgreSQL
storage (the shipped dagster.postgres.yaml, the warehouse on the same throwaway server), does
one repeat of `bench.experiments.daemon_path`: `dagster dev` over a fresh DAGSTER_HOME, the
sensors at their default interval (5 s at `--size small`), a plan of `daemon_batches` ISO weeks
of the example started as `backfill-assets start` starts it; the batch driver launches the
plan's runner run, which runs the batches, each a run of its own. Per batch: from the batch
run's creation to its end, less the batch's warehouse work (its shadow write and gates, done
again on the same data afterwards and timed). Reported per storage: that median over the
batches (the goal's figure), the worst batch, the time between batches, and the last batches
against the first.

About 45 s a round and storage at the default size, most of it `dagster dev` starting and the
driver's first tick (up to 15 s), neither of which is in the per-batch figures.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
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
)
from bench.harness.load import summary as load_summary
from bench.harness.measure import INSTANCE_ENV, env_kept, goal, median

GOAL_S = 2.0
ORDERS_PER_DAY = 300
STORAGES = ("sqlite", "postgres")


@contextlib.contextmanager
def _span(ctx: BenchContext, spans: list[dict[str, Any]]) -> Iterator[None]:
    """The load span of a repeat's timed part, added to `spans`."""
    with ctx.load.span() as span:
        spans.append(span)
        yield


def run(ctx: BenchContext) -> dict[str, Any]:
    from backfill_assets.testing.throwaway_postgres import (
        PostgresUnavailable,
        binaries_dir,
        throwaway_postgres,
    )
    from bench.experiments.daemon_path import Repeat, one_repeat
    from bench.harness.pg_data import PgServer

    batches = ctx.size.daemon_batches
    t0 = time.perf_counter()
    out: dict[str, Any] = {"batches": batches, "orders_per_day": ORDERS_PER_DAY}
    goals: list[dict[str, Any]] = []
    for storage in STORAGES:
        with contextlib.ExitStack() as stack:
            server = None
            if storage == "postgres":
                try:
                    binaries_dir()
                except PostgresUnavailable as e:
                    out[storage] = {"status": "not run", "reason": str(e)}
                    continue
                server = PgServer(stack.enter_context(throwaway_postgres()))
                server.configure()
                pid = server.server.pid()
                ctx.load.attribute(pid, "postgresql server")
                stack.callback(ctx.load.forget, pid)
            repeats: list[Repeat] = []
            rounds: list[dict[str, Any]] = []
            for rnd in range(ctx.repeats):
                tmp = Path(tempfile.mkdtemp(prefix=f"bench_daemon_{storage}_", dir=ctx.workdir))
                spans: list[dict[str, Any]] = []
                with env_kept(*INSTANCE_ENV):
                    timed = functools.partial(_span, ctx, spans)
                    interval = ctx.size.daemon_sensor_interval_s
                    repeat = one_repeat(tmp, batches, ORDERS_PER_DAY, server, interval, timed)
                repeats.append(repeat)
                rounds.append(round_load(rnd, spans))
                print(
                    f"  daemon {storage} round {rnd + 1}: Dagster adds "
                    f"{statistics.median(repeat.orchestration):.2f} s a batch (worst "
                    f"{max(repeat.orchestration):.2f} s), the warehouse work "
                    f"{statistics.median(repeat.work):.2f} s",
                    flush=True,
                )
                print_noisy(f"daemon {storage} round {rnd + 1}", rounds[-1])
        out[storage] = _summary(repeats, rounds)
        goals.append(
            goal(
                f"daemon path: what Dagster adds to a batch, {storage} storage, s",
                out[storage]["orchestration_s"],
                GOAL_S,
                no_verdict=all_noisy(rounds),
            )
        )
    measured = [out[s] for s in STORAGES if "agreement" in out[s]]
    out["rounds_agree"] = agree(a for s in measured for a in s["agreement"].values())
    out["goals"] = goals
    out["wall_s"] = time.perf_counter() - t0
    return out


def _summary(repeats: list[Any], rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One storage's figures: medians over the batches per round, then over the clean rounds."""
    use = kept(rounds)
    per_round = {
        "orchestration_s": [statistics.median(r.orchestration) for r in repeats],
        "worst_s": [max(r.orchestration) for r in repeats],
        "launch_to_end_s": [statistics.median(r.launch_to_end) for r in repeats],
        "work_s": [statistics.median(r.work) for r in repeats],
        "between_s": [statistics.median(r.between) if r.between else 0.0 for r in repeats],
        "last_over_first": [r.last_over_first for r in repeats],
        "start_to_done_s": [r.start_to_done_s for r in repeats],
    }
    figures = {k: median([v[i] for i in use]) for k, v in per_round.items()}
    agreements = {
        "orchestration s": agreement(
            clean_values(dict(enumerate(per_round["orchestration_s"])), rounds)
        )
    }
    return {
        "storage": repeats[0].storage,
        **figures,
        "per_round": per_round,
        "k": repeats[0].k,
        "load": load_summary(
            rounds, "measured per round: from `dagster dev`'s start to the last batch's end"
        ),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
    }
