"""Measure 4: planning cost. A placeholder: the planner lands concurrently and its lead adds the
measure here (e.g. plan build time against warehouse stats and run history of growing size)."""

from __future__ import annotations

from typing import Any

from bench.config import NOT_YET_MEASURED, BenchContext


def run(ctx: BenchContext) -> dict[str, Any]:
    del ctx  # unused until the measure exists
    return {"status": NOT_YET_MEASURED}
