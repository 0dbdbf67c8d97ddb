"""What every warehouse adapter shares, whatever its engine (SQLMesh's `engine_adapter/base.py`
is the model): the coordination state of `backfill_meta` (writer leases, plan claims, each plan's
record), what the swap log and the per-day versions say, the version check before a swap, the
companions' checks before a rollback, and the physical names.

An engine's adapter subclasses `WarehouseBase` and provides its hooks (`hooks.Hooks`): how to run
one statement with `$name` parameters, how to open a connection that reads the metadata or a
transaction that writes it, how rows are locked, and how a table is keyed in the metadata. The
SQL here is the same on every engine; what only one engine can do lives in its own package
(`lib/warehouse/duckdb/`, `lib/warehouse/postgres/`).
"""

from backfill_assets.lib.warehouse.shared.adapter import WarehouseBase

__all__ = ["WarehouseBase"]
