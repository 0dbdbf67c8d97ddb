"""DuckDB adapter: the target is one plain table; a swap publishes week tables over it.

Layout for a table `orders_daily` (all in schema main):

- `orders_daily`: a table holding every live row, what readers query, while no swap of an
  unreleased plan overrides a week. The daily write appends each day in key order.
- After a swap, until its release or rollback: `orders_daily` is a view over `orders_daily__base`
  (the table above, renamed) without the rows of the swapped weeks, UNION ALL the week tables
  `orders_daily__w2026w03` the swap published (explicit column list).
- `orders_daily__template`: empty, holds the schema.
- `orders_daily__shadow__w2026w03` and view `orders_daily__shadow`: what a backfill writes.
- `orders_daily__backup__<plan>__w2026w03`: a week table a swap replaced (a week that already had
  one), until released.
- `<companion>__bfb_<plan>`: a downstream relation (companion) the swap replaced with its shadow,
  in the same transaction, until released (`base.companion_backup`).

A swap renames shadow -> live for every week of the plan in one transaction (pointer moves, no
row copies except the few days of a partial first/last week that lie outside the plan): the
replaced rows stay in the base table, hidden by the view, as the backup. Rollback drops the
published week tables. Neither reads the rows it moves: each write records the rows and
checksum of every day it wrote, and the swap reports those. Release folds the plan's week tables
into the base table, which takes the target's name again. `backfill_meta` holds per-partition
write versions (with those rows and checksums), the shadow's build log and the swap log, so a
swap can refuse when the live partition changed after its shadow was built; and the writer lease
and plan claim of each table, changed by compare-and-set in one transaction (DuckDB lets one
process write the file at a time, so each transaction is atomic across processes).

The adapter is cut by concern: `connection` (the file, sessions, transactions), `meta` (the
metadata tables, versions, checksums, fingerprints), `layout` (the target's relations), `writes`
(partition writes, plain tables, reads), `swap` (swap, rollback, release, abandon), `gates` (the
gates' reads) and `adopt` (an existing table brought under the framework in place). What every
engine shares (leases, plan claims and records, the version check, names, the diff) is
`lib/warehouse/shared`.
"""

from __future__ import annotations

from backfill_assets.lib.warehouse.duckdb.adopt import DuckDBAdopt
from backfill_assets.lib.warehouse.duckdb.swap import DuckDBSwap
from backfill_assets.lib.warehouse.duckdb.writes import DuckDBWrites
from backfill_assets.lib.warehouse.shared.diffing import Differ


class DuckDBWarehouse(DuckDBWrites, DuckDBSwap, DuckDBAdopt, Differ):
    """The DuckDB warehouse: one file (DuckDB allows one writing process per file)."""


__all__ = ["DuckDBWarehouse"]
