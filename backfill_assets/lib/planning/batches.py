"""Weekly batches and their placement, back to back, into window occurrences."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from backfill_assets.errors import InvalidInput, PlanRefused
from backfill_assets.lib.dates import iso_weeks

# A fresh occurrence may be shorter than usual (a DST day, or the daily run moved against the
# window by DST in another zone). A batch that fits an ordinary occurrence skips such days; this
# many consecutive misses means something else is wrong, and the planner refuses rather than loop.
MAX_SKIPPED_OCCURRENCES = 14


def week_spans(start: dt.date, end: dt.date) -> list[tuple[dt.date, dt.date]]:
    """Split the inclusive range [start, end] into inclusive ISO-week spans (Monday start)."""
    one = dt.timedelta(days=1)
    return [(a, b - one) for a, b in iso_weeks(start, end + one)]


def slot_seconds(estimated_seconds: float) -> int:
    """Whole seconds a batch occupies in a window (at least one), so slots print cleanly."""
    return max(1, math.ceil(estimated_seconds))


@dataclass(frozen=True)
class Placement:
    """Where one batch runs: UTC instants, and the ordinal of the window occurrence used."""

    start: dt.datetime
    end: dt.datetime
    occurrence: int


@dataclass(frozen=True)
class BatchLoad:
    """What the packer needs to know about one batch."""

    label: str
    seconds: int
    rows: int = 0


@dataclass(frozen=True)
class Budget:
    """The most a backfill may use of the warehouse in one occurrence of its idle window: its
    batches' estimated seconds and rows, added up (None: no bound). The planner places batches
    so that no occurrence goes over it: the plan then spans more occurrences."""

    max_seconds: float | None = None
    max_rows: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_seconds", "max_rows"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise InvalidInput(
                    f"backfill budget: {name} must be a positive number (or None), not {value!r}"
                )
        if self.max_rows is not None and not isinstance(self.max_rows, int):
            raise InvalidInput(
                f"backfill budget: max_rows must be whole rows, not {self.max_rows!r}"
            )

    def describe(self) -> str:
        parts = []
        if self.max_seconds is not None:
            parts.append(f"{human_duration(self.max_seconds)} of estimated warehouse time")
        if self.max_rows is not None:
            parts.append(f"{self.max_rows:,} rows")
        return " and ".join(parts) + " per window occurrence" if parts else "no bound"

    def over(self, seconds: float, rows: int) -> bool:
        """Whether `seconds` and `rows` in one occurrence go over the budget."""
        return (self.max_seconds is not None and seconds > self.max_seconds) or (
            self.max_rows is not None and rows > self.max_rows
        )


def place_batches(
    loads: Sequence[BatchLoad],
    occurrences: Iterable[tuple[dt.datetime, dt.datetime]],
    *,
    nominal_seconds: int,
    window_label: str,
    budget: Budget | None = None,
) -> list[Placement]:
    """Pack batches in order, back to back, into window occurrences.

    A batch goes into the current occurrence while it fits, in time and within the `budget`
    (what the occurrence's batches add up to), else into the next one.

    Args:
        loads: batches in execution order.
        occurrences: UTC (start, end) of usable occurrences, in order (may be endless).
        nominal_seconds: the window's length on an ordinary day.
        window_label: "HH:MM-HH:MM", for messages.

    Raises:
        PlanRefused: when a batch cannot fit in one whole occurrence, or alone goes over the
            budget.
    """
    it = iter(occurrences)
    out: list[Placement] = []
    cursor: dt.datetime | None = None
    occ_end: dt.datetime | None = None
    ordinal = 0
    used = (0.0, 0)  # the current occurrence's seconds and rows
    for load in loads:
        need = dt.timedelta(seconds=load.seconds)
        if budget is not None and budget.over(load.seconds, load.rows):
            raise PlanRefused(
                f"{load.label} needs an estimated {human_duration(load.seconds)} and "
                f"{load.rows:,} rows, more than the table's backfill budget allows in one window "
                f"occurrence ({budget.describe()}); a batch is one ISO week and is not split: "
                "raise the budget (backfill_budget) to at least that"
            )
        if load.seconds > nominal_seconds:
            raise PlanRefused(
                f"{load.label} needs an estimated {human_duration(load.seconds)} but the window "
                f"{window_label} lasts {human_duration(nominal_seconds)}; a batch must fit in one "
                "window occurrence: widen the window (--window) or plan a shorter range"
            )
        within = budget is None or not budget.over(used[0] + load.seconds, used[1] + load.rows)
        if cursor is not None and occ_end is not None and cursor + need <= occ_end and within:
            out.append(Placement(cursor, cursor + need, ordinal))
            cursor += need
            used = (used[0] + load.seconds, used[1] + load.rows)
            continue
        misses = 0
        while True:
            try:
                occ_start, occ_end = next(it)
            except StopIteration:
                raise PlanRefused(
                    f"{load.label} finds no window occurrence left to run in; widen the window "
                    "(--window)"
                ) from None
            if occ_start + need <= occ_end:
                ordinal += 1
                out.append(Placement(occ_start, occ_start + need, ordinal))
                cursor = occ_start + need
                used = (float(load.seconds), load.rows)
                break
            misses += 1
            if misses >= MAX_SKIPPED_OCCURRENCES:
                raise PlanRefused(
                    f"{load.label} ({human_duration(load.seconds)}) did not fit in {misses} "
                    f"consecutive occurrences of the window {window_label} once the daily run's "
                    "slot was kept clear; widen or move the window (--window)"
                )
    return out


def human_duration(seconds: float) -> str:
    """Format seconds for people: "45 s", "4m 10s", "2h 05m"."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {(s % 3600) // 60:02d}m"
