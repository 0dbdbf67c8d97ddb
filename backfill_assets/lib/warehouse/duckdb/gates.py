"""Everything the gates of one batch need from DuckDB, in a few set-based queries on one
connection (see docs/architecture.md, Gates).

A batch is a week: per-partition queries in a loop cost a connection and several round trips
per day, which made the gates several times slower than the write they check. Here each query
covers the whole range and groups by partition, over the batch's own week tables (not the view
over every week): the shadow's rows and fingerprint; the target's, as its writes recorded them
(or scanned); the shadow's duplicate keys and invariant violations; the source counts; the
sample. A key is sampled when `hash(pk, "<plan>:<day>")` falls below n / the shadow's rows of
its partition, so the sample is reproducible.

Why each query has its shape (`python -m bench --only gates` measures them; docs/performance.md
has the figures): duplicates are counted over the whole batch first, which is cheaper than a
bitmap per day and far cheaper than `count(DISTINCT pk)`; when the fingerprints agree, the rules
of the changed columns are read from the shadow alone, a fraction of the full sample joined to
the target; and a sampled row comes back whole only when it fails, since turning clean rows'
values into Python objects was a good share of the sample query.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from backfill_assets.constants import METADATA_SCHEMA
from backfill_assets.lib.dates import iso_weeks, week_id
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import GateInputs
from backfill_assets.lib.warehouse.duckdb.layout import week_union
from backfill_assets.lib.warehouse.duckdb.meta import fingerprint_of, fingerprint_sql
from backfill_assets.lib.warehouse.gate_assembly import assemble, sample_sql_parts
from backfill_assets.lib.warehouse.identifiers import quote_ident, validate_ident
from backfill_assets.lib.warehouse.predicates import render_predicate

# Signed integer key types whose duplicates can be counted on a bitmap of the keys' range.
_INTEGER_KEYS = frozenset(
    {"TINYINT", "INT1", "SMALLINT", "INT2", "SHORT", "INTEGER", "INT4", "INT", "SIGNED",
     "BIGINT", "INT8", "LONG"}
)  # fmt: skip
# The most bits such bitmaps may take over all of a batch's days (64 MiB); wider key ranges are
# counted from the sorted keys.
_BITMAP_MAX_BITS = 1 << 29


def _key_range(
    con: Any, spec: TableSpec, shadow: str, in_range: str, rng: Mapping[str, Any], n_days: int
) -> tuple[str, int, int] | None:
    """(key, lowest, highest) when the key is one integer column whose values in the shadow span
    few enough for a bitmap (`_BITMAP_MAX_BITS` over the batch's days); else None."""
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
    return key, lo, hi


def _duplicates(
    con: Any, spec: TableSpec, shadow: str, in_range: str, rng: Mapping[str, Any], n_days: int
) -> dict[Any, int]:
    """Each day's duplicate keys, counted exactly, as count(*) - count(DISTINCT key) counts them
    (NULL keys too). An integer key is first counted over the whole batch on one bitmap of its
    range (`bitstring_agg`): a day's duplicate is one of the batch's, so none there means none
    in any day, and only a batch with some is counted day by day (one bitmap per day took twice
    as long). Another key is counted from the keys alone, sorted within each day: each row whose
    key equals the previous row's is one more than count(DISTINCT key) sees, and so is each NULL
    key."""
    pc = quote_ident(spec.partition_column)
    ranged = _key_range(con, spec, shadow, in_range, rng, n_days)
    if ranged is not None:
        key, lo, hi = ranged
        dups = f"count(*) - coalesce(bit_count(bitstring_agg({key}::BIGINT, {lo}, {hi})), 0)"
        (batch,) = con.execute(f"SELECT {dups} FROM {shadow} WHERE {in_range}", rng).fetchone()
        if not batch:
            return {}
        sql = f"SELECT {pc}, {dups} FROM {shadow} WHERE {in_range} GROUP BY ALL"
    else:
        pk = [quote_ident(c) for c in spec.primary_key]
        # The key as count(DISTINCT ...) would see it: one column (NULLs are not keys), or a
        # row of them (never NULL itself; rows with the same NULLs are the same key).
        key = pk[0] if len(pk) == 1 else f"row({', '.join(pk)})"
        sql = (
            f"SELECT {pc}, count_if(_key IS NULL) + count_if(_prev IS NOT NULL "
            f"AND _key IS NOT DISTINCT FROM _prev) FROM (SELECT {pc}, {key} AS _key, "
            f"lag({key}) OVER (PARTITION BY {pc} ORDER BY {key} NULLS LAST) AS _prev "
            f"FROM {shadow} WHERE {in_range}) GROUP BY ALL"
        )
    return {day: int(n) for day, n in con.execute(sql, rng).fetchall()}


def _violations(
    con: Any, shadow: str, pc: str, in_range: str, rng: Mapping[str, Any], invs: list[str]
) -> dict[tuple[int, Any], int]:
    """(invariant index, day) -> rows breaking it. Each invariant is a filter of its own scan:
    DuckDB applies a filter while it reads a column, by its zone maps and, in a file opened since
    the rows were written, by its dictionary, where the same predicate as an aggregate's argument
    is evaluated on every row: on a week opened again, the filter is several times cheaper; on
    the rows a batch's session has just written, the two cost the same."""
    if not invs:
        return {}
    sql = " UNION ALL ".join(
        f"SELECT {i} AS i, {pc}, count(*) FROM {shadow} WHERE {in_range} AND ({p}) IS NOT TRUE "
        "GROUP BY ALL"
        for i, p in enumerate(invs)
    )
    return {(i, day): int(n) for i, day, n in con.execute(sql, rng).fetchall()}


def _scan(
    con: Any,
    relation: str,
    pc: str,
    in_range: str,
    rng: Mapping[str, Any],
    fingerprint: str,
    days: list[dt.date],
) -> dict[Any, tuple[int, Any]]:
    """day -> (rows, fingerprint) of `relation`'s rows."""
    rows = con.execute(
        f"SELECT {pc}, count(*), {fingerprint} FROM {relation} WHERE {in_range} GROUP BY ALL",
        rng,
    ).fetchall()
    return {d: (0, None) for d in days} | {r[0]: (int(r[1]), r[2]) for r in rows}


def _recorded(
    con: Any, spec: TableSpec, rng: Mapping[str, Any]
) -> dict[Any, tuple[int, Any, str | None]]:
    """day -> (rows, fingerprint, the columns it covers) of the target's current version of each
    day, as its write recorded them (`backfill_meta.partition_versions`)."""
    rows = con.execute(
        f"SELECT partition_date, row_count, fingerprint, fingerprint_of FROM "
        f"{METADATA_SCHEMA}.partition_versions WHERE table_name = $t AND partition_date >= $s "
        "AND partition_date < $e",
        {**rng, "t": spec.name},
    ).fetchall()
    return {day: (int(n or 0), fp, of) for day, n, fp, of in rows}


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
    compare = full_compare and bool(unchanged)
    covers = fingerprint_of(unchanged) if compare else None
    fingerprint = fingerprint_sql(spec, unchanged) if compare else "NULL"

    with wh.connect(read_only=True) as con:
        # The batch's own week tables, not the views over every week: planning a view over
        # years of weeks costs more than scanning the one week a batch checks.
        tables = wh._week_tables_of(con, spec.shadow_name, spec.name)
        shadow = _weeks(spec, spec.shadow_name, tables[spec.shadow_name], start, end)
        live = _weeks(spec, spec.name, tables[spec.name], start, end)
        in_range = f"{pc} >= $s AND {pc} < $e"
        # 1. The shadow's rows and fingerprint per day, from a scan of its rows.
        shadow_side = _scan(con, shadow, pc, in_range, rng, fingerprint, days)
        # 2. The target's: as its writes recorded them (each from one scan of the rows it
        # wrote) when every day has them for the plan's unchanged columns; else from a scan (a
        # file written before they were recorded, days a swap or rollback moved, a plan with
        # other unchanged columns than the table's).
        recorded = _recorded(con, spec, rng)
        if all(d in recorded and (not compare or recorded[d][2] == covers) for d in days):
            live_side = {d: recorded[d][:2] for d in days}
        else:
            live_side = _scan(con, live, pc, in_range, rng, fingerprint, days)
        # The shadow's duplicate keys and invariant violations, from its rows.
        dups = _duplicates(con, spec, shadow, in_range, rng, len(days))
        inv_names = list(invs)
        broken = _violations(con, shadow, pc, in_range, rng, list(invs.values()))
        shadow_stats = [
            (d, shadow_side[d][0], dups.get(d, 0), shadow_side[d][1],
             *(broken.get((i, d), 0) for i in range(len(inv_names))))
            for d in days
        ]  # fmt: skip
        live_stats = [(d, *live_side[d]) for d in days]
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
        # 4. The sample of every partition, in one query. A key is sampled when
        # hash(pk, "<plan>:<day>") falls below n/rows of its partition: reproducible, about n
        # per partition, and no sort of the whole week (a per-partition row_number() over the
        # hash cost more than the write being checked). The share to take of a partition is
        # n / the shadow's rows of that day (counted above), and its seed "<plan>:<day>", both
        # looked up by the row's day offset (a join of every row to the days cost more than the
        # hash; building the seed per row, a third of the filter).
        shares = [min(1.0, sample_size / max(shadow_side[d][0], 1)) for d in days]
        params = {**rng, "shares": shares, "seeds": [f"{plan_id}:{d.isoformat()}" for d in days]}
        key_args = ", ".join("x." + k for k in pk)
        sampled = (
            f"x.{pc} >= $s AND x.{pc} < $e AND hash({key_args}, "
            f"$seeds[(x.{pc} - $s::DATE) + 1])::DOUBLE < 18446744073709551615.0 * "
            f"$shares[(x.{pc} - $s::DATE) + 1]"
        )
        ok_cols, join, select = sample_sql_parts(spec, unchanged, list(preds.values()))
        names: list[str] = []
        sampled_rows: list[tuple] | None = None
        clean: dict[Any, int] | None = None
        if compare and all(shadow_side[d][1] == live_side[d][1] for d in days):
            # Equal fingerprints say every row of the shadow has its key and unchanged values in
            # the target (each as often), so the sampled rows do: count, per day, the sampled
            # rows and those that break a changed column's rule, from the shadow alone and from
            # only the columns the rules read (DuckDB reads every column a query names for every
            # row of the week before the sample's filter, and turning clean rows into Python
            # objects costs more than the counts). Rows that break a rule come back whole from
            # the full query below.
            fails = "".join(f", count_if(NOT __ok{i})" for i in range(len(preds)))
            counted = con.execute(
                f"SELECT {pc}, count(*){fails} FROM (SELECT x.{pc}{ok_cols} FROM {shadow} x "
                f"WHERE {sampled}) GROUP BY ALL",
                params,
            ).fetchall()
            if not any(any(row[2:]) for row in counted):
                clean, sampled_rows = {row[0]: int(row[1]) for row in counted}, []
        if sampled_rows is None:
            # The sample of every partition joined to the target on the key. Only sampled keys
            # are read from the target; a clean sampled row comes back as its day and its flags
            # only, and `assemble` shows the values of failing rows alone.
            key_tuple = pk[0] if len(pk) == 1 else f"({', '.join(pk)})"
            shown = [*cols, *(f"target_{c}" for c in unchanged)]
            flag_names = ["__missing", *(f"__diff{i}" for i in range(len(unchanged)))]
            failing = " OR ".join(
                [f"q.{f}" for f in flag_names] + [f"NOT q.__ok{i}" for i in range(len(preds))]
            )
            outer = [
                f"q.{quote_ident(c)}"
                if c == spec.partition_column
                else f"CASE WHEN {failing} THEN q.{quote_ident(c)} END AS {quote_ident(c)}"
                for c in shown
            ]
            outer += [f"q.{f}" for f in flag_names] + [f"q.__ok{i}" for i in range(len(preds))]
            cur = con.execute(
                f"WITH s AS (SELECT x.*{ok_cols} FROM {shadow} x WHERE {sampled}), "
                f"t AS (SELECT * FROM {live} WHERE {in_range} "
                f"AND {key_tuple} IN (SELECT {key_tuple} FROM s)) "
                f"SELECT {', '.join(outer)} FROM (SELECT {select} FROM s LEFT JOIN t ON {join}) q "
                f"ORDER BY q.{pc}, " + ", ".join(f"q.{k}" for k in pk),
                params,
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
        sampled_rows=sampled_rows or [],
        clean_samples=clean,
    )
