"""Everything the gates of one batch need from PostgreSQL: the queries of DuckDB's gates, in
PostgreSQL's dialect, side by side on five connections; `gate_assembly` turns their rows into
`GateInputs`.

Row hashes are `hash_record_extended(ROW(...), seed)`: the columns' own hash functions, faster
than hashing the row's text. A key is sampled when the hash of (key, day), seeded by
the plan, mapped to [0, 1), falls below n/rows of its partition: reproducible, about n per
partition, without sorting the week. The rows per partition are those the shadow write recorded,
so no query waits for another; the sample reads the target only at the sampled keys.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import GateInputs
from backfill_assets.lib.warehouse.gate_assembly import assemble, sample_sql_parts
from backfill_assets.lib.warehouse.identifiers import validate_ident
from backfill_assets.lib.warehouse.postgres.connection import M, _x
from backfill_assets.lib.warehouse.postgres.idents import ident
from backfill_assets.lib.warehouse.postgres.meta import base_type, hashable
from backfill_assets.lib.warehouse.predicates import render_predicate

if TYPE_CHECKING:
    from backfill_assets.lib.warehouse.postgres.layout import PostgresLayout

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
) -> GateInputs:
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
    fingerprint = f", bit_xor({_hash(fp_cols)})" if full_compare and unchanged else ", NULL"
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

    def fetch(sql: str, params: Mapping[str, Any]) -> tuple[list[str], list[tuple]]:
        with wh.connect(read_only=True) as con:
            # The queries already run side by side: parallel workers would only contend.
            _x(con, "SET max_parallel_workers_per_gather = 0")
            cur = _x(con, sql, params)
            return [d.name for d in cur.description or []], cur.fetchall()

    # The queries are independent (each reads committed data, as on one autocommit connection):
    # each on its own connection, side by side, so the gates use the server's cores while the
    # write they check used one.
    with ThreadPoolExecutor(max_workers=5, thread_name_prefix="gates") as pool:
        shadow_job = pool.submit(fetch, shadow_sql, rng)
        dups_job = pool.submit(fetch, dups_sql, rng)
        live_job = pool.submit(fetch, live_sql, rng)
        source_job = pool.submit(fetch, source_sql, rng) if source_sql else None
        sample_job = pool.submit(fetch, sample_sql, sample_params)
        dups = dict(dups_job.result()[1])
        # As gate_assembly reads them: (day, rows, duplicate keys, fingerprint, *invariants).
        shadow_stats = [(r[0], r[1], dups.get(r[0], 0), *r[2:]) for r in shadow_job.result()[1]]
        live_stats = live_job.result()[1]
        source_rows: dict[dt.date, int] | None = None
        if source_job is not None:
            source_rows = dict.fromkeys(days, 0)
            for day, n in source_job.result()[1]:
                source_rows[day] = n
        names, sampled_rows = sample_job.result()

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
