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
from backfill_assets.lib.warehouse.postgres_adapter import PostgresWarehouse

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
    from backfill_assets.example.throwaway_postgres import _free_port

    wh = open_warehouse(f"postgresql://postgres@127.0.0.1:{_free_port()}/nope", lock_timeout_s=2)
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
