"""Which daily runs to request for landed source days (pure; the sensor passes `today`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from backfill_assets.lib.dates import parse_day


def daily_run_keys(
    landed_partitions: Iterable[str], today: dt.date, lookback_days: int = 3
) -> list[str]:
    """Landed days worth a daily production run: before today, within the lookback, each once.

    Older landings (history loads, replays) are backfill territory and are never picked up here.
    """
    oldest = today - dt.timedelta(days=lookback_days)
    keys = {parse_day(pk, "landed partition").isoformat() for pk in landed_partitions}
    return sorted(k for k in keys if oldest <= dt.date.fromisoformat(k) < today)


def daily_run_key(partition: str) -> str:
    """Deterministic run key: a restarted daemon never requests the same day twice."""
    return f"daily-{partition}"
