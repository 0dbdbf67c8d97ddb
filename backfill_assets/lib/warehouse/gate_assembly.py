"""The adapter-independent half of the gates' inputs: from the rows of the set-based queries
(shadow and target stats per partition, the joined sample) to `GateInputs`.

Each adapter runs the same four queries in its own dialect (duckdb/gates.py, postgres/gates.py) and
hands their rows here, so both warehouses give the same outcomes for the same data.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import GateInputs, SampleDiff
from backfill_assets.lib.warehouse.identifiers import quote_ident

MAX_ROWS_SHOWN = 20


def sample_sql_parts(
    spec: TableSpec, unchanged: tuple[str, ...], predicates: Sequence[str]
) -> tuple[str, str, str]:
    """The pieces of the sample query both adapters write the same way, named as `assemble`
    reads them: the `__ok<i>` columns to add to the sampled shadow rows `s`, the join of `s` to
    the target `t` on key and day, and the select list (every shadow column, `target_<c>` per
    unchanged column, then `__missing`, `__diff<i>`, `__ok<i>`)."""
    pc = quote_ident(spec.partition_column)
    pk = [quote_ident(c) for c in spec.primary_key]
    ok_cols = "".join(f", coalesce(({p}), false) AS __ok{i}" for i, p in enumerate(predicates))
    join = " AND ".join(f"t.{k} = s.{k}" for k in pk) + f" AND t.{pc} = s.{pc}"
    select = [f"s.{quote_ident(c)}" for c in spec.column_names]
    select += [f"t.{quote_ident(c)} AS {quote_ident('target_' + c)}" for c in unchanged]
    select += [f"t.{pk[0]} IS NULL AS __missing"]
    select += [
        f"s.{quote_ident(c)} IS DISTINCT FROM t.{quote_ident(c)} AS __diff{i}"
        for i, c in enumerate(unchanged)
    ]
    select += [f"__ok{i}" for i in range(len(predicates))]
    return ok_cols, join, ", ".join(select)


def assemble(
    spec: TableSpec,
    days: list[dt.date],
    *,
    unchanged: tuple[str, ...],
    predicates: tuple[str, ...],
    invariants: tuple[str, ...],
    full_compare: bool,
    shadow_stats: Sequence[Sequence[Any]],
    live_stats: Sequence[Sequence[Any]],
    source_rows: dict[dt.date, int] | None,
    names: list[str],
    sampled_rows: Sequence[Sequence[Any]],
    clean_samples: Mapping[dt.date, int] | None = None,
) -> GateInputs:
    """`shadow_stats` rows: (day, rows, duplicate keys, fingerprint, *invariant violations);
    `live_stats` rows: (day, rows, fingerprint); `sampled_rows`: every column of the shadow,
    `target_<c>` per unchanged column, then the flags `__missing`, `__diff<i>`, `__ok<i>`.
    `clean_samples`: instead of the rows, the number sampled per day when every one passed."""
    cols = spec.column_names
    preds = predicates
    inv_names = list(invariants)
    shown_names = names[: len(cols) + len(unchanged)]
    i_missing = len(shown_names)
    i_diff = i_missing + 1
    i_ok = i_diff + len(unchanged)
    pcol = names.index(spec.partition_column) if sampled_rows else 0
    tallies: dict[dt.date, list[int]] = defaultdict(lambda: [0] * (2 + len(unchanged) + len(preds)))
    bad_rows: dict[dt.date, list[dict[str, Any]]] = defaultdict(list)
    # The flags of a row that passes: nearly every sampled row, only counted.
    clean = (False, *(False,) * len(unchanged), *(True,) * len(preds))
    for day, n in (clean_samples or {}).items():
        tallies[day][0] += n
    for row in sampled_rows:
        day = row[pcol]
        t = tallies[day]
        t[0] += 1
        if tuple(row[i_missing:]) == clean:
            continue
        missing_row = bool(row[i_missing])
        t[1] += missing_row
        diffs = [bool(row[i_diff + i]) and not missing_row for i in range(len(unchanged))]
        fails = [not row[i_ok + i] for i in range(len(preds))]
        for i, d in enumerate(diffs):
            t[2 + i] += d
        for i, f in enumerate(fails):
            t[2 + len(unchanged) + i] += f
        if (missing_row or any(diffs) or any(fails)) and len(bad_rows[day]) < MAX_ROWS_SHOWN:
            bad_rows[day].append(
                _why(spec, shown_names, row, missing_row, diffs, fails, unchanged, tuple(preds))
            )

    shadow_rows = dict.fromkeys(days, 0)
    duplicates = dict.fromkeys(days, 0)
    inv_counts: dict[dt.date, dict[str, int]] = {d: dict.fromkeys(inv_names, 0) for d in days}
    shadow_fp: dict[dt.date, Any] = {}
    for row in shadow_stats:
        day = row[0]
        shadow_rows[day], duplicates[day], shadow_fp[day] = int(row[1]), int(row[2]), row[3]
        inv_counts[day] = {n: int(row[4 + i]) for i, n in enumerate(inv_names)}
    target_rows = dict.fromkeys(days, 0)
    live_fp: dict[dt.date, Any] = {}
    for day, n, fp in live_stats:
        target_rows[day], live_fp[day] = int(n), fp
    n_unch = len(unchanged)
    samples: dict[dt.date, SampleDiff] = {
        d: SampleDiff(
            0,
            0,
            dict.fromkeys(unchanged, 0),
            dict.fromkeys(preds, 0),
            _fp_equal(full_compare, unchanged, shadow_fp.get(d), live_fp.get(d)),
            bad_rows.get(d, []),
        )
        for d in days
    }
    for day, t in tallies.items():
        samples[day] = SampleDiff(
            sampled=t[0],
            missing_in_target=t[1],
            mismatches={c: t[2 + i] for i, c in enumerate(unchanged)},
            predicate_violations={p: t[2 + n_unch + i] for i, p in enumerate(preds)},
            fingerprint_equal=_fp_equal(
                full_compare, unchanged, shadow_fp.get(day), live_fp.get(day)
            ),
            rows=bad_rows.get(day, []),
        )
    return GateInputs(shadow_rows, target_rows, source_rows, duplicates, inv_counts, samples)


def _why(
    spec: TableSpec,
    names: list[str],
    row: Sequence[Any],
    missing: bool,
    diffs: list[bool],
    fails: list[bool],
    unchanged: tuple[str, ...],
    changed: tuple[str, ...],
) -> dict[str, Any]:
    """A failing sampled row as a reviewer reads it: its key, then only what is wrong (a
    differing column next to the target's value, a changed column that breaks its rule)."""
    value = dict(zip(names, row, strict=False))
    out: dict[str, Any] = {c: _plain(value[c]) for c in (*spec.primary_key, spec.partition_column)}
    if missing:
        out["problem"] = "key not in target"
    for c, d in zip(unchanged, diffs, strict=True):
        if d:
            out[c] = _plain(value[c])
            out[f"target_{c}"] = _plain(value[f"target_{c}"])
    for c, f in zip(changed, fails, strict=True):
        if f:
            out[c] = _plain(value[c])
            rule = f"{c} breaks its rule"
            out["problem"] = f"{out['problem']}; {rule}" if "problem" in out else rule
    return out


def _fp_equal(full_compare: bool, unchanged: tuple[str, ...], a: Any, b: Any) -> bool | None:
    if not (full_compare and unchanged):
        return None
    return a == b


def _plain(v: Any) -> Any:
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)
