"""PostgreSQL swap and rollback: cost at 1x and 10x history, and what readers wait meanwhile.

(i) Scaling: the range (`swap_weeks` ISO weeks of `pg_swap_rows_per_day`) is swapped into a
target holding 1x and 10x as much history outside the range (built from one real week with
shifted dates and ids, through the adapter's writer). Each round builds a fresh shadow of the
range (untimed), then times `swap` and `rollback` (each one transaction of DETACH/ATTACH and
renames), and checks that the rollback restored the range (the bench's own checksum: count and
sum of row hashes). The two variants alternate. Each round waits for quiet and is measured;
noisy rounds are left out (bench.harness.load).

(ii) Readers: on the 10x target, a reader in another process (bench.measures.pg_reader_child) runs
short date-filtered queries on the swapped days back to back (a short pause between them) while
the main process builds a shadow, waits, swaps, waits, rolls back, waits. A reader query that
overlaps a swap or a rollback may wait for its ACCESS EXCLUSIVE lock; its latency minus the
median latency of the queries that overlapped nothing is the wait the swap caused. Shadow
builds are not swaps: the queries that overlap them count for neither.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from backfill_assets.example import orders as o
from backfill_assets.example.spec import ORDERS_SPEC
from backfill_assets.lib.dates import days
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
from bench.harness.config import PYTHON, REPO_DIR, BenchContext
from bench.harness.load import print_noisy, round_load, summary
from bench.harness.measure import BenchError, goal, median
from bench.harness.pg_data import (
    PgServer,
    add_history,
    database_of,
    land_sources,
    range_checksum,
    table_facts,
    vacuum_analyze,
)
from bench.measures.pg_reader_child import READY
from bench.measures.swap_scaling import summarise_swaps, swap_rounds

BASE_DB = "bench_swap_base"
SWAP_GOAL_MS = 100.0
BLOCKED_GOAL_MS = 100.0
# Quiet time around each swap and rollback, so the reader's normal latency is sampled.
QUIET_S = 0.25


def _range(ctx: BenchContext) -> tuple[dt.date, dt.date]:
    start = ctx.size.start
    return start, start + dt.timedelta(weeks=ctx.size.swap_weeks)


def build_variants(ctx: BenchContext, pg: PgServer) -> tuple[dict[int, str], dict[str, Any]]:
    """One database per history factor: the range's raw and v1 rows (a copy of one base), plus
    `factor` x the range's weeks of history before it."""
    r0, r1 = _range(ctx)
    t0 = time.perf_counter()
    base = pg.create(BASE_DB)
    wh = PostgresWarehouse(base)
    land_sources(wh, r0, r1, ctx.size.pg_swap_rows_per_day)
    wh.replace_partitions(ORDERS_SPEC, r0, r1, build=o.ORDERS_DAILY_SQL_V1)
    urls: dict[int, str] = {}
    facts: dict[str, Any] = {}
    for factor in ctx.size.swap_history_factors:
        url = pg.copy(BASE_DB, f"bench_swap_{factor}x")
        weeks = factor * ctx.size.swap_weeks
        add_history(PostgresWarehouse(url), r0, r0 - dt.timedelta(weeks=weeks), weeks)
        vacuum_analyze(url)
        urls[factor] = url
        facts[f"{factor}x"] = dict(table_facts(url, ORDERS_SPEC.name))
    pg.drop(BASE_DB)
    facts["build_s"] = time.perf_counter() - t0
    return urls, facts


def swap_once(url: str, r0: dt.date, r1: dt.date, plan_id: str) -> dict[str, float]:
    """Build a shadow for the range (untimed), then time the swap and the rollback."""
    wh = PostgresWarehouse(url)
    before = range_checksum(url, ORDERS_SPEC.name, r0, r1)
    wh.claim_plan(ORDERS_SPEC.name, plan_id)  # what approving the plan does
    wh.replace_partitions(
        ORDERS_SPEC, r0, r1, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id=plan_id
    )
    t0 = time.perf_counter()
    swapped = wh.swap(ORDERS_SPEC, plan_id, days(r0, r1))
    t1 = time.perf_counter()
    rolled = wh.rollback(ORDERS_SPEC, plan_id)
    t2 = time.perf_counter()
    if swapped.action != "swapped" or rolled.action != "rolled_back":
        raise BenchError(f"swap/rollback of {plan_id}: {swapped.action}, {rolled.action}")
    if range_checksum(url, ORDERS_SPEC.name, r0, r1) != before:
        raise BenchError(f"rollback of {plan_id} did not restore the range's rows")
    return {
        "swap_s": t1 - t0,
        "rollback_s": t2 - t1,
        "swap_inner_s": swapped.seconds,
        "rollback_inner_s": rolled.seconds,
    }


def measure_scaling(
    ctx: BenchContext, urls: dict[int, str]
) -> tuple[dict[int, list[dict[str, float]]], list[dict[str, Any]]]:
    """The swap and rollback samples per history factor, and each round's load."""
    r0, r1 = _range(ctx)
    return swap_rounds(
        ctx,
        ctx.size.swap_history_factors,
        lambda factor, rnd: swap_once(urls[factor], r0, r1, f"pgswap_{factor}x_r{rnd}"),
        "postgres swap",
    )


# -- (ii) readers during swaps -----------------------------------------------------------------


def _overlaps(t0: float, t1: float, spans: Sequence[tuple[float, float]]) -> bool:
    return any(t0 < b and a < t1 for a, b in spans)


def reader_waits(
    samples: Sequence[tuple[float, float]],
    busy: Sequence[tuple[float, float]],
    ops: Mapping[str, Sequence[tuple[float, float]]],
) -> dict[str, Any]:
    """Normal latency (queries overlapping nothing) and the latencies of the queries that
    overlapped each kind of op; the longest extra wait an op caused. Milliseconds."""
    every_op = [span for spans in ops.values() for span in spans]
    normal = sorted(
        (t1 - t0) * 1000
        for t0, t1 in samples
        if not _overlaps(t0, t1, busy) and not _overlaps(t0, t1, every_op)
    )
    if not normal:
        raise BenchError("the reader ran no query outside swaps: no normal latency to compare")
    base = median(normal)
    out: dict[str, Any] = {
        "normal_ms": {
            "n": len(normal),
            "median": base,
            "p99": normal[min(len(normal) - 1, int(len(normal) * 0.99))],
            "max": normal[-1],
        },
    }
    longest = 0.0
    for kind, spans in ops.items():
        during = [
            (t1 - t0) * 1000
            for t0, t1 in samples
            if _overlaps(t0, t1, spans) and not _overlaps(t0, t1, busy)
        ]
        out[kind] = {
            "queries_overlapping": len(during),
            "max_ms": max(during, default=0.0),
            "median_ms": median(during) if during else 0.0,
        }
        longest = max(longest, max(during, default=base) - base)
    out["longest_wait_ms"] = longest
    return out


@contextlib.contextmanager
def reader_process(url: str, query_days: Sequence[dt.date], log: Path) -> Iterator[list[Any]]:
    """A reader of the target in another process (pg_reader_child), querying `query_days` from the
    block's start to its end; the yielded list gets its report (samples and errors) once the
    block ends."""
    got: list[Any] = []
    cmd = [PYTHON, "-m", "bench.measures.pg_reader_child", url]
    cmd += [d.isoformat() for d in query_days]
    with log.open("a") as err:
        proc = subprocess.Popen(
            cmd, cwd=REPO_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            text=True,
        )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.readline().strip() != READY:
            raise BenchError(f"the reader process did not start; see {log}")
        yield got
    finally:
        proc.stdin.close()  # the reader's signal to stop and report
        report = proc.stdout.read()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.returncode != 0 or not report.strip():
        raise BenchError(f"the reader process failed (exit {proc.returncode}); see {log}")
    got.append(json.loads(report.strip().splitlines()[-1]))


def measure_blocked_readers(ctx: BenchContext, url: str) -> dict[str, Any]:
    r0, r1 = _range(ctx)
    log = ctx.workdir / "logs" / "pg_reader.log"
    log.parent.mkdir(exist_ok=True)
    with reader_process(url, days(r0, r1), log) as report:
        busy, ops, inner = _swaps_under_readers(ctx, url)
    got = report[-1]
    if got["errors"]:
        raise BenchError(f"readers failed during swaps: {got['errors'][:3]}")
    waits = reader_waits([tuple(s) for s in got["samples"]], busy, ops)
    if not any(waits[kind]["queries_overlapping"] for kind in ops):
        raise BenchError("no reader query overlapped a swap or rollback: nothing was measured")
    waits["queries"] = len(got["samples"])
    waits["rounds"] = len(ops["swap"])
    waits["swap_ms_with_readers"] = median(inner["swap"]) * 1000
    waits["rollback_ms_with_readers"] = median(inner["rollback"]) * 1000
    print(
        f"  postgres readers: normal {waits['normal_ms']['median']:.1f} ms, longest wait "
        f"behind a swap or rollback {waits['longest_wait_ms']:.1f} ms",
        flush=True,
    )
    return waits


Spans = list[tuple[float, float]]


def _swaps_under_readers(
    ctx: BenchContext, url: str
) -> tuple[Spans, dict[str, Spans], dict[str, list[float]]]:
    """Rounds of shadow build, quiet, swap, quiet, rollback, quiet; when each ran (monotonic
    spans), and the adapter's own seconds of each swap and rollback."""
    r0, r1 = _range(ctx)
    wh = PostgresWarehouse(url)
    busy: Spans = []
    ops: dict[str, Spans] = {"swap": [], "rollback": []}
    inner: dict[str, list[float]] = {"swap": [], "rollback": []}
    before = range_checksum(url, ORDERS_SPEC.name, r0, r1)
    for rnd in range(max(ctx.repeats, ctx.size.swap_rounds_min)):
        plan_id = f"pgread_r{rnd}"
        b0 = time.monotonic()
        wh.claim_plan(ORDERS_SPEC.name, plan_id)
        wh.replace_partitions(
            ORDERS_SPEC, r0, r1, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id=plan_id
        )
        busy.append((b0, time.monotonic()))
        for kind in ("swap", "rollback"):
            time.sleep(QUIET_S)
            t0 = time.monotonic()
            if kind == "swap":
                result = wh.swap(ORDERS_SPEC, plan_id, days(r0, r1))
            else:
                result = wh.rollback(ORDERS_SPEC, plan_id)
            ops[kind].append((t0, time.monotonic()))
            inner[kind].append(result.seconds)
        time.sleep(QUIET_S)
    b0 = time.monotonic()
    restored = range_checksum(url, ORDERS_SPEC.name, r0, r1) == before
    busy.append((b0, time.monotonic()))
    if not restored:
        raise BenchError("the rollbacks under readers did not restore the range's rows")
    return busy, ops, inner


def run(ctx: BenchContext, pg: PgServer) -> dict[str, Any]:
    r0, r1 = _range(ctx)
    lo, hi = ctx.size.swap_history_factors
    urls, facts = build_variants(ctx, pg)
    samples, rounds = measure_scaling(ctx, urls)
    scaling = summarise_swaps(
        samples, rounds, (lo, hi), weeks=ctx.size.swap_weeks, ms_goal=SWAP_GOAL_MS
    )
    for f in (lo, hi):
        fact = facts[f"{f}x"]
        scaling["variants"][f"{f}x"] = {
            "live_rows": fact["rows"],
            "live_partitions": fact["partitions"],
            **scaling["variants"][f"{f}x"],
        }
    # The readers' session is one span: wait for quiet before it, measure the others during it
    # (the reader process is the bench's own child).
    with ctx.load.span() as span:
        blocked = measure_blocked_readers(ctx, urls[hi])
    session = round_load(0, [span])
    print_noisy("postgres readers during swaps", session)
    pg.drop(*(database_of(url) for url in urls.values()))  # the disk, for the reader history
    goals = list(scaling["goals"])
    goals.append(
        goal(
            "longest reader wait behind a swap/rollback ms",
            blocked["longest_wait_ms"],
            BLOCKED_GOAL_MS,
            no_verdict=session["noisy"],
        )
    )
    scaling.pop("goals")
    return {
        "swap": {
            "range": {
                "start": r0.isoformat(),
                "end": r1.isoformat(),
                "weeks": ctx.size.swap_weeks,
                "rows_per_day": ctx.size.pg_swap_rows_per_day,
            },
            **scaling,
            "build_s": facts["build_s"],
        },
        "blocked_readers": {
            "history": f"{hi}x",
            **blocked,
            "load": summary(
                [session],
                "one span: the whole session of swap+rollback rounds under readers",
            ),
        },
        "goals": goals,
    }
