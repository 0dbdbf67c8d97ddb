"""PostgreSQL adapter: the target is one table partitioned by range, one partition per ISO week.

Layout for a table `orders_daily` (in the URL's schema, `public` unless `?schema=` says otherwise):

- `orders_daily`: `PARTITION BY RANGE (order_date)`, one ordinary table readers query (partition
  pruning on the date, no view); non-unique indexes on the primary key columns and on the date.
- `orders_daily__y2026`: its partition for ISO year 2026, partitioned by range in turn, so that
  attaching or detaching a week changes one year's list of weeks, whatever the history.
- `orders_daily__w2026w03`: the partition of that year for ISO week 2026-W03, with a CHECK
  constraint equal to the partition bound (so DETACH/ATTACH never needs a validation scan).
- `orders_daily__shadow` and its partitions `orders_daily__shadow__w2026w03`: what a backfill
  writes, built the same way.
- `orders_daily__backup__<plan>__w2026w03`: live weeks a swap detached, until released.
- `<companion>__bfb_<plan>`: a downstream table (companion) the swap replaced with its shadow, in
  the same transaction, until released (`base.companion_backup`).

A swap is one transaction for every week of the plan: copy the days of a partial week that lie
outside the plan from the live week into the shadow week, then DETACH the live week and rename it
to the backup, DETACH the shadow week from the shadow, rename it and ATTACH it to its year.
Nothing is copied but those outside days; the checksums it reports were recorded when the rows
were written. DETACH takes an ACCESS EXCLUSIVE lock on the week's year table, so its readers
wait for the catalog changes (milliseconds) and the swap waits for running readers: each attempt
waits at most `swap_lock_wait_s` for its locks (so a long reader does not hold every new reader
behind the swap's queued lock), and attempts repeat until `lock_timeout_s`, then the swap fails
with the sessions that held the table and nothing changed. Rollback is the reverse.

`backfill_meta` holds per-partition versions (with the rows and checksum written), the shadow
build log, the swap log, the writer lease and the plan claim of each table, keyed by
`schema.table`; the swap checks versions under row locks in the transaction of its renames.

The adapter is cut by concern: `connection` (connections, transactions, the hooks), `meta` (the
metadata tables, versions, checksums), `layout` (the target's relations), `writes` (partition
writes, plain tables, reads), `swap` (swap, rollback, release, abandon), `gates` (the gates'
reads), `adopt` (an existing table read and recorded) and `convert` (a plain table adopted by
converting it online). What every engine shares (leases, plan claims and records, the version
check, names, the diff) is `lib/warehouse/shared`.
"""

from __future__ import annotations

from backfill_assets.lib.warehouse.postgres.convert import PostgresConvert
from backfill_assets.lib.warehouse.postgres.writes import PostgresWrites
from backfill_assets.lib.warehouse.shared.diffing import Differ


class PostgresWarehouse(PostgresWrites, PostgresConvert, Differ):
    """The PostgreSQL warehouse: one schema of one database."""


__all__ = ["PostgresWarehouse"]
