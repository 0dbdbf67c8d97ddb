"""build_plan: a request plus read-only facts in, a BackfillPlan (or a refusal) out. Pure.

Every fact that depends on the outside world (lineage impact, warehouse row counts, run history,
the clock) arrives in PlanInputs, so planning is deterministic and testable on any date.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from backfill_assets.constants import GATE_NAMES, PLAN_SCHEMA_VERSION, SHADOW_SUFFIX
from backfill_assets.errors import InvalidInput, PlanRefused
from backfill_assets.lib.dates import parse_day
from backfill_assets.lib.planning.batches import (
    BatchLoad,
    Budget,
    human_duration,
    place_batches,
    slot_seconds,
    week_spans,
)
from backfill_assets.lib.planning.cost import (
    SAFETY_MARGIN_SECONDS,
    batch_rates,
    daily_duration,
    estimate_rows,
)
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.planning.plan import (
    ROLLBACK_STRATEGIES,
    BackfillPlan,
    Batch,
    Contention,
    Cost,
    ImpactedAsset,
    PlanWindow,
    Rollback,
    Slot,
    compute_plan_id,
    rollback_command,
)
from backfill_assets.lib.planning.windows import (
    DAY_SECONDS,
    TimeWindow,
    arcs_overlap,
    hhmm,
    hhmm_of_seconds,
    load_timezone,
    occurrences,
    parse_window,
    resolve_local,
    seconds_of_day,
    subtract_busy,
)

__all__ = ["ImpactedAsset", "PlanInputs", "PlanRequest", "TargetInfo", "build_plan"]


@dataclass(frozen=True)
class TargetInfo:
    """What the declaration of a backfillable table says."""

    key: str  # "orders_daily"
    shadow_key: str  # "orders_daily__shadow"
    partitions_start: dt.date  # first partition of the daily partitions definition
    partitions_end: dt.date | None  # last partition (inclusive) if the definition has an end
    timezone: str  # partitions' timezone, e.g. "UTC" or "Europe/Berlin"
    daily_job: str  # "orders_daily_job"
    daily_expected_start: dt.time  # local time (in `timezone`) the daily run usually starts
    columns: tuple[str, ...]  # column names (criteria are validated against them)
    default_criteria: Criteria
    bytes_per_row: int = 100
    budget: Budget | None = None  # the most a window occurrence may take (None: no bound)


@dataclass(frozen=True)
class PlanRequest:
    """What the user asked for (CLI/UI). Dates are inclusive at this edge."""

    target: str
    start: str  # "YYYY-MM-DD"
    end: str  # "YYYY-MM-DD", inclusive
    window: str | None  # "HH:MM-HH:MM" local time in `timezone`; may cross midnight
    timezone: str | None = None  # default: the target's partitions timezone
    rollback: str | None = None  # only "backup" is supported
    criteria: Criteria | None = None  # None -> the target's default criteria
    why: Mapping[str, str] | None = None  # partition -> why it is in the plan (`--stale`)


@dataclass(frozen=True)
class PlanInputs:
    """Read-only facts gathered by the caller."""

    targets: Mapping[str, TargetInfo]  # every declared backfillable table
    known_assets: frozenset[str]  # every asset key in the definitions
    impact: tuple[ImpactedAsset, ...]
    partition_rows: Mapping[dt.date, int]  # current target rows per existing partition
    seconds_per_row: float | None  # from past batch runs, None if no history
    batch_overhead_seconds: float | None  # fixed cost per batch run, None if no history
    daily_durations_seconds: tuple[float, ...]  # past daily production runs (may be empty)
    now: dt.datetime  # timezone-aware


def build_plan(request: PlanRequest, inputs: PlanInputs) -> BackfillPlan:
    """Plan a backfill: criteria, downstream impact, cost and contention, weekly batches in slots.

    Args:
        request: what the user asked for.
        inputs: read-only facts (declarations, lineage impact, stats, history, the clock).

    Returns:
        The plan. Building it has no side effects.

    Raises:
        PlanRefused: with one message saying what is wrong and how to fix it, for anything the
            planner will not plan (no rollback, no or bad window, window over the daily run, bad
            or unlanded dates, unknown target or timezone, incomplete criteria, a batch that does
            not fit in the window).
        InvalidInput: when `inputs` themselves are malformed (a naive `now`, a bad declaration).
    """
    now = inputs.now
    if now.tzinfo is None or now.utcoffset() is None:
        raise InvalidInput("PlanInputs.now must be timezone-aware, e.g. datetime.now(UTC)")
    target = _target(request.target, inputs)
    shadow = target.shadow_key
    if shadow != target.key + SHADOW_SUFFIX:
        raise InvalidInput(
            f"declaration of {target.key!r} has shadow {shadow!r}; it must be "
            f"{target.key + SHADOW_SUFFIX!r}"
        )
    strategy = _rollback(request.rollback)
    window = parse_window(request.window)
    tz_name = request.timezone or target.timezone
    tz = load_timezone(tz_name)
    target_tz = load_timezone(target.timezone)
    today = now.astimezone(tz).date()
    start, end = _range(request, target, today, tz_name)

    # Step 1: criteria are written (and checked against the table) before anything else.
    criteria = request.criteria if request.criteria is not None else target.default_criteria
    try:
        criteria.validate(target.columns)
    except InvalidInput as e:
        raise PlanRefused(str(e)) from e

    # Step 3: cost from warehouse stats and run history.
    n_days = (end - start).days + 1
    rows = estimate_rows(start, n_days, inputs.partition_rows)
    rates = batch_rates(inputs.seconds_per_row, inputs.batch_overhead_seconds)
    duration, duration_basis = daily_duration(inputs.daily_durations_seconds, target.daily_job)
    busy_seconds = math.ceil(duration)
    margin = SAFETY_MARGIN_SECONDS

    # Contention: the window must miss [expected start - margin, end of run + margin] every day.
    daily_arcs = _daily_arcs(target, target_tz, tz, now, busy_seconds, margin)
    window_arc = (seconds_of_day(window.start), window.length_seconds)
    for arc in daily_arcs:
        if arcs_overlap(window_arc, arc):
            raise PlanRefused(_overlap_message(window, tz_name, target, arc, duration, margin))
    shown_arc = daily_arcs[0]

    # Step 4: one batch per ISO week, placed back to back into window occurrences.
    spans = week_spans(start, end)
    batch_rows: list[int] = []
    offset = 0
    for ws, we in spans:
        n = (we - ws).days + 1
        batch_rows.append(sum(rows.per_day[offset : offset + n]))
        offset += n
    estimates = [rates.batch_seconds(r) for r in batch_rows]
    loads = [
        BatchLoad(f"batch {i} ({ws}..{we})", slot_seconds(est), n_rows)
        for i, ((ws, we), est, n_rows) in enumerate(
            zip(spans, estimates, batch_rows, strict=True), start=1
        )
    ]

    def clear_of_daily_run(
        occ: tuple[dt.datetime, dt.datetime],
    ) -> tuple[dt.datetime, dt.datetime] | None:
        # On DST days the daily run can drift into an occurrence in real time although the
        # time-of-day circles do not meet; keep its real slot clear there as well.
        return subtract_busy(occ, _daily_busy(occ, target, target_tz, busy_seconds, margin))

    usable = (
        piece
        for occ in occurrences(window, tz, now)
        if (piece := clear_of_daily_run(occ)) is not None
    )
    placements = place_batches(
        loads,
        usable,
        nominal_seconds=window.length_seconds,
        window_label=window.label,
        budget=target.budget,
    )

    keys = tuple((start + dt.timedelta(days=i)).isoformat() for i in range(n_days))
    batches: list[Batch] = []
    offset = 0
    for i, ((ws, we), est, n_rows, place) in enumerate(
        zip(spans, estimates, batch_rows, placements, strict=True), start=1
    ):
        n = (we - ws).days + 1
        batches.append(
            Batch(
                index=i,
                start=ws,
                end=we,
                partitions=keys[offset : offset + n],
                gates=GATE_NAMES,
                slot=Slot(place.start.astimezone(tz), place.end.astimezone(tz)),
                estimated_seconds=est,
                estimated_rows=n_rows,
            )
        )
        offset += n

    plan_id = compute_plan_id(
        target=target.key,
        start=start,
        end=end,
        window=window.label,
        timezone=tz_name,
        rollback=strategy,
        criteria=criteria,
        why=request.why,
    )
    total_rows = rows.total
    cost = Cost(
        basis=f"{rows.basis}; {rates.basis}",
        rows=total_rows,
        bytes=total_rows * target.bytes_per_row,
        seconds=round(sum(estimates), 3),
        per_batch_overhead_seconds=rates.overhead_seconds,
        seconds_per_row=rates.seconds_per_row,
    )
    contention = Contention(
        daily_job=target.daily_job,
        daily_slot_start=hhmm_of_seconds(shown_arc[0]),
        daily_slot_end=hhmm_of_seconds(shown_arc[0] + shown_arc[1], round_up=True),
        daily_expected_start=hhmm(target.daily_expected_start),
        daily_duration_seconds=duration,
        margin_seconds=margin,
        basis=(
            f"{duration_basis}; margin {margin} s before and after the daily slot; expected "
            f"start {hhmm(target.daily_expected_start)} {target.timezone}; slot shown in {tz_name}"
        ),
        occurrences_needed=placements[-1].occurrence,
        expected_finish=batches[-1].slot.end,
        timezone=tz_name,
        daily_timezone=target.timezone,
        budget_max_seconds=target.budget.max_seconds if target.budget else None,
        budget_max_rows=target.budget.max_rows if target.budget else None,
    )
    return BackfillPlan(
        schema_version=PLAN_SCHEMA_VERSION,
        plan_id=plan_id,
        created_at=now.astimezone(tz),
        target=target.key,
        shadow=shadow,
        start=start,
        end=end,
        partitions=keys,
        criteria=criteria,
        impact=tuple(inputs.impact),  # step 2: computed from lineage by the caller, order kept
        cost=cost,
        contention=contention,
        window=PlanWindow(hhmm(window.start), hhmm(window.end), tz_name),
        rollback=Rollback(strategy, rollback_command(plan_id)),
        batches=tuple(batches),
        why=dict(request.why or {}),
    )


def _target(key: str, inputs: PlanInputs) -> TargetInfo:
    if key in inputs.targets:
        return inputs.targets[key]
    declared = sorted(inputs.targets)
    if key in inputs.known_assets:
        raise PlanRefused(
            f"asset {key!r} exists but is not backfillable: it has no BackfillableTable "
            f"declaration (no shadow, gates or swap); declare it, or plan one of {declared}"
        )
    raise PlanRefused(
        f"unknown target {key!r}: no asset with that key in the definitions; backfillable "
        f"tables are {declared}"
    )


def _rollback(value: str | None) -> str:
    strategy = (value or "").strip().lower()
    if not strategy:
        raise PlanRefused(
            "no rollback path: a backfill must be reversible; pass --rollback backup (the swap "
            "keeps the replaced rows and `backfill-assets rollback PLAN_ID` restores them)"
        )
    if strategy not in ROLLBACK_STRATEGIES:
        raise PlanRefused(
            f"unknown rollback strategy {value!r}: the only supported one is 'backup'; pass "
            "--rollback backup"
        )
    return strategy


def _range(
    request: PlanRequest, target: TargetInfo, today: dt.date, tz_name: str
) -> tuple[dt.date, dt.date]:
    try:
        start = parse_day(request.start, "start")
        end = parse_day(request.end, "end")
    except InvalidInput as e:
        raise PlanRefused(str(e)) from e
    if end < start:
        raise PlanRefused(
            f"end {end} is before start {start}; dates are inclusive, e.g. --start {end} "
            f"--end {start}"
        )
    if start < target.partitions_start:
        raise PlanRefused(
            f"start {start} is before the first partition of {target.key} "
            f"({target.partitions_start}); use --start {target.partitions_start} or later"
        )
    if target.partitions_end is not None and end > target.partitions_end:
        raise PlanRefused(
            f"end {end} is after the last partition of {target.key} ({target.partitions_end}); "
            f"use --end {target.partitions_end} or earlier"
        )
    if end >= today:
        latest = today - dt.timedelta(days=1)
        raise PlanRefused(
            f"end {end} has not landed yet (today is {today} in {tz_name}); only past partitions "
            f"can be backfilled: use --end {latest} or earlier"
        )
    return start, end


def _daily_arcs(
    target: TargetInfo,
    target_tz: ZoneInfo,
    tz: ZoneInfo,
    now: dt.datetime,
    busy: int,
    margin: int,
) -> list[tuple[int, int]]:
    """The daily slot as arcs (start second of day, length) on the plan timezone's clock.

    The first arc is for today. When the plan's zone differs from the target's, the offset
    between them changes with DST, and not on the same days in both zones (Europe and the US
    change weeks apart), so every day of the coming year is checked: a window must miss the
    slot on each of them.
    """
    today = now.astimezone(target_tz).date()
    refs = [today]
    if tz.key != target_tz.key:
        refs += [today + dt.timedelta(days=i) for i in range(1, 367)]
    arcs: list[tuple[int, int]] = []
    for ref in refs:
        begin = resolve_local(ref, target.daily_expected_start, target_tz, edge="start")
        local = begin.astimezone(tz)
        arc = ((seconds_of_day(local.time()) - margin) % DAY_SECONDS, busy + 2 * margin)
        if arc not in arcs:
            arcs.append(arc)
    return arcs


def _daily_busy(
    occ: tuple[dt.datetime, dt.datetime],
    target: TargetInfo,
    target_tz: ZoneInfo,
    busy: int,
    margin: int,
) -> list[tuple[dt.datetime, dt.datetime]]:
    """Real (UTC) slots of the daily run on the days around one occurrence."""
    first = occ[0].astimezone(target_tz).date() - dt.timedelta(days=1)
    last = occ[1].astimezone(target_tz).date() + dt.timedelta(days=1)
    out: list[tuple[dt.datetime, dt.datetime]] = []
    day = first
    while day <= last:
        # Both readings of a repeated (or skipped) start time, to stay on the safe side.
        for edge in ("start", "end"):
            begin = resolve_local(day, target.daily_expected_start, target_tz, edge=edge)
            out.append(
                (begin - dt.timedelta(seconds=margin), begin + dt.timedelta(seconds=busy + margin))
            )
        day += dt.timedelta(days=1)
    return out


def _overlap_message(
    window: TimeWindow,
    tz_name: str,
    target: TargetInfo,
    arc: tuple[int, int],
    duration: float,
    margin: int,
) -> str:
    slot_start = hhmm_of_seconds(arc[0])
    slot_end = hhmm_of_seconds(arc[0] + arc[1], round_up=True)
    what = (
        f"window {window.label} ({tz_name}) overlaps the daily run {target.daily_job}'s slot "
        f"{slot_start}-{slot_end} ({tz_name}): expected start "
        f"{hhmm(target.daily_expected_start)} {target.timezone}, duration "
        f"{human_duration(duration)}, {margin // 60} min margin on each side"
    )
    if arc[1] >= DAY_SECONDS:
        return f"{what}; the slot fills the whole day, so no window can avoid it"
    return f"{what}; choose a window outside it, e.g. --window {slot_end}-{slot_start}"
