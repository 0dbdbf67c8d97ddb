"""Open the warehouse a URL names: a DuckDB file path (the embedded default) or, once its adapter
lands, a `postgresql://` URL."""

from __future__ import annotations

from backfill_assets.errors import InvalidInput
from backfill_assets.lib.warehouse.base import Warehouse

WAREHOUSE_ENV = "BACKFILL_ASSETS_WAREHOUSE"
LOCK_TIMEOUT_ENV = "BACKFILL_ASSETS_LOCK_TIMEOUT_S"
DEFAULT_LOCK_TIMEOUT_S = 30.0


def lock_timeout_from(text: str | None, default: float = DEFAULT_LOCK_TIMEOUT_S) -> float:
    """Seconds to wait for a warehouse another process holds (BACKFILL_ASSETS_LOCK_TIMEOUT_S)."""
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"{LOCK_TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if not 0 < value <= 24 * 3600:
        raise InvalidInput(f"{LOCK_TIMEOUT_ENV}={text!r} must be between 0 and 86400 seconds")
    return value


def open_warehouse(url: str, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Warehouse:
    """The adapter for `url`."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput(
            f"no warehouse: set {WAREHOUSE_ENV} to a DuckDB file path or a postgresql:// URL"
        )
    if url.startswith(("postgresql://", "postgres://")):
        raise InvalidInput(
            f"{WAREHOUSE_ENV} names a PostgreSQL warehouse, but this version has no PostgreSQL "
            "adapter; use a DuckDB file path"
        )
    from backfill_assets.lib.warehouse.duckdb_adapter import DuckDBWarehouse

    return DuckDBWarehouse(url, lock_timeout_s=lock_timeout_s)
