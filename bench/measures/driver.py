"""Measure: the batch driver sensor's tick as the instance's plan history grows.

The driver sensor of a table ticks every few seconds for as long as the code location runs. Its
tick must not grow with every plan ever recorded (the performance issue: <= 200 ms with 1,000
past plans). Two real SQLite instances (the embedded default) hold the same started plan, whose
first batch is due now; one of them also holds `driver_past_plans` past plans, each recorded
proposed, approved, swapped and released as the CLI records them. The real sensor (from the
example's definitions) is evaluated in each, alternately, `driver_ticks` times per round;
the tick's median per round is reported, and the ratio of the two.

The past plans have no runs: a tick reads runs by the started plan's tag only, so past runs add
what an indexed tag lookup costs (not measured here).
"""

from __future__ import annotations

import datetime as dt
import tempfile
import time
from contextlib import ExitStack
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
from bench.harness.measure import goal, median

TARGET = "orders_daily"
NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
PAST_START = dt.date(2022, 1, 3)


def _plan(start: dt.date, days: int) -> Any:
    """A plan of `days` days from `start`, built by the real (pure) planner."""
    from backfill_assets.example.declaration import ORDERS
    from backfill_assets.lib.planning.build import PlanInputs, PlanRequest, build_plan

    info = ORDERS.target_info()
    info = type(info)(**{**info.__dict__, "partitions_start": dt.date(2020, 1, 1)})
    inputs = PlanInputs(
        targets={TARGET: info},
        known_assets=frozenset([TARGET]),
        impact=(),
        partition_rows={},
        seconds_per_row=None,
        batch_overhead_seconds=None,
        daily_durations_seconds=(),
        now=NOW,
    )
    end = start + dt.timedelta(days=days - 1)
    request = PlanRequest(
        TARGET, start.isoformat(), end.isoformat(), "02:00-23:59", "UTC", "backup"
    )
    return build_plan(request, inputs)


def _record_past_plans(instance: Any, n: int) -> None:
    """n plans of one week each, one after another, recorded as the CLI records a plan's life:
    proposed, approved, swapped, released."""
    from backfill_assets.lib.states import PlanStatus
    from backfill_assets.service.approval import propose_plan
    from backfill_assets.service.plans import record_status

    for i in range(n):
        plan = _plan(PAST_START + dt.timedelta(days=i), 7)
        propose_plan(instance, plan)
        for status in (
            PlanStatus.APPROVED,
            PlanStatus.SWAPPED,
            PlanStatus.RELEASED,
        ):
            record_status(instance, plan, status)


def _start_current_plan(instance: Any) -> Any:
    """The plan the driver drives: approved and started (its first batch is due)."""
    from backfill_assets.lib.states import PlanStatus
    from backfill_assets.service.approval import propose_plan
    from backfill_assets.service.batch_driver import start_plan
    from backfill_assets.service.plans import record_status

    plan = _plan(dt.date(2026, 3, 2), 21)
    propose_plan(instance, plan)
    record_status(instance, plan, PlanStatus.APPROVED, approved_by="bench")
    start_plan(instance, plan.plan_id, "bench", dt.datetime.now(dt.UTC))
    return plan


def run(ctx: BenchContext) -> dict[str, Any]:
    import dagster as dg

    from backfill_assets.constants import driver_sensor
    from backfill_assets.example.definitions import example_definitions

    n_past = ctx.size.driver_past_plans
    ticks = ctx.size.driver_ticks
    defs = example_definitions()
    sensor = defs.get_sensor_def(driver_sensor(TARGET))
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=ctx.workdir)))
        instances = {}
        for name in ("empty", "history"):
            home = root / name
            home.mkdir()
            instances[name] = stack.enter_context(dg.instance_for_test(temp_dir=str(home)))
        t0 = time.perf_counter()
        _record_past_plans(instances["history"], n_past)
        record_s = time.perf_counter() - t0
        for inst in instances.values():
            _start_current_plan(inst)

        def tick(inst: Any) -> tuple[float, Any]:
            context = dg.build_sensor_context(instance=inst, definitions=defs)
            t = time.perf_counter()
            result: Any = sensor(context)
            return time.perf_counter() - t, result

        for inst in instances.values():  # untimed: the first tick pays one-off imports
            tick(inst)
        per_round: dict[str, list[float]] = {"empty": [], "history": []}
        requests: dict[str, int] = {}
        rounds: list[dict[str, Any]] = []
        for rnd in range(max(3, ctx.repeats)):
            times: dict[str, list[float]] = {"empty": [], "history": []}
            with ctx.load.span() as span:
                for _ in range(ticks):
                    for name, inst in instances.items():
                        seconds, outcome = tick(inst)
                        times[name].append(seconds)
                        requests[name] = len(outcome.run_requests or [])
            for name in times:
                per_round[name].append(median(times[name]))
            rounds.append(round_load(rnd, [span]))
            print_noisy(f"driver round {rnd + 1}", rounds[-1])
    use = kept(rounds)
    empty_ms = median([per_round["empty"][i] for i in use]) * 1000
    history_ms = median([per_round["history"][i] for i in use]) * 1000
    ratios = {i: per_round["history"][i] / per_round["empty"][i] for i in range(len(rounds))}
    agreements = {
        "tick ms with past plans": agreement(
            clean_values({i: v * 1000 for i, v in enumerate(per_round["history"])}, rounds)
        )
    }
    result: dict[str, Any] = {
        "past_plans": n_past,
        "ticks_per_round": ticks,
        "record_past_plans_s": round(record_s, 2),
        "tick_ms_no_past_plans": empty_ms,
        "tick_ms_with_past_plans": history_ms,
        "with_over_without": history_ms / empty_ms,
        "ratio_runs": [ratios[i] for i in use],
        "run_requests": requests,
        "load": load_summary(rounds, "measured per round (the ticks of both instances)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
    }
    result["goals"] = [
        goal(
            f"driver tick ms with {n_past} past plans",
            history_ms,
            200,
            no_verdict=all_noisy(rounds),
        )
    ]
    return result
