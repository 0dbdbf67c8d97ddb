"""The dbt models build against the DuckDB file through Dagster, and their dbt tests pass.

One test, so that the history with its marts (two dbt builds through Dagster) is built once."""

import dagster as dg
import pytest

from tests.conftest import HISTORY_END, HISTORY_START, ROWS_PER_DAY


@pytest.mark.slow
def test_the_daily_and_weekly_marts_build_through_dagster_and_their_dbt_tests_pass(
    defs, instance, history_with_marts
):
    from backfill_assets.service.runs import run_job

    # The daily job's marts, over the history.
    days = (HISTORY_END - HISTORY_START).days + 1
    assert history_with_marts.query("select sum(orders) from fct_daily_revenue") == [
        (days * ROWS_PER_DAY,)
    ]
    assert history_with_marts.query("select count(*) from dim_customers")[0][0] > 0
    for model in ("stg_orders", "fct_daily_revenue", "dim_customers"):
        assert instance.get_latest_materialization_event(dg.AssetKey(model)) is not None
    # dagster-dbt records each dbt test as an asset check; every one of them passed.
    failed = [
        e
        for e in instance.all_logs(instance.get_runs()[0].run_id)
        if e.dagster_event
        and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
        and not e.dagster_event.event_specific_data.passed  # type: ignore[union-attr]
    ]
    assert failed == []

    # The weekly model builds one ISO week from the daily model.
    result = run_job(defs, "orders_weekly_marts_job", instance, partition_key="2026-01-05")
    assert result.success
    rows = history_with_marts.query(
        "select week_start, sum(orders) from fct_weekly_revenue group by all order by 1"
    )
    assert [str(r[0]) for r in rows] == ["2026-01-05"]
    assert rows[0][1] == 7 * ROWS_PER_DAY
