"""Downstream published with the target, or not at all (the swap with `downstream_dbt`).

The first test is also the whole story of a backfill: plan, batches, gates, the swap with its
marts, then the rollback restoring everything row for row.

The example declares `downstream_dbt`, so its swap builds the impacted dbt tables
(fct_daily_revenue, fct_weekly_revenue, dim_customers) in shadow from an overlay of the
target's validated shadow, runs their dbt tests there (the `downstream_dbt_tests` gate), and
publishes them with the target in the warehouse transaction of the swap. Real dbt builds, real
DuckDB files and a real PostgreSQL server, a real Dagster instance.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest

from backfill_assets.cli import main
from backfill_assets.constants import DOWNSTREAM_CHECK
from backfill_assets.errors import BackfillError
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.seed import build_history
from backfill_assets.lib.planning.markdown import render_markdown
from backfill_assets.lib.states import PlanStatus
from backfill_assets.lib.warehouse.base import companion_backup
from backfill_assets.service.downstream import (
    SHADOW_SUFFIX,
    DbtDownstream,
    Invocation,
    classify,
    plan_invocations,
)
from backfill_assets.service.plans import load_plan, published_keys
from backfill_assets.service.refresh import refresh_requests
from backfill_assets.service.runs import IN_PROCESS_LOCATION, local_process_tags
from backfill_assets.service.swap import perform_swap, prepare_downstream
from tests.conftest import HISTORY_END, HISTORY_START, make_plan
from tests.helpers import execute, refused_message, swap_or_rollback

START, END = dt.date(2026, 1, 5), dt.date(2026, 1, 14)  # two ISO weeks, the second partial
MARTS = ("fct_daily_revenue", "fct_weekly_revenue", "dim_customers")
LIVE_REVENUE = (
    "not is_cancelled and order_id is not null and order_date is not null "
    "and customer_id is not null"
)


def _rows(wh: Any, relation: str) -> list[tuple] | None:
    """Every row of `relation`, sorted (None when it does not exist)."""
    try:
        return sorted(wh.query(f"select * from {relation}"), key=repr)
    except Exception:
        return None


def _state(wh: Any) -> dict[str, Any]:
    return {name: _rows(wh, name) for name in ("orders_daily", *MARTS)}


def _leftovers(wh: Any) -> list[str]:
    rows = wh.query(
        "select table_name from information_schema.tables where table_schema = current_schema()"
    )
    return sorted(r[0] for r in rows if "__bf_" in r[0] or "__bfb_" in r[0])


INVARIANT = (
    "select (select coalesce(sum(net_revenue_usd), 0) from fct_daily_revenue "
    "where order_date between DATE '{s}' and DATE '{e}'), "
    "(select coalesce(sum(net_revenue_usd), 0) from orders_daily "
    "where " + LIVE_REVENUE + " and order_date between DATE '{s}' and DATE '{e}')"
)


def _wrong_fx(wh: Any) -> int:
    """Orders of the plan's range whose FX rate is not the reference rate (the v1 bug)."""
    return wh.query(
        "select count(*) from orders_daily o join fx_rates r on r.currency = o.currency "
        "where o.fx_rate <> r.rate_to_usd::decimal(12, 6) and o.order_date between $s and $e",
        {"s": START, "e": END},
    )[0][0]


def _invariant(con_query: Any) -> tuple[Any, Any]:
    """(daily revenue mart, sum over the target) for the history, in one statement."""
    row = con_query(INVARIANT.format(s=HISTORY_START, e=HISTORY_END))[0]
    return row[0], row[1]


@contextlib.contextmanager
def _reading(backend: str, wh: Any) -> Iterator[list[tuple[Any, Any]]]:
    """A reader loop in a thread, from its own connection: the cross-table invariant (daily
    revenue mart == the sum over the target, per the same days) in one statement each time,
    while the block runs. It reads at least 5 times before and 5 times after the block; every
    read must hold, and it must have seen the target before and after the swap."""
    seen: list[tuple[Any, Any]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        query = _reader_query(backend, wh)
        try:
            while not stop.is_set():
                seen.append(_invariant(query))
        except BaseException as e:  # reported below
            errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        while len(seen) < 5 and not errors:
            stop.wait(0.01)
        yield seen
        count = len(seen)
        while len(seen) < count + 5 and not errors:
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert all(mart == target for mart, target in seen), [s for s in seen if s[0] != s[1]][:3]
    assert len({s[1] for s in seen}) == 2  # it saw the target before and after the swap


@pytest.mark.backends("embedded", "postgres")
@pytest.mark.slow
def test_the_swap_publishes_the_marts_with_the_target_and_the_rollback_restores_all(
    backend, defs, instance, history_with_marts, capsys
):
    wh = history_with_marts
    before = _state(wh)
    mart, target = _invariant(wh.query)
    assert mart == target  # the marts were built from the v1 target
    plan = make_plan(defs, instance, wh, START.isoformat(), END.isoformat())
    # The plan says what the swap will rebuild in shadow and what follows the target.
    kinds = {i.asset_key: i.kind for i in plan.impact}
    assert kinds == {
        "fct_daily_revenue": "dbt incremental",
        "fct_weekly_revenue": "dbt incremental",
        "dim_customers": "dbt table",
        "stg_orders": "dbt view",
    }
    assert {i.asset_key: i.at_swap for i in plan.impact} == {
        "fct_daily_revenue": "published",
        "fct_weekly_revenue": "published",
        "dim_customers": "published",
        "stg_orders": "view",
    }
    markdown = render_markdown(plan)
    assert (
        "| `dim_customers` | dbt table | all (full refresh) | rebuilt in shadow, tested, "
        in markdown
    )
    assert "| `stg_orders` | dbt view | all (full refresh) | a view: reads the target" in markdown
    assert "`swap --no-refresh` publishes the target alone" in markdown
    assert [r.status for r in execute(defs, instance, wh, plan)] == ["passed", "passed"]
    assert _state(wh) == before  # the batches write the shadow only
    checksums = wh.checksums(ORDERS.spec, HISTORY_START, HISTORY_END + dt.timedelta(days=1))

    # On PostgreSQL a reader loop runs through the whole swap job, dbt build included: readers
    # never see the new target next to the old marts. (DuckDB lets one process open the file,
    # and dbt builds in its own: its reader loop is the next test's, around the publish.)
    reading = _reading(backend, wh) if backend == "postgres" else contextlib.nullcontext()
    with reading:
        swap = swap_or_rollback(defs, instance, wh, plan.plan_id)
    assert swap.success, refused_message(swap)
    after = _state(wh)
    assert after["orders_daily"] != before["orders_daily"]
    # Only the plan's days changed, and no order is left with a wrong FX rate in them.
    now = wh.checksums(ORDERS.spec, HISTORY_START, HISTORY_END + dt.timedelta(days=1))
    changed = {d for d in checksums if checksums[d] != now[d]}
    assert changed and all(START <= d <= END for d in changed)
    assert _wrong_fx(wh) == 0
    # The swap run recorded one materialization of the target per partition, with checksums.
    target_mats = [
        e.event_specific_data.materialization  # type: ignore[union-attr]
        for e in swap.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION" and e.asset_key == dg.AssetKey(ORDERS.key)
    ]
    assert len(target_mats) == len(plan.partitions)
    assert {"rows_in", "rows_out", "checksum_in", "checksum_out"} <= set(target_mats[0].metadata)
    assert after["fct_daily_revenue"] != before["fct_daily_revenue"]
    mart, target = _invariant(wh.query)
    assert mart == target  # the marts were published with the fixed target
    # Only the replaced marts are left, as the plan's backups: no shadow, no overlay. (The
    # seeded history has no weekly mart yet: the swap publishes its first version.)
    assert before["fct_weekly_revenue"] is None and after["fct_weekly_revenue"]
    replaced = [m for m in MARTS if before[m] is not None]
    assert _leftovers(wh) == sorted(companion_backup(m, plan.plan_id) for m in replaced)
    assert set(published_keys(instance, plan.plan_id)) == {*MARTS, "stg_orders"}
    # The gate is recorded on the shadow asset, passing, with the dbt tests it ran.
    evals = [
        e.event_specific_data
        for e in swap.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    gate = [v for v in evals if isinstance(v, dg.AssetCheckEvaluation)]
    assert [(v.check_name, v.passed) for v in gate] == [(DOWNSTREAM_CHECK, True)]
    assert gate[0].metadata["dbt_tests"].value > 10  # type: ignore[operator]
    # One dbt invocation built every grain (daily, weekly, unpartitioned) in shadow, over the
    # plan's two whole weeks; the run's log says so.
    assert gate[0].metadata["dbt_invocations"].value == 1
    assert gate[0].metadata["dbt_windows"].value == ["[2026-01-05, 2026-01-19)"]
    assert "one_invocation_refused" not in gate[0].metadata
    logs = [e.user_message for e in instance.all_logs(swap.run_id)]
    built = [m for m in logs if "(in shadow" in m]
    assert len(built) == 1 and built[0].endswith("(in shadow, window [2026-01-05, 2026-01-19))")
    # Dagster shows the marts written by the swap, partition by partition.
    published = {
        (e.event_specific_data.materialization.asset_key.to_user_string(), e.partition)  # type: ignore[union-attr]
        for e in swap.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    }
    assert ("fct_daily_revenue", START.isoformat()) in published
    # ...the days its one dbt invocation rebuilt: the plan's two whole weeks, no more.
    daily = sorted(str(p) for k, p in published if k == "fct_daily_revenue")
    assert daily == [(START + dt.timedelta(days=i)).isoformat() for i in range(14)]
    assert ("dim_customers", None) in published
    # Nothing is left to refresh in place after the swap: every impacted model was published.
    graph = defs.resolve_asset_graph()
    assert refresh_requests(plan, graph, skip=published_keys(instance, plan.plan_id)) == []

    # The rollback, as an operator runs it: it says what it restored with the target, and
    # refreshes nothing in place.
    capsys.readouterr()
    assert main(["rollback", plan.plan_id]) == 0
    out = capsys.readouterr().out
    # It counts the target's partitions (the run also records the marts it restored).
    assert (
        f"rollback of plan {plan.plan_id}: {len(plan.partitions)} partitions of orders_daily" in out
    )
    assert (
        "restored with orders_daily in the same transaction: fct_daily_revenue, dim_customers, "
        "fct_weekly_revenue (views reading it: stg_orders)"
    ) in out, out
    assert "refreshed" not in out
    assert _state(wh) == before  # target and every mart, row for row
    assert _leftovers(wh) == []


def _project_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "dbt_project"
    shutil.copytree(
        Path("dbt_project").resolve(),
        dst,
        ignore=shutil.ignore_patterns("target", "logs", "dbt_packages"),
    )
    return dst


def _planted_project(tmp_path: Path) -> Path:
    """A copy of the example's dbt project with one more singular test on fct_daily_revenue
    that passes on the live model and fails on its shadow."""
    dst = _project_copy(tmp_path)
    (dst / "tests" / "assert_planted_failure_in_shadow.sql").write_text(
        "-- planted by tests/test_downstream.py: fails only when built in shadow\n"
        "select * from {{ ref('fct_daily_revenue') }}\n"
        "where {{ 'true' if var('backfill_assets_shadow', none) else 'false' }}\n"
    )
    return dst


@pytest.mark.slow
def test_a_failing_dbt_test_in_shadow_halts_before_the_swap_and_changes_nothing(
    instance, wh, landed, tmp_path
):
    from backfill_assets.example.definitions import example_definitions

    planted = example_definitions(_planted_project(tmp_path))
    build_history(planted, instance, wh, HISTORY_START, HISTORY_END, logic="1")
    plan = make_plan(planted, instance, wh, START.isoformat(), END.isoformat())
    assert [r.status for r in execute(planted, instance, wh, plan)] == ["passed", "passed"]
    before = _state(wh)

    swap = swap_or_rollback(planted, instance, wh, plan.plan_id)
    assert not swap.success
    message = refused_message(swap)
    assert "downstream dbt models failed in shadow" in message
    assert "assert_planted_failure_in_shadow" in message
    assert _state(wh) == before  # the target and the marts are unchanged
    assert _leftovers(wh) == []  # nothing it built in shadow is left
    assert load_plan(instance, plan.plan_id)[1] == PlanStatus.APPROVED
    # The failing gate is recorded on the shadow asset for the UI.
    key = dg.AssetCheckKey(dg.AssetKey(ORDERS.spec.shadow_name), DOWNSTREAM_CHECK)
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
    assert record is not None and record.status.value == "FAILED"

    # With --no-refresh the target alone is published and the marts stay as they were.
    alone = swap_or_rollback(planted, instance, wh, plan.plan_id, downstream=False)
    assert alone.success, refused_message(alone)
    after = _state(wh)
    assert after["orders_daily"] != before["orders_daily"]
    assert {m: after[m] for m in MARTS} == {m: before[m] for m in MARTS}
    assert published_keys(instance, plan.plan_id) == []


@pytest.mark.slow
def test_one_dbt_invocation_builds_every_grain_where_one_window_is_whole_partitions_of_each(
    defs, instance, wh, tmp_path
):
    def invocations(d: dg.Definitions, start: dt.date, end: dt.date) -> Any:
        plan = make_plan(d, instance, wh, start.isoformat(), end.isoformat(), approve=False)
        graph = d.resolve_asset_graph()
        return plan_invocations(plan, graph, classify(plan, graph), _config(d))

    # Two ISO weeks, the second partial: the weekly model's window is both weeks, and the daily
    # model rebuilds the rest of the second week too (from the target's live rows).
    everything = ("dim_customers", "fct_daily_revenue", "fct_weekly_revenue", "stg_orders")
    whole_weeks = (START, dt.date(2026, 1, 19))
    assert invocations(defs, START, END) == ([Invocation(everything, whole_weeks)], None)

    # The daily models start on a Wednesday (2025-01-01), inside the weekly model's first week:
    # no window is whole partitions of both, so each grain gets its own window.
    split, why = invocations(defs, dt.date(2025, 1, 1), dt.date(2025, 1, 7))
    assert why == "2024-12-30..2025-01-13 is not whole partitions of fct_daily_revenue"
    assert split == [
        Invocation(("fct_daily_revenue",), (dt.date(2025, 1, 1), dt.date(2025, 1, 8))),
        Invocation(("dim_customers", "stg_orders"), None),
        Invocation(("fct_weekly_revenue",), (dt.date(2024, 12, 30), dt.date(2025, 1, 13))),
    ]

    # An unpartitioned model that reads the window vars (here through the project's macro)
    # would build the window alone in a shared invocation: it gets one without them.
    project = _project_copy(tmp_path)
    model = project / "models" / "staging" / "stg_orders.sql"
    source = "select * from {{ source('warehouse', 'orders_daily') }}"
    model.write_text(
        model.read_text().replace(
            source, f"{source} {{{{ partition_window_filter('order_date') }}}}"
        )
    )
    from backfill_assets.example.definitions import example_definitions

    split, why = invocations(example_definitions(project), START, END)
    assert why == "stg_orders (unpartitioned) mentions a window var (min_date, max_date)"
    assert [(i.names, i.window) for i in split] == [
        (("fct_daily_revenue",), (START, END + dt.timedelta(days=1))),
        (("dim_customers", "stg_orders"), None),
        (("fct_weekly_revenue",), whole_weeks),
    ]


@pytest.mark.slow
def test_readers_never_see_the_new_target_next_to_the_old_marts(defs, instance, history_with_marts):
    """On DuckDB, around the publish: the shadow build first (dbt opens the file in its own
    process), then the reader loop in this process while the swap publishes. Before that, the
    `downstream_dbt_tests` check executed on its own, as its Execute button in the UI runs it:
    a dry run that builds, tests and drops, and changes nothing else."""
    wh = history_with_marts
    plan = make_plan(defs, instance, wh, START.isoformat(), END.isoformat())
    execute(defs, instance, wh, plan)
    before = _state(wh)
    dry = _execute_check(defs, instance)
    assert dry.success
    (result,) = dry.get_asset_check_evaluations()
    assert result.passed and result.metadata["dbt_tests"].value > 10, result  # type: ignore[operator]
    assert _state(wh) == before and _leftovers(wh) == []
    assert load_plan(instance, plan.plan_id)[1] == PlanStatus.APPROVED
    build = prepare_downstream(
        instance,
        ORDERS,
        defs.resolve_asset_graph(),
        wh,
        defs.resources["dbt"],
        _config(defs),
        _url(),
        plan.plan_id,
        lambda _: None,
    )
    assert build is not None and build.passed and len(build.companions) == 3
    assert all(c.shadow.endswith(SHADOW_SUFFIX) for c in build.companions)
    with _reading("embedded", wh):
        perform_swap(instance, ORDERS, wh, plan.plan_id, build)


def _execute_check(defs: dg.Definitions, instance: Any) -> dg.ExecuteInProcessResult:
    """The `downstream_dbt_tests` check alone, in a run of the asset job that selects only it
    (what the UI launches for a check's Execute button)."""
    key = dg.AssetCheckKey(dg.AssetKey(ORDERS.spec.shadow_name), DOWNSTREAM_CHECK)
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection={key}
    )
    token = IN_PROCESS_LOCATION.set(defs)
    try:
        return job.execute_in_process(
            instance=instance, tags=local_process_tags(), raise_on_error=False
        )
    finally:
        IN_PROCESS_LOCATION.reset(token)


def _config(defs: dg.Definitions) -> DbtDownstream:
    from backfill_assets.example.dbt import dbt_target

    return DbtDownstream(resource_key="dbt", cli_target=dbt_target)


def _url() -> str:
    import os

    from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV

    return os.environ[WAREHOUSE_ENV]


def _reader_query(backend: str, wh: Any) -> Any:
    """A reader of its own: a PostgreSQL connection, or a DuckDB connection in this process
    (DuckDB lets one process open the file; its connections share it)."""
    if backend == "postgres":
        import psycopg

        url = _url().split("?")[0]
        con = psycopg.connect(url, autocommit=True, options=f"-c search_path={wh.schema}")
        return lambda sql: con.execute(sql).fetchall()
    con = duckdb.connect(str(wh.path))
    return lambda sql: con.execute(sql).fetchall()


def test_the_example_carries_the_frameworks_shadow_macros_unchanged():
    shipped = Path("backfill_assets/dbt/backfill_assets_shadow.sql").read_text()
    assert Path("dbt_project/macros/backfill_assets_shadow.sql").read_text() == shipped


def test_without_the_shadow_macros_nothing_is_built_and_the_error_says_what_to_copy(defs):
    """A dbt project that would ignore the var would write the live models: refused first.
    (The example's real manifest, with and without the project's two macros.)"""
    from backfill_assets.service.downstream import MANIFEST_KEY, require_shadow_macros

    node = defs.resolve_asset_graph().get(dg.AssetKey("fct_daily_revenue"))
    manifest = node.metadata[MANIFEST_KEY].manifest
    require_shadow_macros(manifest, ["fct_daily_revenue"])  # the example has them
    for name in ("generate_alias_name", "source"):
        without = {
            **manifest,
            "macros": {
                k: m
                for k, m in manifest["macros"].items()
                if not (m["name"] == name and m["package_name"] == "backfill_marts")
            },
        }
        with pytest.raises(BackfillError) as refused:
            require_shadow_macros(without, ["fct_daily_revenue"])
        assert "backfill_assets/dbt/backfill_assets_shadow.sql" in str(refused.value)
        assert "--no-refresh" in str(refused.value)


@pytest.mark.backends("postgres")
@pytest.mark.slow
def test_a_swap_the_warehouse_refuses_after_the_shadow_build_leaves_no_shadow_behind(
    defs, instance, history_with_marts
):
    """On PostgreSQL a view over a mart would follow the renamed table into its backup, so the
    publish refuses; the models just built in shadow are dropped with the refusal."""
    wh = history_with_marts
    plan = make_plan(defs, instance, wh, START.isoformat(), END.isoformat())
    execute(defs, instance, wh, plan)
    wh.execute("create view revenue_report as select * from fct_daily_revenue")
    before = _state(wh)

    swap = swap_or_rollback(defs, instance, wh, plan.plan_id)
    assert not swap.success
    assert "revenue_report" in refused_message(swap)
    assert _state(wh) == before
    assert _leftovers(wh) == []
    assert load_plan(instance, plan.plan_id)[1] == PlanStatus.APPROVED
