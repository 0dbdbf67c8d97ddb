"""render_markdown: a plan a reviewer can read in two minutes."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from backfill_assets.lib.planning.batches import human_duration
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.planning.plan import BackfillPlan, Batch, ImpactedAsset

# Timeline lines list batches one by one up to this many per window occurrence, then as a range.
_TIMELINE_LIST_MAX = 4


def render_markdown(plan: BackfillPlan) -> str:
    """Render a plan as Markdown: summary, the four planning steps, rollback and a timeline."""
    tz = ZoneInfo(plan.window.timezone)
    n_batches = len(plan.batches)
    c = plan.contention
    first, last = plan.batches[0], plan.batches[-1]
    lines = [
        f"# Backfill plan `{plan.plan_id}`: {plan.target} {plan.start}..{plan.end}",
        "",
        (
            f"**Summary:** {len(plan.partitions)} partitions of `{plan.target}` in {n_batches} "
            f"weekly batch{'es' if n_batches != 1 else ''}, ~{plan.cost.rows:,} rows "
            f"({_bytes(plan.cost.bytes)}), ~{human_duration(plan.cost.seconds)} of work in "
            f"{c.occurrences_needed} occurrence{'s' if c.occurrences_needed != 1 else ''} of the "
            f"window {plan.window.label} {plan.window.timezone}, from "
            f"{_local(first.slot.start, tz)} to {_local(last.slot.end, tz)}. Batches write "
            f"`{plan.shadow}`; the target changes only at the swap, after every gate passed. "
            f"Rollback: `{plan.rollback.command}`."
        ),
        "",
        f"Created {plan.created_at.isoformat()} (plan schema v{plan.schema_version}).",
        "",
        *_why(plan),
        "## 1. Criteria (written first)",
        "",
        *_criteria(plan.criteria),
        "",
        "## 2. Downstream impact",
        "",
        *_impact(plan.impact),
        "",
        "## 3. Cost and contention",
        "",
        f"- Work: ~{plan.cost.rows:,} rows, {_bytes(plan.cost.bytes)}, "
        f"~{human_duration(plan.cost.seconds)} ({plan.cost.seconds_per_row * 1e6:.3g} us/row, "
        f"{plan.cost.per_batch_overhead_seconds:g} s overhead per batch).",
        f"- Cost basis: {plan.cost.basis}.",
        f"- Daily run `{c.daily_job}`: expected start {c.daily_expected_start}, slot kept clear "
        f"{c.daily_slot_start}-{c.daily_slot_end} {c.timezone} (duration "
        f"{human_duration(c.daily_duration_seconds)}, margin {c.margin_seconds // 60} min each "
        "side).",
        f"- Contention basis: {c.basis}.",
        f"- Window {plan.window.label} {plan.window.timezone}: {c.occurrences_needed} "
        f"occurrence(s) needed, expected finish {_local(c.expected_finish, tz)}.",
        f"- Budget: {c.budget.describe() if c.budget else 'none declared (backfill_budget)'}.",
        "",
        "## 4. Batches",
        "",
        "| # | dates | partitions | est rows | est time | slot | gates |",
        "|---:|---|---:|---:|---:|---|---|",
        *(_batch_row(b, tz) for b in plan.batches),
        "",
        "## Rollback",
        "",
        f"Strategy `{plan.rollback.strategy}`: the swap keeps the replaced rows of "
        f"`{plan.target}`; `{plan.rollback.command}` restores them in one atomic step, with the "
        "models the swap published; the other impacted assets are then refreshed for the "
        "affected partitions.",
        "",
        "## Timeline",
        "",
        f"Each line is one day ({plan.window.timezone}), each character {_CELL_MIN} minutes: "
        "`D` the daily run's slot (never used), `-` the idle window, `.` outside it, and "
        "where a batch is planned to run, its number (`1`-`9`, then `a`-`z`), or `#` where "
        "several batches share the half hour (the lines below list them).",
        "",
        "```",
        *_picture(plan, tz),
        "```",
        "",
        "```",
        *_timeline(plan, tz),
        "```",
        "",
    ]
    return "\n".join(lines)


def _why(plan: BackfillPlan) -> list[str]:
    """Why the partitions are in the plan (a plan of what is stale), consecutive days with the
    same reason on one line."""
    if not plan.why:
        return []
    lines = ["## Why these partitions (stale)", ""]
    run: list[str] = []  # [first, last, reason]
    for key in plan.partitions:
        reason = plan.why.get(key, "not stale (inside a stale range)")
        if run and run[2] == reason:
            run[1] = key
            continue
        if run:
            lines.append(_why_line(*run))
        run = [key, key, reason]
    lines.append(_why_line(*run))
    return [*lines, ""]


def _why_line(first: str, last: str, reason: str) -> str:
    days = first if first == last else f"{first}..{last}"
    return f"- {days}: {reason}"


def _criteria(criteria: Criteria) -> list[str]:
    out: list[str] = []
    rc, sample = criteria.row_count, criteria.sample
    if rc is not None:
        out.append(
            f"- Row counts per partition: shadow vs {' and '.join(rc.compare_to)}, tolerance "
            f"{rc.tolerance_pct:g} %; duplicate primary keys fail."
        )
    if sample is not None:
        unchanged = ", ".join(f"`{c}`" for c in sample.unchanged_columns) or "none"
        changed = (
            ", ".join(
                f"`{c.name}`" + (f" (must hold: `{c.must_hold}`)" if c.must_hold else "")
                for c in sample.changed_columns
            )
            or "none"
        )
        whole = "; whole-partition hash of unchanged columns" if sample.full_compare else ""
        out.append(
            f"- Sample of {sample.size} rows per partition: unchanged {unchanged}; changed "
            f"{changed}{whole}."
        )
    if criteria.invariants:
        out.append(
            "- Invariants: "
            + "; ".join(f"`{i.name}`: `{i.predicate}`" for i in criteria.invariants)
            + "."
        )
    else:
        out.append("- Invariants: none.")
    return out


def _impact(impact: tuple[ImpactedAsset, ...]) -> list[str]:
    if not impact:
        return ["No downstream assets depend on the target."]
    rows = [
        "| asset | kind | affected partitions | at the swap |",
        "|---|---|---|---|",
    ]
    for a in impact:
        if a.partitions == "all":
            parts = "all (full refresh)"
        elif len(a.partitions) <= 3:
            parts = ", ".join(a.partitions) or "none"
        else:
            parts = f"{len(a.partitions)} ({a.partitions[0]}..{a.partitions[-1]})"
        rows.append(f"| `{a.asset_key}` | {a.kind} | {parts} | {AT_SWAP[a.at_swap]} |")
    if any(a.at_swap == "published" for a in impact):
        rows += [
            "",
            "The swap builds the models marked *rebuilt in shadow* from the validated shadow of "
            "the target, runs their dbt tests there (the `downstream_dbt_tests` gate: a failure "
            "refuses the swap and changes nothing), and publishes them in the transaction that "
            "swaps the target; the rollback restores them with it. `swap --no-refresh` publishes "
            "the target alone: every asset here is then only flagged stale.",
        ]
    return rows


# What the swap does with an impacted asset, by ImpactedAsset.at_swap.
AT_SWAP = {
    "published": "rebuilt in shadow, tested, published with the target",
    "view": "a view: reads the target, published with it",
    "refreshed": "refreshed after the swap; flagged stale until then",
}


def _batch_row(b: Batch, tz: ZoneInfo) -> str:
    return (
        f"| {b.index} | {b.start}..{b.end} | {len(b.partitions)} | {b.estimated_rows:,} | "
        f"{human_duration(b.estimated_seconds)} | {_local(b.slot.start, tz)}.."
        f"{_local(b.slot.end, tz, with_date=False)} | {', '.join(b.gates)} |"
    )


def _timeline(plan: BackfillPlan, tz: ZoneInfo) -> list[str]:
    """One line per window occurrence used, with the daily run's slot for that day."""
    w_start = dt.time.fromisoformat(plan.window.start)
    crosses = plan.window.end < plan.window.start
    groups: dict[dt.date, list[Batch]] = {}
    for b in plan.batches:
        local = b.slot.start.astimezone(tz)
        day = local.date()
        # A midnight-crossing window opened the evening before: its early-morning part belongs
        # to the occurrence that started on the previous date.
        if crosses and local.time() < w_start:
            day -= dt.timedelta(days=1)
        groups.setdefault(day, []).append(b)
    c = plan.contention
    out = []
    for day, batches in groups.items():
        if len(batches) <= _TIMELINE_LIST_MAX:
            used = ", ".join(
                f"batch {b.index} ({_hm(b.slot.start, tz)}-{_hm(b.slot.end, tz)})" for b in batches
            )
        else:
            used = (
                f"batches {batches[0].index}-{batches[-1].index} "
                f"({_hm(batches[0].slot.start, tz)}-{_hm(batches[-1].slot.end, tz)})"
            )
        out.append(
            f"{day}  daily {c.daily_slot_start}-{c.daily_slot_end} | window "
            f"{plan.window.label}: {used}"
        )
    return out


_CELL_MIN = 30
_CELLS = 24 * 60 // _CELL_MIN
_PICTURE_DAYS_MAX = 14
_BATCH_MARKS = "123456789abcdefghijklmnopqrstuvwxyz"


def _cells(start: str, end: str) -> set[int]:
    """The cells of a daily HH:MM-HH:MM span (it may cross midnight)."""
    a, b = (_minutes(x) for x in (start, end))
    b = b if b > a else b + 24 * 60
    return {(m // _CELL_MIN) % _CELLS for m in range(a, b, _CELL_MIN)} | {(a // _CELL_MIN)}


def _minutes(hm: str) -> int:
    h, m = hm.split(":")[:2]
    return int(h) * 60 + int(m)


def _picture(plan: BackfillPlan, tz: ZoneInfo) -> list[str]:
    """A day-by-hour chart of the batches against the daily run's slot and the window."""
    window = _cells(plan.window.start, plan.window.end)
    daily = _cells(plan.contention.daily_slot_start, plan.contention.daily_slot_end)
    base = "".join("D" if i in daily else "-" if i in window else "." for i in range(_CELLS))
    used: dict[dt.date, dict[int, set[int]]] = {}
    for b in plan.batches:
        start, end = b.slot.start.astimezone(tz), b.slot.end.astimezone(tz)
        t = start.replace(minute=start.minute - start.minute % _CELL_MIN, second=0, microsecond=0)
        while t < end or t == start.replace(second=0, microsecond=0):
            cell = (t.hour * 60 + t.minute) // _CELL_MIN
            used.setdefault(t.date(), {}).setdefault(cell, set()).add(b.index)
            t += dt.timedelta(minutes=_CELL_MIN)
    rows: dict[dt.date, list[str]] = {}
    for day, cells in used.items():
        row = list(base)
        for cell, batches in cells.items():
            if len(batches) > 1:
                row[cell] = "#"
            else:
                row[cell] = _BATCH_MARKS[(min(batches) - 1) % len(_BATCH_MARKS)]
        rows[day] = row
    scale = "".join(f"{h:02d}    " for h in range(0, 24, 3))
    out = [f"{'':10}  {scale}"]
    days = sorted(rows)
    for day in days[:_PICTURE_DAYS_MAX]:
        out.append(f"{day}  {''.join(rows[day])}")
    if len(days) > _PICTURE_DAYS_MAX:
        out.append(f"... {len(days) - _PICTURE_DAYS_MAX} more days, listed below")
    return out


def _hm(t: dt.datetime, tz: ZoneInfo) -> str:
    return t.astimezone(tz).strftime("%H:%M")


def _local(t: dt.datetime, tz: ZoneInfo, *, with_date: bool = True) -> str:
    local = t.astimezone(tz)
    return local.strftime("%Y-%m-%d %H:%M:%S %z" if with_date else "%H:%M:%S")


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    units = ("KiB", "MiB", "GiB", "TiB")
    size, i = n / 1024, 0
    while size >= 1024 and i < len(units) - 1:
        size, i = size / 1024, i + 1
    return f"{size:.1f} {units[i]}"
