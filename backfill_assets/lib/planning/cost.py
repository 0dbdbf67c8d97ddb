"""Cost and contention estimates from warehouse stats and run history, with documented defaults.

When history is missing the plan says so in its `cost.basis` / `contention.basis` text, naming the
default used, so a reviewer can tell a measured estimate from a guess.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Defaults used when the Dagster instance has no history for this table.
DEFAULT_SECONDS_PER_ROW = 2.0e-6  # 2.0 microseconds per row written
DEFAULT_BATCH_OVERHEAD_SECONDS = 10.0  # fixed cost of one batch run (launch, imports, gates)
DEFAULT_ROWS_PER_PARTITION = 10_000  # when no partition of the range has rows yet
DEFAULT_DAILY_DURATION_SECONDS = 900.0  # the daily production run, when it never ran here
# Kept clear before the daily run's expected start and after its expected end.
SAFETY_MARGIN_SECONDS = 1800
DAILY_DURATION_PERCENTILE = 95


@dataclass(frozen=True)
class RowEstimate:
    """Rows per day of the range (index 0 = first day) and how they were obtained."""

    per_day: tuple[int, ...]
    basis: str

    @property
    def total(self) -> int:
        return sum(self.per_day)


@dataclass(frozen=True)
class Rates:
    """Seconds per row written and fixed seconds per batch run, and where they came from."""

    seconds_per_row: float
    overhead_seconds: float
    basis: str

    def batch_seconds(self, rows: int) -> float:
        """Estimated seconds for one batch writing `rows` rows."""
        return round(rows * self.seconds_per_row + self.overhead_seconds, 3)


def estimate_rows(
    start: dt.date, n_days: int, partition_rows: Mapping[dt.date, int]
) -> RowEstimate:
    """Rows for each of `n_days` days from `start`: the current count where the partition has rows,
    else the mean of those that do, else DEFAULT_ROWS_PER_PARTITION."""
    existing = [int(v) for v in partition_rows.values() if v and v > 0]
    fill = round(sum(existing) / len(existing)) if existing else DEFAULT_ROWS_PER_PARTITION
    per_day: list[int] = []
    missing = 0
    for i in range(n_days):
        rows = partition_rows.get(start + dt.timedelta(days=i)) or 0
        if rows <= 0:
            missing += 1
            rows = fill
        per_day.append(int(rows))
    if missing == 0:
        basis = f"rows: warehouse stats for all {n_days} partitions"
    elif existing:
        basis = (
            f"rows: warehouse stats for {n_days - missing} of {n_days} partitions; {missing} "
            f"without rows estimated at the mean of the others ({fill:,} rows)"
        )
    else:
        basis = f"rows: no partition of the range has rows yet; default {fill:,} rows per partition"
    return RowEstimate(tuple(per_day), basis)


def batch_rates(seconds_per_row: float | None, overhead_seconds: float | None) -> Rates:
    """Rates from past batch runs, falling back to the documented defaults part by part."""
    parts: list[str] = []
    if seconds_per_row is None:
        spr = DEFAULT_SECONDS_PER_ROW
        parts.append(f"default {spr * 1e6:.1f} us/row (no batch run history)")
    else:
        spr = float(seconds_per_row)
        parts.append(f"{spr * 1e6:.3g} us/row from past batch runs")
    if overhead_seconds is None:
        overhead = DEFAULT_BATCH_OVERHEAD_SECONDS
        parts.append(f"default {overhead:g} s overhead per batch (no batch run history)")
    else:
        overhead = float(overhead_seconds)
        parts.append(f"{overhead:g} s overhead per batch from past batch runs")
    return Rates(spr, overhead, "time: " + ", ".join(parts))


def nearest_rank_percentile(values: Sequence[float], pct: int) -> float:
    """The nearest-rank percentile: the smallest value with at least pct% of values <= it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return float(ordered[rank - 1])


def daily_duration(history: Sequence[float], daily_job: str) -> tuple[float, str]:
    """Expected duration of the daily production run, and a sentence saying where it came from."""
    if not history:
        return DEFAULT_DAILY_DURATION_SECONDS, (
            f"daily duration: default {DEFAULT_DAILY_DURATION_SECONDS:g} s (no run history of "
            f"{daily_job})"
        )
    p = nearest_rank_percentile(history, DAILY_DURATION_PERCENTILE)
    return p, (
        f"daily duration: p{DAILY_DURATION_PERCENTILE} (nearest rank) of {len(history)} past "
        f"runs of {daily_job} = {p:g} s"
    )
