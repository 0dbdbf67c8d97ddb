"""Test data: generated once per size into template DuckDB files, copied for every contender.

Generating 200k orders/day x 90 days takes far longer than copying the file, and a copy gives
every contender byte-identical input. The raw source is generated once; the plain and the weekly
(backfill_assets layout) targets are both built from copies of it with the buggy v1 SQL, so the
backfill (v2) really changes `fx_rate` and `net_revenue_usd` on ~15% of rows.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from functools import cached_property
from pathlib import Path

import duckdb

from backfill_assets.example import orders as o
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from bench.harness import plain
from bench.harness.config import BenchContext, Size


def load_sources(path: Path, start: dt.date, end: dt.date, rows_per_day: int) -> None:
    """raw_orders for [start, end) plus the FX reference tables, through the project's loaders."""
    wh = DuckDBWarehouse(path)
    wh.replace_reference_table(
        o.FX_RATES, [("currency", "VARCHAR"), ("rate_to_usd", "DOUBLE")], o.RATES_TO_USD
    )
    wh.replace_reference_table(
        o.COUNTRY_CURRENCY, [("country", "VARCHAR"), ("currency", "VARCHAR")], o.COUNTRIES
    )
    wh.replace_plain_partitions(
        o.RAW_ORDERS,
        o.RAW_ORDER_COLUMNS,
        "order_date",
        o.RAW_ORDERS_SQL,
        start,
        end,
        {"n": rows_per_day},
    )
    checkpoint(path)


def checkpoint(path: Path) -> None:
    """Fold the WAL into the file, so copying the one file copies everything."""
    with duckdb.connect(str(path)) as con:
        con.execute("CHECKPOINT")


def fresh_copy(template: Path, dst: Path) -> Path:
    """A private copy of a template (any leftover copy and its WAL removed first)."""
    remove_db(dst)
    shutil.copyfile(template, dst)
    return dst


def remove_db(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)


class Templates:
    """Lazily built template files for one size; each is built at most once per run."""

    def __init__(self, ctx: BenchContext):
        self.size: Size = ctx.size
        self.dir = ctx.workdir / "templates"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.build_seconds: dict[str, float] = {}

    def _timed(self, name: str, t0: float) -> None:
        self.build_seconds[name] = round(time.perf_counter() - t0, 2)

    @cached_property
    def raw(self) -> Path:
        t0 = time.perf_counter()
        path = self.dir / "raw.duckdb"
        remove_db(path)
        load_sources(path, self.size.start, self.size.end, self.size.rows_per_day)
        self._timed("raw", t0)
        return path

    @cached_property
    def plain(self) -> Path:
        """raw + a single plain `orders_daily` table holding the range, built by v1."""
        t0 = time.perf_counter()
        path = fresh_copy(self.raw, self.dir / "plain.duckdb")
        with duckdb.connect(str(path)) as con:
            plain.create_table(con)
            plain.replace_range(con, self.size.start, self.size.end, o.ORDERS_DAILY_SQL_V1)
            con.execute("CHECKPOINT")
        self._timed("plain", t0)
        return path

    @cached_property
    def weekly(self) -> Path:
        """raw + `orders_daily` in backfill_assets' layout (a table per ISO week behind a view)."""
        from backfill_assets.example.declaration import ORDERS

        t0 = time.perf_counter()
        path = fresh_copy(self.raw, self.dir / "weekly.duckdb")
        # As the daily job writes it: with the fingerprints its gates compare, recorded.
        DuckDBWarehouse(path).replace_partitions(
            ORDERS.spec,
            self.size.start,
            self.size.end,
            build=o.ORDERS_DAILY_SQL_V1,
            fingerprint=ORDERS.criteria.fingerprint_columns,
        )
        checkpoint(path)
        self._timed("weekly", t0)
        return path

    @cached_property
    def expected_checksum(self) -> str:
        """What `orders_daily` must hold over the range after a correct v2 backfill."""
        with duckdb.connect(str(self.raw), read_only=True) as con:
            return plain.build_checksum(con, self.size.start, self.size.end)
