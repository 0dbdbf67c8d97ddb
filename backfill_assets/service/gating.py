"""What the instance says about a plan's gates: per partition, per gate, passed and current.

A gate result counts for a plan only if it checked shadow data that plan wrote, and that data is
still the partition's latest shadow write:

- the partition's latest shadow write (materialization) was made by a run of this plan (its
  metadata names the plan);
- this plan's latest evaluation of the gate checked exactly that write (the evaluation's target
  materialization).

So results left by an earlier, rolled-back plan over the same days count as "not run" for a new
plan; a partition written again after its check (a re-run, a hand-launched backfill) is "stale"
until its gates run again; and a run that was refused before it wrote (it still plans its checks
in the instance) changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import dagster as dg

from backfill_assets.constants import GATE_NAMES, PLAN_ID_TAG
from backfill_assets.lib.states import GateState

PLAN_METADATA = "plan_id"  # the shadow materialization's metadata key naming its plan


@dataclass(frozen=True)
class PartitionGate:
    partition: str
    gate: str
    state: GateState


@dataclass(frozen=True)
class _Evaluation:
    """The latest evaluation of one gate of one partition by a run of the plan."""

    status: str  # SUCCEEDED, FAILED, or anything else (planned, in progress, errored)
    target: int  # storage id of the shadow write it checked, 0 if unknown


def shadow_writers(
    instance: dg.DagsterInstance, shadow_key: str, storage_ids: Iterable[int]
) -> dict[int, str]:
    """storage id of a shadow materialization -> the plan that wrote it."""
    ids = sorted({i for i in storage_ids if i})
    if not ids:
        return {}
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(shadow_key), storage_ids=ids), limit=len(ids)
    ).records
    out: dict[int, str] = {}
    for rec in records:
        mat = rec.asset_materialization
        value = mat.metadata.get(PLAN_METADATA) if mat is not None else None
        out[rec.storage_id] = str(value.value) if value is not None else ""
    return out


def _from_runs(
    instance: dg.DagsterInstance, run_ids: Sequence[str], wanted: set[tuple[str, str]]
) -> dict[tuple[str, str], _Evaluation]:
    """The latest evaluations of (partition, gate) pairs in `run_ids` (newest run first)."""
    found: dict[tuple[str, str], _Evaluation] = {}
    for run_id in run_ids:
        if not wanted - set(found):
            break
        for rec in reversed(
            instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        ):
            data = rec.dagster_event.event_specific_data if rec.dagster_event else None
            if not isinstance(data, dg.AssetCheckEvaluation) or data.partition is None:
                continue
            key = (data.partition, data.check_name)
            if key in wanted and key not in found:
                target = data.target_materialization_data
                found[key] = _Evaluation(
                    "SUCCEEDED" if data.passed else "FAILED", target.storage_id if target else 0
                )
    return found


def gate_states(
    instance: dg.DagsterInstance,
    shadow_key: str,
    partitions: Sequence[str],
    plan_id: str,
    gates: Iterable[str] = GATE_NAMES,
) -> list[PartitionGate]:
    """One state per (partition, gate) for `plan_id`."""
    asset = dg.AssetKey(shadow_key)
    keys = [dg.AssetCheckKey(asset, g) for g in gates]
    infos = instance.event_log_storage.get_asset_check_partition_info(
        keys, partition_keys=list(partitions)
    )
    plan_runs = [
        r.dagster_run.run_id
        for r in instance.get_run_records(dg.RunsFilter(tags={PLAN_ID_TAG: plan_id}))
    ]  # newest first
    ours = set(plan_runs)
    latest: dict[tuple[str, str], int] = {}
    evaluations: dict[tuple[str, str], _Evaluation] = {}
    elsewhere: set[tuple[str, str]] = set()
    for info in infos:
        pair = (str(info.partition_key), info.check_key.name)
        latest[pair] = info.latest_materialization_storage_id or 0
        if info.latest_planned_run_id in ours:
            evaluations[pair] = _Evaluation(
                info.latest_execution_status.value,
                info.latest_target_materialization_storage_id or 0,
            )
        else:
            # The latest evaluation is another run's (one refused before it wrote, another
            # plan's): look for this plan's own latest evaluation in its runs.
            elsewhere.add(pair)
    if elsewhere:
        evaluations.update(_from_runs(instance, plan_runs, elsewhere))
    writers = shadow_writers(
        instance,
        shadow_key,
        [*latest.values(), *(e.target for e in evaluations.values())],
    )
    out: list[PartitionGate] = []
    for pk in partitions:
        for key in keys:
            pair = (pk, key.name)
            state = _state(latest.get(pair, 0), evaluations.get(pair), writers, plan_id)
            out.append(PartitionGate(pk, key.name, state))
    return out


def _state(
    written: int, evaluation: _Evaluation | None, writers: dict[int, str], plan_id: str
) -> GateState:
    if evaluation is None:
        return GateState.NOT_RUN
    checked_ours = evaluation.target != 0 and writers.get(evaluation.target) == plan_id
    if written == evaluation.target and checked_ours:
        if evaluation.status == "SUCCEEDED":
            return GateState.PASSED
        if evaluation.status == "FAILED":
            return GateState.FAILED
        return GateState.NOT_RUN
    # The partition was written again after this plan's gate checked it (by this plan's rerun
    # that has not been checked yet, or by anyone else).
    if checked_ours and evaluation.status == "SUCCEEDED":
        return GateState.STALE
    return GateState.NOT_RUN


def blockers(states: Iterable[PartitionGate]) -> list[PartitionGate]:
    return [s for s in states if s.state != GateState.PASSED]


def describe_blockers(bad: Sequence[PartitionGate], limit: int = 12) -> str:
    """One line a human reads: which partitions, which gates, in what state."""
    parts = [f"{s.partition} {s.gate} {s.state}" for s in bad[:limit]]
    more = f" and {len(bad) - limit} more" if len(bad) > limit else ""
    return "; ".join(parts) + more
