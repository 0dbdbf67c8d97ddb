"""The diff as a reviewer reads it: text for the terminal, Markdown for a ticket or a review."""

from __future__ import annotations

import datetime as dt
from typing import Any

from backfill_assets.lib.review.diff import ColumnDiff, DataDiff


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:+,.2f}" if v else "0"


def _amount(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _range(diff: DataDiff) -> str:
    return f"{diff.start}..{diff.end - dt.timedelta(days=1)}"


def headline(diff: DataDiff) -> str:
    """One line: what changed, for `status` and the plan's summary."""
    changed = diff.changed_columns
    rows = diff.rows_changed
    total = diff.rows_in_both + diff.only_in_shadow + diff.only_in_live
    cols = ", ".join(
        f"{c.name} {c.changed_share:.1%}"
        + (f" ({_num(c.numeric.total_delta)})" if c.numeric and c.numeric.total_delta else "")
        for c in changed
    )
    return (
        f"{rows:,} of {total:,} rows change over {_range(diff)}"
        + (f": {cols}" if cols else "")
        + (f"; {diff.only_in_shadow:,} new" if diff.only_in_shadow else "")
        + (f"; {diff.only_in_live:,} gone" if diff.only_in_live else "")
    )


def _column_lines(c: ColumnDiff) -> list[str]:
    out = [f"{c.name} ({c.sql_type}): {c.changed_rows:,} rows changed ({c.changed_share:.2%})"]
    n = c.numeric
    if n is not None and c.changed_rows:
        q = n.delta_quantiles
        out.append(
            f"  sum {_amount(n.sum_before)} -> {_amount(n.sum_after)} (total delta "
            f"{_num(n.total_delta)}); mean {_amount(n.mean_before)} -> {_amount(n.mean_after)}; "
            f"per changed row: mean delta {_num(n.mean_delta)}"
        )
        if q:
            out.append("  delta quantiles: " + ", ".join(f"{k} {_num(v)}" for k, v in q.items()))
    for old, new, rows in c.top_pairs:
        out.append(f"  {old!r} -> {new!r}: {rows:,} rows")
    return out


def render_text(diff: DataDiff, *, title: str = "") -> str:
    lines = [title or f"diff of {diff.table} over {_range(diff)} (shadow against live)", ""]
    s = diff.schema
    if s.empty:
        lines.append("schema: the same columns and types")
    else:
        lines += [f"schema: column {c} added" for c in s.added]
        lines += [f"schema: column {c} removed" for c in s.removed]
        lines += [f"schema: column {c} was {a}, is {b}" for c, a, b in s.changed_type]
    lines.append(
        f"rows: {diff.rows_in_both:,} in both, {diff.only_in_shadow:,} only in the shadow, "
        f"{diff.only_in_live:,} only in live; {diff.rows_changed:,} change"
    )
    changed = diff.changed_columns
    same = [c.name for c in diff.columns if not c.changed_rows]
    lines.append("")
    lines.append(f"changed columns ({len(changed)}):" if changed else "no column changed")
    for c in changed:
        lines += _column_lines(c)
    if same:
        lines.append(f"unchanged on every row: {', '.join(same)}")
    if diff.known_same:
        lines.append(
            f"(not compared row by row, equal by the gates' fingerprints: "
            f"{', '.join(diff.known_same)})"
        )
    numeric = [c.name for c in changed if c.numeric]
    if diff.days:
        lines += ["", "per day: rows changed" + "".join(f"; {c} before -> after" for c in numeric)]
        for d in diff.days:
            sums = "".join(f"; {_amount(d.sums[c][0])} -> {_amount(d.sums[c][1])}" for c in numeric)
            lines.append(f"  {d.day}  {d.rows_changed:,}{sums}")
    if diff.side_by_side:
        lines += ["", "changed rows side by side (old -> new):"]
        lines += [f"  {_row(r)}" for r in diff.side_by_side]
    return "\n".join(lines)


def _row(r: dict[str, Any]) -> str:
    parts = []
    for k, v in r.items():
        if isinstance(v, dict):
            parts.append(f"{k} {v['old']!r} -> {v['new']!r}")
        elif k != "side" or v != "both":
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def render_markdown(diff: DataDiff, *, title: str = "") -> str:
    lines = [f"# {title or f'Diff of {diff.table} over {_range(diff)}'}", "", headline(diff), ""]
    s = diff.schema
    lines.append(
        "Schema: the same columns and types."
        if s.empty
        else "Schema: "
        + "; ".join(
            [f"`{c}` added" for c in s.added]
            + [f"`{c}` removed" for c in s.removed]
            + [f"`{c}` {a} -> {b}" for c, a, b in s.changed_type]
        )
        + "."
    )
    lines += [
        "",
        "| rows in both | only in shadow | only in live | changed |",
        "| ---: | ---: | ---: | ---: |",
        f"| {diff.rows_in_both:,} | {diff.only_in_shadow:,} | {diff.only_in_live:,} | "
        f"{diff.rows_changed:,} |",
        "",
        "| column | changed rows | share | sum before | sum after | total delta | p50 delta |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in diff.columns:
        n = c.numeric
        lines.append(
            f"| `{c.name}` | {c.changed_rows:,} | {c.changed_share:.2%} | "
            + (
                f"{_amount(n.sum_before)} | {_amount(n.sum_after)} | {_num(n.total_delta)} | "
                f"{_num(n.delta_quantiles.get('p50'))} |"
                if n is not None
                else "| | | |"
            )
        )
    for c in diff.changed_columns:
        if c.top_pairs:
            lines += ["", f"Most frequent changes of `{c.name}`:", ""]
            lines += [f"- `{o}` -> `{v}`: {k:,} rows" for o, v, k in c.top_pairs]
    if diff.side_by_side:
        lines += ["", "Changed rows side by side:", ""]
        lines += [f"- {_row(r)}" for r in diff.side_by_side]
    return "\n".join(lines) + "\n"
