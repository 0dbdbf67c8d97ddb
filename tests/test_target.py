"""Writing the target: the daily path writes recent partitions idempotently; nothing else writes
the live table (the front door), and a refused backfill becomes a proposed plan."""

import datetime as dt

import dagster as dg
import pytest

from backfill_assets.constants import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.orders import ORDERS_DAILY_SQL as ORDERS_SQL
from backfill_assets.lib.states import PlanStatus
from backfill_assets.service.plans import plan_statuses
from backfill_assets.service.runs import run_job
from tests.conftest import HISTORY_END, HISTORY_START, ROWS_PER_DAY
from tests.helpers import failure_description

TODAY = dt.datetime.now(dt.UTC).date()
RECENT = TODAY - dt.timedelta(days=1)  # inside the daily job's lookback


@pytest.fixture
def recent(defs, instance, wh):
    """Source data landed for the last few days (the daily path's range)."""
    from backfill_assets.example.seed import land_days

    land_days(defs, instance, TODAY - dt.timedelta(days=5), RECENT, ROWS_PER_DAY)
    return wh


def _daily(defs, instance, day: dt.date):
    return run_job(defs, ORDERS.daily_job, instance, partition_key=day.isoformat())


@pytest.mark.slow
def test_the_daily_job_writes_a_recent_partition_and_rewriting_it_is_idempotent(
    defs, instance, recent
):
    assert _daily(defs, instance, RECENT).success
    first = recent.checksums(ORDERS.spec, RECENT, TODAY)
    assert _daily(defs, instance, RECENT).success
    assert recent.checksums(ORDERS.spec, RECENT, TODAY) == first
    assert first[RECENT].startswith(f"{ROWS_PER_DAY}:")
    # Nothing else was written: only that day is present.
    assert recent.query("select count(distinct order_date) from orders_daily") == [(1,)]
    # Dagster's row metadata: the day's rows and the whole table's.
    mat = instance.fetch_materializations(dg.AssetKey(ORDERS.key), limit=1).records[0]
    mat = mat.asset_materialization
    assert mat is not None and mat.partition == RECENT.isoformat()
    assert mat.metadata["dagster/partition_row_count"].value == ROWS_PER_DAY
    assert mat.metadata["dagster/row_count"].value == ROWS_PER_DAY


def test_a_partition_write_replaces_the_day_and_bumps_its_version(landed):
    spec = ORDERS.spec
    day = HISTORY_START + dt.timedelta(days=3)
    nxt = day + dt.timedelta(days=1)
    landed.replace_partitions(spec, day, nxt, build=ORDERS_SQL)
    v1 = landed.partition_versions(spec, day, nxt)[day]
    landed.replace_partitions(spec, day, nxt, build=ORDERS_SQL)
    assert landed.partition_versions(spec, day, nxt)[day] > v1
    assert landed.query("select count(*) from orders_daily") == [(ROWS_PER_DAY,)]


def test_the_fixed_logic_changes_only_fx_columns_of_cross_border_orders(landed):
    from backfill_assets.example import orders as o

    spec = ORDERS.spec
    day = HISTORY_START + dt.timedelta(days=3)
    nxt = day + dt.timedelta(days=1)
    landed.replace_partitions(spec, day, nxt, build=o.ORDERS_DAILY_SQL_V1)
    landed.replace_partitions(spec, day, nxt, build=ORDERS_SQL, shadow=True, plan_id="ptest")
    rows = landed.query(
        "select count(*) filter (where s.fx_rate <> t.fx_rate), "
        "count(*) filter (where s.currency <> c.currency), "
        "count(*) filter (where s.gross_amount <> t.gross_amount) "
        "from orders_daily__shadow s join orders_daily t using (order_id) "
        "join country_currency c on c.country = s.country"
    )
    changed, cross_border, other = rows[0]
    assert changed > 0
    assert changed <= cross_border  # only orders paid in a foreign currency
    assert other == 0


@pytest.mark.parametrize("bad", ["2026-13-01", "not-a-date", "2026-02-30"])
def test_a_malformed_partition_key_is_refused_before_anything_is_written(
    defs, instance, landed, bad
):
    before = len(instance.get_runs())
    with pytest.raises(Exception, match=r"(?i)partition|not a"):
        run_job(defs, ORDERS.daily_job, instance, partition_key=bad)
    assert len(instance.get_runs()) == before
    assert landed.query(
        "select count(*) from duckdb_tables() where table_name like 'orders_daily__w%'"
    ) == [(0,)]


def _backfill_of_the_target(defs, instance, start: dt.date, end: dt.date):
    """What the UI's Materialize... over a range launches: one run of the target asset alone,
    with Dagster's range tags (single-run backfill policy)."""
    return run_job(
        defs,
        "",
        instance,
        asset_selection=[dg.AssetKey(ORDERS.key)],
        tags={
            PARTITION_RANGE_START_TAG: start.isoformat(),
            PARTITION_RANGE_END_TAG: end.isoformat(),
        },
        raise_on_error=False,
    )


def test_a_backfill_of_the_target_writes_nothing_and_proposes_a_plan_for_its_range(
    defs, instance, history, tables
):
    # Regression: a UI backfill of orders_daily over 14 past days rewrote the live table
    # directly (no plan, shadow, gates or backup) and succeeded.
    start, end = dt.date(2026, 1, 5), dt.date(2026, 1, 18)
    before = history.checksums(ORDERS.spec, HISTORY_START, HISTORY_END + dt.timedelta(days=1))
    result = _backfill_of_the_target(defs, instance, start, end)
    assert not result.success
    why = failure_description(result)
    assert "Refused" in why and "Nothing was written" in why
    assert "only its daily path (orders_daily_job)" in why
    after = history.checksums(ORDERS.spec, HISTORY_START, HISTORY_END + dt.timedelta(days=1))
    assert after == before
    proposed = {pid: status for pid, (_, status) in plan_statuses(instance, ORDERS.key).items()}
    assert list(proposed.values()) == [PlanStatus.PROPOSED]
    plan_id = next(iter(proposed))
    assert f"Plan {plan_id} (proposed) covers that range instead" in why
    assert f"approve_backfill_job (plan_id: {plan_id})" in why
    from backfill_assets.service.plans import load_plan

    plan, _ = load_plan(instance, plan_id, allow_proposed=True)
    assert (plan.start, plan.end) == (start, end)
    assert plan.window.label == ORDERS.backfill_window
    assert {i.asset_key for i in plan.impact} >= {"fct_daily_revenue", "stg_orders"}


def test_the_daily_job_over_old_days_is_refused_too(defs, instance, history):
    before = history.checksums(ORDERS.spec, HISTORY_START, HISTORY_END + dt.timedelta(days=1))
    result = run_job(
        defs, ORDERS.daily_job, instance, partition_key="2026-01-08", raise_on_error=False
    )
    assert not result.success
    assert "backfill territory" in failure_description(result)
    assert (
        history.checksums(ORDERS.spec, HISTORY_START, HISTORY_END + dt.timedelta(days=1)) == before
    )
