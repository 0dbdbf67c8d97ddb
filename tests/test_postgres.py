"""The framework on PostgreSQL: the warehouse chosen by URL, builds written once and refused at
load time when they cannot run there, and the whole runbook through Dagster with the Dagster
instance itself on PostgreSQL storage (dagster-postgres).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from backfill_assets import WarehouseResource, backfill_definitions
from backfill_assets.errors import InvalidInput
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.warehouse.connect import open_warehouse
from backfill_assets.lib.warehouse.postgres import PostgresWarehouse

D = dt.date


def test_the_warehouse_is_chosen_by_its_url(postgres_url, tmp_path):
    wh = open_warehouse(postgres_url)
    assert isinstance(wh, PostgresWarehouse) and wh.dialect == "postgres"
    assert "password" not in wh.location and wh.schema in wh.location
    assert open_warehouse(str(tmp_path / "w.duckdb")).dialect == "duckdb"
    with pytest.raises(InvalidInput, match="is not supported: use a DuckDB file path"):
        open_warehouse("mysql://x@y/z")


def test_an_unreachable_server_is_a_clear_error(tmp_path):
    from backfill_assets.errors import WarehouseError
    from backfill_assets.testing.throwaway_postgres import free_port

    wh = open_warehouse(f"postgresql://postgres@127.0.0.1:{free_port()}/nope", lock_timeout_s=2)
    with pytest.raises(WarehouseError, match=r"cannot reach warehouse .* check that the server"):
        wh.checksums(ORDERS.spec, D(2026, 1, 1), D(2026, 1, 2))


def test_a_build_that_cannot_run_on_the_configured_warehouse_is_refused_at_load(postgres_url):
    from backfill_assets.example.sources import land_fx_rates, land_raw_orders

    wh = open_warehouse(postgres_url)
    land_fx_rates(wh)
    land_raw_orders(wh, D(2026, 1, 1), D(2026, 1, 2), 10)
    resource = WarehouseResource(url=postgres_url)
    # The example's build transpiles and plans on PostgreSQL.
    backfill_definitions([ORDERS], warehouse=resource)
    # DuckDB's hash() transpiles as text but does not exist in PostgreSQL.
    assert isinstance(ORDERS.build, str)
    duck_only = ORDERS.build.replace(
        "o.customer_id,", "hash(o.customer_id)::bigint as customer_id,"
    )
    bad = dataclasses.replace(ORDERS, build=duck_only)
    refused = r"table orders_daily: its build SQL.*cannot run there: .*hash"
    with pytest.raises(InvalidInput, match=refused):
        backfill_definitions([bad], warehouse=resource)
    # The same table loads on DuckDB, and with SQL per dialect on PostgreSQL.
    backfill_definitions([bad], warehouse=WarehouseResource(url="/tmp/not-opened.duckdb"))
    per_dialect = dataclasses.replace(ORDERS, build={"duckdb": duck_only, "postgres": ORDERS.build})
    backfill_definitions([per_dialect], warehouse=resource)
    # SQL sqlglot cannot write for PostgreSQL at all is refused before any connection.
    untranslatable = "select * from t qualify row_number() over () = 1 pivot"
    with pytest.raises(InvalidInput, match="per dialect"):
        backfill_definitions(
            [dataclasses.replace(ORDERS, build=untranslatable)], warehouse=resource
        )


def test_your_own_indexes_on_the_target_are_on_the_shadow_weeks_before_the_swap(postgres_url):
    """A shadow week copies the target's indexes when it is created, so the swap's ATTACH matches
    them rather than building one inside the transaction that blocks readers."""
    from backfill_assets.example import orders as o
    from backfill_assets.example.sources import land_fx_rates, land_raw_orders

    wh = open_warehouse(postgres_url)
    land_fx_rates(wh)
    land_raw_orders(wh, D(2026, 1, 5), D(2026, 1, 12), 20)
    wh.replace_partitions(ORDERS.spec, D(2026, 1, 5), D(2026, 1, 12), build=o.ORDERS_DAILY_SQL_V1)
    wh.execute("create index orders_by_customer on orders_daily (customer_id)")

    def indexes(table: str) -> list[str]:
        rows = wh.query(
            "select indexdef from pg_indexes where schemaname = current_schema() "
            "and tablename = $t order by indexdef",
            {"t": table},
        )
        return [r[0].split(" USING ")[1] for r in rows]

    assert wh.claim_plan(ORDERS.spec.name, "pi") == "pi"
    wh.replace_partitions(
        ORDERS.spec, D(2026, 1, 5), D(2026, 1, 12), build=o.ORDERS_DAILY_SQL, shadow=True,
        plan_id="pi",
    )  # fmt: skip
    week = "orders_daily__shadow__w2026w02"
    ours = ["btree (customer_id)", "btree (order_date)", "btree (order_id)"]
    assert indexes(week) == ours
    wh.swap(ORDERS.spec, "pi", [D(2026, 1, 5) + dt.timedelta(days=i) for i in range(7)])
    assert indexes("orders_daily__w2026w02") == ours


def test_a_write_over_old_and_new_weeks_fills_each_and_indexes_the_new_ones_as_the_target(
    postgres_url,
):
    """A week that does not exist yet is loaded alone, then indexed and attached; weeks that
    exist are written through the table. A range over both writes every day once, leaves the
    days outside it alone, and each new week's indexes are partitions of the target's (so
    queries and a later ATTACH use them)."""
    from backfill_assets.example import orders as o
    from backfill_assets.example.sources import land_fx_rates, land_raw_orders

    wh = PostgresWarehouse(postgres_url)
    land_fx_rates(wh)
    land_raw_orders(wh, D(2026, 1, 5), D(2026, 1, 26), 30)
    spec = ORDERS.spec
    wh.replace_partitions(spec, D(2026, 1, 5), D(2026, 1, 8), build=o.ORDERS_DAILY_SQL_V1)
    wh.execute("create index orders_by_customer on orders_daily (customer_id)")
    before = wh.checksums(spec, D(2026, 1, 5), D(2026, 1, 8))
    # Thursday of week 2 (exists, with Mon-Wed) to Wednesday of week 4 (new): weeks 2, 3, 4.
    rows = wh.replace_partitions(spec, D(2026, 1, 8), D(2026, 1, 22), build=o.ORDERS_DAILY_SQL_V1)
    assert rows == dict.fromkeys(_days(D(2026, 1, 8), D(2026, 1, 22)), 30)
    assert wh.checksums(spec, D(2026, 1, 5), D(2026, 1, 8)) == before
    counts = wh.query(
        "select order_date, count(*), count(distinct order_id) from orders_daily "
        "group by 1 order by 1"
    )
    assert counts == [(d, 30, 30) for d in _days(D(2026, 1, 5), D(2026, 1, 22))]
    weeks = sorted(_tree(wh, "orders_daily"))
    assert weeks == [f"orders_daily__w2026w0{n}" for n in (2, 3, 4)]
    for week in weeks:
        attached = wh.query(
            "select count(*) filter (where i.inhparent is not null), count(*) from pg_index x "
            "left join pg_inherits i on i.inhrelid = x.indexrelid "
            "where x.indrelid = $t::regclass",
            {"t": f"{wh.schema}.{week}"},
        )
        assert attached == [(3, 3)], (week, attached)  # key, day, and yours


def _tree(wh: PostgresWarehouse, table: str) -> dict[str, str]:
    """Every week table under `table`, with the table it is attached to."""
    rows = wh.query(
        "select c.relname, p.relname from pg_partition_tree($t::regclass) t "
        "join pg_class c on c.oid = t.relid join pg_class p on p.oid = t.parentrelid "
        "where t.isleaf and t.level > 0",
        {"t": f"{wh.schema}.{table}"},
    )
    return dict(rows)


def _days(start: dt.date, end: dt.date) -> list[dt.date]:
    return [start + dt.timedelta(days=i) for i in range((end - start).days)]


def test_target_weeks_sit_under_their_iso_year_so_a_swap_costs_the_same_with_years_of_history(
    postgres_url,
):
    """Weeks attach to their ISO year's table (orders_daily__y2025), not to the target: a swap
    changes one year's list of weeks, whatever the history. Readers still query one table, and a
    swap and its rollback across a year boundary put every week back under its own year."""
    from backfill_assets.example import orders as o
    from backfill_assets.example.sources import land_fx_rates, land_raw_orders

    wh = open_warehouse(postgres_url)
    assert isinstance(wh, PostgresWarehouse)
    start, end = D(2025, 12, 22), D(2026, 1, 12)  # ISO weeks 2025-W52, 2026-W01, 2026-W02
    land_fx_rates(wh)
    land_raw_orders(wh, start, end, 10)
    wh.replace_partitions(ORDERS.spec, start, end, build=o.ORDERS_DAILY_SQL_V1)
    expected = {
        "orders_daily__w2025w52": "orders_daily__y2025",
        "orders_daily__w2026w01": "orders_daily__y2026",
        "orders_daily__w2026w02": "orders_daily__y2026",
    }
    assert _tree(wh, "orders_daily") == expected
    assert wh.live_week_count(ORDERS.spec) == 3
    before = wh.checksums(ORDERS.spec, start, end)

    assert wh.claim_plan(ORDERS.spec.name, "py") == "py"
    wh.replace_partitions(
        ORDERS.spec, start, end, build=o.ORDERS_DAILY_SQL, shadow=True, plan_id="py"
    )  # fmt: skip
    assert wh.swap(ORDERS.spec, "py", _days(start, end)).action == "swapped"
    assert _tree(wh, "orders_daily") == expected
    assert wh.checksums(ORDERS.spec, start, end) != before
    assert wh.query("select count(*) from orders_daily where order_date = $d", {"d": start})[0][0]
    assert wh.rollback(ORDERS.spec, "py").action == "rolled_back"
    assert _tree(wh, "orders_daily") == expected
    assert wh.checksums(ORDERS.spec, start, end) == before


def test_a_target_whose_weeks_were_attached_directly_keeps_working(postgres_url):
    """A target laid out before the ISO-year level (weeks attached to the target itself) is
    swapped and rolled back as it is: new weeks join the old ones directly, nothing is moved."""
    from backfill_assets.example import orders as o
    from backfill_assets.example.sources import land_fx_rates, land_raw_orders

    wh = open_warehouse(postgres_url)
    assert isinstance(wh, PostgresWarehouse)
    spec = ORDERS.spec
    wh.ensure_table(spec)
    week = D(2026, 1, 5)
    wh.execute(
        "create table orders_daily__w2026w02 (like orders_daily including defaults including "
        "indexes, constraint backfill_week_bound check (order_date is not null and order_date "
        ">= '2026-01-05' and order_date < '2026-01-12'))"
    )
    wh.execute(
        "alter table orders_daily attach partition orders_daily__w2026w02 "
        "for values from ('2026-01-05') to ('2026-01-12')"
    )
    land_fx_rates(wh)
    land_raw_orders(wh, week, D(2026, 1, 19), 10)
    wh.replace_partitions(spec, week, D(2026, 1, 19), build=o.ORDERS_DAILY_SQL_V1)
    flat = {"orders_daily__w2026w02": "orders_daily", "orders_daily__w2026w03": "orders_daily"}
    assert _tree(wh, "orders_daily") == flat
    before = wh.checksums(spec, week, D(2026, 1, 19))
    assert wh.claim_plan(spec.name, "pf") == "pf"
    wh.replace_partitions(
        spec, week, D(2026, 1, 19), build=o.ORDERS_DAILY_SQL, shadow=True, plan_id="pf"
    )  # fmt: skip
    assert wh.swap(spec, "pf", _days(week, D(2026, 1, 19))).action == "swapped"
    assert _tree(wh, "orders_daily") == flat
    assert wh.rollback(spec, "pf").action == "rolled_back"
    assert _tree(wh, "orders_daily") == flat
    assert wh.checksums(spec, week, D(2026, 1, 19)) == before


def test_columns_without_a_hash_function_are_checksummed_by_their_text(postgres_url):
    """Checksums and gate fingerprints hash each column with its own hash function; a type that
    has none (json here) is hashed as its text, so such a table is written, checksummed and
    gated like any other, and a change in that column changes its checksum."""
    import pandas as pd

    from backfill_assets.lib.spec import Column, TableSpec

    spec = TableSpec(
        name="events_daily",
        columns=(Column("event_id", "BIGINT"), Column("day", "DATE"), Column("payload", "JSON")),
        partition_column="day",
        primary_key=("event_id",),
    )
    wh = open_warehouse(postgres_url)
    day = D(2026, 3, 2)

    def frame(payload: str) -> pd.DataFrame:
        return pd.DataFrame(
            {"event_id": [1, 2], "day": [day, day], "payload": ['{"a": 1}', payload]}
        )

    wh.replace_partitions(spec, day, day + dt.timedelta(days=1), build=frame('{"b": 2}'))
    first = wh.checksums(spec, day, day + dt.timedelta(days=1))
    assert first[day].startswith("2:")
    wh.replace_partitions(spec, day, day + dt.timedelta(days=1), build=frame('{"b": 3}'))
    assert wh.checksums(spec, day, day + dt.timedelta(days=1)) != first


def test_a_landed_source_is_indexed_on_its_partition_column(postgres_url):
    """A source landed by day (replace_plain_partitions) gets an index on its day column when it
    is created: each landing deletes and counts days, and the gates count a batch's days."""
    from backfill_assets.example.sources import land_raw_orders

    wh = open_warehouse(postgres_url)
    land_raw_orders(wh, D(2026, 1, 5), D(2026, 1, 7), 5)
    rows = wh.query(
        "select indexdef from pg_indexes where schemaname = current_schema() "
        "and tablename = 'raw_orders'"
    )
    assert [r[0].split(" USING ")[1] for r in rows] == ["btree (order_date)"]
    assert land_raw_orders(wh, D(2026, 1, 5), D(2026, 1, 7), 5) == 10  # idempotent re-landing
