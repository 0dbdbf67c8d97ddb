"""What readers pay for the DuckDB target's layout, three layouts side by side: an experiment
behind docs/architecture.md ("Readers and the layout"), not a measure of `make bench`.

    python -m bench.experiments.layout_options [--workdir DIR]

18.3M synthetic orders (10k a day, 261 ISO weeks) in one DuckDB file, three ways: a plain
table in date order; a view over one table per ISO week (the target's earlier layout); and a
view over one table per closed ISO year plus the last 52 weeks as week tables (closed years
compacted).
Four queries, each timed 15 times after one untimed run, medians: one recent day's count, one
old day's count, the last 90 days' revenue by day, a full-scan aggregate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

START = dt.date(2021, 11, 29)  # a Monday
WEEKS = 261
ROWS_PER_DAY = 10_000
REPS = 15


def build(path: Path) -> None:
    import duckdb

    con = duckdb.connect(str(path))
    con.execute(
        f"CREATE TABLE plain AS SELECT (d * 100000 + i)::BIGINT AS order_id, "
        f"(DATE '{START}' + d::INT) AS order_date, (i % 50)::VARCHAR AS country, "
        "round(random() * 100, 2)::DECIMAL(12, 2) AS net "
        f"FROM range(0, {WEEKS * 7}) r(d), range(0, {ROWS_PER_DAY}) s(i) ORDER BY order_date"
    )
    weeks = []
    for w in range(WEEKS):
        w0 = START + dt.timedelta(weeks=w)
        name = f"w{w:03d}"
        con.execute(
            f"CREATE TABLE {name} AS SELECT * FROM plain WHERE order_date >= DATE '{w0}' "
            f"AND order_date < DATE '{w0 + dt.timedelta(days=7)}'"
        )
        weeks.append((w0, name))
    con.execute(
        "CREATE VIEW by_week AS " + " UNION ALL ".join(f"SELECT * FROM {n}" for _, n in weeks)
    )
    closed, recent = weeks[:-52], weeks[-52:]
    years: dict[int, list[str]] = {}
    for w0, name in closed:
        years.setdefault(w0.isocalendar()[0], []).append(name)
    for year, names in years.items():
        con.execute(
            f"CREATE TABLE y{year} AS " + " UNION ALL ".join(f"SELECT * FROM {n}" for n in names)
        )
    parts = [f"SELECT * FROM y{y}" for y in years] + [f"SELECT * FROM {n}" for _, n in recent]
    con.execute("CREATE VIEW by_year_then_week AS " + " UNION ALL ".join(parts))
    con.close()
    print(f"{WEEKS} week tables; {len(years)} year tables + {len(recent)} week tables")


def measure(path: Path) -> None:
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    last = START + dt.timedelta(weeks=WEEKS) - dt.timedelta(days=1)
    recent, old = last - dt.timedelta(days=40), START + dt.timedelta(days=400)
    since = last - dt.timedelta(days=90)
    queries = {
        "one recent day's count": f"SELECT count(*) FROM {{r}} WHERE order_date = '{recent}'",
        "one old day's count": f"SELECT count(*) FROM {{r}} WHERE order_date = '{old}'",
        "last 90 days by day": (
            f"SELECT order_date, sum(net) FROM {{r}} WHERE order_date > '{since}' GROUP BY 1"
        ),
        "full-scan aggregate": "SELECT country, sum(net) FROM {r} GROUP BY 1",
    }
    print("| query | plain | by week | closed years + 52 weeks |")
    print("|---|---:|---:|---:|")
    for label, sql in queries.items():
        ms = []
        for relation in ("plain", "by_week", "by_year_then_week"):
            q = sql.format(r=relation)
            con.execute(q).fetchall()
            times = []
            for _ in range(REPS):
                t0 = time.perf_counter()
                con.execute(q).fetchall()
                times.append(time.perf_counter() - t0)
            ms.append(sorted(times)[REPS // 2] * 1000)
        print(
            f"| {label} | {ms[0]:.2f} ms | {ms[1]:.2f} ms ({ms[1] / ms[0]:.1f}x) | "
            f"{ms[2]:.2f} ms ({ms[2] / ms[0]:.1f}x) |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--workdir", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        path = Path(tmp) / "layouts.duckdb"
        build(path)
        measure(path)


if __name__ == "__main__":
    main()
