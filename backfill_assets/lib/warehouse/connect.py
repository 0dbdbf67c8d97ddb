"""Open the warehouse a URL names: a DuckDB file path (the embedded default) or a `postgresql://`
URL (`?schema=NAME` picks the schema; `public` by default)."""

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


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def dialect_of(url: str) -> str:
    """The SQL dialect of the warehouse `url` names."""
    return "postgres" if is_postgres_url(url) else "duckdb"


def open_warehouse(url: str, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Warehouse:
    """The adapter for `url`."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput(
            f"no warehouse: set {WAREHOUSE_ENV} to a DuckDB file path or a postgresql:// URL"
        )
    if is_postgres_url(url):
        try:
            from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
        except ImportError as e:
            raise InvalidInput(
                f"{WAREHOUSE_ENV} names a PostgreSQL warehouse, but psycopg is not installed: "
                f"pip install 'backfill_assets[postgres]' ({e})"
            ) from None
        return PostgresWarehouse(url, lock_timeout_s=lock_timeout_s)
    if "://" in url:
        raise InvalidInput(
            f"{WAREHOUSE_ENV}={url.split('://')[0]}://... is not supported: use a DuckDB file "
            "path or a postgresql:// URL"
        )
    from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse

    return DuckDBWarehouse(url, lock_timeout_s=lock_timeout_s)
