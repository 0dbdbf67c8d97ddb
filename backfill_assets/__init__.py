"""backfill_assets: safe-by-construction backfills of daily-partitioned tables on Dagster.

Plan (no side effects) -> execute into a shadow table behind blocking gates -> swap atomically,
keeping a backup -> roll back in one step if needed.
"""

from backfill_assets.errors import (
    BackfillError,
    GateFailed,
    InvalidInput,
    PlanRefused,
    SwapRefused,
    WarehouseError,
)

__all__ = [
    "BackfillError",
    "GateFailed",
    "InvalidInput",
    "PlanRefused",
    "SwapRefused",
    "WarehouseError",
]
