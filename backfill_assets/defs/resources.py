"""Resources. Paths come from config or environment variables read at run time, never import."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster_dbt import DbtCliResource, DbtProject

from backfill_assets.lib.dbt_manifest import dbt_executable
from backfill_assets.lib.warehouse.duckdb_adapter import DuckDBWarehouse

WAREHOUSE_ENV = "BACKFILL_ASSETS_WAREHOUSE"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DBT_PROJECT_DIR = PROJECT_ROOT / "dbt_project"


class WarehouseResource(dg.ConfigurableResource):
    """The embedded DuckDB warehouse (one file). `adapter()` is the only way code reaches SQL."""

    path: str
    lock_timeout_s: float = 30.0

    def adapter(self) -> DuckDBWarehouse:
        return DuckDBWarehouse(self.path, lock_timeout_s=self.lock_timeout_s)


def warehouse_resource() -> WarehouseResource:
    return WarehouseResource(path=dg.EnvVar(WAREHOUSE_ENV))


dbt_project = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)


def dbt_resource() -> DbtCliResource:
    return DbtCliResource(
        project_dir=dbt_project, profiles_dir=str(DBT_PROJECT_DIR), dbt_executable=dbt_executable()
    )
