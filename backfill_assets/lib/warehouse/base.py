"""The warehouse seam. Adapters implement `Warehouse`; nothing above this layer writes SQL.

The swap is designed as "exchange partitions": an adapter moves pointers (DuckDB: rename one
table per ISO week behind a view; Postgres: ATTACH/DETACH PARTITION) rather than copying rows,
so its cost follows the number of weeks in the plan, not the size of the table or the range.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Protocol

from backfill_assets.lib.spec import TableSpec


@dataclass(frozen=True)
class PartitionStats:
    """Rows and estimated bytes per partition of one table, read in one query."""

    rows: dict[dt.date, int]
    bytes_per_row: int

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


@dataclass(frozen=True)
class SampleDiff:
    """A row-level comparison of sampled shadow rows against the live target (one partition)."""

    sampled: int
    missing_in_target: int
    mismatches: dict[str, int]  # unchanged column -> sampled rows where it differs
    predicate_violations: dict[str, int]  # changed column predicate -> sampled rows failing
    fingerprint_equal: bool | None  # whole-partition hash of unchanged columns, None if skipped
    rows: list[dict[str, Any]] = field(default_factory=list)  # up to 20 failing sampled rows


@dataclass(frozen=True)
class SwapResult:
    plan_id: str
    action: str  # "swapped", "rolled_back", "already_swapped", "already_rolled_back"
    partitions: dict[dt.date, dict[str, Any]]  # rows_in, rows_out, checksum_in, checksum_out
    weeks: int
    seconds: float


class Warehouse(Protocol):
    """What the rest of the package needs from a warehouse."""

    def ensure_table(self, spec: TableSpec) -> None: ...

    def replace_partitions(
        self,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        *,
        shadow: bool = False,
        plan_id: str | None = None,
        build_sql: str | None = None,
    ) -> dict[dt.date, int]: ...

    def partition_stats(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> PartitionStats: ...

    def gate_inputs(self, spec: TableSpec, start: dt.date, end: dt.date, **kw: Any) -> Any: ...

    def checksums(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> dict[dt.date, str]: ...

    def swap(self, spec: TableSpec, plan_id: str, days: list[dt.date]) -> SwapResult: ...

    def rollback(self, spec: TableSpec, plan_id: str) -> SwapResult: ...

    def release_backup(self, spec: TableSpec, plan_id: str) -> int: ...

    def swap_state(self, spec: TableSpec, plan_id: str) -> str | None: ...
