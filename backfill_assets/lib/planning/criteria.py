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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from backfill_assets.errors import InvalidInput, PlanRefused
from backfill_assets.lib.warehouse.identifiers import validate_ident, validate_predicate

COMPARE_TARGETS = ("source", "target")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ChangedColumn:
    """A column the fix is expected to change, and what must hold for its new value."""

    name: str
    must_hold: str | None = None


@dataclass(frozen=True)
class SampleCriterion:
    """A reproducible sample per partition: unchanged columns must equal the current target."""

    size: int = 200
    unchanged_columns: tuple[str, ...] = ()
    changed_columns: tuple[ChangedColumn, ...] = ()
    # Also compare a hash of the unchanged columns over the whole partition (exact, one scan).
    full_compare: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or not 1 <= self.size <= 100_000:
            raise InvalidInput(f"sample.size {self.size!r} must be an integer in 1..100000")


@dataclass(frozen=True)
class Invariant:
    name: str
    predicate: str


@dataclass(frozen=True)
class Criteria:
    row_count: RowCountCriterion | None = None
    sample: SampleCriterion | None = None
    invariants: tuple[Invariant, ...] = field(default_factory=tuple)

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
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Criteria:
        return merge_criteria(Criteria(), data)


def merge_criteria(base: Criteria, override: dict[str, Any] | None) -> Criteria:
    """Apply a dict (from YAML or a plan file) on top of `base`; unknown keys are errors."""
    if not override:
        return base
    if not isinstance(override, dict):
        raise InvalidInput("criteria must be a mapping with row_count, sample and/or invariants")
    unknown = set(override) - {"row_count", "sample", "invariants"}
    if unknown:
        raise InvalidInput(
            f"unknown criteria keys {sorted(unknown)}; use row_count, sample, invariants"
        )
    out = base
    try:
        if (rc := override.get("row_count")) is not None:
            rc = dict(rc)
            if "compare_to" in rc:
                rc["compare_to"] = tuple(rc["compare_to"])
            out = replace(out, row_count=replace(out.row_count or RowCountCriterion(), **rc))
        if (sc := override.get("sample")) is not None:
            sc = dict(sc)
            if "unchanged_columns" in sc:
                sc["unchanged_columns"] = tuple(sc["unchanged_columns"])
            if "changed_columns" in sc:
                sc["changed_columns"] = tuple(
                    ChangedColumn(**c) if isinstance(c, dict) else ChangedColumn(str(c))
                    for c in sc["changed_columns"]
                )
            out = replace(out, sample=replace(out.sample or SampleCriterion(), **sc))
        if (inv := override.get("invariants")) is not None:
            out = replace(out, invariants=tuple(Invariant(**i) for i in inv))
    except TypeError as e:
        raise InvalidInput(f"criteria: {e}; see docs/criteria.md for the accepted keys") from e
    return out


def load_criteria_yaml(text: str, base: Criteria) -> Criteria:
    """Parse a criteria YAML document and merge it over the declared defaults."""
    import yaml  # kept off module level: only the CLI's --criteria needs it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidInput(f"criteria file is not valid YAML: {e}") from e
    return merge_criteria(base, data)
