"""Idle windows: parsing "HH:MM-HH:MM", their occurrences as real instants, and the 24-hour circle
on which a window must miss the daily production run's slot.

All instants returned here are UTC; arithmetic on them is real (elapsed) time. Arithmetic on an
aware datetime in a ZoneInfo zone would be wall-clock arithmetic and go wrong on DST days.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from backfill_assets.errors import PlanRefused

UTC = dt.UTC
DAY_SECONDS = 86_400

# ASCII digits only: `\\d` also matches full-width and other Unicode digits, which int() reads,
# so a window written in full-width digits was accepted.
_WINDOW_RE = re.compile(r"\s*([0-9]{1,2}):([0-9]{2})\s*-\s*([0-9]{1,2}):([0-9]{2})\s*", re.ASCII)
_WINDOW_HINT = (
    "pass --window HH:MM-HH:MM (24-hour local time; may cross midnight, e.g. 22:00-04:00)"
)

Edge = Literal["start", "end"]


def load_timezone(name: str) -> ZoneInfo:
    """Return the IANA zone `name`.

    Raises:
        PlanRefused: when `name` is not a zone this machine's tz database knows.
    """
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError) as e:
        raise PlanRefused(
            f"unknown timezone {name!r}: use an IANA name such as 'UTC' or 'Europe/Berlin' "
            "(--timezone)"
        ) from e


def seconds_of_day(t: dt.time) -> int:
    """Seconds since local midnight of a wall-clock time."""
    return t.hour * 3600 + t.minute * 60 + t.second


def hhmm(t: dt.time) -> str:
    """Format a wall-clock time as HH:MM."""
    return f"{t.hour:02d}:{t.minute:02d}"


def hhmm_of_seconds(seconds: float, *, round_up: bool = False) -> str:
    """Format seconds on the 24-hour circle as HH:MM (floor, or ceiling to the minute)."""
    minutes = -(-int(seconds) // 60) if round_up else int(seconds) // 60
    minutes %= DAY_SECONDS // 60
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@dataclass(frozen=True)
class TimeWindow:
    """A daily idle window in local wall-clock time; `end < start` means it crosses midnight."""

    start: dt.time
    end: dt.time

    @property
    def crosses_midnight(self) -> bool:
        return self.end < self.start

    @property
    def length_seconds(self) -> int:
        """Length on an ordinary day (DST days are an hour shorter or longer in real time)."""
        return (seconds_of_day(self.end) - seconds_of_day(self.start)) % DAY_SECONDS

    @property
    def label(self) -> str:
        return f"{hhmm(self.start)}-{hhmm(self.end)}"


def parse_window(text: str | None) -> TimeWindow:
    """Parse "HH:MM-HH:MM" into a TimeWindow.

    Raises:
        PlanRefused: when there is no window, it is malformed, or it has zero length.
    """
    if text is None or not str(text).strip():
        raise PlanRefused(
            "no window: a backfill runs only inside an explicit idle window that excludes the "
            f"daily production run; {_WINDOW_HINT}"
        )
    m = _WINDOW_RE.fullmatch(str(text))
    if not m:
        raise PlanRefused(f"window {text!r} is not HH:MM-HH:MM; {_WINDOW_HINT}")
    h0, m0, h1, m1 = (int(g) for g in m.groups())
    for h, mi in ((h0, m0), (h1, m1)):
        if h > 23 or mi > 59:
            raise PlanRefused(
                f"window {text!r} has an impossible time {h:02d}:{mi:02d}: hours run 00..23 and "
                f"minutes 00..59; {_WINDOW_HINT}"
            )
    window = TimeWindow(dt.time(h0, m0), dt.time(h1, m1))
    if window.start == window.end:
        three_hours_later = hhmm_of_seconds(seconds_of_day(window.start) + 3 * 3600)
        raise PlanRefused(
            f"window {text!r} has zero length (start equals end); give an end different from the "
            f"start, e.g. --window {hhmm(window.start)}-{three_hours_later}"
        )
    return window


def resolve_local(day: dt.date, at: dt.time, tz: ZoneInfo, *, edge: Edge) -> dt.datetime:
    """Return the UTC instant at which the clock in `tz` reads `at` on `day`.

    A repeated time (autumn change) resolves so that a window stays inside its local bounds: a
    start takes the later instant, an end the earlier one. A skipped time (spring change) resolves
    to the first valid instant after the gap for a start; for an end, to the last whole second
    before the gap, so the instant still reads as inside the window on the local clock.

    Args:
        day: local calendar date.
        at: local wall-clock time.
        tz: the zone the clock is in.
        edge: whether the instant opens ("start") or closes ("end") an interval.
    """
    naive = dt.datetime.combine(day, at)
    candidates = [naive.replace(tzinfo=tz, fold=f).astimezone(UTC) for f in (0, 1)]
    real = [u for u in candidates if u.astimezone(tz).replace(tzinfo=None) == naive]
    if real:
        return max(real) if edge == "start" else min(real)
    # `naive` falls in a gap. The transition lies in (lo, hi]: find it by bisection over whole
    # seconds (at most ~12 steps for a one-hour gap), since zoneinfo exposes no transition list.
    lo, hi = min(candidates), max(candidates)
    after = hi.astimezone(tz).utcoffset()
    a, b = 0, int((hi - lo).total_seconds())
    while b - a > 1:
        mid = (a + b) // 2
        if (lo + dt.timedelta(seconds=mid)).astimezone(tz).utcoffset() == after:
            b = mid
        else:
            a = mid
    transition = lo + dt.timedelta(seconds=b)
    return transition if edge == "start" else transition - dt.timedelta(seconds=1)


def occurrences(
    window: TimeWindow, tz: ZoneInfo, now: dt.datetime
) -> Iterator[tuple[dt.datetime, dt.datetime]]:
    """Yield the window's occurrences as UTC (start, end), in order, from the one open at `now`
    (its remainder, from `now` rounded up to the next whole minute) or else the first starting
    after `now`. An occurrence that DST leaves empty is skipped. The generator is endless."""
    day = now.astimezone(tz).date() - dt.timedelta(days=1)
    end_offset = dt.timedelta(days=1 if window.crosses_midnight else 0)
    while True:
        start = resolve_local(day, window.start, tz, edge="start")
        end = resolve_local(day + end_offset, window.end, tz, edge="end")
        if start < now < end:
            # Planned inside an open window: the batch driver would start right away, so the
            # plan's slots must say so too (not the next day's occurrence).
            from_now = (now + dt.timedelta(minutes=1)).replace(second=0, microsecond=0)
            if from_now < end:
                yield from_now.astimezone(dt.UTC), end
        elif start >= now and end > start:
            yield start, end
        day += dt.timedelta(days=1)


def subtract_busy(
    span: tuple[dt.datetime, dt.datetime], busy: Iterable[tuple[dt.datetime, dt.datetime]]
) -> tuple[dt.datetime, dt.datetime] | None:
    """Return the longest piece of `span` left after removing every busy interval, or None.

    Intervals are half-open. Used to keep a window occurrence clear of the daily run's real slot
    on days when DST moves one against the other.
    """
    pieces = [span]
    for b0, b1 in busy:
        nxt: list[tuple[dt.datetime, dt.datetime]] = []
        for s, e in pieces:
            if b1 <= s or b0 >= e:
                nxt.append((s, e))
                continue
            if s < b0:
                nxt.append((s, b0))
            if b1 < e:
                nxt.append((b1, e))
        pieces = nxt
    if not pieces:
        return None
    return max(pieces, key=lambda p: p[1] - p[0])


def arcs_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two half-open arcs (start second of day, length seconds) meet on the 24-hour
    circle. An arc at least a day long covers the whole circle."""
    (a0, la), (b0, lb) = a, b
    if la <= 0 or lb <= 0:
        return False
    if la >= DAY_SECONDS or lb >= DAY_SECONDS:
        return True
    return (b0 - a0) % DAY_SECONDS < la or (a0 - b0) % DAY_SECONDS < lb
