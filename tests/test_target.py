"""Writing the target: idempotent partition writes through the daily job's own path."""

import datetime as dt

import pytest

from backfill_assets.example.declaration import ORDERS
from backfill_assets.service.runs import run_job
from tests.conftest import HISTORY_START, ROWS_PER_DAY

DAY = HISTORY_START + dt.timedelta(days=3)


def _write_one(defs, instance):
    return run_job(
        defs,
        "orders_daily_job",
        instance,
        partition_key=DAY.isoformat(),
        run_config={"ops": {"orders_daily": {"config": {"logic_version": ""}}}},
    )


def test_materialising_one_partition_twice_leaves_exactly_the_same_rows(defs, instance, landed):
    assert _write_one(defs, instance).success
    first = landed.checksums(ORDERS.spec, DAY, DAY + dt.timedelta(days=1))
    assert _write_one(defs, instance).success
    second = landed.checksums(ORDERS.spec, DAY, DAY + dt.timedelta(days=1))
    assert first == second
    assert first[DAY].startswith(f"{ROWS_PER_DAY}:")
    # Nothing else was written: only that day is present.
    assert landed.query("select count(distinct order_date) from orders_daily") == [(1,)]


def test_a_partition_write_replaces_the_day_and_bumps_its_version(landed):
    spec = ORDERS.spec
    nxt = DAY + dt.timedelta(days=1)
    landed.replace_partitions(spec, DAY, nxt)
    v1 = landed.partition_versions(spec, DAY, nxt)[DAY]
    landed.replace_partitions(spec, DAY, nxt)
    assert landed.partition_versions(spec, DAY, nxt)[DAY] > v1
    assert landed.query("select count(*) from orders_daily") == [(ROWS_PER_DAY,)]


def test_the_fixed_logic_changes_only_fx_columns_of_cross_border_orders(landed):
    spec = ORDERS.spec
    nxt = DAY + dt.timedelta(days=1)
    landed.replace_partitions(spec, DAY, nxt, build_sql=ORDERS.build_sql("1"))
    landed.replace_partitions(spec, DAY, nxt, shadow=True, plan_id="ptest")
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
        run_job(defs, "orders_daily_job", instance, partition_key=bad)
    assert len(instance.get_runs()) == before
    assert landed.query(
        "select count(*) from duckdb_tables() where table_name like 'orders_daily__w%'"
    ) == [(0,)]
