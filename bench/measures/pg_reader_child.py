"""The reader of the blocked-readers measure, in a process of its own (no GIL shared with the
swaps it is timed against): `python -m bench.measures.pg_reader_child URL DAY [DAY ...]`.

Connects, prints READY, then queries one day after another (a short pause between) until its
stdin closes; then prints one JSON line: each query's start and end (`time.monotonic()`, the
same clock as the parent's) and any errors. Each query is planned afresh (not prepared), as an
ad-hoc or dashboard query is.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import threading
import time

import psycopg

READY = "READY"
READER_SQL = "SELECT count(*), sum(net_revenue_usd) FROM orders_daily WHERE order_date = %(d)s"
PAUSE_S = 0.003


def main(argv: list[str]) -> None:
    url, days = argv[0], [dt.date.fromisoformat(d) for d in argv[1:]]
    stop = threading.Event()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    samples: list[tuple[float, float]] = []
    errors: list[str] = []
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as con:
        threading.Thread(target=until_stdin_closes, daemon=True).start()
        print(READY, flush=True)
        i = 0
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                con.execute(READER_SQL, {"d": days[i % len(days)]}).fetchall()
            except psycopg.Error as e:  # reported: a reader must never fail during a swap
                errors.append(" ".join(str(e).split()))
            samples.append((t0, time.monotonic()))
            i += 1
            time.sleep(PAUSE_S)
    print(json.dumps({"samples": samples, "errors": errors}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
