"""The plan contract, carried by the project: the JSON Schema shipped with the package, and the
rules a schema cannot say (the same rules as the reference checker `shared/tools/validate_plan.py`:
one batch per ISO week, every partition exactly once, a row-count gate in every batch, slots with
a UTC offset inside the window). The tests use this; nothing outside the repository is needed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema

from backfill_assets.lib.planning.plan import shipped_plan_schema


def _day(value: Any) -> dt.date:
    return dt.date.fromisoformat(str(value)[:10])


def _inside(t: dt.datetime, w0: dt.time, w1: dt.time, tz: str) -> bool:
    local = t.astimezone(ZoneInfo(tz)).time().replace(second=0, microsecond=0)
    return w0 <= local <= w1 if w0 <= w1 else (local >= w0 or local <= w1)


def problems(plan: dict[str, Any]) -> list[str]:
    """Every way `plan` (the JSON of `backfill-assets plan`) breaks the contract; [] if it holds."""
    schema_errors = sorted(
        jsonschema.Draft202012Validator(shipped_plan_schema()).iter_errors(plan), key=str
    )
    out = [f"schema: {e.json_path}: {e.message}" for e in schema_errors]
    if out:
        return out
    start, end = _day(plan["start"]), _day(plan["end"])
    tz = plan["window"]["timezone"]
    w0, w1 = (dt.time.fromisoformat(str(plan["window"][k])[:5]) for k in ("start", "end"))
    if not plan["shadow"] or plan["shadow"] == plan["target"]:
        out.append("shadow is missing or equals the target")
    if not plan["rollback"]:
        out.append("rollback is empty")
    if not plan["impact"]:
        out.append("impact is empty")
    days = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
    weeks = {d.isocalendar()[:2] for d in days}
    if len(plan["batches"]) != len(weeks):
        out.append(f"{len(plan['batches'])} batches for {len(weeks)} ISO weeks")
    covered: list[dt.date] = []
    for b in plan["batches"]:
        keys = [_day(k) for k in b["partitions"]]
        covered += keys
        if keys and len({k.isocalendar()[:2] for k in keys}) > 1:
            out.append(f"batch {b['index']} spans more than one ISO week")
        gates = " ".join(b["gates"]).lower()
        if "row" not in gates or "count" not in gates:
            out.append(f"batch {b['index']} has no row-count gate")
        s0 = dt.datetime.fromisoformat(b["slot"]["start"])
        s1 = dt.datetime.fromisoformat(b["slot"]["end"])
        if s0.tzinfo is None or s1.tzinfo is None:
            out.append(f"batch {b['index']} slot has no UTC offset")
        elif s1 <= s0 or not (_inside(s0, w0, w1, tz) and _inside(s1, w0, w1, tz)):
            out.append(f"batch {b['index']} slot is not inside the window")
    if sorted(covered) != days:
        out.append(f"batches cover {len(covered)} partitions; want {len(days)}")
    return out
