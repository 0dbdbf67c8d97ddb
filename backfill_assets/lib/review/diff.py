"""What a backfill changes: the shadow's rows against the live rows of the same days, computed in
the warehouse (the same SQL on DuckDB and PostgreSQL), for the person who approves the swap.

Rows are matched by the primary key and the day (a key is a partition's, as the gates read it) over
the days [start, end) on both sides. Per column, over the rows in both, a value changed when it is
distinct (NULL against a value counts; two NULLs do not); a float column (DOUBLE, REAL, FLOAT)
changed only when the two values differ by more than the tolerance. For a numeric column: its sum
and mean before (the live rows) and after (the shadow's), the total delta (after - before, so it
equals what the swap adds to the column's sum over the range) and the quantiles of the per-row
delta over the rows that changed; for another column, the most frequent old -> new pairs. Per day:
the rows changed and each numeric column's sum before and after. A few changed rows side by side,
the first by day and key (reproducible).

One pass over the two sides, joined on the key and the day, aggregates per day and over all days
(`GROUPING SETS`): the counts, the sums, the quantiles. Then, only when there is something to show,
the pairs of each changed non-numeric column, and the side-by-side rows of the first day with a
change. Only the key, the partition column and the compared columns are read: within a gate, the
columns the gates' fingerprints already showed equal on every row are not compared again
(`known_same`). The query building here is pure; `lib/warehouse/shared/diffing.py` runs it on an
adapter's connection.
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
    # Columns not compared row by row: equal on every row by the gates' fingerprints.
    known_same: list[str] = field(default_factory=list)

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
    quoted by the adapter). `known_same`: columns known equal on every row (the gates' equal
    fingerprints of the key and those columns): neither read nor compared."""

    spec: TableSpec
    shadow: str
    live: str
    start: dt.date
    end: dt.date
    dialect: str
    tolerance: float = DEFAULT_TOLERANCE
    known_same: tuple[str, ...] = ()
    # False (a batch's diff gate): the counts and sums per day alone, no quantiles.
    detail: bool = True
    # Columns compared as one, exactly (floats too), not column by column: the aggregate ends
    # with the rows in both where any of them differs. The columns declared unchanged, when the
    # diff also stands for the gates' whole-partition comparison of them (PostgreSQL's gates).
    as_one: tuple[str, ...] = ()

    @property
    def per_numeric(self) -> int:
        """The aggregate's columns per numeric column."""
        return 6 if self.detail else 4

    @property
    def _pk(self) -> list[str]:
        return [quote_ident(c) for c in self.spec.primary_key]

    @property
    def compared(self) -> list[str]:
        """The columns compared row by row: every column but the key and `known_same`."""
        skip = {*self.spec.primary_key, *self.known_same}
        return [c for c in self.spec.column_names if c not in skip]

    @property
    def numeric(self) -> list[str]:
        """The compared numeric columns a reviewer sums (not the key's: identifiers)."""
        types = {c.name: c.sql_type for c in self.spec.columns}
        return [c for c in self.compared if is_numeric(types[c])]

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

    def _joined(self, start: dt.date | None = None, end: dt.date | None = None) -> str:
        """Both sides over [start, end) (default: the diff's days), reading only the key, the
        partition column and the compared columns, joined on the key and the day."""
        pc = quote_ident(self.spec.partition_column)
        s0, e0 = start or self.start, end or self.end
        rng = f"{pc} >= DATE '{s0}' AND {pc} < DATE '{e0}'"
        cols = dict.fromkeys(
            (*self.spec.primary_key, self.spec.partition_column, *self.compared, *self.as_one)
        )
        read = ", ".join(quote_ident(c) for c in cols)
        # A key is a partition's, as the gates read it: a key on two days is two rows.
        keys = dict.fromkeys((*self._pk, pc))
        on = " AND ".join(f"s.{k} = l.{k}" for k in keys)
        return (
            f"(SELECT {read} FROM {self.shadow} WHERE {rng}) s FULL OUTER JOIN "
            f"(SELECT {read} FROM {self.live} WHERE {rng}) l ON {on}"
        )

    def aggregate(self) -> str:
        """One pass over the joined rows, grouped by day and over all days (`GROUPING SETS`):
        grouping flag, day, in both, shadow only, live only, any changed, then per compared
        column its changed rows, then per numeric column: sum and count before, sum and count
        after, the mean and the quantiles of its delta over the rows that changed. Without
        `detail`, per day only and without the mean and quantiles (the totals add up)."""
        pc = quote_ident(self.spec.partition_column)
        k = self._pk[0]
        cols = self.compared
        flags = "".join(f", {self.changed(c)} AS f{i}" for i, c in enumerate(cols))
        values = "".join(
            f", l.{quote_ident(c)} AS b{j}, s.{quote_ident(c)} AS a{j}"
            for j, c in enumerate(self.numeric)
        )
        if self.as_one:
            sides = [", ".join(f"{x}.{quote_ident(c)}" for c in self.as_one) for x in "sl"]
            flags += (
                f", (s.{k} IS NOT NULL AND l.{k} IS NOT NULL AND "
                f"ROW({sides[0]}) IS DISTINCT FROM ROW({sides[1]})) AS fo"
            )
        inner = (
            f"SELECT coalesce(s.{pc}, l.{pc}) AS day, s.{k} IS NULL AS ol, l.{k} IS NULL AS os"
            f"{flags}{values} FROM {self._joined()}"
        )
        anychanged = " OR ".join(["ol", "os", *(f"f{i}" for i in range(len(cols)))])
        parts = [
            "grouping(day)" if self.detail else "0",
            "day",
            "sum(CASE WHEN NOT ol AND NOT os THEN 1 ELSE 0 END)",
            "sum(CASE WHEN os THEN 1 ELSE 0 END)",
            "sum(CASE WHEN ol THEN 1 ELSE 0 END)",
            f"sum(CASE WHEN {anychanged} THEN 1 ELSE 0 END)",
            *(f"sum(CASE WHEN f{i} THEN 1 ELSE 0 END)" for i in range(len(cols))),
        ]
        qs = ", ".join(repr(x) for x in QUANTILES)
        for j, c in enumerate(self.numeric):
            delta = (
                f"CASE WHEN f{cols.index(c)} THEN CAST(a{j} AS DOUBLE PRECISION) - "
                f"CAST(b{j} AS DOUBLE PRECISION) END"
            )
            parts += [f"sum(b{j})", f"count(b{j})", f"sum(a{j})", f"count(a{j})"]
            if not self.detail:
                continue
            parts.append(f"avg({delta})")
            if self.dialect == "postgres":
                parts.append(f"percentile_cont(ARRAY[{qs}]) WITHIN GROUP (ORDER BY {delta})")
            else:
                parts.append(f"quantile_cont({delta}, [{qs}])")
        if self.as_one:
            parts.append("sum(CASE WHEN fo THEN 1 ELSE 0 END)")
        groups = "GROUPING SETS ((day), ())" if self.detail else "day"
        return f"SELECT {', '.join(parts)} FROM ({inner}) j GROUP BY {groups} ORDER BY 1, 2"

    def pairs(self, column: str) -> str:
        q = quote_ident(column)
        return (
            f"SELECT CAST(l.{q} AS VARCHAR), CAST(s.{q} AS VARCHAR), count(*) FROM "
            f"{self._joined()} WHERE {self.changed(column)} GROUP BY 1, 2 "
            f"ORDER BY 3 DESC, 1, 2 LIMIT {TOP_PAIRS}"
        )

    def side_by_side(self, day: dt.date, columns: Sequence[str]) -> str:
        """The first changed rows of `day` (the first day with a change) by key: key, day,
        side, then old and new values of `columns`."""
        pc = quote_ident(self.spec.partition_column)
        k = self._pk[0]
        keys = [f"coalesce(s.{x}, l.{x})" for x in self._pk]
        olds_news = [f"l.{quote_ident(c)}, s.{quote_ident(c)}" for c in columns]
        anychanged = " OR ".join(self.changed(c) for c in self.compared) or "false"
        side = (
            f"CASE WHEN l.{k} IS NULL THEN 'shadow only' WHEN s.{k} IS NULL THEN 'live only' "
            "ELSE 'both' END"
        )
        joined = self._joined(day, day + dt.timedelta(days=1))
        return (
            f"SELECT {', '.join(keys)}, coalesce(s.{pc}, l.{pc}), {side}"
            + "".join(f", {x}" for x in olds_news)
            + f" FROM {joined} WHERE ({anychanged}) OR s.{k} IS NULL OR l.{k} IS NULL "
            "ORDER BY " + ", ".join(str(i + 1) for i in range(len(keys))) + f" LIMIT {SIDE_BY_SIDE}"
        )


def _f(v: Any) -> float:
    return float(v) if v is not None else 0.0


def _add(values: Sequence[Any]) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def assemble(
    q: DiffQueries,
    schema: SchemaDiff,
    rows: Sequence[Sequence[Any]],
    pairs: Mapping[str, Sequence[Sequence[Any]]],
    side_rows: Sequence[Sequence[Any]],
    side_columns: Sequence[str],
) -> DataDiff:
    """The rows of `q`'s queries as a `DataDiff` (`rows`: `aggregate`'s)."""
    spec = q.spec
    cols = q.compared
    numeric = q.numeric
    n = len(cols)
    per = q.per_numeric
    per_day = [r for r in rows if not r[0]]
    total = next((r for r in rows if r[0]), None)
    if total is None and per_day:  # without detail: the totals are the days' added up
        total = [1, None, *(_add([r[i] for r in per_day]) for i in range(2, len(per_day[0])))]
    days: list[DayDiff] = []
    for row in per_day:
        day_sums: dict[str, tuple[float, float]] = {}
        for j, c in enumerate(numeric):
            sb, _, sa, _ = row[6 + n + per * j : 10 + n + per * j]
            day_sums[c] = (_f(sb), _f(sa))
        day_changed = {c: int(row[6 + i] or 0) for i, c in enumerate(cols) if row[6 + i]}
        day_rows = int(row[2] or 0) + int(row[3] or 0) + int(row[4] or 0)
        days.append(DayDiff(row[1], int(row[5] or 0), day_sums, day_rows, day_changed))
    both = int(total[2] or 0) if total else 0
    changed = {c: int(total[6 + i] or 0) if total else 0 for i, c in enumerate(cols)}
    columns: list[ColumnDiff] = []
    for c in spec.columns:
        num = None
        if c.name in numeric and total is not None:
            j = numeric.index(c.name)
            sb, nb, sa, na = total[6 + n + per * j : 10 + n + per * j]
            mean, qs = total[10 + n + per * j : 12 + n + per * j] if q.detail else (None, None)
            sb, sa = _f(sb), _f(sa)
            num = NumericChange(
                sum_before=sb,
                sum_after=sa,
                mean_before=sb / int(nb) if nb else None,
                mean_after=sa / int(na) if na else None,
                total_delta=sa - sb,
                mean_delta=float(mean) if mean is not None else None,
                delta_quantiles={
                    f"p{round(p * 100):02d}": float(v)
                    for p, v in zip(QUANTILES, qs or (), strict=False)
                    if v is not None
                },
            )
        k = changed.get(c.name, 0)
        columns.append(
            ColumnDiff(
                c.name,
                c.sql_type,
                k,
                k / both if both else 0.0,
                num,
                [(_plain(o), _plain(v), int(x)) for o, v, x in pairs.get(c.name, ())],
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
        spec.name,
        q.start,
        q.end,
        q.tolerance,
        schema,
        both,
        int(total[3] or 0) if total else 0,
        int(total[4] or 0) if total else 0,
        columns,
        days,
        side,
        list(q.known_same),
    )


def schema_diff(live: Sequence[tuple[str, str]], shadow: Sequence[tuple[str, str]]) -> SchemaDiff:
    """Columns (name, type as the engine names it) of the two relations compared."""
    lv, sv = dict(live), dict(shadow)
    return SchemaDiff(
        added=[c for c in sv if c not in lv],
        removed=[c for c in lv if c not in sv],
        changed_type=[(c, lv[c], sv[c]) for c in lv if c in sv and lv[c] != sv[c]],
    )
