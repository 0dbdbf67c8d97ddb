"""The diff as a picture: for each changed numeric column, its sum per day before (live) and
after (shadow) across the range, one panel per column, as a standalone SVG (no plotting
library: a few lines and labels). The CLI writes it to a file (`diff --chart`); the plan's
reviewed diff on `backfill_plans` embeds it in its Markdown as a data URI, which the Dagster UI's
Markdown view shows as an image (its sanitizer allows `data:` images)."""

from __future__ import annotations

import base64
from html import escape

from backfill_assets.lib.review.diff import DataDiff

_W, _H, _PAD_L, _PAD_R, _PAD_T, _PAD_B = 720, 180, 80, 20, 30, 30
_PLOT_W, _PLOT_H = _W - _PAD_L - _PAD_R, _H - _PAD_T - _PAD_B
_BEFORE, _AFTER = "#9aa0a6", "#1a73e8"


def render_svg(diff: DataDiff) -> str:
    """One panel per changed numeric column (a note when there is none)."""
    columns = [c.name for c in diff.changed_columns if c.numeric is not None]
    days = diff.days
    height = _H * max(1, len(columns)) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
        f'viewBox="0 0 {_W} {height}" font-family="sans-serif" font-size="11">',
        f'<text x="{_PAD_L}" y="16" font-size="13">{escape(diff.table)} '
        f"{diff.start}..{days[-1].day if days else diff.start}: sum per day, "
        f'<tspan fill="{_BEFORE}">before (live)</tspan> and '
        f'<tspan fill="{_AFTER}">after (shadow)</tspan></text>',
    ]
    if not columns or not days:
        out.append(f'<text x="{_PAD_L}" y="50">no numeric column changed</text>')
    for i, c in enumerate(columns):
        top = 30 + i * _H
        before = [d.sums[c][0] for d in days]
        after = [d.sums[c][1] for d in days]
        lo, hi = min(before + after), max(before + after)
        span = (hi - lo) or 1.0
        plot_w, plot_h = _PLOT_W, _PLOT_H

        def point(j: int, v: float, top: float = top, lo: float = lo, span: float = span) -> str:
            x = _PAD_L + (_PLOT_W * j / max(1, len(days) - 1))
            y = top + _PAD_T + _PLOT_H * (1 - (v - lo) / span)
            return f"{x:.1f},{y:.1f}"

        out.append(f'<text x="{_PAD_L}" y="{top + 20}" font-weight="bold">{escape(c)}</text>')
        out.append(
            f'<rect x="{_PAD_L}" y="{top + _PAD_T}" width="{plot_w}" height="{plot_h}" '
            'fill="none" stroke="#dadce0"/>'
        )
        out.append(f'<text x="4" y="{top + _PAD_T + 10}">{hi:,.2f}</text>')
        out.append(f'<text x="4" y="{top + _PAD_T + plot_h}">{lo:,.2f}</text>')
        for values, color in ((before, _BEFORE), (after, _AFTER)):
            pts = " ".join(point(j, v) for j, v in enumerate(values))
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
        y_axis = top + _H - 10
        out.append(f'<text x="{_PAD_L}" y="{y_axis}">{days[0].day}</text>')
        out.append(f'<text x="{_W - _PAD_R}" y="{y_axis}" text-anchor="end">{days[-1].day}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


CHART_ALT = "sum per day before and after"


def markdown_image(diff: DataDiff) -> str:
    """The chart as a Markdown image with the SVG inlined (a data URI): no file to serve."""
    data = base64.b64encode(render_svg(diff).encode()).decode()
    return f"![{CHART_ALT}](data:image/svg+xml;base64,{data})"
