"""BackfillPlan: the plan as data. Frozen, JSON-serialisable, versioned, verifiable.

The JSON contract is checked by shared/tools/validate_plan.py. Dates are inclusive ISO dates at
this edge (`start`, `end`, each batch's `start`/`end`); slots are ISO datetimes with a UTC offset,
in the plan's timezone.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from backfill_assets.constants import GATE_NAMES, PLAN_SCHEMA_VERSION, SHADOW_SUFFIX
from backfill_assets.errors import InvalidInput
from backfill_assets.lib.planning.batches import week_spans
from backfill_assets.lib.planning.criteria import Criteria

ROLLBACK_STRATEGIES = ("backup",)

T = TypeVar("T")


def rollback_command(plan_id: str) -> str:
    """The CLI command that restores the rows a plan's swap replaced."""
    return f"backfill-assets rollback {plan_id}"


def compute_plan_id(
    *,
    target: str,
    start: dt.date,
    end: dt.date,
    window: str,
    timezone: str,
    rollback: str,
    criteria: Criteria,
) -> str:
    """Deterministic plan id: "p" + 10 hex digits of sha256 over the canonical request.

    The same request always gets the same id (so re-planning is idempotent and the id can name
    physical backup tables); `now` and estimates are deliberately left out.
    """
    canonical = json.dumps(
        {
            "target": target,
            "start": start.isoformat(),
            "end": end.isoformat(),
            "window": window,
            "timezone": timezone,
            "rollback": rollback,
            "criteria": _jsonable(criteria.to_dict()),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return "p" + hashlib.sha256(canonical.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class ImpactedAsset:
    """One asset downstream of the target and the partitions of it the backfill affects."""

    asset_key: str  # Dagster slash-joined key, e.g. "fct_weekly_revenue"
    partitions: tuple[str, ...] | Literal["all"]  # affected keys, or "all" = full refresh
    kind: str = "asset"  # e.g. "dbt", "asset"

    def to_dict(self) -> dict[str, Any]:
        parts: list[str] | str = "all" if self.partitions == "all" else list(self.partitions)
        return {"asset_key": self.asset_key, "partitions": parts, "kind": self.kind}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> ImpactedAsset:
        parts = _req(data, "partitions", "impact[]")
        if isinstance(parts, str):
            if parts != "all":
                raise InvalidInput(
                    f'impact partitions {parts!r}: use a list of partition keys or "all"'
                )
            return ImpactedAsset(
                str(_req(data, "asset_key", "impact[]")), "all", str(data.get("kind", "asset"))
            )
        return ImpactedAsset(
            str(_req(data, "asset_key", "impact[]")),
            tuple(str(p) for p in _as_list(parts, "impact[].partitions")),
            str(data.get("kind", "asset")),
        )


@dataclass(frozen=True)
class Slot:
    """When a batch runs: aware datetimes in the plan's timezone."""

    start: dt.datetime
    end: dt.datetime


@dataclass(frozen=True)
class Batch:
    """One ISO week of the range (first and last may be partial), run as one gated unit."""

    index: int  # 1-based, execution order
    start: dt.date  # inclusive
    end: dt.date  # inclusive
    partitions: tuple[str, ...]
    gates: tuple[str, ...]
    slot: Slot
    estimated_seconds: float
    estimated_rows: int

    @property
    def end_exclusive(self) -> dt.date:
        """Half-open end, for code that works on [start, end)."""
        return self.end + dt.timedelta(days=1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "partitions": list(self.partitions),
            "gates": list(self.gates),
            "slot": {"start": self.slot.start.isoformat(), "end": self.slot.end.isoformat()},
            "estimated_seconds": self.estimated_seconds,
            "estimated_rows": self.estimated_rows,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Batch:
        where = f"batches[{data.get('index', '?')}]"
        slot = _req(data, "slot", where)
        return Batch(
            index=int(_req(data, "index", where)),
            start=_date(_req(data, "start", where), f"{where}.start"),
            end=_date(_req(data, "end", where), f"{where}.end"),
            partitions=tuple(str(p) for p in _as_list(_req(data, "partitions", where), where)),
            gates=tuple(str(g) for g in _as_list(_req(data, "gates", where), where)),
            slot=Slot(
                _datetime(_req(slot, "start", f"{where}.slot"), f"{where}.slot.start"),
                _datetime(_req(slot, "end", f"{where}.slot"), f"{where}.slot.end"),
            ),
            estimated_seconds=float(_req(data, "estimated_seconds", where)),
            estimated_rows=int(_req(data, "estimated_rows", where)),
        )


@dataclass(frozen=True)
class Cost:
    """Total estimated work and the rates behind it."""

    basis: str
    rows: int
    bytes: int
    seconds: float
    per_batch_overhead_seconds: float
    seconds_per_row: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "rows": self.rows,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "per_batch_overhead_seconds": self.per_batch_overhead_seconds,
            "seconds_per_row": self.seconds_per_row,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Cost:
        return Cost(
            basis=str(_req(data, "basis", "cost")),
            rows=int(_req(data, "rows", "cost")),
            bytes=int(_req(data, "bytes", "cost")),
            seconds=float(_req(data, "seconds", "cost")),
            per_batch_overhead_seconds=float(_req(data, "per_batch_overhead_seconds", "cost")),
            seconds_per_row=float(_req(data, "seconds_per_row", "cost")),
        )


@dataclass(frozen=True)
class Contention:
    """The daily production run the batches keep clear of, and how many window nights they need.

    `daily_slot` is [expected start - margin, expected start + duration + margin] as local HH:MM
    in the plan's timezone; `daily_expected_start` is in the target's partitions timezone.
    """

    daily_job: str
    daily_slot_start: str
    daily_slot_end: str
    daily_expected_start: str
    daily_duration_seconds: float
    margin_seconds: int
    basis: str
    occurrences_needed: int
    expected_finish: dt.datetime
    timezone: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "daily_job": self.daily_job,
            "daily_slot": {"start": self.daily_slot_start, "end": self.daily_slot_end},
            "daily_expected_start": self.daily_expected_start,
            "daily_duration_seconds": self.daily_duration_seconds,
            "margin_seconds": self.margin_seconds,
            "basis": self.basis,
            "occurrences_needed": self.occurrences_needed,
            "expected_finish": self.expected_finish.isoformat(),
            "timezone": self.timezone,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Contention:
        slot = _req(data, "daily_slot", "contention")
        return Contention(
            daily_job=str(_req(data, "daily_job", "contention")),
            daily_slot_start=str(_req(slot, "start", "contention.daily_slot")),
            daily_slot_end=str(_req(slot, "end", "contention.daily_slot")),
            daily_expected_start=str(_req(data, "daily_expected_start", "contention")),
            daily_duration_seconds=float(_req(data, "daily_duration_seconds", "contention")),
            margin_seconds=int(_req(data, "margin_seconds", "contention")),
            basis=str(_req(data, "basis", "contention")),
            occurrences_needed=int(_req(data, "occurrences_needed", "contention")),
            expected_finish=_datetime(
                _req(data, "expected_finish", "contention"), "contention.expected_finish"
            ),
            timezone=str(_req(data, "timezone", "contention")),
        )


@dataclass(frozen=True)
class PlanWindow:
    """The idle window as written: local "HH:MM" times in `timezone`; end < start crosses
    midnight."""

    start: str
    end: str
    timezone: str

    @property
    def label(self) -> str:
        return f"{self.start}-{self.end}"

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "timezone": self.timezone}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> PlanWindow:
        return PlanWindow(
            str(_req(data, "start", "window")),
            str(_req(data, "end", "window")),
            str(_req(data, "timezone", "window")),
        )


@dataclass(frozen=True)
class Rollback:
    """How to undo the swap: the strategy and the exact command."""

    strategy: str
    command: str

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "command": self.command}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Rollback:
        return Rollback(
            str(_req(data, "strategy", "rollback")), str(_req(data, "command", "rollback"))
        )


_TOP_KEYS = (
    "schema_version",
    "plan_id",
    "created_at",
    "target",
    "shadow",
    "start",
    "end",
    "partitions",
    "criteria",
    "impact",
    "cost",
    "contention",
    "window",
    "rollback",
    "batches",
)


@dataclass(frozen=True)
class BackfillPlan:
    """Everything a backfill will do, decided before anything runs. Build it with `build_plan`."""

    schema_version: int
    plan_id: str
    created_at: dt.datetime
    target: str
    shadow: str
    start: dt.date  # inclusive
    end: dt.date  # inclusive
    partitions: tuple[str, ...]
    criteria: Criteria
    impact: tuple[ImpactedAsset, ...]
    cost: Cost
    contention: Contention
    window: PlanWindow
    rollback: Rollback
    batches: tuple[Batch, ...]

    @property
    def end_exclusive(self) -> dt.date:
        """Half-open end of the range, for code that works on [start, end)."""
        return self.end + dt.timedelta(days=1)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-native data (lists, strings, numbers), keys in contract order."""
        return {
            "schema_version": self.schema_version,
            "plan_id": self.plan_id,
            "created_at": self.created_at.isoformat(),
            "target": self.target,
            "shadow": self.shadow,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "partitions": list(self.partitions),
            "criteria": _jsonable(self.criteria.to_dict()),
            "impact": [a.to_dict() for a in self.impact],
            "cost": self.cost.to_dict(),
            "contention": self.contention.to_dict(),
            "window": self.window.to_dict(),
            "rollback": self.rollback.to_dict(),
            "batches": [b.to_dict() for b in self.batches],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """The plan as a JSON document."""
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> BackfillPlan:
        """Read a plan written by `to_dict`.

        Raises:
            InvalidInput: when keys are missing, the schema version is unknown, or a value does
                not parse.
        """
        if not isinstance(data, Mapping):
            raise InvalidInput(
                "a plan must be a JSON object; re-create it with backfill-assets plan"
            )
        missing = [k for k in _TOP_KEYS if k not in data]
        if missing:
            raise InvalidInput(
                f"plan is missing keys {missing}; it was truncated or edited, re-create it with "
                "backfill-assets plan"
            )
        version = data["schema_version"]
        if version != PLAN_SCHEMA_VERSION:
            raise InvalidInput(
                f"plan schema_version {version!r} is not supported (this version reads "
                f"{PLAN_SCHEMA_VERSION}); re-create the plan with this version's "
                "backfill-assets plan"
            )
        try:
            return BackfillPlan(
                schema_version=int(version),
                plan_id=str(data["plan_id"]),
                created_at=_datetime(data["created_at"], "created_at"),
                target=str(data["target"]),
                shadow=str(data["shadow"]),
                start=_date(data["start"], "start"),
                end=_date(data["end"], "end"),
                partitions=tuple(str(p) for p in _as_list(data["partitions"], "partitions")),
                criteria=Criteria.from_dict(dict(_mapping(data["criteria"], "criteria"))),
                impact=tuple(
                    ImpactedAsset.from_dict(_mapping(a, "impact[]"))
                    for a in _as_list(data["impact"], "impact")
                ),
                cost=Cost.from_dict(_mapping(data["cost"], "cost")),
                contention=Contention.from_dict(_mapping(data["contention"], "contention")),
                window=PlanWindow.from_dict(_mapping(data["window"], "window")),
                rollback=Rollback.from_dict(_mapping(data["rollback"], "rollback")),
                batches=tuple(
                    Batch.from_dict(_mapping(b, "batches[]"))
                    for b in _as_list(data["batches"], "batches")
                ),
            )
        except (TypeError, ValueError, AttributeError) as e:
            raise InvalidInput(f"plan has a value that does not parse: {e}") from e

    @staticmethod
    def from_json(text: str) -> BackfillPlan:
        """Read a plan written by `to_json`.

        Raises:
            InvalidInput: for truncated or invalid JSON, and everything `from_dict` refuses.
        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError) as e:
            raise InvalidInput(
                f"plan is not valid JSON ({e}); the file may be truncated: re-create it with "
                "backfill-assets plan"
            ) from e
        return BackfillPlan.from_dict(data)


def verify_integrity(plan: BackfillPlan) -> None:
    """Check that a plan is still what the planner wrote.

    Catches hand edits: the id no longer matching the request, a shadow that is not the target's,
    partitions or batches that are not exactly the ISO-week split of [start, end], a batch without
    every gate, slots that are missing or reversed, a rollback other than the backup one.

    Raises:
        InvalidInput: naming the first problem found.
    """

    def bad(what: str) -> InvalidInput:
        return InvalidInput(
            f"plan {plan.plan_id} fails its integrity check: {what}; plans must not be edited by "
            "hand, re-create it with backfill-assets plan"
        )

    if plan.schema_version != PLAN_SCHEMA_VERSION:
        raise bad(f"schema_version {plan.schema_version} is not {PLAN_SCHEMA_VERSION}")
    if plan.shadow != plan.target + SHADOW_SUFFIX:
        raise bad(f"shadow {plan.shadow!r} is not {plan.target + SHADOW_SUFFIX!r}")
    if plan.end < plan.start:
        raise bad(f"end {plan.end} is before start {plan.start}")
    expected_id = compute_plan_id(
        target=plan.target,
        start=plan.start,
        end=plan.end,
        window=plan.window.label,
        timezone=plan.window.timezone,
        rollback=plan.rollback.strategy,
        criteria=plan.criteria,
    )
    if plan.plan_id != expected_id:
        raise bad(
            f"plan_id {plan.plan_id} does not match its target, range, window, timezone, rollback "
            f"and criteria (expected {expected_id})"
        )
    if plan.rollback.strategy not in ROLLBACK_STRATEGIES:
        raise bad(
            f"rollback strategy {plan.rollback.strategy!r} is not one of {ROLLBACK_STRATEGIES}"
        )
    if plan.rollback.command != rollback_command(plan.plan_id):
        raise bad(
            f"rollback command {plan.rollback.command!r} is not {rollback_command(plan.plan_id)!r}"
        )
    n_days = (plan.end - plan.start).days + 1
    if len(plan.partitions) != n_days or plan.partitions != _keys(plan.start, n_days):
        raise bad(f"partitions do not list every day of {plan.start}..{plan.end} once, in order")
    spans = week_spans(plan.start, plan.end)
    if len(plan.batches) != len(spans):
        raise bad(f"{len(plan.batches)} batches for {len(spans)} ISO weeks of the range")
    offset = 0
    for i, (batch, (ws, we)) in enumerate(zip(plan.batches, spans, strict=True), start=1):
        n = (we - ws).days + 1
        if batch.index != i or batch.start != ws or batch.end != we:
            raise bad(
                f"batch {batch.index} ({batch.start}..{batch.end}) should be batch {i} "
                f"({ws}..{we}), one ISO week"
            )
        if batch.partitions != plan.partitions[offset : offset + n]:
            raise bad(f"batch {i} partitions do not match its dates {ws}..{we}")
        offset += n
        missing = [g for g in GATE_NAMES if g not in batch.gates]
        if missing:
            raise bad(f"batch {i} lacks gates {missing}")
        if batch.slot.start.tzinfo is None or batch.slot.end.tzinfo is None:
            raise bad(f"batch {i} slot has no UTC offset")
        if batch.slot.end <= batch.slot.start:
            raise bad(f"batch {i} slot ends before it starts")
        if i > 1 and batch.slot.start < plan.batches[i - 2].slot.end:
            raise bad(f"batch {i} slot starts before batch {i - 1} ends")


def _keys(start: dt.date, n_days: int) -> tuple[str, ...]:
    return tuple((start + dt.timedelta(days=i)).isoformat() for i in range(n_days))


def _jsonable(value: Any) -> Any:
    """Tuples to lists, recursively, so to_dict() equals json.loads(to_json())."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _req(data: Any, key: str, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise InvalidInput(f"plan {where} must be an object; re-create the plan")
    if key not in data:
        raise InvalidInput(f"plan {where} is missing key {key!r}; re-create the plan")
    return data[key]


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"plan {where} must be an object, got {type(value).__name__}")
    return value


def _as_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(f"plan {where} must be a list, got {type(value).__name__}")
    return value


def _parse(value: Any, where: str, parse: Callable[[str], T], kind: str) -> T:
    try:
        return parse(str(value))
    except ValueError as e:
        raise InvalidInput(f"plan {where} {value!r} is not an ISO {kind}") from e


def _date(value: Any, where: str) -> dt.date:
    return _parse(value, where, dt.date.fromisoformat, "date")


def _datetime(value: Any, where: str) -> dt.datetime:
    parsed = _parse(value, where, dt.datetime.fromisoformat, "datetime")
    if parsed.tzinfo is None:
        raise InvalidInput(f"plan {where} {value!r} has no UTC offset")
    return parsed
