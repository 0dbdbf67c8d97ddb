"""(d) backfill_assets: shadow write per ISO week, gates per batch, one pointer swap at the end.

Two ways, on either warehouse: at the warehouse level (`run_backfill_assets`, the batch loop the
executor drives), and through the project's own Dagster path (`run_backfill_assets_dagster`:
plan, approve, one run per batch, the swap job). The `_pg` variants are the same code on a
PostgreSQL warehouse (and, through Dagster, on Dagster's PostgreSQL storage); the adapters are
imported where they are used, so each contender pays only for its own.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from backfill_assets.example.orders import ORDERS_DAILY_SQL as ORDERS_SQL
from backfill_assets.example.spec import ORDERS_CRITERIA, ORDERS_SPEC
from backfill_assets.lib.dates import days, iso_weeks
from backfill_assets.lib.gates.evaluate import GateOutcome, evaluate_gates
from backfill_assets.lib.review.diff import DEFAULT_TOLERANCE
from backfill_assets.lib.warehouse.base import Warehouse
from bench.harness.config import REPO_DIR

PLAN_ID = "bench"
# The project's own instance config: what a deployment runs with (the writer tag limits).
SHIPPED_INSTANCE = REPO_DIR / "dagster_home" / "dagster.yaml"


def run_backfill_assets(
    path: Path, start: dt.date, end: dt.date, plan_id: str = PLAN_ID
) -> dict[str, Any]:
    """Backfill [start, end) of orders_daily in a DuckDB file: shadow + gates per week, then one
    swap."""
    from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse

    return backfill_in_weeks(DuckDBWarehouse(path), start, end, plan_id)


def run_backfill_assets_pg(url: str, start: dt.date, end: dt.date) -> dict[str, Any]:
    """The same loop on a PostgreSQL warehouse (partitioned target, DETACH/ATTACH swap). Its
    gates read the diff with the other gates' queries, side by side (`gates_and_diff`); the
    diff's own share is timed apart, each batch's diff gate run again alone after its gates, and
    that time is set aside from the contender's."""
    from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
    from backfill_assets.lib.warehouse.postgres.gates import diff_gate_alone

    wh = PostgresWarehouse(url)
    unchanged = ORDERS_CRITERIA.sample.unchanged_columns if ORDERS_CRITERIA.sample else ()

    def alone(w0: dt.date, w1: dt.date) -> None:
        diff_gate_alone(wh, ORDERS_SPEC, w0, w1, tolerance=DEFAULT_TOLERANCE, unchanged=unchanged)

    return backfill_in_weeks(wh, start, end, PLAN_ID, diff_alone=alone)


def timed_batch(
    wh: Warehouse,
    w0: dt.date,
    w1: dt.date,
    plan_id: str,
    *,
    session: bool = True,
    gates_wh: Any = None,
) -> tuple[float, float, list[GateOutcome]]:
    """One batch as its op runs it: the shadow write, then the gates, in one session of the
    warehouse. Returns (write s, gates s, outcomes); the session's opening and closing of the
    warehouse count as the write's, whose own they were before. `gates_wh`: what the gates read
    through (a timing proxy of `wh`), `wh` itself by default."""
    t0 = time.perf_counter()
    with wh.session() if session else nullcontext():
        wh.replace_partitions(ORDERS_SPEC, w0, w1, build=ORDERS_SQL, shadow=True, plan_id=plan_id)
        t1 = time.perf_counter()
        outcomes = evaluate_gates(
            wh if gates_wh is None else gates_wh, ORDERS_SPEC, ORDERS_CRITERIA, w0, w1, plan_id
        )
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    return (t1 - t0) + (t3 - t2), t2 - t1, outcomes


def backfill_in_weeks(
    wh: Warehouse,
    start: dt.date,
    end: dt.date,
    plan_id: str = PLAN_ID,
    *,
    session: bool = True,
    diff_alone: Callable[[dt.date, dt.date], Any] | None = None,
) -> dict[str, Any]:
    """Shadow write + gates per ISO week of [start, end), then one swap of every day.
    `session=False`: the write and the gates each open the warehouse, as they did before the
    session (for `bench.experiments.session_gain`). `diff_alone`: where the gates read the diff
    with their other queries, the diff gate run alone for a week, timed after its gates and set
    aside (`set_aside_s`, not the contender's time)."""
    wh.claim_plan(ORDERS_SPEC.name, plan_id)  # what approving the plan does
    write_s = gates_s = alone_s = 0.0
    batches = 0
    timer = _DiffTimer(wh)
    for w0, w1 in iso_weeks(start, end):
        write, gates, outcomes = timed_batch(wh, w0, w1, plan_id, session=session, gates_wh=timer)
        failed = [
            f"{g.check_name}@{g.partition}: {g.description}" for g in outcomes if not g.passed
        ]
        if failed:
            # The next batch must not start; in the bench this means the data is wrong.
            raise RuntimeError(f"gates failed for {w0}..{w1}: {failed[:3]}")
        write_s += write
        gates_s += gates
        batches += 1
        if diff_alone is not None:
            t0 = time.perf_counter()
            diff_alone(w0, w1)
            alone_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    wh.swap(ORDERS_SPEC, plan_id, days(start, end))
    swap_s = time.perf_counter() - t0
    if diff_alone is not None:
        # The gates and the diff read together; the diff alone, timed apart.
        phases = {"shadow_write_s": write_s, "gates_and_diff_s": gates_s, "diff_alone_s": alone_s}
    else:
        # The gates without the diff, then the diff (the diff gate's read), apart.
        phases = {
            "shadow_write_s": write_s,
            "gates_s": gates_s - timer.seconds,
            "diff_s": timer.seconds,
        }
    return {"batches": batches, "phases": {**phases, "swap_s": swap_s}, "set_aside_s": alone_s}


class _DiffTimer:
    """The warehouse, with the seconds its `diff` took added up (the gates read through it)."""

    def __init__(self, wh: Warehouse):
        self._wh = wh
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wh, name)

    def diff(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._wh.diff(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0


def run_backfill_assets_dagster(path: Path, start: dt.date, end: dt.date) -> dict[str, Any]:
    """(d') The same backfill through the project's own path: plan -> approve -> one Dagster run
    per ISO-week batch (shadow write + blocking gates recorded per partition in a real
    instance) -> the swap job, publishing the target alone, as (a) and (d) do. What
    `backfill-assets plan/approve/run` and `swap --no-refresh` do, in-process. The instance
    stores in SQLite under a fresh DAGSTER_HOME holding the shipped dagster.yaml."""
    return through_dagster(str(path), start, end, None, downstream=False)


def run_backfill_assets_dagster_downstream(
    path: Path, start: dt.date, end: dt.date
) -> dict[str, Any]:
    """(d') with the swap job building the impacted dbt models in shadow and publishing them
    with the target: `backfill-assets swap` without --no-refresh (the CLI then refreshes the
    impacted assets the swap did not publish). Work the floor does not do."""
    return through_dagster(str(path), start, end, None, downstream=True)


def run_backfill_assets_dagster_pg(url: str, start: dt.date, end: dt.date) -> dict[str, Any]:
    """(d'_pg) The Dagster path on a PostgreSQL warehouse, the target published alone, the
    instance on Dagster's PostgreSQL storage (dagster-postgres) in the database the measure
    prepared next to the warehouse's."""
    from bench.harness.pg_data import dagster_storage_url

    return through_dagster(url, start, end, dagster_storage_url(url), downstream=False)


def run_backfill_assets_dagster_downstream_pg(
    url: str, start: dt.date, end: dt.date
) -> dict[str, Any]:
    """(d'_pg) with the impacted dbt models built in shadow and published by the swap."""
    from bench.harness.pg_data import dagster_storage_url

    return through_dagster(url, start, end, dagster_storage_url(url), downstream=True)


def instance_yaml(storage_url: str | None) -> str:
    """The project's shipped instance config (dagster_home/dagster.yaml: the writer tag
    concurrency limits, telemetry off), plus Dagster's PostgreSQL storage when given."""
    text = SHIPPED_INSTANCE.read_text()
    if storage_url is None:
        return text
    if re.search(r"^storage:", text, flags=re.MULTILINE):
        raise RuntimeError(f"{SHIPPED_INSTANCE} sets storage already; merge it here instead")
    return f"{text}\nstorage:\n  postgres:\n    postgres_url: {storage_url}\n"


def through_dagster(
    warehouse_url: str,
    start: dt.date,
    end: dt.date,
    storage_url: str | None,
    *,
    downstream: bool,
) -> dict[str, Any]:
    """Plan, approve, execute and swap [start, end) with the example's definitions, on the
    warehouse `warehouse_url` names, with the shipped instance config (`instance_yaml`) in a
    fresh DAGSTER_HOME, removed afterwards. `downstream`: the swap builds the impacted dbt
    models in shadow and publishes them with the target. `setup_s` in the split is Dagster's
    import, the definitions' load and the instance's start."""
    t_entry = time.perf_counter()
    import os
    import shutil
    import tempfile

    os.environ["BACKFILL_ASSETS_WAREHOUSE"] = warehouse_url
    home = tempfile.mkdtemp(prefix="bench_dagster_home_")
    os.environ["DAGSTER_HOME"] = home
    try:
        Path(home, "dagster.yaml").write_text(instance_yaml(storage_url))
        out = _plan_execute_swap(warehouse_url, start, end, t_entry, downstream)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {**out, "dagster_home": home}


def approved_plan(
    defs: Any,
    tables: Any,
    instance: Any,
    wh: Warehouse,
    start: dt.date,
    end: dt.date,
    now: dt.datetime,
) -> Any:
    """The real planner's plan of orders_daily over [start, end), approved: what a user does
    before the batches (window 02:00-23:59 UTC, rollback backup)."""
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.planner import plan_backfill

    last = end - dt.timedelta(days=1)
    request = PlanRequest(
        "orders_daily", start.isoformat(), last.isoformat(), "02:00-23:59", "UTC", "backup"
    )
    plan = plan_backfill(
        request,
        asset_graph=defs.resolve_asset_graph(),
        tables=tables,
        instance=instance,
        warehouse=wh,
        now=now,
    )
    approve_plan(instance, wh, tables["orders_daily"], plan, "bench")
    return plan


def _plan_execute_swap(
    warehouse_url: str, start: dt.date, end: dt.date, t_entry: float, downstream: bool
) -> dict[str, Any]:
    import contextlib
    import io

    import dagster as dg

    from backfill_assets.constants import ROLE_SWAP, swap_job, swap_run_config
    from backfill_assets.example.declaration import ORDERS
    from backfill_assets.example.definitions import example_definitions
    from backfill_assets.lib.warehouse.connect import open_warehouse
    from backfill_assets.service.executor import execute_plan
    from backfill_assets.service.runs import hold_connections, run_as_writer
    from backfill_assets.service.tables import backfill_tables

    defs = example_definitions()
    tables = backfill_tables(defs)

    with dg.DagsterInstance.get() as instance:
        hold_connections(instance)  # as the CLI's `run`, `swap` and `rollback` do
        wh = open_warehouse(warehouse_url)
        now = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        plan = approved_plan(defs, tables, instance, wh, start, end, now)
        t1 = time.perf_counter()
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            reports = execute_plan(
                defs,
                instance,
                wh,
                tables,
                plan.plan_id,
                clock=lambda: now,
                ignore_window=True,
                log_level="ERROR",
            )
            t2 = time.perf_counter()
            swap = run_as_writer(
                defs,
                swap_job(ORDERS.key),
                instance,
                wh,
                ORDERS,
                role=ROLE_SWAP,
                plan_id=plan.plan_id,
                wait_s=30,
                log_level="ERROR",
                run_config=swap_run_config(ORDERS.key, ROLE_SWAP, plan.plan_id, downstream),
            )
        t3 = time.perf_counter()
    if not swap.success or any(r.status != "passed" for r in reports):
        raise RuntimeError(f"the Dagster path did not complete: {[r.status for r in reports]}")
    return {
        "batches": len(reports),
        "phases": {
            "setup_s": t0 - t_entry,
            "plan_approve_s": t1 - t0,
            "batches_s": t2 - t1,
            "swap_job_s": t3 - t2,
        },
    }
