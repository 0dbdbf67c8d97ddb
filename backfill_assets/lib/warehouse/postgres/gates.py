"""Everything the gates of one batch need from PostgreSQL: the queries of DuckDB's gates, in
PostgreSQL's dialect, side by side on five connections; `gate_assembly` turns their rows into
`GateInputs`. A batch's gates (`gates_and_diff`) also read the diff gate's diff beside them, on
two more, and its join stands for the fingerprints of the key and the unchanged columns, and for
the duplicate-key count when it finds every day the same; `gate_inputs` alone hashes them.

Row hashes are `hash_record_extended(ROW(...), seed)`: the columns' own hash functions, faster
than hashing the row's text. A key is sampled when the hash of (key, day), seeded by
the plan, mapped to [0, 1), falls below n/rows of its partition: reproducible, about n per
partition, without sorting the week. The rows per partition are those the shadow write recorded,
so no query waits for another; the sample reads the target only at the sampled keys.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from backfill_assets.lib.review.diff import DataDiff, DiffQueries, SchemaDiff
from backfill_assets.lib.review.diff import assemble as assemble_diff
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import GateInputs
from backfill_assets.lib.warehouse.gate_assembly import assemble, sample_sql_parts
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.postgres.connection import M, _x, diff_session
from backfill_assets.lib.warehouse.postgres.idents import ident
from backfill_assets.lib.warehouse.postgres.meta import base_type, hashable
from backfill_assets.lib.warehouse.predicates import render_predicate

if TYPE_CHECKING:
    from backfill_assets.lib.warehouse.postgres.layout import PostgresLayout

# The batch's diff gate runs as this many queries, each over a share of the days.
DIFF_PARTS = 2
_TWO_63 = "9223372036854775808.0"
_TWO_64 = "18446744073709551616.0"


def _hash(exprs: list[str], seed: str = "0") -> str:
    return f"hash_record_extended(ROW({', '.join(exprs)}), {seed})"


_INTEGER_TYPES = frozenset({"BIGINT", "INT8", "INTEGER", "INT", "INT4", "SMALLINT", "INT2"})


def _key_hash(spec: TableSpec, pc: str) -> str:
    """The sampling hash of a shadow row `x`: of its key and day, seeded by the plan. A single
    integer key is hashed by itself with the day in the seed (cheaper than a record's hash)."""
    seed = "hashtextextended(%(plan)s, 0)"
    pk = spec.primary_key
    if len(pk) == 1 and base_type(spec, pk[0]) in _INTEGER_TYPES:
        day = f"(x.{pc} - DATE '2000-01-01')::bigint"
        return f"hashint8extended(x.{ident(pk[0])}::bigint, {seed} # {day})"
    keys = [hashable(spec, c, "x.") for c in (*pk, spec.partition_column)]
    return _hash(keys, seed)


def _pg(sql: str) -> str:
    return sql.replace("%", "%%")


def gate_inputs(
    wh: PostgresLayout, spec: TableSpec, start: dt.date, end: dt.date, **reads: Any
) -> GateInputs:
    """The gates' inputs alone, the whole-partition comparison by fingerprints (`reads`: the
    keywords of `GateSource.gate_inputs`)."""
    return _gates(wh, spec, start, end, diff_tolerance=None, **reads)[0]


def gates_and_diff(
    wh: PostgresLayout,
    spec: TableSpec,
    start: dt.date,
    end: dt.date,
    *,
    tolerance: float,
    **reads: Any,
) -> tuple[GateInputs, DataDiff]:
    """The gates' inputs and the batch's diff gate, side by side. The diff joins every row of
    both sides on the key and the day, so it also answers what the fingerprints did: it
    compares the unchanged columns as one (exactly, floats too), and a day's key and unchanged
    columns are the same on both sides when no row is on one side only, none of the joined rows
    differs in them, and the joined rows number the rows of each side (no key matched twice).
    The two scans hash no row. Where they differ (a failing batch), the diff is read again
    comparing every column, to say which changed."""
    facts, diff = _gates(wh, spec, start, end, diff_tolerance=tolerance, **reads)
    assert diff is not None
    return facts, diff


def _diff_parts(
    wh: PostgresLayout,
    spec: TableSpec,
    start: dt.date,
    end: dt.date,
    tolerance: float,
    unchanged: tuple[str, ...],
) -> list[DiffQueries]:
    """The batch's diff, cut by days into `DIFF_PARTS` queries that run side by side: the
    `unchanged` columns compared as one, not one by one."""
    shadow, live = wh._q(spec.shadow_name), wh._q(spec.name)
    n = (end - start).days
    parts = max(1, min(DIFF_PARTS, n))
    cuts = [start + dt.timedelta(days=round(n * i / parts)) for i in range(parts + 1)]
    return [
        DiffQueries(
            spec, shadow, live, a, b, "postgres", tolerance, unchanged, False, as_one=unchanged
        )
        for a, b in itertools.pairwise(cuts)
    ]


def _diff_rows(wh: PostgresLayout, diffs: list[DiffQueries]) -> list[tuple]:
    """The rows of the diff's parts, read side by side."""
    with ThreadPoolExecutor(max_workers=len(diffs), thread_name_prefix="diff") as pool:
        jobs = [pool.submit(_fetch, wh, q.aggregate(), None) for q in diffs]
        return [row for job in jobs for row in job.result()[1]]


def _whole(diffs: list[DiffQueries]) -> DiffQueries:
    """The parts' queries as one over all their days (what `assemble_diff` reads them as)."""
    return dataclasses.replace(diffs[0], end=diffs[-1].end)


def diff_gate_alone(
    wh: PostgresLayout,
    spec: TableSpec,
    start: dt.date,
    end: dt.date,
    *,
    tolerance: float,
    unchanged: tuple[str, ...],
) -> DataDiff:
    """The diff gate's queries as `gates_and_diff` runs them, without the other gates' (the
    bench times the diff's share of a batch with it)."""
    diffs = _diff_parts(wh, spec, start, end, tolerance, unchanged)
    return assemble_diff(_whole(diffs), SchemaDiff(), _diff_rows(wh, diffs), {}, [], [])


def _fetch(
    wh: PostgresLayout, sql: str, params: Mapping[str, Any] | None
) -> tuple[list[str], list[tuple]]:
    """One of the gates' queries on its own read-only connection (`params` None: a diff's)."""
    with wh.connect(read_only=True) as con:
        # The queries already run side by side: parallel workers would only contend.
        _x(con, "SET max_parallel_workers_per_gather = 0")
        if params is None:  # a diff's join: both sides of its days hashed in memory
            diff_session(con)
        cur = _x(con, sql, params)
        return [d.name for d in cur.description or []], cur.fetchall()


def _gates(
    wh: PostgresLayout,
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
    diff_tolerance: float | None,
) -> tuple[GateInputs, DataDiff | None]:
    cols = spec.column_names
    for c in unchanged:
        validate_ident(c, "unchanged column")
    # Sent with parameters: a literal % (modulo) is doubled for psycopg.
    preds = {k: _pg(render_predicate(v, cols, "postgres")) for k, v in changed_predicates.items()}
    invs = {k: _pg(render_predicate(v, cols, "postgres")) for k, v in invariants.items()}
    pc = ident(spec.partition_column)
    pk = [ident(c) for c in spec.primary_key]
    shadow, live = wh._q(spec.shadow_name), wh._q(spec.name)
    rng = {"s": start, "e": end}
    days = [start + dt.timedelta(days=i) for i in range((end - start).days)]
    fp_cols = [hashable(spec, c) for c in (*spec.primary_key, *unchanged)]
    hashed = full_compare and unchanged and diff_tolerance is None  # the diff stands for it
    fingerprint = f", bit_xor({_hash(fp_cols)})" if hashed else ", NULL"
    distinct_pk = pk[0] if len(pk) == 1 else f"ROW({', '.join(pk)})"

    inv_names = list(invs)
    inv_aggs = "".join(
        f", count(*) FILTER (WHERE NOT coalesce(({invs[n]}), false))" for n in inv_names
    )
    # 1. One scan of the shadow: rows, invariant violations, fingerprint; and its duplicate keys
    # apart (a DISTINCT count sorts, and would hold the scan back).
    shadow_sql = (
        f"SELECT {pc}, count(*){fingerprint}{inv_aggs} FROM {shadow} "
        f"WHERE {pc} >= %(s)s AND {pc} < %(e)s GROUP BY 1"
    )
    dups_sql = (
        f"SELECT {pc}, count(*) - count(DISTINCT {distinct_pk}) FROM {shadow} "
        f"WHERE {pc} >= %(s)s AND {pc} < %(e)s GROUP BY 1"
    )
    # 2. One scan of the target: rows and the same fingerprint.
    live_sql = (
        f"SELECT {pc}, count(*){fingerprint} FROM {live} WHERE {pc} >= %(s)s "
        f"AND {pc} < %(e)s GROUP BY 1"
    )
    # 3. Source rows per partition.
    source_sql = None
    if spec.source is not None:
        spc = ident(spec.source.partition_column)
        source_sql = (
            f"SELECT {spc}, count(*) FROM {wh._q(spec.source.table)} "
            f"WHERE {spc} >= %(s)s AND {spc} < %(e)s GROUP BY 1"
        )
    # 4. The sample of every partition, joined to the target on the key, in one query. The share
    # to take of a partition is n / the rows its shadow write recorded, so that this query need
    # not wait for query 1.
    ok_cols, join, select = sample_sql_parts(spec, unchanged, list(preds.values()))
    key_hash = _key_hash(spec, pc)
    sample_sql = (
        f"WITH c AS (SELECT partition_date AS __day, least(1.0, %(n)s::float8 / "
        f"greatest(row_count, 1)) AS __share FROM {M}.shadow_log "
        "WHERE table_name = %(t)s AND plan_id = %(plan)s "
        "AND partition_date >= %(s)s AND partition_date < %(e)s), "
        f"s AS (SELECT x.*{ok_cols} FROM {shadow} x JOIN c ON x.{pc} = c.__day "
        f"WHERE x.{pc} >= %(s)s AND x.{pc} < %(e)s "
        f"AND ({key_hash}::float8 + {_TWO_63}) / {_TWO_64} < c.__share) "
        f"SELECT {select}"
        # Each sampled key looked up in the target's index: the target's weeks are pruned by the
        # range (an IN over the sample, planned on the unanalyzed shadow, rescanned it per row).
        + f" FROM s LEFT JOIN {live} t ON {join} AND t.{pc} >= %(s)s AND t.{pc} < %(e)s "
        f"ORDER BY s.{pc}, " + ", ".join("s." + k for k in pk)
    )
    sample_params = {**rng, "plan": plan_id, "n": sample_size, "t": wh._key(spec.name)}

    # The unchanged columns compared as one where the diff stands for the fingerprints.
    as_one = unchanged if full_compare else ()
    diffs = (
        _diff_parts(wh, spec, start, end, diff_tolerance, as_one)
        if diff_tolerance is not None
        else []
    )
    # Where the diff stands for the fingerprints, a day it finds the same has no duplicate key
    # (`_same_by_day`): the batch's duplicates are counted only when a day is not the same.
    dups_after = bool(diffs and as_one)

    # The queries are independent (each reads committed data, as on one autocommit connection):
    # each on its own connection, side by side, so the gates use the server's cores while the
    # write they check used one.
    with ThreadPoolExecutor(max_workers=5 + len(diffs), thread_name_prefix="gates") as pool:
        # The diff's parts first: they are the longest.
        diff_jobs = [pool.submit(_fetch, wh, q.aggregate(), None) for q in diffs]
        shadow_job = pool.submit(_fetch, wh, shadow_sql, rng)
        dups_job = None if dups_after else pool.submit(_fetch, wh, dups_sql, rng)
        live_job = pool.submit(_fetch, wh, live_sql, rng)
        source_job = pool.submit(_fetch, wh, source_sql, rng) if source_sql else None
        sample_job = pool.submit(_fetch, wh, sample_sql, sample_params)
        shadow_rows = shadow_job.result()[1]
        live_stats = live_job.result()[1]
        source_rows: dict[dt.date, int] | None = None
        if source_job is not None:
            source_rows = dict.fromkeys(days, 0)
            for day, n in source_job.result()[1]:
                source_rows[day] = n
        names, sampled_rows = sample_job.result()
        diff_rows = [row for job in diff_jobs for row in job.result()[1]]
        same: dict[dt.date, bool] = {}
        if dups_after:
            same = _same_by_day(
                diff_rows, {r[0]: r[1] for r in shadow_rows}, {r[0]: r[1] for r in live_stats}
            )
            unproven = not all(same.values())
            dups_job = pool.submit(_fetch, wh, dups_sql, rng) if unproven else None
        dups = dict(dups_job.result()[1]) if dups_job is not None else {}
    # As gate_assembly reads them: (day, rows, duplicate keys, fingerprint, *invariants).
    shadow_stats = [(r[0], r[1], dups.get(r[0], 0), *r[2:]) for r in shadow_rows]

    facts = assemble(
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
    if diff_tolerance is None:
        return facts, None
    if not as_one:
        return facts, assemble_diff(_whole(diffs), SchemaDiff(), diff_rows, {}, [], [])
    samples = {
        d: dataclasses.replace(s, fingerprint_equal=same.get(d, True))
        for d, s in facts.samples.items()
    }
    facts = dataclasses.replace(facts, samples=samples)
    if not all(same.values()):
        # A row differs in a column declared unchanged: which, read column by column.
        diffs = _diff_parts(wh, spec, start, end, diff_tolerance, ())
        diff_rows = _diff_rows(wh, diffs)
    return facts, assemble_diff(_whole(diffs), SchemaDiff(), diff_rows, {}, [], [])


def _same_by_day(
    rows: list[tuple], shadow_rows: Mapping[dt.date, int], target_rows: Mapping[dt.date, int]
) -> dict[dt.date, bool]:
    """Per day of the diff's rows (`DiffQueries.aggregate`'s: flag, day, in both, shadow only,
    live only, ..., and last the joined rows whose unchanged columns differ): the key and the
    unchanged columns are the same multiset on both sides, each key once.

    Once: with s_k and t_k a key's rows on each side, every key on both (nothing one-sided), the
    join has sum(s_k * t_k) rows; that equals sum(s_k), the shadow's rows, only if every t_k is
    1, and equals sum(t_k) only if every s_k is 1. So a day found the same has no duplicate key
    on either side."""
    same: dict[dt.date, bool] = {}
    for row in rows:
        day, both, only_shadow, only_live = row[1], int(row[2] or 0), row[3], row[4]
        same[day] = (
            not only_shadow
            and not only_live
            and not row[-1]
            and both == shadow_rows.get(day, 0) == target_rows.get(day, 0)
        )
    return same
