"""What a backfill changes: the shadow's rows against the live rows of the same days, computed in
the warehouse (the same SQL on DuckDB and PostgreSQL), for the person who approves the swap.

Rows are matched by the primary key over the days [start, end) on both sides. Per column, over
the rows in both, a value changed when it is distinct (NULL against a value counts; two NULLs do
not); a float column (DOUBLE, REAL, FLOAT) changed only when the two values differ by more than
the tolerance. For a numeric column: its sum and mean before (the live rows) and after (the
shadow's), the total delta (after - before, so it equals what the swap adds to the column's sum
over the range) and the quantiles of the per-row delta over the rows that changed; for another
column, the most frequent old -> new pairs. Per day: the rows changed and each numeric column's
sum before and after. A few changed rows side by side, the first by day and key (reproducible).

Four queries read the two sides: the per-day aggregate (the counts, the sums), the quantiles, the
pairs of the changed non-numeric columns, and the side-by-side rows. The query building here is
pure; `lib/warehouse/shared/diffing.py` runs it on an adapter's connection.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.identifiers import quote_ident

QUANTILES = (0.01, 0.25, 0.5, 0.75, 0.99)
TOP_PAIRS = 5
SIDE_BY_SIDE = 5
DEFAULT_TOLERANCE = 1e-9
_NUMERIC = ("TINYINT", "SMALLINT", "INT", "BIGINT", "HUGEINT", "DECIMAL", "NUMERIC", "DOUBLE",
            "REAL", "FLOAT", "INT2", "INT4", "INT8")  # fmt: skip
_FLOAT = ("DOUBLE", "REAL", "FLOAT")


def is_numeric(sql_type: str) -> bool:
    return sql_type.strip().upper().split("(")[0].split(" ")[0] in _NUMERIC


def is_float(sql_type: str) -> bool:
    return sql_type.strip().upper().split("(")[0].split(" ")[0] in _FLOAT


@dataclass(frozen=True)
class NumericChange:
    """A numeric column over the range: before is the live rows, after the shadow's."""

    sum_before: float
    sum_after: float
    mean_before: float | None
    mean_after: float | None
    total_delta: float  # sum_after - sum_before
    mean_delta: float | None  # over the rows in both whose value changed
    delta_quantiles: dict[str, float]  # "p01", "p25", "p50", "p75", "p99" of those deltas


@dataclass(frozen=True)
class ColumnDiff:
    name: str
    sql_type: str
    changed_rows: int  # of the rows in both
    changed_share: float  # changed_rows / rows in both (0 when none are in both)
    numeric: NumericChange | None = None
    top_pairs: list[tuple[Any, Any, int]] = field(default_factory=list)  # (old, new, rows)


@dataclass(frozen=True)
class DayDiff:
    day: dt.date
    rows_changed: int  # rows in both with any column changed, plus rows on one side only
    sums: dict[str, tuple[float, float]]  # numeric column -> (before, after)
    rows: int = 0  # rows of the day on either side (in both counted once)
    changed: dict[str, int] = field(default_factory=dict)  # column -> rows changed, if any


@dataclass(frozen=True)
class SchemaDiff:
    added: list[str] = field(default_factory=list)  # in the shadow only
    removed: list[str] = field(default_factory=list)  # in the live table only
    changed_type: list[tuple[str, str, str]] = field(default_factory=list)  # (col, live, shadow)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed_type)


@dataclass(frozen=True)
class DataDiff:
    """The shadow against the live rows over [start, end)."""

    table: str
    start: dt.date
    end: dt.date  # exclusive
    tolerance: float
    schema: SchemaDiff
    rows_in_both: int
    only_in_shadow: int
    only_in_live: int
    columns: list[ColumnDiff]
    days: list[DayDiff]
    side_by_side: list[dict[str, Any]]

    @property
    def changed_columns(self) -> list[ColumnDiff]:
        return [c for c in self.columns if c.changed_rows]

    @property
    def rows_changed(self) -> int:
        return sum(d.rows_changed for d in self.days)

    def column(self, name: str) -> ColumnDiff:
        return next(c for c in self.columns if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: dates as ISO strings, numbers as floats."""
        return _plain(dataclasses.asdict(self))


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    return v


# -- the queries -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffQueries:
    """The SQL of one diff (relations and dates inlined: the dates are `date`s, the relations
    quoted by the adapter)."""

    spec: TableSpec
    shadow: str
    live: str
    start: dt.date
    end: dt.date
    dialect: str
    tolerance: float = DEFAULT_TOLERANCE

    @property
    def _pk(self) -> list[str]:
        return [quote_ident(c) for c in self.spec.primary_key]

    @property
    def numeric(self) -> list[str]:
        """The numeric columns a reviewer sums: not the key's (identifiers, not amounts)."""
        return [
            c.name
            for c in self.spec.columns
            if is_numeric(c.sql_type) and c.name not in self.spec.primary_key
        ]

    def changed(self, column: str) -> str:
        """True when the row is in both and `column` changed."""
        c = quote_ident(column)
        both = f"l.{self._pk[0]} IS NOT NULL AND s.{self._pk[0]} IS NOT NULL"
        sql_type = next(x.sql_type for x in self.spec.columns if x.name == column)
        if is_float(sql_type):
            differs = (
                f"((s.{c} IS NULL) <> (l.{c} IS NULL) OR abs(s.{c} - l.{c}) > {self.tolerance!r})"
            )
        else:
            differs = f"s.{c} IS DISTINCT FROM l.{c}"
        return f"({both} AND {differs})"

    def _joined(self) -> str:
        pc = quote_ident(self.spec.partition_column)
        rng = f"{pc} >= DATE '{self.start}' AND {pc} < DATE '{self.end}'"
        on = " AND ".join(f"s.{k} = l.{k}" for k in self._pk)
        return (
            f"(SELECT * FROM {self.shadow} WHERE {rng}) s FULL OUTER JOIN "
            f"(SELECT * FROM {self.live} WHERE {rng}) l ON {on}"
        )

    def per_day(self) -> str:
        """day, in both, shadow only, live only, any changed, then per column its changed rows,
        then per numeric column: sum and count before, sum and count after."""
        pc = quote_ident(self.spec.partition_column)
        k = self._pk[0]
        cols = self.spec.column_names
        anychanged = " OR ".join(self.changed(c) for c in cols)
        parts = [
            f"coalesce(s.{pc}, l.{pc}) AS day",
            f"sum(CASE WHEN s.{k} IS NOT NULL AND l.{k} IS NOT NULL THEN 1 ELSE 0 END)",
            f"sum(CASE WHEN l.{k} IS NULL THEN 1 ELSE 0 END)",
            f"sum(CASE WHEN s.{k} IS NULL THEN 1 ELSE 0 END)",
            f"sum(CASE WHEN ({anychanged}) OR s.{k} IS NULL OR l.{k} IS NULL THEN 1 ELSE 0 END)",
            *(f"sum(CASE WHEN {self.changed(c)} THEN 1 ELSE 0 END)" for c in cols),
        ]
        for c in self.numeric:
            q = quote_ident(c)
            parts += [f"sum(l.{q})", f"count(l.{q})", f"sum(s.{q})", f"count(s.{q})"]
        return f"SELECT {', '.join(parts)} FROM {self._joined()} GROUP BY 1 ORDER BY 1"

    def quantiles(self, columns: Sequence[str]) -> str:
        """Per numeric column: the mean, then the quantiles, of its delta over the rows that
        changed."""
        parts: list[str] = []
        for c in columns:
            q = quote_ident(c)
            delta = f"CAST(s.{q} AS DOUBLE PRECISION) - CAST(l.{q} AS DOUBLE PRECISION)"
            only = f"CASE WHEN {self.changed(c)} THEN {delta} END"
            parts.append(f"avg({only})")
            qs = ", ".join(repr(x) for x in QUANTILES)
            if self.dialect == "postgres":
                parts.append(f"percentile_cont(ARRAY[{qs}]) WITHIN GROUP (ORDER BY {only})")
            else:
                parts.append(f"quantile_cont({only}, [{qs}])")
        return f"SELECT {', '.join(parts)} FROM {self._joined()}"

    def pairs(self, column: str) -> str:
        q = quote_ident(column)
        return (
            f"SELECT CAST(l.{q} AS VARCHAR), CAST(s.{q} AS VARCHAR), count(*) FROM "
            f"{self._joined()} WHERE {self.changed(column)} GROUP BY 1, 2 "
            f"ORDER BY 3 DESC, 1, 2 LIMIT {TOP_PAIRS}"
        )

    def side_by_side(self, columns: Sequence[str]) -> str:
        """The first changed rows by day and key: key, day, side, then old and new values of
        `columns`."""
        pc = quote_ident(self.spec.partition_column)
        k = self._pk[0]
        keys = [f"coalesce(s.{x}, l.{x})" for x in self._pk]
        olds_news = [f"l.{quote_ident(c)}, s.{quote_ident(c)}" for c in columns]
        anychanged = " OR ".join(self.changed(c) for c in self.spec.column_names)
        side = (
            f"CASE WHEN l.{k} IS NULL THEN 'shadow only' WHEN s.{k} IS NULL THEN 'live only' "
            "ELSE 'both' END"
        )
        return (
            f"SELECT {', '.join(keys)}, coalesce(s.{pc}, l.{pc}), {side}"
            + "".join(f", {x}" for x in olds_news)
            + f" FROM {self._joined()} WHERE ({anychanged}) OR s.{k} IS NULL OR l.{k} IS NULL "
            f"ORDER BY {len(keys) + 1}, "
            + ", ".join(str(i + 1) for i in range(len(keys)))
            + f" LIMIT {SIDE_BY_SIDE}"
        )


def _f(v: Any) -> float:
    return float(v) if v is not None else 0.0


def assemble(
    q: DiffQueries,
    schema: SchemaDiff,
    per_day: Sequence[Sequence[Any]],
    quantile_row: Sequence[Any] | None,
    quantile_columns: Sequence[str],
    pairs: Mapping[str, Sequence[Sequence[Any]]],
    side_rows: Sequence[Sequence[Any]],
    side_columns: Sequence[str],
) -> DataDiff:
    """The rows of `q`'s queries as a `DataDiff`."""
    spec = q.spec
    cols = spec.column_names
    numeric = q.numeric
    n = len(cols)
    both = only_s = only_l = 0
    changed = dict.fromkeys(cols, 0)
    sums = {c: [0.0, 0, 0.0, 0] for c in numeric}  # sum before, count before, after, count
    days: list[DayDiff] = []
    for row in per_day:
        both += int(row[1] or 0)
        only_s += int(row[2] or 0)
        only_l += int(row[3] or 0)
        for i, c in enumerate(cols):
            changed[c] += int(row[5 + i] or 0)
        day_sums: dict[str, tuple[float, float]] = {}
        for j, c in enumerate(numeric):
            sb, nb, sa, na = row[5 + n + 4 * j : 9 + n + 4 * j]
            acc = sums[c]
            acc[0] += _f(sb)
            acc[1] += int(nb or 0)
            acc[2] += _f(sa)
            acc[3] += int(na or 0)
            day_sums[c] = (_f(sb), _f(sa))
        day_changed = {c: int(row[5 + i] or 0) for i, c in enumerate(cols) if row[5 + i]}
        day_rows = int(row[1] or 0) + int(row[2] or 0) + int(row[3] or 0)
        days.append(DayDiff(row[0], int(row[4] or 0), day_sums, day_rows, day_changed))
    stats: dict[str, tuple[float | None, dict[str, float]]] = {}
    for j, c in enumerate(quantile_columns):
        mean = quantile_row[2 * j] if quantile_row else None
        qs = quantile_row[2 * j + 1] if quantile_row else None
        stats[c] = (
            float(mean) if mean is not None else None,
            {f"p{round(p * 100):02d}": float(v) for p, v in zip(QUANTILES, qs or (), strict=False)
             if v is not None},
        )  # fmt: skip
    columns: list[ColumnDiff] = []
    for c in spec.columns:
        num = None
        if c.name in sums:
            sb, nb, sa, na = sums[c.name]
            mean_delta, quants = stats.get(c.name, (None, {}))
            num = NumericChange(
                sum_before=sb,
                sum_after=sa,
                mean_before=sb / nb if nb else None,
                mean_after=sa / na if na else None,
                total_delta=sa - sb,
                mean_delta=mean_delta,
                delta_quantiles=quants,
            )
        columns.append(
            ColumnDiff(
                c.name,
                c.sql_type,
                changed[c.name],
                changed[c.name] / both if both else 0.0,
                num,
                [(_plain(o), _plain(v), int(k)) for o, v, k in pairs.get(c.name, ())],
            )
        )
    nk = len(spec.primary_key)
    side: list[dict[str, Any]] = []
    for row in side_rows:
        item: dict[str, Any] = {k: _plain(v) for k, v in zip(spec.primary_key, row, strict=False)}
        item[spec.partition_column] = _plain(row[nk])
        item["side"] = row[nk + 1]
        for i, c in enumerate(side_columns):
            old, new = row[nk + 2 + 2 * i], row[nk + 3 + 2 * i]
            if old != new:
                item[c] = {"old": _plain(old), "new": _plain(new)}
        side.append(item)
    return DataDiff(
        spec.name, q.start, q.end, q.tolerance, schema, both, only_s, only_l, columns, days, side
    )


def schema_diff(live: Sequence[tuple[str, str]], shadow: Sequence[tuple[str, str]]) -> SchemaDiff:
    """Columns (name, type as the engine names it) of the two relations compared."""
    lv, sv = dict(live), dict(shadow)
    return SchemaDiff(
        added=[c for c in sv if c not in lv],
        removed=[c for c in lv if c not in sv],
        changed_type=[(c, lv[c], sv[c]) for c in lv if c in sv and lv[c] != sv[c]],
    )
