"""The diff of the shadow against the live rows (lib/review/diff.py), run on an adapter: the same
queries on DuckDB and PostgreSQL, in one read-only connection."""

from __future__ import annotations

import datetime as dt
from typing import Any

from backfill_assets.lib.review.diff import (
    DEFAULT_TOLERANCE,
    DataDiff,
    DiffQueries,
    assemble,
    is_numeric,
    schema_diff,
)
from backfill_assets.lib.spec import TableSpec


class Differ:
    """`diff`, from the adapter's `connect`, `_sql` and `dialect`, and two hooks of its own:
    `_diff_relations(con, spec, start, end)`, the SQL of the shadow's and the live rows'
    relations holding those days, and `_relation_columns(con, name)`, a relation's columns and
    their types as the engine names them."""

    def diff(
        self: Any,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        *,
        tolerance: float = DEFAULT_TOLERANCE,
    ) -> DataDiff:
        """The shadow's rows of [start, end) against the live rows of those days."""
        with self.connect(read_only=True) as con:
            shadow, live = self._diff_relations(con, spec, start, end)
            q = DiffQueries(spec, shadow, live, start, end, self.dialect, tolerance)
            schema = schema_diff(
                self._relation_columns(con, spec.name),
                self._relation_columns(con, spec.shadow_name),
            )
            per_day = self._sql(con, q.per_day(), {})
            cols = spec.column_names
            changed = {c for i, c in enumerate(cols) if any(int(r[5 + i] or 0) for r in per_day)}
            numeric = [c for c in q.numeric if c in changed]
            quantile_row = self._sql(con, q.quantiles(numeric), {})[0] if numeric else None
            pairs = {
                c.name: self._sql(con, q.pairs(c.name), {})
                for c in spec.columns
                if c.name in changed and not is_numeric(c.sql_type)
            }
            one_side = any(int(r[2] or 0) or int(r[3] or 0) for r in per_day)
            shown = [c for c in cols if c in changed and c != spec.partition_column]
            side = self._sql(con, q.side_by_side(shown), {}) if changed or one_side else []
        return assemble(q, schema, per_day, quantile_row, numeric, pairs, side, shown)
