"""A small shop's warehouse, made backfillable with backfill_assets' public API alone."""
