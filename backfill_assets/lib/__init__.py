"""Pure and warehouse-facing logic. Nothing here imports from backfill_assets.defs."""
