"""Review before the swap: what a backfill changes (diff.py)."""
