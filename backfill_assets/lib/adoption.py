"""Adopting a table that already exists: what the warehouse finds, and what it means.

The warehouse adapters read the facts (`ExistingRelation`: the relation and its columns;
`TableScan`: rows per day, null partition values, duplicate keys, the days already recorded);
this module turns them into the verdict `adopt` acts on (`AdoptionCheck`): the refusals, each
saying what is wrong and how to fix it, and what is only reported.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from backfill_assets.lib.spec import TableSpec

# What the relation is: absent, a plain table, a view, a table partitioned by range on the
# partition column (adopted in place), or partitioned some other way (refused).
ABSENT, TABLE, VIEW, PARTITIONED, OTHER_PARTITIONING = (
    "absent",
    "table",
    "view",
    "partitioned",
    "other partitioning",
)


@dataclass(frozen=True)
class ExistingRelation:
    """The relation named like the target, as the warehouse's catalog describes it.

    `columns` and `declared` are (name, type) with the types as this engine names them: the
    declaration's types are put through the same engine (DuckDB: an in-memory table; PostgreSQL:
    a temporary table in a transaction rolled back), so `INT` and `INTEGER` compare equal and
    `DECIMAL(12,2)` and `DECIMAL(10,2)` do not. `layout`: the framework's own relations already
    exist beside it (the table was created or adopted before)."""

    name: str
    kind: str
    columns: tuple[tuple[str, str], ...] = ()
    declared: tuple[tuple[str, str], ...] = ()
    detail: str = ""  # how a table partitioned another way is partitioned
    layout: bool = False
    views: tuple[str, ...] = ()  # views over it (PostgreSQL: they follow a table, not a name)


@dataclass(frozen=True)
class DuplicateKey:
    day: dt.date
    key: tuple[Any, ...]
    rows: int


@dataclass(frozen=True)
class TableScan:
    """One read of the existing table: rows per day (days with rows only), rows whose partition
    column is null, per day the keys that occur more than once (and the rows they have), a few
    of them, and the days whose rows and checksum the warehouse already records."""

    rows_by_day: Mapping[dt.date, int]
    null_partition_rows: int
    duplicate_keys: Mapping[dt.date, int]
    duplicate_rows: Mapping[dt.date, int]
    examples: tuple[DuplicateKey, ...]
    recorded: frozenset[dt.date]
    seconds: float

    @classmethod
    def from_rows(
        cls,
        counts: Sequence[Sequence[Any]],
        duplicates: Sequence[Sequence[Any]],
        examples: Sequence[Sequence[Any]],
        recorded: Iterable[dt.date],
        seconds: float,
    ) -> TableScan:
        """From the adapters' query results: (day or None, rows) per day; (day, keys, rows) per
        day with duplicate keys; (day, *key, rows) per example; the recorded days."""
        return cls(
            rows_by_day={d: int(n) for d, n in counts if d is not None},
            null_partition_rows=sum(int(n) for d, n in counts if d is None),
            duplicate_keys={d: int(k) for d, k, _ in duplicates},
            duplicate_rows={d: int(r) for d, _, r in duplicates},
            examples=tuple(DuplicateKey(r[0], tuple(r[1:-1]), int(r[-1])) for r in examples),
            recorded=frozenset(recorded),
            seconds=seconds,
        )

    @property
    def rows(self) -> int:
        return sum(self.rows_by_day.values()) + self.null_partition_rows

    @property
    def first(self) -> dt.date | None:
        return min(self.rows_by_day) if self.rows_by_day else None

    @property
    def last(self) -> dt.date | None:
        return max(self.rows_by_day) if self.rows_by_day else None

    @property
    def days(self) -> list[dt.date]:
        """Every day from the first with rows to the last, gaps included."""
        if self.first is None or self.last is None:
            return []
        return [self.first + dt.timedelta(days=i) for i in range((self.last - self.first).days + 1)]

    @property
    def empty_days(self) -> list[dt.date]:
        return [d for d in self.days if d not in self.rows_by_day]


def column_problems(spec: TableSpec, rel: ExistingRelation) -> list[str]:
    """Each difference between the relation's columns and the declaration, named with both
    types (empty: they match, in any order)."""
    have = {n.lower(): t for n, t in rel.columns}
    want = {n.lower(): t for n, t in rel.declared}
    out = []
    for name, declared in rel.declared:
        got = have.get(name.lower())
        if got is None:
            out.append(
                f"column {name} ({declared}) is declared but {rel.name} has no such column: add it "
                f"to the table (ALTER TABLE {rel.name} ADD COLUMN {name} {declared}) or remove it "
                "from the declaration"
            )
        elif got.replace(" ", "").upper() != declared.replace(" ", "").upper():
            out.append(
                f"column {name} is {got} in {rel.name} but declared {declared}: change the "
                f"declaration to Column({name!r}, {got!r}), or convert the column (ALTER TABLE "
                f"{rel.name} ALTER COLUMN {name} TYPE {declared}) first"
            )
    for name, got in rel.columns:
        if name.lower() not in want:
            out.append(
                f"column {name} ({got}) is in {rel.name} but not declared: a backfill rebuilds "
                f"declared columns only and would lose it; declare it (Column({name!r}, "
                f"{got!r})) or drop it from the table"
            )
    return out


@dataclass(frozen=True)
class AdoptionCheck:
    """What `adopt --check` reports, and the refusals `adopt` stops on."""

    table: str
    where: str
    relation: ExistingRelation
    scan: TableScan | None
    refusals: tuple[str, ...]
    notes: tuple[str, ...]
    materialized: int = 0  # partitions that already have a materialization in the instance
    partitions: int = 0  # of the scanned days, those that are partitions of the asset
    estimate_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.refusals

    def lines(self) -> list[str]:
        """The check as text, one finding a line."""
        rel, scan = self.relation, self.scan
        out = [f"adopt {self.table} ({self.where})"]
        if rel.kind == ABSENT:
            out.append(f"  relation: none named {rel.name}")
        else:
            cols = len(rel.columns)
            out.append(f"  relation: {rel.kind} {rel.name}, {cols} columns")
        if scan is not None:
            if scan.first is None:
                out.append("  rows: none")
            else:
                out.append(
                    f"  rows: {scan.rows:,} over {scan.first}..{scan.last} ({len(scan.days)} "
                    f"days, {len(scan.empty_days)} without rows"
                    + (f": {_days_text(scan.empty_days)})" if scan.empty_days else ")")
                )
            out.append(f"  rows whose partition column is null: {scan.null_partition_rows:,}")
            if scan.duplicate_keys:
                keys = sum(scan.duplicate_keys.values())
                out.append(
                    f"  duplicate keys: {keys:,} keys on {len(scan.duplicate_keys)} days, "
                    f"{sum(scan.duplicate_rows.values()):,} rows; for example "
                    + "; ".join(f"{e.day} {_key_text(e.key)} x{e.rows}" for e in scan.examples)
                )
            else:
                out.append("  duplicate keys: none")
            out.append(
                f"  recorded already: {len(scan.recorded & set(scan.days))} of {len(scan.days)} "
                f"days; materialized in Dagster already: {self.materialized} of "
                f"{self.partitions} partitions"
            )
            out.append(f"  estimated time: {self.estimate_s:.0f} s")
        out.extend(f"  note: {n}" for n in self.notes)
        out.extend(f"  refused: {r}" for r in self.refusals)
        return out

    def as_dict(self) -> dict[str, Any]:
        scan = self.scan
        return {
            "table": self.table,
            "warehouse": self.where,
            "relation": {
                "name": self.relation.name,
                "kind": self.relation.kind,
                "columns": [list(c) for c in self.relation.columns],
            },
            "rows": scan.rows if scan else 0,
            "first_day": str(scan.first) if scan and scan.first else None,
            "last_day": str(scan.last) if scan and scan.last else None,
            "days": len(scan.days) if scan else 0,
            "empty_days": [str(d) for d in scan.empty_days] if scan else [],
            "null_partition_rows": scan.null_partition_rows if scan else 0,
            "duplicate_keys": {str(d): n for d, n in sorted(scan.duplicate_keys.items())}
            if scan
            else {},
            "duplicate_examples": [
                {"day": str(e.day), "key": [str(v) for v in e.key], "rows": e.rows}
                for e in (scan.examples if scan else ())
            ],
            "recorded_days": len(scan.recorded & set(scan.days)) if scan else 0,
            "materialized_partitions": self.materialized,
            "partitions": self.partitions,
            "estimated_seconds": round(self.estimate_s, 1),
            "notes": list(self.notes),
            "refusals": list(self.refusals),
            "ok": self.ok,
        }


def _key_text(key: tuple[Any, ...]) -> str:
    return "(" + ", ".join(str(v) for v in key) + ")"


def _days_text(days: list[dt.date], most: int = 5) -> str:
    shown = ", ".join(str(d) for d in days[:most])
    return shown + (f" and {len(days) - most} more" if len(days) > most else "")


@runtime_checkable
class ConvertsOnline(Protocol):
    """A warehouse that adopts a plain table by converting it online to its layout (PostgreSQL:
    lib/warehouse/postgres/convert.py says how)."""

    def adoption_state(self, spec: TableSpec) -> str | None: ...

    def convert_start(self, spec: TableSpec) -> None: ...

    def converted_weeks(self, spec: TableSpec) -> set[dt.date]: ...

    def changed_weeks(self, spec: TableSpec) -> set[dt.date]: ...

    def convert_week(self, spec: TableSpec, week: dt.date) -> dict[dt.date, str]: ...

    def convert_switch(self, spec: TableSpec) -> bool: ...

    def convert_rollback(self, spec: TableSpec) -> int: ...

    def convert_release(self, spec: TableSpec) -> bool: ...
