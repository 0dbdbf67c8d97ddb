"""Everything the gates of one batch need from PostgreSQL: the queries of duckdb_gates, in
PostgreSQL's dialect, on one connection; `gate_assembly` turns their rows into `GateInputs`.

Row hashes are `hash_record_extended(ROW(...), seed)`: the columns' own hash functions, about
twice as fast as hashing the row's text. A key is sampled when the hash of (key, day), seeded by
the plan, mapped to [0, 1), falls below n/rows of its partition: reproducible, about n per
partition, without sorting the week. The rows per partition come from the shadow's scan, so the
sample reads the shadow once more and the target only at the sampled keys.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING

from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import GateInputs
from backfill_assets.lib.warehouse.gate_assembly import assemble
from backfill_assets.lib.warehouse.identifiers import quote_ident, validate_ident
from backfill_assets.lib.warehouse.predicates import render_predicate

if TYPE_CHECKING:
    from backfill_assets.lib.warehouse.postgres_adapter import PostgresWarehouse

from backfill_assets.lib.warehouse.postgres_adapter import _x, hashable

_TWO_63 = "9223372036854775808.0"
_TWO_64 = "18446744073709551616.0"


def _hash(exprs: list[str], seed: str = "0") -> str:
    return f"hash_record_extended(ROW({', '.join(exprs)}), {seed})"


def _pg(sql: str) -> str:
    return sql.replace("%", "%%")


def gate_inputs(
    wh: PostgresWarehouse,
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
    pc = quote_ident(spec.partition_column)
    pk = [quote_ident(c) for c in spec.primary_key]
    shadow, live = wh._q(spec.shadow_name), wh._q(spec.name)
    rng = {"s": start, "e": end}
    days = [start + dt.timedelta(days=i) for i in range((end - start).days)]
    fp_cols = [hashable(spec, c) for c in (*spec.primary_key, *unchanged)]
    fingerprint = f", bit_xor({_hash(fp_cols)})" if full_compare and unchanged else ", NULL"
    distinct_pk = pk[0] if len(pk) == 1 else f"ROW({', '.join(pk)})"

    with wh.connect(read_only=True) as con:
        # 1. One scan of the shadow: rows, duplicate keys, invariant violations, fingerprint.
        inv_names = list(invs)
        inv_aggs = "".join(
            f", count(*) FILTER (WHERE NOT coalesce(({invs[n]}), false))" for n in inv_names
        )
        shadow_stats = _x(
            con,
            f"SELECT {pc}, count(*), count(*) - count(DISTINCT {distinct_pk}){fingerprint}"
            f"{inv_aggs} FROM {shadow} WHERE {pc} >= %(s)s AND {pc} < %(e)s GROUP BY 1",
            rng,
        ).fetchall()
        # 2. One scan of the target: rows and the same fingerprint.
        live_stats = _x(
            con,
            f"SELECT {pc}, count(*){fingerprint} FROM {live} WHERE {pc} >= %(s)s "
            f"AND {pc} < %(e)s GROUP BY 1",
            rng,
        ).fetchall()
        # 3. Source rows per partition.
        source_rows: dict[dt.date, int] | None = None
        if spec.source is not None:
            spc = quote_ident(spec.source.partition_column)
            source_rows = dict.fromkeys(days, 0)
            for day, n in _x(
                con,
                f"SELECT {spc}, count(*) FROM {wh._q(spec.source.table)} "
                f"WHERE {spc} >= %(s)s AND {spc} < %(e)s GROUP BY 1",
                rng,
            ).fetchall():
                source_rows[day] = n
        # 4. The sample of every partition, joined to the target on the key, in one query; the
        # share to take of each partition is n / its rows (from query 1).
        ok_cols = "".join(
            f", coalesce(({p}), false) AS __ok{i}" for i, p in enumerate(preds.values())
        )
        share = {row[0]: min(1.0, sample_size / row[1]) for row in shadow_stats if row[1]}
        keys = [hashable(spec, c, "x.") for c in (*spec.primary_key, spec.partition_column)]
        key_hash = _hash(keys, "hashtextextended(%(plan)s, 0)")
        join = " AND ".join(f"t.{k} = s.{k}" for k in pk) + f" AND t.{pc} = s.{pc}"
        key_tuple = pk[0] if len(pk) == 1 else f"({', '.join(pk)})"
        flags = [f"t.{pk[0]} IS NULL AS __missing"]
        flags += [
            f"s.{quote_ident(c)} IS DISTINCT FROM t.{quote_ident(c)} AS __diff{i}"
            for i, c in enumerate(unchanged)
        ]
        shown = ", ".join(f"s.{quote_ident(c)}" for c in cols)
        shown += "".join(f", t.{quote_ident(c)} AS {quote_ident('target_' + c)}" for c in unchanged)
        cur = _x(
            con,
            f"WITH c AS (SELECT * FROM unnest(%(days)s::date[], %(share)s::float8[]) "
            f"AS c(__day, __share)), "
            f"s AS (SELECT x.*{ok_cols} FROM {shadow} x JOIN c ON x.{pc} = c.__day "
            f"WHERE x.{pc} >= %(s)s AND x.{pc} < %(e)s "
            f"AND ({key_hash}::float8 + {_TWO_63}) / {_TWO_64} < c.__share), "
            f"t AS (SELECT * FROM {live} WHERE {pc} >= %(s)s AND {pc} < %(e)s "
            f"AND {key_tuple} IN (SELECT {key_tuple} FROM s)) "
            f"SELECT {shown}, {', '.join(flags)}"
            + "".join(f", __ok{i}" for i in range(len(preds)))
            + f" FROM s LEFT JOIN t ON {join} ORDER BY s.{pc}, "
            + ", ".join("s." + k for k in pk),
            {**rng, "plan": plan_id, "days": list(share), "share": list(share.values())},
        )
        names = [d.name for d in cur.description or []]
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
