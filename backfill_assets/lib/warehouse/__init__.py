"""The only code that speaks SQL. DuckDB first; `base.Warehouse` is the seam for other adapters.

Nothing is imported here: `lib/spec.py` imports `identifiers` from this package, and `base`
imports `lib/spec.py`, so an eager import of `base` here made `from backfill_assets import
TableSpec`, imported first, a circular ImportError.
"""
