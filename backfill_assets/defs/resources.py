"""Resources of the framework. Paths and URLs come from config or environment variables read at
run time, never at import."""

from __future__ import annotations

import os

import dagster as dg
from pydantic import Field

from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.lib.warehouse.connect import (
    LOCK_TIMEOUT_ENV,
    WAREHOUSE_ENV,
    lock_timeout_from,
    open_warehouse,
)


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse the backfillable tables live in. `adapter()` is the only way code reaches
    SQL."""

    url: str = Field(description="A DuckDB file path, or a postgresql:// URL.")
    lock_timeout_s: float | None = Field(
        default=None,
        description="Seconds to wait for a warehouse another process holds; default: "
        f"{LOCK_TIMEOUT_ENV}, else 30.",
    )

    def adapter(self) -> Warehouse:
        timeout = (
            self.lock_timeout_s
            if self.lock_timeout_s is not None
            else lock_timeout_from(os.environ.get(LOCK_TIMEOUT_ENV))
        )
        return open_warehouse(self.url, timeout)


# One object shared by every `backfill_definitions` call that does not pass its own, so that
# merging the results of two calls finds the same resource, not a conflict.
DEFAULT_WAREHOUSE = WarehouseResource(url=dg.EnvVar(WAREHOUSE_ENV))
