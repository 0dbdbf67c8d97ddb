"""Everything the gates of one batch need from DuckDB, in five set-based queries on one connection.

A batch is a week: per-partition queries in a loop cost a connection and several round trips
per day, which made the gates several times slower than the write they check. Here each query
covers the whole range and groups by partition, over the batch's own week tables (not the view
over every week). A key is sampled when `hash(pk, "<plan>:<day>")` falls below n / the rows the
shadow write recorded for its partition, so the sample is reproducible.

Measured query by query on one of the bench's 1.4M-row weeks: `count(DISTINCT pk)` beside the
other aggregates took 143 ms for the shadow's step; duplicate keys are now counted on a bitmap
of an integer key's range in the same scan (72 ms), or else from the keys alone, sorted within
each day (104 ms). A sampled row comes back whole only when it fails, since turning ~1,400
clean rows' decimals and timestamps into Python objects took a quarter of the sample query.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from backfill_assets.constants import METADATA_SCHEMA
from backfill_assets.lib.dates import iso_weeks, week_id
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import GateInputs
from backfill_assets.lib.warehouse.duckdb_adapter import week_union
from backfill_assets.lib.warehouse.gate_assembly import assemble, sample_sql_parts
from backfill_assets.lib.warehouse.identifiers import (
    column_list,
    quote_ident,
    validate_ident,
)
from backfill_assets.lib.warehouse.predicates import render_predicate

# Signed integer key types whose duplicates can be counted on a bitmap of the keys' range.
_INTEGER_KEYS = frozenset(
    {"TINYINT", "INT1", "SMALLINT", "INT2", "SHORT", "INTEGER", "INT4", "INT", "SIGNED",
     "BIGINT", "INT8", "LONG"}
)  # fmt: skip
# The most bits such bitmaps may take over all of a batch's days (64 MiB); wider key ranges are
# counted from the sorted keys.
_BITMAP_MAX_BITS = 1 << 29


def _bitmap_duplicates(
    con: Any, spec: TableSpec, shadow: str, in_range: str, rng: Mapping[str, Any], n_days: int
) -> str | None:
    """An aggregate counting each day's duplicate keys exactly, from a bitmap of the key range
    (`bitstring_agg`), when the key is one integer column whose values in the shadow span few
    enough; else None. It counts what count(*) - count(DISTINCT key) counts, NULL keys too."""
    if len(spec.primary_key) != 1:
        return None
    column = next(c for c in spec.columns if c.name == spec.primary_key[0])
    if column.sql_type.strip().upper() not in _INTEGER_KEYS:
        return None
    key = quote_ident(column.name)
    lo, hi = con.execute(
        f"SELECT min({key})::BIGINT, max({key})::BIGINT FROM {shadow} WHERE {in_range}", rng
    ).fetchone()
    if lo is None or (hi - lo + 1) * n_days > _BITMAP_MAX_BITS:
        return None
    return f"count(*) - coalesce(bit_count(bitstring_agg({key}::BIGINT, {lo}, {hi})), 0)"


def _weeks(
    spec: TableSpec, base: str, tables: Mapping[str, str], start: dt.date, end: dt.date
) -> str:
    """The week tables of `base` (target or shadow; `tables`: its week tables by week id) that
    hold [start, end), as one relation with the spec's columns, as the view reads them; the view
    when a week has none (a shadow week not written yet, or a target week in the base table)."""
    names = [tables.get(week_id(w0)) for w0, _ in iso_weeks(start, end)]
    if not names or None in names:
        return quote_ident(base)
    return f"({week_union(spec, names)})"  # type: ignore[arg-type]


def gate_inputs(
    wh: Any,
    spec: TableSpec,
    start: dt.date,
    end: dt.date,
    *,
    plan_id: str,
    sample_size: int,
    unchanged: tuple[str, ...],
    changed_predicates: Mapping[str, str],
    invariants: Mapping[str, str],
    full_compare: bool,
) -> GateInputs:
    cols = spec.column_names
    for c in unchanged:
        validate_ident(c, "unchanged column")
    preds = {k: render_predicate(v, cols) for k, v in changed_predicates.items()}
    invs = {k: render_predicate(v, cols) for k, v in invariants.items()}
    pc = quote_ident(spec.partition_column)
    pk = [quote_ident(c) for c in spec.primary_key]
    rng = {"s": start, "e": end}
    days = [start + dt.timedelta(days=i) for i in range((end - start).days)]
    fp_cols = column_list((*spec.primary_key, *unchanged))
    fingerprint = f", bit_xor(hash({fp_cols}))" if full_compare and unchanged else ", NULL"
    # The key as count(DISTINCT ...) would see it: one column (NULLs are not keys), or a row of
    # them (never NULL itself; rows with the same NULLs are the same key).
    key = pk[0] if len(pk) == 1 else f"row({', '.join(pk)})"

    with wh.connect(read_only=True) as con:
        # The batch's own week tables, not the views over every week: planning a view over
        # years of weeks costs more than scanning the one week a batch checks.
        tables = wh._week_tables_of(con, spec.shadow_name, spec.name)
        shadow = _weeks(spec, spec.shadow_name, tables[spec.shadow_name], start, end)
        live = _weeks(spec, spec.name, tables[spec.name], start, end)
        in_range = f"{pc} >= $s AND {pc} < $e"
        # 1. The shadow: rows, duplicate keys, fingerprint and invariant violations per day.
        inv_names = list(invs)
        inv_aggs = "".join(f", count_if(({invs[n]}) IS NOT TRUE)" for n in inv_names)
        bitmap = _bitmap_duplicates(con, spec, shadow, in_range, rng, len(days))
        # Duplicates from a bitmap of an integer key's range, in the same scan; else from the
        # keys alone, sorted within each day: each row whose key equals the previous row's is
        # one more than count(DISTINCT key) sees, and so is each NULL key.
        shadow_stats = con.execute(
            f"SELECT {pc}, count(*), {bitmap}{fingerprint}{inv_aggs} FROM {shadow} "
            f"WHERE {in_range} GROUP BY ALL"
            if bitmap
            else f"WITH k AS (SELECT {pc}, count_if(_key IS NULL) + count_if(_prev IS NOT NULL "
            f"AND _key IS NOT DISTINCT FROM _prev) AS dups FROM (SELECT {pc}, {key} AS _key, "
            f"lag({key}) OVER (PARTITION BY {pc} ORDER BY {key} NULLS LAST) AS _prev "
            f"FROM {shadow} WHERE {in_range}) GROUP BY ALL), "
            f"st AS (SELECT {pc}, count(*) AS _rows{fingerprint}{inv_aggs} FROM {shadow} "
            f"WHERE {in_range} GROUP BY ALL) "
            f"SELECT st.{pc}, st._rows, k.dups, st.* EXCLUDE ({pc}, _rows) "
            f"FROM st JOIN k USING ({pc})",
            rng,
        ).fetchall()
        # 2. One scan of the target: rows and the same fingerprint.
        live_stats = con.execute(
            f"SELECT {pc}, count(*){fingerprint} FROM {live} WHERE {in_range} GROUP BY ALL",
            rng,
        ).fetchall()
        # 3. Source rows per partition.
        source_rows: dict[dt.date, int] | None = None
        if spec.source is not None:
            spc = quote_ident(spec.source.partition_column)
            source_rows = dict.fromkeys(days, 0)
            for day, n in con.execute(
                f"SELECT {spc}, count(*) FROM {quote_ident(spec.source.table)} "
                f"WHERE {spc} >= $s AND {spc} < $e GROUP BY ALL",
                rng,
            ).fetchall():
                source_rows[day] = n
        # 4. The sample of every partition, joined to the target on the key, in one query.
        # A key is sampled when hash(pk, "<plan>:<day>") falls below n/rows of its partition:
        # reproducible, about n per partition, and no sort of the whole week (a per-partition
        # row_number() over the hash cost more than the write being checked). Only sampled keys
        # are read from the target.
        ok_cols, join, select = sample_sql_parts(spec, unchanged, list(preds.values()))
        key_tuple = pk[0] if len(pk) == 1 else f"({', '.join(pk)})"
        # The share to take of a partition is n / the rows its shadow write recorded, and its
        # seed "<plan>:<day>", both looked up by the row's day offset (a join of every row to the
        # days cost more than the hash; building the seed per row, a third of the filter).
        recorded = dict(
            con.execute(
                f"SELECT partition_date, row_count FROM {METADATA_SCHEMA}.shadow_log "
                "WHERE table_name = $t AND plan_id = $plan AND partition_date >= $s "
                "AND partition_date < $e",
                {**rng, "t": spec.name, "plan": plan_id},
            ).fetchall()
        )
        shares = [min(1.0, sample_size / max(recorded.get(d) or 0, 1)) for d in days]
        # A clean sampled row comes back as its day and its flags only; `assemble` shows the
        # values of failing rows alone.
        shown = [*cols, *(f"target_{c}" for c in unchanged)]
        flags = ["__missing", *(f"__diff{i}" for i in range(len(unchanged)))]
        failing = " OR ".join(
            [f"q.{f}" for f in flags] + [f"NOT q.__ok{i}" for i in range(len(preds))]
        )
        outer = [
            f"q.{quote_ident(c)}"
            if c == spec.partition_column
            else f"CASE WHEN {failing} THEN q.{quote_ident(c)} END AS {quote_ident(c)}"
            for c in shown
        ]
        outer += [f"q.{f}" for f in flags] + [f"q.__ok{i}" for i in range(len(preds))]
        cur = con.execute(
            f"WITH s AS (SELECT x.*{ok_cols} FROM {shadow} x "
            f"WHERE x.{pc} >= $s AND x.{pc} < $e AND hash({', '.join('x.' + k for k in pk)}, "
            f"$seeds[(x.{pc} - $s::DATE) + 1])::DOUBLE < 18446744073709551615.0 * "
            f"$shares[(x.{pc} - $s::DATE) + 1]), "
            f"t AS (SELECT * FROM {live} WHERE {in_range} "
            f"AND {key_tuple} IN (SELECT {key_tuple} FROM s)) "
            f"SELECT {', '.join(outer)} FROM (SELECT {select} FROM s LEFT JOIN t ON {join}) q "
            f"ORDER BY q.{pc}, " + ", ".join(f"q.{k}" for k in pk),
            {**rng, "shares": shares, "seeds": [f"{plan_id}:{d.isoformat()}" for d in days]},
        )
        names = [d[0] for d in cur.description]
        sampled_rows = cur.fetchall()

    return assemble(
        spec,
        days,
        unchanged=unchanged,
        predicates=tuple(preds),
        invariants=tuple(inv_names),
        full_compare=full_compare,
        shadow_stats=shadow_stats,
        live_stats=live_stats,
        source_rows=source_rows,
        names=names,
        sampled_rows=sampled_rows,
    )
