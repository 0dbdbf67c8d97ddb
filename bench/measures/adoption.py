"""Adopting an existing table with years of history (`backfill-assets adopt`).

- DuckDB, in place: the check and the recording of every day (rows, checksum, fingerprint) and a
  runless materialization per partition, against one full scan of the same table (every column
  read and hashed). Goal: at most 2x.
- PostgreSQL, converted online: the check, the week-by-week copy beside the table, the switch of
  names, against a plain `CREATE TABLE ... AS SELECT` copy of the same table. Goal: at most
  1.5x. Meanwhile a reader in another thread counts one day's rows back to back; the longest
  wait is its slowest query minus its median one. Goal: at most 100 ms.

Each engine's table is built once (untimed), `adopt_days` days of `adopt_rows_per_day` orders
from a Monday, by plain SQL (on PostgreSQL with an index on the day, which its readers use);
each round adopts a fresh copy, into a fresh Dagster instance. Each
round waits for quiet and is measured; noisy rounds are left out (bench.harness.load).
"""

from __future__ import annotations

import datetime as dt
import shutil
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from backfill_assets.constants import METADATA_SCHEMA
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.warehouse.dialects import column_type
from backfill_assets.lib.warehouse.identifiers import column_list
from bench.harness.config import BenchContext
from bench.harness.load import (
    agree,
    agreement,
    all_noisy,
    clean_values,
    kept,
    print_noisy,
    round_load,
    summary,
)
from bench.harness.measure import goal, median

START = dt.date(2021, 1, 4)  # a Monday
DUCK_GOAL, PG_GOAL, WAIT_GOAL_MS = 2.0, 1.5, 100.0
COLS = column_list(ORDERS.spec.column_names)


def _rows_sql(days: int, per_day: int, postgres: bool) -> str:
    """`per_day` orders a day for `days` days from START, in date order."""
    end = START + dt.timedelta(days=days)
    series = (
        f"generate_series(DATE '{START}', DATE '{end}' - 1, INTERVAL '1 day')"
        if postgres
        else f"range(DATE '{START}', DATE '{end}', INTERVAL 1 DAY)"
    )
    at = "d + make_interval(secs => i % 86400)" if postgres else "d + to_seconds(i % 86400)"
    numbers = f"generate_series(0, {per_day - 1})" if postgres else f"range({per_day})"
    return (
        f"SELECT (d - DATE '2000-01-01') * 100000 + i, d, {at}, i % 5000, 'US', 'USD', 10.00, "
        "0.00, 1.00, 9.00, 1.000000, 9.00, 'placed', false FROM (SELECT CAST(g AS DATE) AS d "
        f"FROM {series} AS t(g)) AS days, {numbers} AS n(i) ORDER BY 2, 1"
    )


def _table() -> Any:
    """The example's table, its partitions starting where the history does."""
    import dagster as dg

    return replace(ORDERS, partitions_def=dg.DailyPartitionsDefinition(start_date=str(START)))


def _adopt(wh: Any, home: Path) -> float:
    """Check and adopt the table into a fresh instance at `home`; seconds."""
    import dagster as dg

    from backfill_assets.service.adopt import adopt_table, check_adoption

    table = _table()
    home.mkdir(parents=True)
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        t0 = time.perf_counter()
        check = check_adoption(instance, wh, table)
        if check.refusals:
            raise RuntimeError("; ".join(check.refusals))
        adopt_table(instance, wh, table, check=check)
        return time.perf_counter() - t0


# -- DuckDB ------------------------------------------------------------------------------------


def _duckdb(ctx: BenchContext) -> dict[str, Any]:
    import duckdb

    from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse

    size = ctx.size
    base = ctx.workdir / "adopt_base.duckdb"
    ddl = ", ".join(f"{c.name} {c.sql_type}" for c in ORDERS.spec.columns)
    con = duckdb.connect(str(base))
    con.execute(f"CREATE TABLE orders_daily ({ddl})")
    rows_sql = _rows_sql(size.adopt_days, size.adopt_rows_per_day, False)
    con.execute(f"INSERT INTO orders_daily ({COLS}) {rows_sql}")
    rows = int(con.execute("SELECT count(*) FROM orders_daily").fetchone()[0])  # type: ignore[index]
    con.close()
    scan_s, adopt_s, rounds = [], [], []
    for rnd in range(ctx.repeats):
        path = ctx.workdir / f"adopt_{rnd}.duckdb"
        shutil.copyfile(base, path)
        with ctx.load.span() as span:
            t0 = time.perf_counter()
            con = duckdb.connect(str(path), read_only=True)
            con.execute(f"SELECT count(*), bit_xor(hash({COLS})) FROM orders_daily").fetchall()
            con.close()
            scan_s.append(time.perf_counter() - t0)
            adopt_s.append(_adopt(DuckDBWarehouse(path), ctx.workdir / f"adopt_home_{rnd}"))
        rounds.append(round_load(rnd, [span]))
        print_noisy(f"adoption duckdb round {rnd + 1}", rounds[-1])
        path.unlink()
    use = kept(rounds)
    ratios = [a / s for a, s in zip(adopt_s, scan_s, strict=True)]
    ratio = median([ratios[i] for i in use])
    agreements = {"adopt/scan": agreement(clean_values(dict(enumerate(ratios)), rounds))}
    return {
        "rows": rows,
        "days": size.adopt_days,
        "full_scan_s": median([scan_s[i] for i in use]),
        "adopt_s": median([adopt_s[i] for i in use]),
        "adopt_over_scan": ratio,
        "full_scan_s_runs": scan_s,
        "adopt_s_runs": adopt_s,
        "load": summary(rounds, "measured per round (the scan, then the adoption)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
        "goals": [
            goal(
                f"duckdb adopt in place {size.adopt_days}d x {size.adopt_rows_per_day}/day / one "
                "full scan",
                ratio,
                DUCK_GOAL,
                no_verdict=all_noisy(rounds),
            )
        ],
    }


# -- PostgreSQL ----------------------------------------------------------------------------------


class _Reader:
    """One day's count, back to back, on its own connection; each query's latency."""

    def __init__(self, url: str, days: int):
        self.url, self.days = url, days
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as con:
            i = 0
            while not self._stop.is_set():
                day = START + dt.timedelta(days=i % self.days)
                t0 = time.perf_counter()
                con.execute("SELECT count(*) FROM orders_daily WHERE order_date = %s", (day,))
                self.latencies.append(time.perf_counter() - t0)
                i += 1
                time.sleep(0.005)

    def __enter__(self) -> _Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    @property
    def longest_wait_ms(self) -> float:
        if not self.latencies:
            return 0.0
        return (max(self.latencies) - statistics.median(self.latencies)) * 1000


def _postgres(ctx: BenchContext) -> dict[str, Any]:
    from backfill_assets.lib.warehouse.postgres import PostgresWarehouse
    from backfill_assets.testing.throwaway_postgres import (
        PostgresUnavailable,
        binaries_dir,
        throwaway_postgres,
    )
    from bench.harness.pg_data import PgServer, vacuum_analyze, x

    try:
        binaries_dir()
    except PostgresUnavailable as e:
        return {"status": "not run", "reason": str(e), "goals": []}
    size = ctx.size
    with throwaway_postgres() as server:
        pg = PgServer(server)
        pg.configure()
        pid = server.pid()
        ctx.load.attribute(pid, "postgresql server")
        try:
            base = pg.create("adopt_base")
            import psycopg

            ddl = ", ".join(
                f"{c.name} {column_type(c.sql_type, 'postgres')}" for c in ORDERS.spec.columns
            )
            with psycopg.connect(base, autocommit=True) as con:
                x(con, f"CREATE TABLE orders_daily ({ddl})")
                x(
                    con,
                    f"INSERT INTO orders_daily ({COLS}) "
                    + _rows_sql(size.adopt_days, size.adopt_rows_per_day, True),
                )
                # Its readers (dashboards) read it by day: it has that index, as such a table
                # does, and the reader's queries time waits, not scans.
                x(con, "CREATE INDEX orders_daily_by_day ON orders_daily (order_date)")
                row = x(con, "SELECT count(*) FROM orders_daily").fetchone()
                rows = int(row[0]) if row else 0
            vacuum_analyze(base)
            ctas_s, convert_s, waits, rounds = [], [], [], []
            for rnd in range(ctx.repeats):
                url = pg.copy("adopt_base", f"adopt_{rnd}")
                with ctx.load.span() as span:
                    with psycopg.connect(url, autocommit=True) as con:
                        t0 = time.perf_counter()
                        x(con, "CREATE TABLE orders_copy AS SELECT * FROM orders_daily")
                        ctas_s.append(time.perf_counter() - t0)
                        x(con, "DROP TABLE orders_copy")
                    with _Reader(url, size.adopt_days) as reader:
                        convert_s.append(
                            _adopt(PostgresWarehouse(url), ctx.workdir / f"adopt_pg_home_{rnd}")
                        )
                    waits.append(reader.longest_wait_ms)
                rounds.append(round_load(rnd, [span]))
                print_noisy(f"adoption postgres round {rnd + 1}", rounds[-1])
                with psycopg.connect(url, autocommit=True) as con:
                    kind = x(
                        con, "SELECT relkind FROM pg_class WHERE relname = 'orders_daily'"
                    ).fetchone()
                    assert kind and kind[0] == "p", "the conversion did not switch"
                    assert x(con, f"SELECT count(*) FROM {METADATA_SCHEMA}.adoptions").fetchone()
                pg.drop(f"adopt_{rnd}")
        finally:
            ctx.load.forget(pid)
    use = kept(rounds)
    ratios = [c / s for c, s in zip(convert_s, ctas_s, strict=True)]
    ratio = median([ratios[i] for i in use])
    agreements = {"convert/ctas": agreement(clean_values(dict(enumerate(ratios)), rounds))}
    wait = max(waits[i] for i in use) if use else max(waits)
    noisy = all_noisy(rounds)
    return {
        "rows": rows,
        "days": size.adopt_days,
        "ctas_s": median([ctas_s[i] for i in use]),
        "convert_s": median([convert_s[i] for i in use]),
        "convert_over_ctas": ratio,
        "longest_reader_wait_ms": wait,
        "ctas_s_runs": ctas_s,
        "convert_s_runs": convert_s,
        "reader_wait_ms_runs": waits,
        "load": summary(rounds, "measured per round (the copy, then the conversion)"),
        "agreement": agreements,
        "rounds_agree": agree(agreements.values()),
        "goals": [
            goal(
                f"postgres convert {size.adopt_days}d x {size.adopt_rows_per_day}/day / CREATE "
                "TABLE AS copy",
                ratio,
                PG_GOAL,
                no_verdict=noisy,
            ),
            goal(
                "postgres longest reader wait during the conversion (ms)",
                wait,
                WAIT_GOAL_MS,
                no_verdict=noisy,
            ),
        ],
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    duck = _duckdb(ctx)
    pg = _postgres(ctx)
    return {"duckdb": duck, "postgres": pg, "goals": duck["goals"] + pg.get("goals", [])}
