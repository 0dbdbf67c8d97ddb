"""The physical description of a backfillable table, as the warehouse layer needs it."""

from __future__ import annotations

from dataclasses import dataclass

from backfill_assets.constants import SHADOW_SUFFIX
from backfill_assets.errors import InvalidInput
from backfill_assets.lib.warehouse.identifiers import validate_ident

# Rough in-memory width of a value, for cost estimates only.
_TYPE_BYTES = {
    "BIGINT": 8,
    "INTEGER": 4,
    "DATE": 4,
    "TIMESTAMP": 8,
    "BOOLEAN": 1,
    "DOUBLE": 8,
    "DECIMAL": 16,
}


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str

    def __post_init__(self) -> None:
        validate_ident(self.name, "column name")
        # Types are written into DDL; allow only plain type names like DECIMAL(12, 2).
        if not all(ch.isalnum() or ch in "(), _" for ch in self.sql_type) or not self.sql_type:
            raise InvalidInput(
                f"column {self.name}: type {self.sql_type!r} is not a plain SQL type"
            )


@dataclass(frozen=True)
class SourceRef:
    """The upstream table the build reads, partitioned by the same day column."""

    table: str
    partition_column: str

    def __post_init__(self) -> None:
        validate_ident(self.table, "source table")
        validate_ident(self.partition_column, "source partition column")


@dataclass(frozen=True)
class TableSpec:
    """Name, columns, partition column and primary key of a daily-partitioned table.

    How its rows are built is the table's `build` (see `BackfillableTable`), not part of the
    physical description.
    """

    name: str
    columns: tuple[Column, ...]
    partition_column: str
    primary_key: tuple[str, ...]
    source: SourceRef | None = None

    def __post_init__(self) -> None:
        validate_ident(self.name, "table name")
        if not isinstance(self.columns, tuple) or not all(
            isinstance(c, Column) for c in self.columns
        ):
            raise InvalidInput(f"table {self.name}: columns must be a tuple of Column(name, type)")
        if isinstance(self.primary_key, str) or not isinstance(self.primary_key, tuple):
            raise InvalidInput(
                f"table {self.name}: primary_key must be a tuple of column names, e.g. "
                '("order_id",)'
            )
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise InvalidInput(f"table {self.name}: duplicate column names in {names}")
        for col in (self.partition_column, *self.primary_key):
            validate_ident(col, "column name")
            if col not in names:
                raise InvalidInput(f"table {self.name}: {col!r} is not one of its columns {names}")
        if not self.primary_key:
            raise InvalidInput(f"table {self.name}: declare a primary key (used by the gates)")

    @property
    def shadow_name(self) -> str:
        return f"{self.name}{SHADOW_SUFFIX}"

    @property
    def bytes_per_row(self) -> int:
        return sum(
            _TYPE_BYTES.get(c.sql_type.split("(")[0].strip().upper(), 16) for c in self.columns
        )

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)
