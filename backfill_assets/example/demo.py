"""`make demo`: the whole story on the embedded DuckDB (or, with `make demo WAREHOUSE=postgres`,
on PostgreSQL), end to end, printed as it happens.

1. History: 120 days of orders land; `orders_daily` and its dbt marts are built by the daily
   job's own code path with logic v1, which converted cross-border orders with the wrong rate.
2. Story: the fix (v2) is in code. Plan a 90-day backfill around the daily run, approve it, run
   it batch by batch into the shadow behind the gates, swap atomically, refresh the dbt marts,
   and compare before/after.
3. Corruption: a later plan meets a source day restated under it. The sample gate fails, the
   plan halts before the next batch, the swap refuses and the target is unchanged. The day is
   re-landed, the plan re-run (only what did not pass), swapped, then rolled back to show the
   exact pre-swap checksum coming back.

The demo resets its own state first: the warehouse file and the Dagster instance under the
project's DAGSTER_HOME. The reset can be run any number of times: it also repairs what a wipe of
the instance leaves behind (see service.doctor).

On PostgreSQL: with BACKFILL_ASSETS_WAREHOUSE set to a `postgresql://` URL the demo works in that
database's schema `backfill_assets_demo` (dropped and recreated: nothing else is touched) with
the project's instance; otherwise it starts a throwaway server
(backfill_assets/testing/throwaway_postgres.py) that holds both the warehouse and the Dagster
instance (dagster-postgres storage), and stops it at the end.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backfill_assets.cli import QUIET, _runs_output_to_log
from backfill_assets.constants import ROLE_SWAP, rollback_job, swap_job, swap_run_config
from backfill_assets.errors import GateFailed

SECTION = "=" * 78
DEMO_SCHEMA = "backfill_assets_demo"  # the only schema the demo touches on a given server


_OUT = sys.stdout  # the terminal, even while run output is redirected to the log


def say(text: str = "") -> None:
    print(text, file=_OUT, flush=True)


def _checksum(wh: Any, spec: Any, start: dt.date, end_inclusive: dt.date) -> str:
    parts = wh.checksums(spec, start, end_inclusive + dt.timedelta(days=1))
    return hashlib.sha256(repr(sorted(parts.items())).encode()).hexdigest()[:16]


def _wrong_fx_rows(wh: Any, start: dt.date, end_inclusive: dt.date) -> int:
    return wh.query(
        "select count(*) from orders_daily o join fx_rates r on r.currency = o.currency "
        "where o.order_date between $s and $e and o.fx_rate <> r.rate_to_usd::decimal(12, 6)",
        {"s": start, "e": end_inclusive},
    )[0][0]


def _target_revenue(wh: Any, start: dt.date, end_inclusive: dt.date) -> float:
    """orders_daily's net revenue over the range, read apart from the diff."""
    rows = wh.query(
        "SELECT coalesce(sum(net_revenue_usd), 0) FROM orders_daily "
        "WHERE order_date >= $s AND order_date <= $e",
        {"s": start, "e": end_inclusive},
    )
    return float(rows[0][0])


def _revenue(wh: Any, start: dt.date, end_inclusive: dt.date) -> float:
    return float(
        wh.query(
            "select coalesce(sum(net_revenue_usd), 0) from fct_daily_revenue "
            "where order_date between $s and $e",
            {"s": start, "e": end_inclusive},
        )[0][0]
    )


def _swap(defs: Any, instance: Any, wh: Any, table: Any, plan: Any, kind: str) -> Any:
    from backfill_assets.service.runs import run_as_writer

    job = swap_job(plan.target) if kind == ROLE_SWAP else rollback_job(plan.target)
    with _runs_output_to_log():
        return run_as_writer(
            defs,
            job,
            instance,
            wh,
            table,
            role=kind,
            plan_id=plan.plan_id,
            wait_s=30,
            raise_on_error=False,
            log_level=QUIET,
            run_config=swap_run_config(plan.target, kind, plan.plan_id),
        )


def _window_for(now: dt.datetime) -> tuple[str, bool]:
    """An idle window clear of the daily run (01:00 UTC, with its margins), and whether `now`
    falls outside it (then the demo runs with the operator override and says so)."""
    window = "02:15-00:00"
    inside = not (dt.time(0, 0) <= now.time() < dt.time(2, 15))
    return window, inside


def run_demo(days: int, rows_per_day: int, scenario: str, warehouse: str = "duckdb") -> int:
    if days < 100:
        say("refused: the demo needs --days >= 100 (a 90-day backfill plus recent days)")
        return 2
    with _demo_state(warehouse) as (wh, where, out_dir):
        return _story(wh, where, out_dir, days, rows_per_day, scenario)


@contextlib.contextmanager
def _demo_state(warehouse: str) -> Iterator[tuple[Any, str, Path]]:
    """The reset warehouse, a line saying where things are, and where plan files go. Sets
    BACKFILL_ASSETS_WAREHOUSE (and DAGSTER_HOME, for a throwaway server) for the demo's runs."""
    import dagster as dg

    from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV, is_postgres_url, open_warehouse
    from backfill_assets.service.doctor import diagnose

    given = os.environ.get(WAREHOUSE_ENV, "")
    if warehouse == "duckdb":
        wh_path = Path(given)
        wh_path.parent.mkdir(parents=True, exist_ok=True)
        for p in (wh_path, Path(f"{wh_path}.wal")):
            p.unlink(missing_ok=True)
        _reset_instance(dg, diagnose)
        home = os.environ["DAGSTER_HOME"]
        yield (
            open_warehouse(str(wh_path)),
            f"warehouse {wh_path}, DAGSTER_HOME {home}",
            (wh_path.parent),
        )
        return
    out_dir = Path("data")
    out_dir.mkdir(exist_ok=True)
    if is_postgres_url(given):
        url = _reset_demo_schema(given)
        os.environ[WAREHOUSE_ENV] = url
        _reset_instance(dg, diagnose)
        wh = open_warehouse(url)
        yield wh, f"warehouse {wh.location}, DAGSTER_HOME {os.environ['DAGSTER_HOME']}", out_dir
        return
    from backfill_assets.testing.throwaway_postgres import throwaway_postgres

    say("(no PostgreSQL URL in BACKFILL_ASSETS_WAREHOUSE: starting a throwaway server)")
    with throwaway_postgres() as server, tempfile.TemporaryDirectory() as home:
        url = server.create_database("warehouse")
        dagster_url = server.create_database("dagster")
        Path(home, "dagster.yaml").write_text(_postgres_instance_yaml(dagster_url))
        os.environ[WAREHOUSE_ENV] = url
        os.environ["DAGSTER_HOME"] = home
        wh = open_warehouse(url)
        yield wh, f"warehouse {wh.location}, Dagster storage {dagster_url} (throwaway)", out_dir
        dg.DagsterInstance.get().dispose()


def _reset_instance(dg: Any, diagnose: Any) -> None:
    instance = dg.DagsterInstance.get()
    instance.wipe()
    # A wipe leaves pools with a limit and no slots (steps in them would wait forever), and
    # runs of an earlier demo killed half-way: repair both so the demo runs again and again.
    diagnose(instance, None, {}, repair=True)


def _reset_demo_schema(url: str) -> str:
    """Drop the demo's own schema on the given server, and its rows of backfill_meta; return the
    URL that points the demo at that schema."""
    import urllib.parse

    import psycopg
    from psycopg import sql

    parts = urllib.parse.urlsplit(url)
    base = urllib.parse.urlunsplit(parts._replace(query=""))
    with psycopg.connect(base, autocommit=True) as con:
        con.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(DEMO_SCHEMA)))
        if con.execute("SELECT to_regclass('backfill_meta.plan_claims')").fetchone() != (None,):
            for table in ("partition_versions", "shadow_log", "swap_log", "swap_days",
                          "swap_companions", "writer_lease", "plan_claims"):  # fmt: skip
                if con.execute(
                    "SELECT to_regclass(%s)", (f"backfill_meta.{table}",)
                ).fetchone() == (None,):
                    continue  # made by a version that did not have it
                con.execute(
                    sql.SQL("DELETE FROM {} WHERE table_name LIKE %s").format(
                        sql.Identifier("backfill_meta", table)
                    ),
                    (f"{DEMO_SCHEMA}.%",),
                )
    return f"{base}?schema={DEMO_SCHEMA}"


def _postgres_instance_yaml(url: str) -> str:
    """The throwaway instance: dagster-postgres storage (psycopg2: see dagster.postgres.yaml)
    and the project's run queue limits."""
    storage_url = url.replace("postgresql://", "postgresql+psycopg2://", 1)
    return (
        f"storage:\n  postgres:\n    postgres_url: {storage_url}\n"
        "concurrency:\n  runs:\n    max_concurrent_runs: 4\n    tag_concurrency_limits:\n"
        '      - key: "backfill_assets/writer"\n        value:\n'
        "          applyLimitPerUniqueValue: true\n        limit: 1\n"
        "telemetry:\n  enabled: false\n"
    )


def _story(wh: Any, where: str, out_dir: Path, days: int, rows_per_day: int, scenario: str) -> int:
    import dagster as dg

    from backfill_assets.example.definitions import example_definitions
    from backfill_assets.example.seed import build_history, land_days
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.lib.planning.markdown import render_markdown
    from backfill_assets.lib.review.render import headline
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.executor import execute_plan
    from backfill_assets.service.planner import plan_backfill
    from backfill_assets.service.plans import published_keys
    from backfill_assets.service.refresh import refresh_downstream
    from backfill_assets.service.review import plan_diff
    from backfill_assets.service.stale import find_stale
    from backfill_assets.service.status import plan_status, render_status
    from backfill_assets.service.swap import release_backup
    from backfill_assets.service.tables import backfill_tables

    instance = dg.DagsterInstance.get()
    defs = example_definitions()
    tables = backfill_tables(defs)
    table = tables["orders_daily"]
    now = dt.datetime.now(dt.UTC)
    yesterday = now.date() - dt.timedelta(days=1)
    first = yesterday - dt.timedelta(days=days - 1)
    say(SECTION)
    say(f"backfill_assets demo — {where}")
    say("(demo state was reset; run output goes to dagster_home/logs/backfill-assets-cli.log)")
    say(SECTION)

    t0 = time.perf_counter()
    with _runs_output_to_log():
        land_days(defs, instance, first, yesterday, rows_per_day)
        build_history(defs, instance, wh, first, yesterday, logic="1")
    rows = wh.query("select count(*) from orders_daily")[0][0]
    say(
        f"[history] {days} days {first}..{yesterday} landed and built with logic v1 "
        f"(the FX bug): {rows:,} rows in orders_daily, dbt marts built "
        f"({time.perf_counter() - t0:.1f}s)"
    )

    window, inside = _window_for(now)
    ignore_window = not inside
    clock = lambda: dt.datetime.now(dt.UTC)  # noqa: E731

    def plan_and_approve(start: dt.date, end: dt.date) -> Any:
        req = PlanRequest(
            "orders_daily", start.isoformat(), end.isoformat(), window, "UTC", "backup"
        )
        plan = plan_backfill(
            req,
            asset_graph=defs.resolve_asset_graph(),
            tables=tables,
            instance=instance,
            warehouse=wh,
            now=now,
        )
        out = out_dir / f"plan_{plan.plan_id}"
        Path(f"{out}.json").write_text(plan.to_json() + "\n")
        Path(f"{out}.md").write_text(render_markdown(plan) + "\n")
        approve_plan(instance, wh, table, plan, "demo")
        say(
            f"[plan] {plan.plan_id}: {plan.start}..{plan.end}, {len(plan.partitions)} partitions"
            f", {len(plan.batches)} weekly batches in window {window} UTC (daily run "
            f"{plan.contention.daily_slot_start}-{plan.contention.daily_slot_end} excluded); "
            f"impact: {', '.join(i.asset_key for i in plan.impact)}; written to {out}.json/.md"
        )
        say(f"[approve] {plan.plan_id} approved")
        return plan

    def progress(event: Any) -> None:
        if event.report is None:  # the demo prints batches, not each partition
            return
        report = event.report
        say(
            f"  batch {report.index:>2}/{event.total_batches} {report.start}..{report.end}: "
            f"{report.status}" + (f" ({report.seconds:.1f}s)" if report.seconds else "")
        )

    def run(plan: Any) -> None:
        if ignore_window:
            say(
                f"  (now {now:%H:%M} UTC is outside the window: the demo uses the operator "
                "override --ignore-window; the daily-run guard still applies)"
            )
        with _runs_output_to_log():
            execute_plan(
                defs,
                instance,
                wh,
                tables,
                plan.plan_id,
                clock=clock,
                ignore_window=ignore_window,
                progress=progress,
                log_level=QUIET,
            )

    def stale_lines(when: str, at: dt.datetime) -> None:
        scan = find_stale(instance, table, now=at)
        head, *rest = scan.summary()
        say(f"[stale] {when}, `backfill-assets plan orders_daily --stale` finds {head}")
        for line in rest:
            say(f"   {line.strip()}")

    spec = table.spec
    status = 0
    if scenario in ("story", "all"):
        say(SECTION)
        say("STORY: fix the FX bug in 90 days of history")
        s_start, s_end = yesterday - dt.timedelta(days=95), yesterday - dt.timedelta(days=6)
        wrong_before = _wrong_fx_rows(wh, s_start, s_end)
        rev_before = _revenue(wh, s_start, s_end)
        stale_lines("before the backfill", now)
        plan = plan_and_approve(s_start, s_end)
        t = time.perf_counter()
        run(plan)
        say(f"[run] every batch passed its gates ({time.perf_counter() - t:.1f}s)")
        # What the reviewer approves: the shadow against the live rows, before the swap.
        reviewed = plan_diff(instance, tables, wh, plan.plan_id)
        revenue = reviewed.diff.column("net_revenue_usd").numeric
        say(f"[diff] {headline(reviewed.diff)} (backfill-assets diff {plan.plan_id})")
        target_before = _target_revenue(wh, plan.start, plan.end)
        result = _swap(defs, instance, wh, table, plan, "swap")
        if not result.success:
            say("[swap] FAILED — see the log")
            return 1
        moved = _target_revenue(wh, plan.start, plan.end) - target_before
        say(f"[shadow] {_downstream_gate(result)}")
        published = published_keys(instance, plan.plan_id)
        marts = [i.asset_key for i in plan.impact if i.at_swap == "published"]
        marts = [k for k in marts if k in published]
        say(
            f"[swap] {len(plan.partitions)} partitions moved into orders_daily atomically "
            f"(old weeks kept as backup), in the same transaction as the marts {', '.join(marts)}"
        )
        say(
            f"[diff] orders_daily net_revenue_usd: the diff said {revenue.total_delta:+,.2f}, "
            f"the swap moved it by {moved:+,.2f}"
            if revenue is not None
            else "[diff] net_revenue_usd unchanged"
        )
        with _runs_output_to_log():
            refreshed = refresh_downstream(
                defs, instance, wh, table, plan, wait_s=30, log_level=QUIET, skip=published
            )
        for req, ok in refreshed:
            rng = f" {req.start}..{req.end}" if req.start else " (full refresh)"
            say(f"[refresh] {', '.join(req.asset_keys)}{rng}: {'ok' if ok else 'FAILED'}")
        consistent = _mart_matches_target(wh, first, yesterday)
        say(
            "[consistent] fct_daily_revenue equals the sum over orders_daily for every day: "
            f"{consistent}"
        )
        if not consistent:
            status = 1
        wrong_after = _wrong_fx_rows(wh, s_start, s_end)
        rev_after = _revenue(wh, s_start, s_end)
        say(
            f"[before/after] orders with a wrong FX rate: {wrong_before:,} -> {wrong_after:,}; "
            f"fct_daily_revenue net USD: {rev_before:,.2f} -> {rev_after:,.2f} "
            f"({rev_after - rev_before:+,.2f})"
        )
        if wrong_after:
            status = 1
        stale_lines("after the swap", now)
        with _runs_output_to_log():
            release_backup(instance, tables, wh, plan.plan_id)
        say(f"[release] backup of {plan.plan_id} released (the target is free for a new plan)")

    if scenario in ("corruption", "all"):
        say(SECTION)
        say("CORRUPTION: a source day is restated under a running backfill")
        # Older history than the story's range: still built by v1, so the swap changes it.
        c_start = first + dt.timedelta(days=2)
        c_end = c_start + dt.timedelta(days=17)
        plan = plan_and_approve(c_start, c_end)
        bad_day = plan.batches[1].start + dt.timedelta(days=1)
        wh.execute(
            "update raw_orders set amount = amount + 1 where order_date = $d and order_id % 40 = 0",
            {"d": bad_day},
        )
        say(
            f"[plant] raw_orders for {bad_day} restated: 1 in 40 orders' amount changed "
            f"(gross_amount is declared unchanged)"
        )
        before = _checksum(wh, spec, plan.start, plan.end)
        try:
            run(plan)
            say("[run] UNEXPECTED: every gate passed")
            return 1
        except GateFailed as e:
            first_line, *rest = str(e).splitlines()
            say(f"[halted] {first_line}")
            for line in rest[:4]:
                say(f"   {line.strip()}")
        st = plan_status(instance, tables, wh, plan.plan_id)
        say("[status]\n" + "\n".join("   " + ln for ln in render_status(st).splitlines()))
        result = _swap(defs, instance, wh, table, plan, "swap")
        say(
            f"[swap] {'REFUSED' if not result.success else 'UNEXPECTEDLY SUCCEEDED'}: "
            + _refusal(result)
        )
        unchanged = _checksum(wh, spec, plan.start, plan.end) == before
        say(f"[target] checksum of {plan.start}..{plan.end} unchanged: {unchanged}")
        if not unchanged or result.success:
            return 1
        with _runs_output_to_log():
            land_days(defs, instance, bad_day, bad_day, rows_per_day)
        say(f"[fix] {bad_day} re-landed from the source of truth; running the plan again")
        run(plan)
        marts_before = _marts(wh)
        result = _swap(defs, instance, wh, table, plan, "swap")
        say(f"[swap] {'done' if result.success else 'FAILED'}, with the marts")
        swapped = _checksum(wh, spec, plan.start, plan.end)
        result = _swap(defs, instance, wh, table, plan, "rollback")
        restored = _checksum(wh, spec, plan.start, plan.end)
        marts_restored = _marts(wh) == marts_before
        say(
            f"[rollback] {'done' if result.success else 'FAILED'}: checksum {swapped} -> "
            f"{restored}, equal to the pre-swap checksum: {restored == before}; marts equal "
            f"to their pre-swap rows: {marts_restored}"
        )
        if restored != before or not marts_restored:
            status = 1

    say(SECTION)
    if "(throwaway)" in where:
        say("The throwaway server stops now. To look at the result in the Dagster UI, run the demo")
        say("against a server that stays: BACKFILL_ASSETS_WAREHOUSE=postgresql://... make demo")
        say("WAREHOUSE=postgres, then `make dev` with the same variable.")
        return status
    say("Look at it in the Dagster UI: `make dev`, then http://127.0.0.1:3000")
    say("  lineage: /asset-groups   gates: /assets/orders_daily__shadow?view=checks")
    say("  plans:   /assets/backfill_plans (Markdown in each partition's metadata)   runs: /runs")
    return status


def _downstream_gate(result: Any) -> str:
    """What the swap's downstream gate said (its evaluation's description)."""
    for event in result.all_events:
        data = event.event_specific_data
        if event.event_type_value == "ASSET_CHECK_EVALUATION" and data.check_name == (
            "downstream_dbt_tests"
        ):
            return str(data.description)
    return "no downstream dbt models built in shadow"


MARTS = ("fct_daily_revenue", "fct_weekly_revenue", "dim_customers")


def _marts(wh: Any) -> dict[str, list[tuple]]:
    """Every row of each dbt mart, sorted."""
    return {m: sorted(wh.query(f"select * from {m}"), key=repr) for m in MARTS}


def _mart_matches_target(wh: Any, start: dt.date, end: dt.date) -> bool:
    """The cross-table invariant readers rely on: per day, the daily revenue mart equals the
    live revenue summed over orders_daily."""
    days = f"order_date between DATE '{start}' and DATE '{end}'"
    mart = wh.query(
        f"select order_date, sum(net_revenue_usd) from fct_daily_revenue where {days} group by 1"
    )
    target = wh.query(
        "select order_date, sum(net_revenue_usd) from orders_daily where not is_cancelled and "
        f"order_id is not null and customer_id is not null and {days} group by 1"
    )
    return bool(mart) and dict(mart) == dict(target)


def _refusal(result: Any) -> str:
    from backfill_assets.service.executor import run_error

    error = run_error(result)
    return error[1] if error else "see the run in the UI"


if __name__ == "__main__":
    sys.exit(run_demo(120, 20_000, "all"))
