"""Windows, DST resolution, the 24-hour circle, weekly spans, packing and cost helpers. Pure."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest

from backfill_assets.errors import PlanRefused
from backfill_assets.lib.planning.batches import BatchLoad, place_batches, week_spans
from backfill_assets.lib.planning.cost import (
    DEFAULT_ROWS_PER_PARTITION,
    estimate_rows,
    nearest_rank_percentile,
)
from backfill_assets.lib.planning.windows import (
    arcs_overlap,
    occurrences,
    parse_window,
    resolve_local,
    subtract_busy,
)

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")
H = 3600


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def test_a_window_crossing_midnight_parses_with_its_real_length() -> None:
    w = parse_window("22:00-04:00")
    assert w.crosses_midnight
    assert w.length_seconds == 6 * H
    assert w.label == "22:00-04:00"


def test_a_window_accepts_single_digit_hours_and_spaces_and_normalises_its_label() -> None:
    assert parse_window(" 3:00 - 6:30 ").label == "03:00-06:30"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "no window"),
        ("", "no window"),
        ("03:00", "is not HH:MM-HH:MM"),
        ("3-6", "is not HH:MM-HH:MM"),
        ("03:00-06", "is not HH:MM-HH:MM"),
        ("24:00-02:00", "impossible time 24:00"),
        ("03:60-05:00", "impossible time 03:60"),
        ("03:00-03:00", "zero length"),
    ],
)
def test_a_missing_malformed_or_empty_window_is_refused_with_the_fix(
    text: str | None, message: str
) -> None:
    with pytest.raises(PlanRefused, match=message) as e:
        parse_window(text)
    assert "--window" in str(e.value)


def test_a_skipped_start_time_resolves_to_the_first_instant_after_the_gap() -> None:
    # 2026-03-29 Berlin: clocks jump 02:00 CET -> 03:00 CEST (01:00 UTC); 02:30 never happens.
    start = resolve_local(dt.date(2026, 3, 29), dt.time(2, 30), BERLIN, edge="start")
    assert start == utc(2026, 3, 29, 1, 0)
    assert start.astimezone(BERLIN).strftime("%H:%M") == "03:00"


def test_a_skipped_end_time_resolves_to_the_last_second_before_the_gap() -> None:
    end = resolve_local(dt.date(2026, 3, 29), dt.time(2, 30), BERLIN, edge="end")
    assert end == utc(2026, 3, 29, 0, 59, 59)
    assert end.astimezone(BERLIN).strftime("%H:%M") == "01:59"


def test_a_repeated_time_opens_late_and_closes_early_so_the_window_stays_in_its_bounds() -> None:
    # 2026-10-25 Berlin: 03:00 CEST -> 02:00 CET (01:00 UTC); 02:30 happens twice.
    day, at = dt.date(2026, 10, 25), dt.time(2, 30)
    assert resolve_local(day, at, BERLIN, edge="start") == utc(2026, 10, 25, 1, 30)
    assert resolve_local(day, at, BERLIN, edge="end") == utc(2026, 10, 25, 0, 30)


@pytest.mark.parametrize(
    ("day", "real_hours"),
    [(dt.date(2026, 3, 28), 3), (dt.date(2026, 3, 29), 2), (dt.date(2026, 10, 25), 4)],
)
def test_an_occurrence_on_a_dst_day_is_shorter_or_longer_in_real_time(
    day: dt.date, real_hours: int
) -> None:
    now = dt.datetime.combine(day, dt.time(0, 0), tzinfo=BERLIN)
    first = next(occurrences(parse_window("01:00-04:00"), BERLIN, now))
    assert first[0].astimezone(BERLIN).date() == day
    assert first[1] - first[0] == dt.timedelta(hours=real_hours)


def test_occurrences_start_with_the_rest_of_an_open_window_and_cross_midnight() -> None:
    # Regression: planned inside an open window, the plan's first slot was the next night
    # although the batch driver starts right away; the rest of tonight's window is used now.
    now = utc(2026, 4, 10, 23, 0, 30)
    occ = list(itertools.islice(occurrences(parse_window("22:00-04:00"), ZoneInfo("UTC"), now), 2))
    assert occ == [
        (utc(2026, 4, 10, 23, 1), utc(2026, 4, 11, 4, 0)),
        (utc(2026, 4, 11, 22, 0), utc(2026, 4, 12, 4, 0)),
    ]


def test_an_occurrence_that_starts_exactly_now_is_used() -> None:
    now = utc(2026, 4, 10, 3, 0)
    assert next(occurrences(parse_window("03:00-06:00"), ZoneInfo("UTC"), now))[0] == now


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ((3 * H, 3 * H), (0, 2 * H), False),  # 03-06 vs 00-02
        ((3 * H, 3 * H), (2 * H, H), False),  # touching at 03:00 is not overlapping
        ((3 * H, 3 * H), (2 * H, H + 1), True),
        ((22 * H, 6 * H), (H, H), True),  # 22-04 vs 01-02: midnight-crossing window
        ((22 * H, 6 * H), (5 * H, 2 * H), False),
        ((23 * H, H), (23 * H + 1800, 2 * H), True),  # both cross midnight
        ((6 * H, H), (0, 86_400), True),  # a slot filling the day meets everything
    ],
)
def test_arcs_on_the_24_hour_circle_overlap_only_when_they_share_time(
    a: tuple[int, int], b: tuple[int, int], overlap: bool
) -> None:
    assert arcs_overlap(a, b) is overlap
    assert arcs_overlap(b, a) is overlap


def test_subtracting_a_busy_interval_keeps_the_longest_free_piece() -> None:
    span = (utc(2026, 1, 1, 0), utc(2026, 1, 1, 6))
    assert subtract_busy(span, [(utc(2026, 1, 1, 0), utc(2026, 1, 1, 1))]) == (
        utc(2026, 1, 1, 1),
        utc(2026, 1, 1, 6),
    )
    assert subtract_busy(span, [(utc(2026, 1, 1, 4), utc(2026, 1, 1, 5))]) == (
        utc(2026, 1, 1, 0),
        utc(2026, 1, 1, 4),
    )
    assert subtract_busy(span, [(utc(2025, 12, 31), utc(2026, 1, 2))]) is None


def test_week_spans_split_an_inclusive_range_by_iso_week_including_a_leap_day() -> None:
    assert week_spans(dt.date(2024, 2, 28), dt.date(2024, 3, 1)) == [
        (dt.date(2024, 2, 28), dt.date(2024, 3, 1))
    ]
    assert week_spans(dt.date(2024, 2, 25), dt.date(2024, 3, 4)) == [
        (dt.date(2024, 2, 25), dt.date(2024, 2, 25)),  # a Sunday closes its week alone
        (dt.date(2024, 2, 26), dt.date(2024, 3, 3)),
        (dt.date(2024, 3, 4), dt.date(2024, 3, 4)),
    ]


def test_batches_pack_back_to_back_and_move_on_when_the_occurrence_is_full() -> None:
    occ = [(utc(2026, 1, 1, 3), utc(2026, 1, 1, 4)), (utc(2026, 1, 2, 3), utc(2026, 1, 2, 4))]
    loads = [BatchLoad(f"batch {i}", 1500) for i in (1, 2, 3)]
    placed = place_batches(loads, occ, nominal_seconds=H, window_label="03:00-04:00")
    assert [(p.start, p.occurrence) for p in placed] == [
        (utc(2026, 1, 1, 3), 1),
        (utc(2026, 1, 1, 3, 25), 1),
        (utc(2026, 1, 2, 3), 2),
    ]


def test_a_short_dst_occurrence_is_skipped_by_a_batch_that_fits_an_ordinary_one() -> None:
    occ = [(utc(2026, 1, 1, 3), utc(2026, 1, 1, 3, 30)), (utc(2026, 1, 2, 3), utc(2026, 1, 2, 4))]
    placed = place_batches(
        [BatchLoad("batch 1", 2400)], occ, nominal_seconds=H, window_label="03:00-04:00"
    )
    assert placed[0].start == utc(2026, 1, 2, 3)
    assert placed[0].occurrence == 1  # occurrences are counted only when used


def test_a_batch_longer_than_the_window_is_refused() -> None:
    with pytest.raises(PlanRefused, match=r"batch 1 needs an estimated 1h 00m .* lasts 30m 00s"):
        place_batches(
            [BatchLoad("batch 1", H)], [], nominal_seconds=1800, window_label="03:00-03:30"
        )


def test_the_daily_duration_is_the_nearest_rank_p95() -> None:
    assert nearest_rank_percentile([float(v) for v in range(1, 21)], 95) == 19.0
    assert nearest_rank_percentile([5.0], 95) == 5.0
    assert nearest_rank_percentile([1.0, 2.0, 100.0], 95) == 100.0


def test_partitions_without_rows_are_estimated_at_the_mean_or_the_default() -> None:
    start = dt.date(2026, 1, 1)
    est = estimate_rows(start, 3, {start: 100, start + dt.timedelta(days=1): 300})
    assert est.per_day == (100, 300, 200)
    assert "1 without rows" in est.basis
    empty = estimate_rows(start, 2, {})
    assert empty.per_day == (DEFAULT_ROWS_PER_PARTITION,) * 2
    assert "default" in empty.basis
