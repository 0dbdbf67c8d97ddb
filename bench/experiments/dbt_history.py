"""The warehouse the dbt experiments (`dbt_resource_gain`, `partial_parse_gain`) build on: four
weeks of the example's orders (2,000 a day) and their marts, in a scratch folder."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START, END = dt.date(2026, 1, 5), dt.date(2026, 2, 1)
ROWS_PER_DAY = 2_000


@contextmanager
def dbt_history(prefix: str) -> Iterator[Path]:
    """A scratch folder whose DuckDB warehouse (named by BACKFILL_ASSETS_WAREHOUSE from here on)
    holds [START, END] landed and built, orders_daily and its dbt marts, through the example's
    jobs on a test instance; yields the folder, and removes it afterwards."""
    import dagster as dg

    from backfill_assets.example.definitions import example_definitions
    from backfill_assets.example.seed import build_history, land_days
    from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
    from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse

    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        (root / "home").mkdir()
        os.environ[WAREHOUSE_ENV] = str(root / "warehouse.duckdb")
        defs = example_definitions()
        with dg.instance_for_test(temp_dir=str(root / "home")) as instance:
            land_days(defs, instance, START, END, ROWS_PER_DAY)
            build_history(defs, instance, DuckDBWarehouse(root / "warehouse.duckdb"), START, END)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
