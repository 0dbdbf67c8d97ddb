"""The code location: `dagster dev` (via workspace.yaml), the CLI and the tests load `defs`."""

from __future__ import annotations

import dagster as dg

from backfill_assets.defs.control import control_definitions
from backfill_assets.defs.dbt import DBT_ASSETS
from backfill_assets.defs.driver import driver_definitions
from backfill_assets.defs.production import (
    orders_daily_job,
    orders_daily_sensor,
    orders_weekly_job,
    orders_weekly_refresh_sensor,
)
from backfill_assets.defs.resources import dbt_resource, warehouse_resource
from backfill_assets.defs.sources import fx_rates, land_orders_job, raw_orders
from backfill_assets.example.declaration import ORDERS

BACKFILLABLE_TABLES = {ORDERS.key: ORDERS}
# Built once: the batch driver's sensor must target these very shadow job objects.
TABLE_DEFINITIONS = [table.definitions() for table in BACKFILLABLE_TABLES.values()]

defs = dg.Definitions.merge(
    *TABLE_DEFINITIONS,
    control_definitions(BACKFILLABLE_TABLES),
    driver_definitions(BACKFILLABLE_TABLES, TABLE_DEFINITIONS),
    dg.Definitions(
        assets=[raw_orders, fx_rates, *DBT_ASSETS],
        jobs=[orders_daily_job, orders_weekly_job, land_orders_job],
        sensors=[orders_daily_sensor, orders_weekly_refresh_sensor],
        resources={"warehouse": warehouse_resource(), "dbt": dbt_resource()},
    ),
)
