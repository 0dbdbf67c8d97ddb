"""The daily production run's sensor: one run per landed day, none for a day not landed yet."""

import datetime as dt

import dagster as dg

from backfill_assets.example.daily import daily_run_keys
from backfill_assets.example.seed import land_days

TODAY = dt.datetime.now(dt.UTC).date()


def _tick(defs, instance, cursor=None) -> dg.SensorResult:
    sensor = next(s for s in defs.sensors if s.name == "orders_daily_sensor")
    result = sensor(dg.build_sensor_context(instance=instance, cursor=cursor))
    assert isinstance(result, dg.SensorResult)
    return result


def test_the_sensor_requests_exactly_one_run_per_landed_day_and_none_for_a_day_not_landed(
    defs, instance, wh
):
    yesterday = TODAY - dt.timedelta(days=1)
    before = TODAY - dt.timedelta(days=3)
    land_days(defs, instance, before, before, 50)
    land_days(defs, instance, yesterday, yesterday, 50)  # the day in between never landed
    first = _tick(defs, instance)
    requested = [(r.partition_key, r.run_key) for r in first.run_requests or []]
    assert requested == [
        (before.isoformat(), f"daily-{before.isoformat()}"),
        (yesterday.isoformat(), f"daily-{yesterday.isoformat()}"),
    ]
    again = _tick(defs, instance, first.cursor)
    assert not again.run_requests  # nothing new has landed
    assert again.skip_reason is not None
    # A day landing again (a restatement) asks for the same deterministic run key, which the
    # daemon does not launch twice.
    land_days(defs, instance, yesterday, yesterday, 50)
    (req,) = _tick(defs, instance, first.cursor).run_requests or []
    assert req.run_key == f"daily-{yesterday.isoformat()}"


def test_only_days_before_today_within_the_lookback_get_a_daily_run():
    today = dt.date(2026, 3, 10)
    landed = ["2026-03-01", "2026-03-07", "2026-03-09", "2026-03-09", "2026-03-10"]
    # 03-01 is history (a backfill's business), 03-10 is today (not over), 03-09 once.
    assert daily_run_keys(landed, today, lookback_days=3) == ["2026-03-07", "2026-03-09"]
