"""Evaluate every gate of a batch, one outcome per (gate, partition).

The outcomes are plain data; the Dagster layer turns each into an `AssetCheckEvaluation` recorded
for its own partition, so the swap can later ask the instance for the latest result of every gate
of every planned partition.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from backfill_assets.constants import DIFF_CHECK, INVARIANTS_CHECK, ROW_COUNT_CHECK, SAMPLE_CHECK
from backfill_assets.lib.planning.criteria import Criteria, DiffThresholds
from backfill_assets.lib.review.diff import DEFAULT_TOLERANCE, DataDiff, DayDiff
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.base import GateSource, JointGateSource, SampleDiff

MAX_SAMPLE_ROWS_SHOWN = 20


@dataclass(frozen=True)
class GateOutcome:
    check_name: str
    partition: str
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def row_count_outcome(
    criteria: Criteria,
    day: dt.date,
    shadow: int,
    source: int | None,
    target: int | None,
    duplicates: int,
) -> GateOutcome:
    """Shadow rows against the source and/or target counts within tolerance; no duplicate keys."""
    assert criteria.row_count is not None
    tol = criteria.row_count.tolerance_pct / 100.0
    problems: list[str] = []
    notes: list[str] = []
    compared: dict[str, int] = {}
    for name, expected in (("source", source), ("target", target)):
        if name not in criteria.row_count.compare_to:
            continue
        if expected is None:
            notes.append(f"no {name} to compare with")
            continue
        if name == "target" and expected == 0 and shadow > 0:
            # A missed load: the target has nothing for this day yet; the source decides.
            notes.append("target has no rows for this day (missed load)")
            continue
        compared[name] = expected
        if abs(shadow - expected) > expected * tol:
            problems.append(
                f"{shadow} rows vs {expected} in the {name} "
                f"(tolerance {criteria.row_count.tolerance_pct}%)"
            )
    if not compared:
        problems.append("nothing to compare the row count with (configure compare_to)")
    if duplicates:
        problems.append(f"{duplicates} duplicate primary-key rows")
    meta: dict[str, Any] = {
        "shadow_rows": shadow,
        "duplicate_key_rows": duplicates,
        "tolerance_pct": criteria.row_count.tolerance_pct,
    }
    for name, n in compared.items():
        meta[f"{name}_rows"] = n
    if notes:
        meta["notes"] = "; ".join(notes)
    desc = "; ".join(problems) if problems else f"{shadow} rows match " + ", ".join(compared)
    return GateOutcome(ROW_COUNT_CHECK, day.isoformat(), not problems, desc, meta)


def sample_outcome(day: dt.date, diff: SampleDiff, target_rows: int) -> GateOutcome:
    """Sampled shadow rows must equal the target on unchanged columns and satisfy the rest."""
    problems: list[str] = []
    if target_rows and diff.missing_in_target:
        problems.append(f"{diff.missing_in_target} sampled keys are not in the target")
    bad_cols = {c: n for c, n in diff.mismatches.items() if n}
    if bad_cols:
        problems.append(
            "unchanged columns differ: " + ", ".join(f"{c} ({n})" for c, n in bad_cols.items())
        )
    bad_preds = {c: n for c, n in diff.predicate_violations.items() if n}
    if bad_preds:
        problems.append(
            "changed columns fail their rule: "
            + ", ".join(f"{c} ({n})" for c, n in bad_preds.items())
        )
    if diff.fingerprint_equal is False:
        problems.append(
            "the whole-partition fingerprint of unchanged columns differs from the target"
        )
    mismatched = max([0, *diff.mismatches.values(), *diff.predicate_violations.values()])
    rate = (mismatched / diff.sampled) if diff.sampled else 0.0
    meta: dict[str, Any] = {
        "sampled_rows": diff.sampled,
        "mismatch_rate": round(rate, 6),
        "missing_in_target": diff.missing_in_target,
        "mismatches_by_column": diff.mismatches,
        "rule_violations": diff.predicate_violations,
        "fingerprint_equal": diff.fingerprint_equal,
    }
    if diff.rows:
        meta["mismatching_rows"] = diff.rows[:MAX_SAMPLE_ROWS_SHOWN]
    if diff.sampled == 0:
        problems.append("the shadow has no rows to sample")
    desc = "; ".join(problems) if problems else f"{diff.sampled} sampled rows validated"
    return GateOutcome(SAMPLE_CHECK, day.isoformat(), not problems, desc, meta)


def invariants_outcome(day: dt.date, violations: dict[str, int]) -> GateOutcome:
    bad = {k: v for k, v in violations.items() if v}
    desc = (
        ("rows violate: " + ", ".join(f"{k} ({v})" for k, v in bad.items()))
        if bad
        else (f"{len(violations)} invariants hold")
    )
    return GateOutcome(INVARIANTS_CHECK, day.isoformat(), not bad, desc, {"violations": violations})


def diff_outcome(
    day: dt.date,
    d: DayDiff | None,
    diff: DataDiff,
    thresholds: DiffThresholds | None,
    declared_changed: tuple[str, ...],
) -> GateOutcome:
    """The day's diff of the shadow against the live rows, as metadata a reviewer reads (and
    Dagster plots); failed only by a breach of the declared thresholds."""
    rows = d.rows if d else 0
    changed = d.rows_changed if d else 0
    pct = 100.0 * changed / rows if rows else 0.0
    by_column = dict(d.changed) if d else {}
    meta: dict[str, Any] = {
        "rows_changed": changed,
        "changed_pct": round(pct, 4),
        "changed_by_column": by_column,
    }
    numeric = {c.name for c in diff.columns if c.numeric is not None}
    for c in by_column:
        if d is not None and c in numeric:
            before, after = d.sums[c]
            meta[f"{c}_sum_before"] = round(before, 6)
            meta[f"{c}_sum_after"] = round(after, 6)
            meta[f"{c}_delta"] = round(after - before, 6)
    problems: list[str] = []
    if thresholds is not None:
        cap = thresholds.max_changed_pct
        if cap is not None and pct > cap:
            problems.append(f"{pct:.2f}% of the rows changed, more than {cap:g}%")
        if thresholds.only_changed_columns:
            undeclared = sorted(c for c in by_column if c not in declared_changed)
            if undeclared:
                problems.append(
                    "columns not declared as changed changed: "
                    + ", ".join(f"{c} ({by_column[c]} rows)" for c in undeclared)
                )
        for c, bound in thresholds.max_abs_delta.items():
            if d is not None and c in d.sums:
                delta = d.sums[c][1] - d.sums[c][0]
                if abs(delta) > bound:
                    problems.append(f"{c} sum moved by {delta:+,.2f}, more than {bound:,g}")
    top = ", ".join(f"{c} {n}" for c, n in sorted(by_column.items(), key=lambda x: -x[1]))
    desc = (
        "; ".join(problems)
        if problems
        else (f"{changed} of {rows} rows change ({pct:.1f}%)" + (f": {top}" if top else ""))
    )
    return GateOutcome(DIFF_CHECK, day.isoformat(), not problems, desc, meta)


def diff_tolerance(criteria: Criteria) -> float:
    """How far apart two floats may be and count as the same in the diff."""
    return criteria.diff.float_tolerance if criteria.diff else DEFAULT_TOLERANCE


def gate_reads(criteria: Criteria, plan_id: str) -> dict[str, Any]:
    """The keywords of `GateSource.gate_inputs` (and `gates_and_diff`) that `criteria` asks for."""
    assert criteria.sample is not None
    return {
        "plan_id": plan_id,
        "sample_size": criteria.sample.size,
        "unchanged": criteria.sample.unchanged_columns,
        "changed_predicates": {
            c.name: c.must_hold for c in criteria.sample.changed_columns if c.must_hold
        },
        "invariants": {i.name: i.predicate for i in criteria.invariants},
        "full_compare": criteria.sample.full_compare,
    }


def evaluate_gates(
    wh: GateSource,
    spec: TableSpec,
    criteria: Criteria,
    start: dt.date,
    end: dt.date,
    plan_id: str,
) -> list[GateOutcome]:
    """Every gate for every partition of [start, end) of the shadow, from one set of reads."""
    assert criteria.row_count is not None and criteria.sample is not None
    thresholds = criteria.diff
    tolerance = diff_tolerance(criteria)
    reads = gate_reads(criteria, plan_id)
    if isinstance(wh, JointGateSource):
        facts, diff = wh.gates_and_diff(spec, start, end, tolerance=tolerance, **reads)
    else:
        facts = wh.gate_inputs(spec, start, end, **reads)
        # The diff of the batch against the live rows, recorded per day. The unchanged columns
        # are not compared again where the fingerprints of the key and those columns were equal
        # on every day: every row holds them as the target does.
        same = all(facts.samples[d].fingerprint_equal for d in facts.samples)
        diff = wh.diff(
            spec,
            start,
            end,
            tolerance=tolerance,
            known_same=criteria.sample.unchanged_columns if same else (),
            detail=False,  # the gate reads the counts and sums per day alone
        )
    by_day = {d.day: d for d in diff.days}
    declared = tuple(c.name for c in criteria.sample.changed_columns)
    out: list[GateOutcome] = []
    day = start
    while day < end:
        source = facts.source_rows.get(day) if facts.source_rows is not None else None
        out.append(
            row_count_outcome(
                criteria,
                day,
                facts.shadow_rows[day],
                source,
                facts.target_rows[day],
                facts.duplicates[day],
            )
        )
        out.append(sample_outcome(day, facts.samples[day], facts.target_rows[day]))
        out.append(invariants_outcome(day, facts.invariants[day]))
        out.append(diff_outcome(day, by_day.get(day), diff, thresholds, declared))
        day += dt.timedelta(days=1)
    return out
