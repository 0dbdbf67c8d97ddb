"""BackfillPlan: the plan as data. Frozen, JSON-serialisable, versioned, verifiable.

The plan and its parts are pydantic dataclasses; one `TypeAdapter` reads and writes the JSON, and
its JSON Schema is the plan contract shipped with the package (`plan.schema.json`, checked by the
tests together with the rules a schema cannot say; see `verify_integrity`). Dates are inclusive
ISO dates at this edge (`start`, `end`, each batch's `start`/`end`); slots are ISO datetimes with
a UTC offset, in the plan's timezone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    AwareDatetime,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    TypeAdapter,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from backfill_assets.constants import CORE_GATES, PLAN_SCHEMA_VERSION, SHADOW_SUFFIX
from backfill_assets.errors import InvalidInput
from backfill_assets.lib.planning.batches import Budget, week_spans
from backfill_assets.lib.planning.criteria import Criteria

ROLLBACK_STRATEGIES = ("backup",)
# The dbt materializations a swap rebuilds in shadow and publishes with the target (a view reads
# the target by name and follows it; anything else is refreshed after the swap).
PUBLISHED_MATERIALIZATIONS = ("table", "incremental")
# A plan file is a few hundred KiB at most (a year of daily partitions); refuse anything far
# larger before parsing it.
MAX_PLAN_BYTES = 8 * 1024 * 1024

_CONFIG = ConfigDict(extra="forbid")


def _iso_instant(value: Any) -> Any:
    """An instant in a plan is an ISO 8601 date-time: pydantic would also read a number, or a
    string of digits, as seconds since 1970, so an edit to `created_at: 0` passed as a plan."""
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return dt.datetime.fromisoformat(value)
    raise PydanticCustomError("datetime_parsing", "not an ISO 8601 date-time")


# Instants keep the `isoformat()` spelling (+00:00, not Z) the contract has always used.
Instant = Annotated[
    AwareDatetime,
    BeforeValidator(_iso_instant),
    PlainSerializer(lambda v: v.isoformat(), when_used="json"),
]


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
    why: Mapping[str, str] | None = None,
) -> str:
    """Deterministic plan id: "p" + 10 hex digits of sha256 over the canonical request.

    The same request always gets the same id (so re-planning is idempotent and the id can name
    physical backup tables); `now` and estimates are deliberately left out. A plan of what is
    stale has its reasons (`why`) in the id too, so that they cannot be edited either; a plan
    without reasons keeps the id it always had.
    """
    request: dict[str, Any] = {
        "target": target,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "window": window,
        "timezone": timezone,
        "rollback": rollback,
        "criteria": criteria.to_dict(),
    }
    if why:
        request["why"] = dict(why)
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return "p" + hashlib.sha256(canonical.encode()).hexdigest()[:10]


@dataclass(frozen=True, config=_CONFIG)
class ImpactedAsset:
    """One asset downstream of the target and the partitions of it the backfill affects."""

    asset_key: str  # Dagster slash-joined key, e.g. "fct_weekly_revenue"
    partitions: tuple[str, ...] | Literal["all"]  # affected keys, or "all" = full refresh
    kind: str = "asset"  # "asset", "dbt"; "dbt table" etc. when published (lib.planning.impact)

    @property
    def at_swap(self) -> Literal["published", "view", "refreshed"]:
        """What the swap does with it: a dbt table or incremental model of a table that declares
        downstream_dbt is rebuilt in shadow and published with the target; a dbt view of one
        reads the target (its shadow view exists for the build only); anything else is
        refreshed after the swap."""
        if self.kind in tuple(f"dbt {m}" for m in PUBLISHED_MATERIALIZATIONS):
            return "published"
        return "view" if self.kind == "dbt view" else "refreshed"

    @classmethod
    def built(
        cls, asset_key: str, partitions: tuple[str, ...] | Literal["all"], kind: str
    ) -> ImpactedAsset:
        """One built by the planner from Dagster's own keys, without validation: the fields
        already have their types, and validating 10,000 assets' tuples of up to 1,826 keys again
        took a fifth of a plan's time. Plans read from anywhere else are validated."""
        out = object.__new__(cls)
        object.__setattr__(out, "asset_key", asset_key)
        object.__setattr__(out, "partitions", partitions)
        object.__setattr__(out, "kind", kind)
        return out


@dataclass(frozen=True, config=_CONFIG)
class Slot:
    """When a batch runs: aware datetimes in the plan's timezone."""

    start: Instant
    end: Instant


@dataclass(frozen=True, config=_CONFIG)
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


@dataclass(frozen=True, config=_CONFIG)
class Cost:
    """Total estimated work and the rates behind it."""

    basis: str
    rows: int
    bytes: int
    seconds: float
    per_batch_overhead_seconds: float
    seconds_per_row: float


class _DailySlotJSON(TypedDict):
    start: str
    end: str


_BUDGET_FIELDS = ("max_seconds", "max_rows")


class _BudgetJSON(TypedDict):
    """The table's backfill budget per window occurrence (null: no bound on that quantity)."""

    max_seconds: float | None
    max_rows: int | None


class _ContentionJSON(TypedDict):
    """Contention as it reads in the JSON contract (the daily slot nested)."""

    daily_job: str
    daily_slot: _DailySlotJSON
    daily_expected_start: str
    daily_duration_seconds: float
    margin_seconds: int
    basis: str
    occurrences_needed: int
    expected_finish: str
    timezone: str
    daily_timezone: NotRequired[str]
    budget: NotRequired[_BudgetJSON]


@dataclass(frozen=True, config=_CONFIG)
class Contention:
    """The daily production run the batches keep clear of, and how many window nights they need.

    `daily_slot_start`/`daily_slot_end` (JSON: `daily_slot`) is [expected start - margin,
    expected start + duration + margin] as local HH:MM in the plan's timezone on the day it was
    planned, for people. What the driver keeps clear is computed every day from
    `daily_expected_start` in `daily_timezone` (the daily job's, i.e. the partitions'), so a DST
    change in either zone never shifts the real slot. Plans written before `daily_timezone`
    existed fall back to the slot as shown.
    """

    daily_job: str
    daily_slot_start: str
    daily_slot_end: str
    daily_expected_start: str
    daily_duration_seconds: float
    margin_seconds: int
    basis: str
    occurrences_needed: int
    expected_finish: Instant
    timezone: str
    daily_timezone: str | None = None
    # The table's backfill budget the batches were placed within (JSON: `budget`, absent when
    # the table declares none; plans written before it read as without).
    budget_max_seconds: float | None = None
    budget_max_rows: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _flat_slot(cls, data: Any) -> Any:
        # The JSON's nested objects, as the flat fields they are here (`daily_slot.start` is
        # `daily_slot_start`).
        for key, fields in (("daily_slot", ("start", "end")), ("budget", _BUDGET_FIELDS)):
            if isinstance(data, Mapping) and key in data:
                data = dict(data)
                nested = data.pop(key)
                if not isinstance(nested, Mapping):
                    raise ValueError(f"{key} must be an object with {' and '.join(fields)}")
                for f in fields:
                    data[f"{key}_{f}"] = nested.get(f)
        return data

    @property
    def budget(self) -> Budget | None:
        """The budget the batches were placed within (None: the table declares none)."""
        if self.budget_max_seconds is None and self.budget_max_rows is None:
            return None
        return Budget(self.budget_max_seconds, self.budget_max_rows)

    @model_serializer(mode="wrap")
    def _nested_slot(self, handler: Any) -> _ContentionJSON:
        data = handler(self)
        out = {"daily_job": data.pop("daily_job")}
        out["daily_slot"] = {
            "start": data.pop("daily_slot_start"),
            "end": data.pop("daily_slot_end"),
        }
        if data.get("daily_timezone") is None:
            data.pop("daily_timezone", None)
        budget = {f: data.pop(f"budget_{f}", None) for f in _BUDGET_FIELDS}
        if any(v is not None for v in budget.values()):
            data["budget"] = budget
        return {**out, **data}  # type: ignore[return-value]


@dataclass(frozen=True, config=_CONFIG)
class PlanWindow:
    """The idle window as written: local "HH:MM" times in `timezone`; end < start crosses
    midnight."""

    start: str
    end: str
    timezone: str

    @property
    def label(self) -> str:
        return f"{self.start}-{self.end}"


@dataclass(frozen=True, config=_CONFIG)
class Rollback:
    """How to undo the swap: the strategy and the exact command."""

    strategy: str
    command: str


@dataclass(frozen=True, config=_CONFIG)
class BackfillPlan:
    """Everything a backfill will do, decided before anything runs. Build it with `build_plan`."""

    schema_version: int
    plan_id: str
    created_at: Instant
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
    # Why each partition is in the plan, for a plan of what is stale (`plan --stale`): partition
    # -> "built by code version 1 on 2026-09-03 (run 1a2b3c4d)". Empty for a plan of a range
    # the user named. Optional: plans written before it read as empty.
    why: Mapping[str, str] = field(default_factory=dict)

    @property
    def end_exclusive(self) -> dt.date:
        """Half-open end of the range, for code that works on [start, end)."""
        return self.end + dt.timedelta(days=1)

    @property
    def gates(self) -> tuple[str, ...]:
        """The gates of its batches, in order (a plan built before the diff gate lacks it)."""
        return tuple(dict.fromkeys(g for b in self.batches for g in b.gates))

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-native data (lists, strings, numbers), keys in contract order.
        `why` only when there are reasons (a plan of what is stale)."""
        data = PLAN_ADAPTER.dump_python(self, mode="json")
        if not data["why"]:
            del data["why"]
        if data["criteria"].get("diff") is None:
            data["criteria"].pop("diff", None)  # no thresholds: the plan reads as before them
        return data

    def to_json(self, indent: int | None = 2) -> str:
        """The plan as a JSON document."""
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def from_dict(data: Any) -> BackfillPlan:
        """Read a plan written by `to_dict`.

        Raises:
            InvalidInput: when keys are missing, the schema version is unknown, or a value does
                not parse.
        """
        if not isinstance(data, Mapping):
            raise InvalidInput(
                "a plan must be a JSON object; re-create it with backfill-assets plan"
            )
        missing = [k for k in PLAN_KEYS if k not in data]
        if missing:
            raise InvalidInput(
                f"plan is missing keys {missing}; it was truncated or edited, re-create it with "
                "backfill-assets plan"
            )
        version = data["schema_version"]
        if type(version) is not int or version != PLAN_SCHEMA_VERSION:
            raise InvalidInput(
                f"plan schema_version {version!r} is not supported (this version reads "
                f"{PLAN_SCHEMA_VERSION}); re-create the plan with this version's "
                "backfill-assets plan"
            )
        try:
            return PLAN_ADAPTER.validate_python(data)
        except ValidationError as e:
            raise _plan_error(e) from None
        except RecursionError:
            raise InvalidInput("plan is nested too deeply to be a plan; re-create it") from None

    @staticmethod
    def from_json(text: str | bytes) -> BackfillPlan:
        """Read a plan written by `to_json` (text, or the bytes of a file).

        Raises:
            InvalidInput: for binary, oversized, truncated or invalid JSON, and everything
                `from_dict` refuses.
        """
        if len(text) > MAX_PLAN_BYTES:
            raise InvalidInput(
                f"plan is {len(text):,} bytes, more than any plan ({MAX_PLAN_BYTES:,}); is it the "
                "right file? Re-create it with backfill-assets plan"
            )
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInput(
                    "plan is not UTF-8 text (is it a binary file?); a plan is the JSON written "
                    "by backfill-assets plan"
                ) from None
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError) as e:
            raise InvalidInput(
                f"plan is not valid JSON ({e}); the file may be truncated: re-create it with "
                "backfill-assets plan"
            ) from None
        except RecursionError:
            raise InvalidInput(
                "plan JSON is nested too deeply to be a plan; re-create it with "
                "backfill-assets plan"
            ) from None
        return BackfillPlan.from_dict(data)


PLAN_ADAPTER = TypeAdapter(BackfillPlan)
# The keys every plan has; `why` may be absent (plans from before it).
PLAN_KEYS = tuple(k for k in BackfillPlan.__dataclass_fields__ if k != "why")


SCHEMA_FILE = "plan.schema.json"


def plan_json_schema() -> dict[str, Any]:
    """The plan contract as JSON Schema, generated from the plan's types. `plan.schema.json`
    next to this module is this, written out (a test keeps the two equal)."""
    schema = PLAN_ADAPTER.json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://backfill-assets.invalid/plan.schema.json"
    return schema


def shipped_plan_schema() -> dict[str, Any]:
    """The plan contract as shipped with the package."""
    from importlib.resources import files

    return json.loads(files("backfill_assets.lib.planning").joinpath(SCHEMA_FILE).read_text())


_PROBLEMS = {
    "missing": "is missing",
    "extra_forbidden": "is not a key of the plan",
    "unexpected_keyword_argument": "is not a key of the plan",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "dataclass_type": "must be an object",
    "dict_type": "must be an object",
    "timezone_aware": "has no UTC offset",
}


def _path(parts: list[str]) -> str:
    """Where in the plan, as dotted keys. A key of an edited file can hold a dot or a control
    character, so the path is kept as parts until here, and a part that is not printable is shown
    escaped: the message stays one line that names the right key."""
    return ".".join(p if p.isprintable() else repr(p)[1:-1] for p in parts)


def _plan_error(e: ValidationError) -> InvalidInput:
    """pydantic's first complaint as one line: where in the plan, the value, what is wrong."""
    err = e.errors()[0]
    # A path through a union (e.g. impact partitions: list or "all") names the branch tried.
    parts = [p for p in map(str, err["loc"]) if not p.startswith(("tuple[", "literal["))]
    loc = _path(parts)
    kind = err["type"]
    if kind in ("missing", "extra_forbidden", "unexpected_keyword_argument"):
        key = parts[-1] if parts else ""
        owner = f"plan {_path(parts[:-1])}" if len(parts) > 1 else "plan"
        what = (
            f"{owner} is missing key {key!r}"
            if kind == "missing"
            else (f"{owner} has unknown key {key!r}")
        )
    elif kind.startswith("date") or kind.startswith("datetime"):
        noun = "datetime" if kind.startswith("datetime") else "date"
        what = f"plan {loc} {err.get('input')!r} is not an ISO {noun}"
    else:
        problem = _PROBLEMS.get(kind, err["msg"].lower())
        what = f"plan {loc} {problem} (got {str(err.get('input'))[:60]!r})"
    return InvalidInput(
        f"{what}; it was edited or is damaged, re-create it with backfill-assets plan"
    )


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
        why=plan.why,
    )
    if plan.plan_id != expected_id:
        raise bad(
            f"plan_id {plan.plan_id} does not match its target, range, window, timezone, rollback, "
            f"criteria and reasons (expected {expected_id})"
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
        missing = [g for g in CORE_GATES if g not in batch.gates]
        if missing:
            raise bad(f"batch {i} lacks gates {missing}")
        if batch.slot.end <= batch.slot.start:
            raise bad(f"batch {i} slot ends before it starts")
        if i > 1 and batch.slot.start < plan.batches[i - 2].slot.end:
            raise bad(f"batch {i} slot starts before batch {i - 1} ends")
    outside = sorted(set(plan.why) - set(plan.partitions))
    if outside:
        raise bad(f"why names partitions outside the plan ({', '.join(outside[:3])})")


def _keys(start: dt.date, n_days: int) -> tuple[str, ...]:
    return tuple((start + dt.timedelta(days=i)).isoformat() for i in range(n_days))
