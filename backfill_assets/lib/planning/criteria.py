"""Correctness criteria, written before anything runs: row counts, a validated sample, invariants.

Defaults come from the table's declaration; a YAML file may override any part of them, e.g.:

    row_count:
      compare_to: [source, target]
      tolerance_pct: 0.0
    sample:
      size: 200
      unchanged_columns: [order_id, customer_id, gross_amount]
      changed_columns:
        - name: net_revenue_usd
          must_hold: "net_revenue_usd = round(net_amount * fx_rate, 2)"
    invariants:
      - name: net_amount_non_negative
        predicate: "net_amount >= 0"
    diff:                       # optional thresholds, checked by the diff gate per partition
      max_changed_pct: 20
      only_changed_columns: true
      max_abs_delta: {net_revenue_usd: 50000}

The criteria are pydantic dataclasses: frozen, validated on construction, and (de)serialised by
one `TypeAdapter` (see `to_dict` / `from_dict`), so a plan file and a YAML override go through
the same checks as a declaration in code.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic.dataclasses import dataclass

from backfill_assets.errors import InvalidInput, PlanRefused
from backfill_assets.lib.review.diff import DEFAULT_TOLERANCE
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.predicates import validate_predicate

COMPARE_TARGETS = ("source", "target")
_CONFIG = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=_CONFIG)
class RowCountCriterion:
    """Shadow rows per partition must match the source and/or the current target within a
    relative tolerance. Duplicate primary keys always fail this gate."""

    compare_to: tuple[str, ...] = ("source",)
    tolerance_pct: float = 0.0

    def __post_init__(self) -> None:
        bad = [c for c in self.compare_to if c not in COMPARE_TARGETS]
        if bad or not self.compare_to:
            raise InvalidInput(
                f"row_count.compare_to {list(self.compare_to)!r}: use one or both of "
                f"{list(COMPARE_TARGETS)}"
            )
        if not 0 <= self.tolerance_pct <= 100:
            raise InvalidInput(f"row_count.tolerance_pct {self.tolerance_pct} must be in 0..100")


@dataclass(frozen=True, config=_CONFIG)
class ChangedColumn:
    """A column the fix is expected to change, and what must hold for its new value."""

    name: str
    must_hold: str | None = None


@dataclass(frozen=True, config=_CONFIG)
class SampleCriterion:
    """A reproducible sample per partition: unchanged columns must equal the current target."""

    size: int = Field(default=200, strict=True)
    unchanged_columns: tuple[str, ...] = ()
    changed_columns: tuple[ChangedColumn, ...] = ()
    # Also compare a hash of the unchanged columns over the whole partition (exact, one scan).
    full_compare: bool = True

    @field_validator("changed_columns", mode="before")
    @classmethod
    def _names_alone(cls, value: Any) -> Any:
        # YAML may list a changed column by name alone.
        if isinstance(value, list | tuple):
            return tuple({"name": v} if isinstance(v, str) else v for v in value)
        return value

    def __post_init__(self) -> None:
        if not 1 <= self.size <= 100_000:
            raise InvalidInput(f"sample.size {self.size!r} must be an integer in 1..100000")


@dataclass(frozen=True, config=_CONFIG)
class Invariant:
    name: str
    predicate: str


@dataclass(frozen=True, config=_CONFIG)
class DiffThresholds:
    """Bounds on what the fix may change, per partition, checked by the `diff_gate` on the diff
    of the shadow against the live rows (lib/review/diff.py); a breach fails the batch like any
    other gate. Without them the diff gate records the diff and passes."""

    # At most this share of the partition's rows may change (0..100).
    max_changed_pct: float | None = None
    # No change in a column other than the sample's changed columns.
    only_changed_columns: bool = False
    # column -> the largest |sum after - sum before| of the partition.
    max_abs_delta: dict[str, float] = Field(default_factory=dict)
    # A float column's values differing by at most this are the same.
    float_tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        if self.max_changed_pct is not None and not 0 <= self.max_changed_pct <= 100:
            raise InvalidInput(f"diff.max_changed_pct {self.max_changed_pct} must be in 0..100")
        for c, v in self.max_abs_delta.items():
            validate_ident(c, "diff.max_abs_delta column")
            if v < 0:
                raise InvalidInput(f"diff.max_abs_delta.{c} {v} must be 0 or more")

    @property
    def declared(self) -> bool:
        return (
            self.max_changed_pct is not None
            or self.only_changed_columns
            or bool(self.max_abs_delta)
        )


@dataclass(frozen=True, config=_CONFIG)
class Criteria:
    row_count: RowCountCriterion | None = None
    sample: SampleCriterion | None = None
    invariants: tuple[Invariant, ...] = ()
    # Thresholds on the diff (absent from a plan's JSON when none are declared).
    diff: DiffThresholds | None = None

    def validate(self, columns: tuple[str, ...]) -> Criteria:
        """Refuse criteria that lack a row-count or sample part, or name unknown columns."""
        missing = [n for n, v in (("row_count", self.row_count), ("sample", self.sample)) if not v]
        if missing:
            raise PlanRefused(
                f"criteria have no {' and no '.join(missing)} criterion; a plan needs both "
                "(declare them on the table or pass --criteria FILE)"
            )
        assert self.sample is not None
        known = set(columns)
        for c in (*self.sample.unchanged_columns, *(c.name for c in self.sample.changed_columns)):
            validate_ident(c, "criteria column")
            if c not in known:
                raise InvalidInput(f"criteria name column {c!r}, not a column of {sorted(known)}")
        overlap = set(self.sample.unchanged_columns) & {c.name for c in self.sample.changed_columns}
        if overlap:
            raise InvalidInput(f"columns {sorted(overlap)} are declared both unchanged and changed")
        for c in self.sample.changed_columns:
            if c.must_hold:
                validate_predicate(c.must_hold, columns)
        names = [i.name for i in self.invariants]
        if len(set(names)) != len(names):
            raise InvalidInput(f"invariant names must be unique: {names}")
        for inv in self.invariants:
            validate_ident(inv.name, "invariant name")
            validate_predicate(inv.predicate, columns)
        for c in self.diff.max_abs_delta if self.diff else ():
            if c not in known:
                raise InvalidInput(
                    f"diff.max_abs_delta names column {c!r}, not a column of {sorted(known)}"
                )
        return self

    @property
    def predicates(self) -> tuple[str, ...]:
        """Every SQL predicate of the criteria: the changed columns' rules, the invariants."""
        rules = [c.must_hold for c in self.sample.changed_columns] if self.sample else []
        return (*(r for r in rules if r), *(i.predicate for i in self.invariants))

    @property
    def fingerprint_columns(self) -> tuple[str, ...]:
        """The unchanged columns whose whole-partition fingerprint the sample gate compares
        (none when it compares none): what a write records for the gates."""
        if self.sample is None or not self.sample.full_compare:
            return ()
        return self.sample.unchanged_columns

    def to_dict(self) -> dict[str, Any]:
        """JSON-native data (lists, not tuples); `diff` only when declared, so plans without
        thresholds read as they did."""
        data = _ADAPTER.dump_python(self, mode="json")
        if data.get("diff") is None:
            data.pop("diff", None)
        return data

    @staticmethod
    def from_dict(data: Any) -> Criteria:
        return merge_criteria(Criteria(), data)


_ADAPTER = TypeAdapter(Criteria)


def criteria_error(e: ValidationError, where: str = "criteria") -> InvalidInput:
    """One line a person can act on, from pydantic's report."""
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        known = "row_count, sample, invariants, diff" if len(err["loc"]) == 1 else "the keys"
        return InvalidInput(f"unknown {where} key {loc!r}; use {known} listed in docs/criteria.md")
    return InvalidInput(f"{where}.{loc}: {err['msg']}; see docs/criteria.md for the accepted keys")


def merge_criteria(base: Criteria, override: Any) -> Criteria:
    """Apply a mapping (from YAML or a plan file) on top of `base`; unknown keys are errors.

    `row_count` and `sample` are merged key by key; a list (`invariants`, column lists) replaces
    the declared one.
    """
    if not override:
        return base
    if not isinstance(override, dict):
        raise InvalidInput("criteria must be a mapping with row_count, sample and/or invariants")
    merged: dict[str, Any] = base.to_dict()
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merged[key] = {**current, **value}
        else:
            merged[key] = value
    try:
        return _ADAPTER.validate_python(merged)
    except ValidationError as e:
        raise criteria_error(e) from None


def load_criteria_yaml(text: str | bytes, base: Criteria) -> Criteria:
    """Parse a criteria YAML document and merge it over the declared defaults."""
    import yaml  # kept off module level: only --criteria and the Launchpad need it

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(
                "criteria file is not UTF-8 text (is it a binary file?); write the criteria as "
                "YAML, see docs/criteria.md"
            ) from None
    if "\x00" in text:
        raise InvalidInput("criteria file holds NUL bytes (is it a binary file?); write YAML")
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as e:
        raise InvalidInput(f"criteria file is not valid YAML: {str(e)[:300]}") from None
    return merge_criteria(base, data)
