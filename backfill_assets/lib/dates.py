"""Dates and ISO weeks. Windows are half-open [start, end) internally; inclusive at the edges."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

from backfill_assets.errors import InvalidInput

_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)


def parse_day(value: object, what: str = "date") -> dt.date:
    """Parse a YYYY-MM-DD partition key or date; raise InvalidInput with a fix otherwise."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    text = str(value).strip()
    if not _DATE_RE.fullmatch(text):
        raise InvalidInput(f"{what} {value!r} is not a date: use YYYY-MM-DD, e.g. 2026-01-31")
    try:
        return dt.date.fromisoformat(text)
    except ValueError as e:
        raise InvalidInput(f"{what} {value!r} is not a real calendar date ({e})") from e


def days(start: dt.date, end: dt.date) -> list[dt.date]:
    """Every day of the half-open range [start, end)."""
    return [start + dt.timedelta(days=i) for i in range((end - start).days)]


def week_monday(day: dt.date) -> dt.date:
    """The Monday that starts the ISO week holding `day`."""
    return day - dt.timedelta(days=day.weekday())


def week_id(day: dt.date) -> str:
    """A sortable ISO-week id such as 2026w03, used in physical table names."""
    year, week, _ = day.isocalendar()
    return f"{year}w{week:02d}"


def iso_weeks(start: dt.date, end: dt.date) -> Iterator[tuple[dt.date, dt.date]]:
    """Split [start, end) into contiguous pieces, one per ISO week (Monday start), half-open."""
    cur = start
    while cur < end:
        nxt = min(week_monday(cur) + dt.timedelta(days=7), end)
        yield cur, nxt
        cur = nxt
