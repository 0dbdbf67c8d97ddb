"""The only code that speaks SQL. DuckDB first; `Warehouse` is the seam for other adapters."""

from backfill_assets.lib.warehouse.base import PartitionStats, SwapResult, Warehouse
from backfill_assets.lib.warehouse.identifiers import quote_ident, validate_ident

__all__ = ["PartitionStats", "SwapResult", "Warehouse", "quote_ident", "validate_ident"]
