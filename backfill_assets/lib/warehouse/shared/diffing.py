"""The diff of the shadow against the live rows (lib/review/diff.py), run on an adapter: the same
queries on DuckDB and PostgreSQL, in one read-only connection."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from backfill_assets.lib.review.diff import (
    DEFAULT_TOLERANCE,
    DataDiff,
    DiffQueries,
    SchemaDiff,
    assemble,
    is_numeric,
    schema_diff,
)
from backfill_assets.lib.spec import TableSpec


class Differ:
    """`diff`, from the adapter's `connect`, `_sql` and `dialect`, and two hooks of its own:
    `_diff_relations(con, spec, start, end)`, the SQL of the shadow's and the live rows'
    relations holding those days, and `_relation_columns(con, name)`, a relation's columns and
    their types as the engine names them; and `_diff_session(con)`, settings for the diff's
    connection (none by default)."""

    def _diff_session(self, con: Any) -> None:
        return None

    def diff(
        self: Any,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        *,
        tolerance: float = DEFAULT_TOLERANCE,
        known_same: Sequence[str] = (),
        detail: bool = True,
    ) -> DataDiff:
        """The shadow's rows of [start, end) against the live rows of those days; without
        `detail` (a batch's diff gate), the counts and sums alone: no schema, quantiles, pairs
        or rows side by side."""
        with self.connect(read_only=True) as con:
            self._diff_session(con)
            shadow, live = self._diff_relations(con, spec, start, end)
            q = DiffQueries(
                spec, shadow, live, start, end, self.dialect, tolerance, tuple(known_same), detail
            )
            # A gate's diff shows no schema: the shadow is built with the target's columns.
            schema = (
                schema_diff(
                    self._relation_columns(con, spec.name),
                    self._relation_columns(con, spec.shadow_name),
                )
                if detail
                else SchemaDiff()
            )
            rows = self._sql(con, q.aggregate(), {})
            total = next((r for r in rows if r[0]), None)
            cols = q.compared
            changed = [c for i, c in enumerate(cols) if total and int(total[6 + i] or 0)]
            pairs = {
                c.name: self._sql(con, q.pairs(c.name), {})
                for c in spec.columns
                if detail and c.name in changed and not is_numeric(c.sql_type)
            }
            first = next((r[1] for r in rows if not r[0] and int(r[5] or 0)), None)
            shown = [c for c in changed if c != spec.partition_column]
            side = self._sql(con, q.side_by_side(first, shown), {}) if first and detail else []
        return assemble(q, schema, rows, pairs, side, shown)
