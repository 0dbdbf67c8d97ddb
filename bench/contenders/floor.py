"""(a) floor: the v2 transform as plain SQL, one DELETE+INSERT…SELECT transaction per ISO week.

No orchestration, no shadow, no gates, no backup: the least work that still rewrites the range
week by week. Everything else is measured as a multiple of this.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import duckdb

from backfill_assets.lib.dates import iso_weeks
from bench.harness import plain


def run_floor(path: Path, start: dt.date, end: dt.date) -> dict[str, Any]:
    weeks = 0
    with duckdb.connect(str(path)) as con:
        for w0, w1 in iso_weeks(start, end):
            plain.replace_range(con, w0, w1)
            weeks += 1
    return {"transactions": weeks}
