"""Executing a plan: shadow writes, per-batch gates, refusals, atomic swap with backup, rollback.

Real Dagster instance, real runs, a real DuckDB file or PostgreSQL server. The whole story with
the dbt marts built in shadow and published with the target is tests/test_downstream.py's.
"""

import datetime as dt

import dagster as dg
import pytest

from backfill_assets.constants import BATCH_TAG, GATE_NAMES, PLAN_ID_TAG, shadow_job
from backfill_assets.errors import GateFailed, SwapRefused
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.orders import ORDERS_DAILY_SQL as ORDERS_SQL
from backfill_assets.service.executor import batch_done
from backfill_assets.service.runs import run_job
from backfill_assets.service.swap import perform_swap
from tests.conftest import HISTORY_END, HISTORY_START, make_plan
from tests.helpers import execute, refused_message, swap_or_rollback

pytestmark = pytest.mark.backends("embedded", "postgres")
SPEC = ORDERS.spec
# 2026-01-03..2026-01-17: batch 1 = Sat-Sun of ISO week 1, batch 2 = week 2, batch 3 = week 3.
START, END = dt.date(2026, 1, 3), dt.date(2026, 1, 17)
BAD_DAY = dt.date(2026, 1, 7)  # in batch 2


def _checksums(wh):
    return wh.checksums(SPEC, HISTORY_START, HISTORY_END + dt.timedelta(days=1))


def test_gates_are_recorded_per_partition_with_readable_metadata(defs, instance, history):
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan, max_batches=2)
    keys = [dg.AssetCheckKey(dg.AssetKey(plan.shadow), g) for g in GATE_NAMES]
    infos = instance.event_log_storage.get_asset_check_partition_info(keys)
    recorded = {(i.check_key.name, i.partition_key) for i in infos if i.partition_key}
    expected = {(g, pk) for g in GATE_NAMES for b in plan.batches[:2] for pk in b.partitions}
    assert recorded == expected
    run = instance.get_runs(filters=dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}), limit=1)[0]
    evaluations = [
        e.dagster_event.event_specific_data
        for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        if e.dagster_event
    ]
    sample = [
        v
        for v in evaluations
        if isinstance(v, dg.AssetCheckEvaluation) and v.check_name == "sample_gate" and v.partition
    ]
    assert len(sample) == 7  # one per partition of the week
    assert {"sampled_rows", "mismatch_rate", "fingerprint_equal"} <= set(sample[0].metadata)


@pytest.mark.backends("embedded")
def test_a_batch_opens_the_warehouse_once_for_its_write_and_its_gates(
    defs, instance, history, monkeypatch
):
    """The batch's write and gates share one opening of the DuckDB file (a session): opening it
    loads the catalog, and closing it drops the buffers holding the week the gates read."""
    import sys

    import duckdb

    real = duckdb.connect
    openers: list[list[str]] = []

    def connect(database: object = ":memory:", *args: object, **kwargs: object) -> object:
        if str(database) == history.path:
            frame, names = sys._getframe(1), []
            while frame is not None:
                names.append(frame.f_code.co_name)
                frame = frame.f_back
            openers.append(names)
        return real(database, *args, **kwargs)  # type: ignore[arg-type]

    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    monkeypatch.setattr(duckdb, "connect", connect)
    reports = execute(defs, instance, history, plan, max_batches=1)
    monkeypatch.undo()
    assert [r.status for r in reports] == ["passed"]
    in_batch = [names for names in openers if "shadow" in names]  # the batch's op
    assert [names for names in in_batch if "session" in names] != []
    assert [n for n in in_batch if "replace_partitions" in n or "gate_inputs" in n] == []


CORRUPTIONS = {
    # name: (SQL planted into the source of BAD_DAY, the gate that must catch it)
    "missing_row": (
        "delete from raw_orders where order_id = (select min(order_id) from raw_orders "
        "where order_date = $d)",
        "row_count_gate",
    ),
    "duplicated_key": (
        "insert into raw_orders select * from raw_orders where order_date = $d "
        "order by order_id limit 1",
        "row_count_gate",
    ),
    "changed_unchanged_column": (
        "update raw_orders set amount = amount + 1 where order_date = $d and order_id % 10 = 0",
        "sample_gate",
    ),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_planted_corruption_fails_its_gate_halts_the_plan_and_the_swap_refuses(
    defs, instance, history, corruption
):
    sql, gate = CORRUPTIONS[corruption]
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    history.execute(sql, {"d": BAD_DAY})
    before = _checksums(history)

    with pytest.raises(GateFailed) as failed:
        execute(defs, instance, history, plan)
    assert f"{BAD_DAY} {gate}" in str(failed.value)
    assert "halted at batch 2" in str(failed.value)
    # Batch 3 never started.
    batch_runs = instance.get_runs(filters=dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}))
    assert sorted(r.tags["backfill_assets/batch"] for r in batch_runs) == ["1", "2"]

    swap = swap_or_rollback(defs, instance, history, plan.plan_id)
    assert not swap.success
    assert "cannot be swapped" in refused_message(swap)
    assert f"{BAD_DAY} {gate} failed" in refused_message(swap)
    assert _checksums(history) == before


def test_a_failed_sample_gate_shows_the_mismatching_rows(defs, instance, history):
    sql, _ = CORRUPTIONS["changed_unchanged_column"]
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    history.execute(sql, {"d": BAD_DAY})
    with pytest.raises(GateFailed):
        execute(defs, instance, history, plan)
    info = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(dg.AssetKey(plan.shadow), "sample_gate")],
        partition_filter=None,
    )
    assert info  # the check ran
    from backfill_assets.service.executor import run_failures

    runs = instance.get_runs(filters=dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}), limit=1)
    failure = next(f for f in run_failures(instance, runs[0].run_id) if f.gate == "sample_gate")
    assert failure.metadata["mismatch_rate"] > 0
    table = failure.metadata["mismatching_rows"]  # a Markdown table: key, then what is wrong
    header = table.splitlines()[0]
    assert "gross_amount" in header and "target_gross_amount" in header
    assert "customer_id" not in header  # columns that match are left out


@pytest.mark.slow
def test_re_running_a_halted_plan_after_the_fix_redoes_only_what_did_not_pass(
    defs, instance, history
):
    from backfill_assets.example.seed import land_days

    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    history.execute(CORRUPTIONS["changed_unchanged_column"][0], {"d": BAD_DAY})
    with pytest.raises(GateFailed):
        execute(defs, instance, history, plan)
    land_days(defs, instance, BAD_DAY, BAD_DAY, 300)  # the fix: the source day re-landed
    reports = execute(defs, instance, history, plan)
    assert [r.status for r in reports] == ["skipped (already passed)", "passed", "passed"]
    # The target alone (no dbt build in shadow): the swap with its marts is test_downstream's.
    assert swap_or_rollback(defs, instance, history, plan.plan_id, downstream=False).success


def test_swap_refuses_when_one_partition_was_never_checked(defs, instance, history):
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan, max_batches=2)
    before = _checksums(history)
    table = ORDERS
    with pytest.raises(SwapRefused, match=r"2026-01-12 row_count_gate not run"):
        perform_swap(instance, table, history, plan.plan_id)
    assert _checksums(history) == before


def test_swap_refuses_when_a_partition_was_rewritten_after_its_check(defs, instance, history):
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan)
    table = ORDERS
    # A write of the shadow recorded after its gates (e.g. by an external process).
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=plan.shadow, partition="2026-01-08")
    )
    before = _checksums(history)
    with pytest.raises(SwapRefused, match=r"2026-01-08 \w+_gate stale"):
        perform_swap(instance, table, history, plan.plan_id)
    assert _checksums(history) == before


def test_the_plan_of_each_latest_shadow_write_is_read_from_its_data_version(
    defs, instance, history
):
    """The gates read which plan wrote each partition's latest shadow write from its data
    version, `plan <id>` (one indexed read for a whole plan); a write without one (made before
    shadow writes carried it, or by anything else) is read from its metadata."""
    from backfill_assets.service.gating import latest_writers, shadow_writers

    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan)
    shadow = dg.AssetKey(plan.shadow)
    latest: dict[str, int] = {}
    for rec in instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=shadow, asset_partitions=list(plan.partitions)), limit=999
    ).records:  # newest first
        latest.setdefault(str(rec.partition_key), rec.storage_id)
    assert len(latest) == len(plan.partitions)
    assert latest_writers(instance, plan.shadow, latest) == {
        i: plan.plan_id for i in latest.values()
    }
    # A write by something else that names the plan in its metadata, and has no data version.
    day = plan.partitions[3]
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=shadow, partition=day, metadata={"plan_id": plan.plan_id})
    )
    (newest,) = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=shadow, asset_partitions=[day]), limit=1
    ).records
    assert latest_writers(instance, plan.shadow, {day: newest.storage_id}) == {}
    assert shadow_writers(instance, plan.shadow, [newest.storage_id]) == {
        newest.storage_id: plan.plan_id
    }
    # Asked about the write before it, the index answers as of that write, not the newest one.
    assert latest_writers(instance, plan.shadow, {day: latest[day]}) == {latest[day]: plan.plan_id}


def test_a_plans_own_evaluations_are_looked_for_only_in_its_runs_of_those_days(
    defs, instance, history, monkeypatch
):
    """When a day's latest gate evaluation is another plan's (a new plan over days an earlier
    plan checked), the plan's own is looked for in its runs: only in those whose partition
    tags hold that day, not in every run of the plan."""
    from backfill_assets.service import gating

    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan)
    runs = [
        r.dagster_run
        for r in instance.get_run_records(dg.RunsFilter(tags={PLAN_ID_TAG: plan.plan_id}))
    ]
    assert len(runs) == len(plan.batches) >= 3
    read: list[str] = []
    real = instance.all_logs

    def counted(run_id, *args, **kwargs):
        read.append(run_id)
        return real(run_id, *args, **kwargs)

    monkeypatch.setattr(instance, "all_logs", counted)
    day = plan.batches[1].partitions[0]
    found = gating._from_runs(instance, runs, {(day, g) for g in GATE_NAMES})
    assert {k for k, e in found.items() if e.status == "SUCCEEDED"} == {
        (day, g) for g in GATE_NAMES
    }
    (batch_two,) = [r.run_id for r in runs if r.tags.get(BATCH_TAG) == "2"]
    assert read == [batch_two]
    # A day none of its runs wrote: nothing is read.
    read.clear()
    outside = (END + dt.timedelta(days=30)).isoformat()
    assert gating._from_runs(instance, runs, {(outside, GATE_NAMES[0])}) == {}
    assert read == []


def test_a_shadow_run_outside_the_plan_is_refused_and_the_swap_still_holds(defs, instance, history):
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan)
    shadow_before = history.checksums(SPEC, START, END + dt.timedelta(days=1), shadow=True)
    # Regression: a hand-launched run of the shadow job without the plan's tag re-wrote one day,
    # leaving the plan's shadow to be caught by the swap only. Now the shadow belongs to the plan
    # that holds the table: such a run is refused before it writes.
    result = run_job(
        defs, shadow_job("orders_daily"), instance, partition_key="2026-01-08", raise_on_error=False
    )
    assert not result.success
    assert f"tag backfill_assets/plan_id={plan.plan_id}" in refused_message(result)
    assert history.checksums(SPEC, START, END + dt.timedelta(days=1), shadow=True) == shadow_before
    assert perform_swap(instance, ORDERS, history, plan.plan_id).action == "swapped"


def test_a_shadow_run_under_the_plans_tag_for_days_outside_the_plan_is_refused(
    defs, instance, history
):
    # Regression: launched with the holding plan's tag, the shadow job wrote a day outside the
    # plan's range under that plan (2026-11-02 for a plan of 2026-10-05..10-18).
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    outside = END + dt.timedelta(days=2)
    result = run_job(
        defs,
        shadow_job("orders_daily"),
        instance,
        start=outside,
        end_inclusive=outside + dt.timedelta(days=1),
        tags={PLAN_ID_TAG: plan.plan_id},
        raise_on_error=False,
    )
    assert not result.success
    message = refused_message(result)
    assert f"covers {START}..{END}" in message and "outside it" in message
    days = history.checksums(SPEC, outside, outside + dt.timedelta(days=2), shadow=True)
    assert not days  # nothing was written to the shadow


def test_swap_refuses_when_the_daily_run_wrote_a_partition_after_its_shadow(
    defs, instance, history
):
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan)
    day = dt.date(2026, 1, 16)
    # The daily job's write.
    history.replace_partitions(SPEC, day, day + dt.timedelta(days=1), build=ORDERS_SQL)
    before = _checksums(history)
    table = ORDERS
    with pytest.raises(SwapRefused, match="written after its shadow was built for 2026-01-16"):
        perform_swap(instance, table, history, plan.plan_id)
    assert _checksums(history) == before


def test_re_running_a_batch_is_idempotent(defs, instance, history):
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan, max_batches=1)
    batch = plan.batches[0]
    first = history.checksums(SPEC, batch.start, batch.end_exclusive, shadow=True)
    from backfill_assets.service.executor import batch_tags

    assert run_job(
        defs,
        shadow_job("orders_daily"),
        instance,
        start=batch.start,
        end_inclusive=batch.end,
        tags=batch_tags(plan, batch),
    ).success
    assert history.checksums(SPEC, batch.start, batch.end_exclusive, shadow=True) == first
    assert batch_done(instance, plan, batch)


@pytest.mark.slow
def test_swap_and_rollback_are_idempotent(defs, instance, history):
    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan)
    table = ORDERS
    assert perform_swap(instance, table, history, plan.plan_id).action == "swapped"
    after = _checksums(history)
    assert perform_swap(instance, table, history, plan.plan_id).action == "already_swapped"
    assert _checksums(history) == after
    assert swap_or_rollback(defs, instance, history, plan.plan_id, "rollback").success
    # A no-op the second time.
    assert swap_or_rollback(defs, instance, history, plan.plan_id, "rollback").success


def test_backups_are_kept_until_released_and_then_rollback_refuses(defs, instance, history):
    from backfill_assets.service.swap import perform_rollback, release_backup

    plan = make_plan(defs, instance, history, START.isoformat(), END.isoformat())
    execute(defs, instance, history, plan)
    table = ORDERS
    perform_swap(instance, table, history, plan.plan_id)
    backups = (
        "select count(*) from information_schema.tables where table_schema = current_schema() "
        "and table_name like '%backup%'"
    )
    # The replaced rows of the plan's 3 weeks: PostgreSQL keeps them in backup week tables;
    # DuckDB in its base table, hidden by the view behind the swapped-in week tables.
    replaced = (
        "select count(distinct date_trunc('week', order_date)) from orders_daily__base "
        "where order_date >= $s and order_date < $e"
    )
    rng = {"s": START, "e": END}
    duck = history.dialect == "duckdb"
    assert history.query(backups) == [(0 if duck else 3,)]
    if duck:
        assert history.query(replaced, rng) == [(3,)] and history.live_week_count(table.spec) == 3
    live = _checksums(history)
    assert release_backup(instance, {"orders_daily": table}, history, plan.plan_id)[1] == 3
    assert history.query(backups) == [(0,)]
    assert _checksums(history) == live
    if duck:  # the weeks are folded into the base table, renamed back: one plain table again
        assert history.live_week_count(table.spec) == 0
        assert history.query(
            "select table_name from duckdb_tables() where table_name like 'orders_daily%' "
            "and table_name not like '%template' order by 1"
        ) == [("orders_daily",)]
    with pytest.raises(SwapRefused, match="released"):
        perform_rollback(instance, table, history, plan.plan_id)
