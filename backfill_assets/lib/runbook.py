"""A table's backfill runbook, generated from its declaration (and, where there is one, the daily
job's run history), never written by hand: it changes when they do.

It is shown on the target asset in the Dagster UI (from the declaration) and printed by
`backfill-assets runbook TABLE` (with the daily job's history from the instance).
"""

from __future__ import annotations

import datetime as dt
import math

import yaml

from backfill_assets.lib.planning.batches import human_duration
from backfill_assets.lib.planning.cost import SAFETY_MARGIN_SECONDS, daily_duration
from backfill_assets.lib.table import BackfillableTable

HALF_HOUR = 1800
DAY = 86_400
LONGEST_PROPOSAL = 6 * 3600  # a proposed window is at most this long


def _hhmm(seconds: int) -> str:
    seconds %= DAY
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"


def propose_window(daily_start: dt.time, duration_s: float) -> str | None:
    """An idle window clear of the daily run and its margins: from half an hour after the run's
    margin ends, at most six hours, ending at the latest where the next run's margin begins;
    None when the day leaves less than an hour."""
    start_s = daily_start.hour * 3600 + daily_start.minute * 60
    busy_end = start_s + math.ceil(duration_s) + SAFETY_MARGIN_SECONDS
    first = math.ceil(busy_end / HALF_HOUR) * HALF_HOUR
    last = start_s - SAFETY_MARGIN_SECONDS + DAY  # the next day's margin
    length = min(LONGEST_PROPOSAL, (last - first) // HALF_HOUR * HALF_HOUR)
    if length < 3600:
        return None
    return f"{_hhmm(first)}-{_hhmm(first + length)}"


def render_runbook(
    table: BackfillableTable, daily_durations: tuple[float, ...] | None = None
) -> str:
    """The runbook in Markdown. `daily_durations`: the daily job's past run times, when the
    caller read them from the instance (None: the declaration alone, as on the asset)."""
    key, tz = table.key, table.timezone
    duration, basis = daily_duration(daily_durations or (), table.daily_job)
    start_s = table.daily_expected_start.hour * 3600 + table.daily_expected_start.minute * 60
    slot = (
        f"{_hhmm(start_s - SAFETY_MARGIN_SECONDS)}-"
        f"{_hhmm(start_s + math.ceil(duration) + SAFETY_MARGIN_SECONDS)}"
    )
    window = table.backfill_window
    proposed = propose_window(table.daily_expected_start, duration)
    window_text = (
        f"`{window}` ({tz}): plans launched from the UI use it; `plan` takes it as `--window`"
        if window
        else "none declared: `plan` needs `--window`, and a backfill launched from the UI is "
        "refused. Declare `backfill_window="
        + (f'"{proposed}"`, proposed from the daily job\'s slot' if proposed else '"HH:MM-HH:MM"`')
    )
    budget = table.backfill_budget
    budget_text = (
        f"{budget.describe()}: the planner spreads the weekly batches over more occurrences to "
        "stay within it, and refuses a batch that alone goes over it"
        if budget
        else "none declared: the batches fill each window occurrence. Declare "
        "`backfill_budget=Budget(max_seconds=..., max_rows=...)` to bound what one occurrence "
        "takes from the warehouse"
    )
    w = window or proposed or "HH:MM-HH:MM"
    criteria = yaml.safe_dump(table.criteria.to_dict(), sort_keys=False).rstrip()
    spec = table.spec
    lines = [
        f"# Backfill runbook: {key}",
        "",
        "_Generated from the table's declaration"
        + (" and its daily job's run history" if daily_durations is not None else "")
        + f"; it changes when they do. `backfill-assets runbook {key}` prints it._",
        "",
        "## The table",
        "",
        f"- partitioned by day on `{spec.partition_column}` ({tz}), from "
        f"{table.partitions_def.start.date()}; key ({', '.join(spec.primary_key)}); "
        f"{len(spec.columns)} columns",
        f"- built by {'SQL' if table.build_kind == 'sql' else 'a Python function'}, code "
        f"version {table.code_version} (after a logic fix, bump it: `plan --stale` then finds "
        "the partitions built by an older one)",
        "",
        "## The daily job and its slot",
        "",
        f"- `{table.daily_job}` writes the last {table.daily_lookback_days} days; it is expected "
        f"to start at {table.daily_expected_start:%H:%M} ({tz})",
        f"- {basis}; with {human_duration(SAFETY_MARGIN_SECONDS)} margins, backfills keep "
        f"clear of {slot} every day",
        "",
        "## Idle window and budget",
        "",
        f"- idle window: {window_text}",
        f"- budget: {budget_text}",
        "",
        "## Correctness criteria (the gates of every batch)",
        "",
        "```yaml",
        criteria,
        "```",
        "",
        "## Rollback",
        "",
        "- strategy `backup`: the swap keeps the replaced rows until `release`; `rollback` "
        "restores them exactly (the same checksums)",
        "",
        "## Commands",
        "",
        "```bash",
        f"backfill-assets plan {key} --start YYYY-MM-DD --end YYYY-MM-DD --window {w} \\",
        "    --rollback backup --out plan.json    # or --stale after a code version bump",
        "backfill-assets approve plan.json --by NAME",
        "backfill-assets run PLAN_ID              # or: start PLAN_ID (the daemon runs it)",
        "backfill-assets status PLAN_ID",
        "backfill-assets swap PLAN_ID",
        "backfill-assets rollback PLAN_ID         # if the swap must be undone",
        "backfill-assets release PLAN_ID          # drops the backup: no rollback after it",
        "```",
        "",
        "## What the framework refuses",
        "",
        "- a plan without a rollback strategy, or without an idle window that misses the daily "
        "slot above" + ("; a batch that alone goes over the budget" if budget else ""),
        "- a batch beside the daily run, or outside the plan's window",
        "- a second plan of the table while one holds it; two writers of the table at once",
        "- a swap unless every gate of every planned partition passed on the plan's latest "
        "shadow; a swap of a day the daily job rewrote after its shadow was built",
        f"- any write of the live table by a run other than `{table.daily_job}`"
        + (f" ({', '.join(table.production_jobs)})" if table.production_jobs else "")
        + f", and by those beyond the last {table.daily_lookback_days} days",
    ]
    return "\n".join(lines) + "\n"
