"""What the instance says about a plan's gates: per partition, per gate, passed and current.

A gate result counts for a plan only if it checked shadow data that plan wrote, and that data is
still the partition's latest shadow write:

- the partition's latest shadow write (materialization) was made by a run of this plan (its
  data version, `plan <id>`, and its metadata name the plan);
- this plan's latest evaluation of the gate checked exactly that write (the evaluation's target
  materialization).

So results left by an earlier, rolled-back plan over the same days count as "not run" for a new
plan; a partition written again after its check (a re-run, a hand-launched backfill) is "stale"
until its gates run again; and a run that was refused before it wrote (it still plans its checks
in the instance) changes nothing.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from backfill_assets.constants import (
    GATE_NAMES,
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PARTITION_TAG,
    PLAN_ID_TAG,
)
from backfill_assets.lib.states import GateState

PLAN_METADATA = "plan_id"  # the shadow materialization's metadata key naming its plan
# Dagster's tag for an asset event's data version, which it indexes per partition: the shadow's
# data version names the plan that wrote it, so the writers of the latest writes of every
# partition are one indexed read, where reading each write's metadata deserialized 1,826 events
# on a five-year plan (about 0.2 s of `status`, docs/performance.md).
DATA_VERSION_TAG = "dagster/data_version"
_PLAN_VERSION = "plan "


def plan_data_version(plan_id: str) -> dg.DataVersion:
    """The data version of a shadow write by `plan_id`'s run."""
    return dg.DataVersion(f"{_PLAN_VERSION}{plan_id}")


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


def latest_writers(
    instance: dg.DagsterInstance, shadow_key: str, latest: Mapping[str, int]
) -> dict[int, str]:
    """storage id -> plan, for the partitions' latest shadow writes `latest` (partition ->
    storage id) whose data version names their plan: one read of Dagster's per-partition index
    of data versions. Writes made before shadow writes carried it, or by anything else, are
    left out (`shadow_writers` reads them). Only events older than the newest of `latest` are
    read, so a write made since `latest` was read cannot stand in for the one it names."""
    if not latest:
        return {}
    tags = instance.event_log_storage.get_latest_tags_by_partition(
        dg.AssetKey(shadow_key),
        dg.DagsterEventType.ASSET_MATERIALIZATION,
        [DATA_VERSION_TAG],
        asset_partitions=list(latest),
        before_cursor=max(latest.values()) + 1,
    )
    out: dict[int, str] = {}
    for pk, storage_id in latest.items():
        version = tags.get(pk, {}).get(DATA_VERSION_TAG, "")
        if version.startswith(_PLAN_VERSION):
            out[storage_id] = version.removeprefix(_PLAN_VERSION)
    return out


def _days(run: dg.DagsterRun) -> tuple[str, str] | None:
    """The first and last partition a run wrote, as its tags say (None if they say nothing)."""
    if run.tags.get(PARTITION_TAG):
        return run.tags[PARTITION_TAG], run.tags[PARTITION_TAG]
    start, end = run.tags.get(PARTITION_RANGE_START_TAG), run.tags.get(PARTITION_RANGE_END_TAG)
    return (start, end) if start and end else None


def _from_runs(
    instance: dg.DagsterInstance, runs: Sequence[dg.DagsterRun], wanted: set[tuple[str, str]]
) -> dict[tuple[str, str], _Evaluation]:
    """The latest evaluations of (partition, gate) pairs in `runs` (newest run first). Only the
    runs whose days (their partition tags; ISO dates sort as days) hold a pair still wanted are
    read: a new plan over days an earlier plan checked has each of those days "elsewhere" until
    its batch runs, and reading every run's evaluations for them took 2.7 s of `status` half
    way through a five-year plan (docs/performance.md)."""
    found: dict[tuple[str, str], _Evaluation] = {}
    # Each day still wanted, with how many of its pairs are not found yet (kept as pairs are
    # found: recomputed after each run, it took 1.2 s of 7,304 pairs over 261 runs).
    left = Counter(pk for pk, _ in wanted)
    days = sorted(left)
    for run in runs:
        if not days:
            break
        span = _days(run)
        if span is not None and bisect.bisect_right(days, span[1]) == bisect.bisect_left(
            days, span[0]
        ):
            continue  # none of the days still wanted is the run's
        for rec in reversed(
            instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
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
                left[data.partition] -= 1
                if not left[data.partition]:
                    del days[bisect.bisect_left(days, data.partition)]
    return found


def runs_of_plan(instance: dg.DagsterInstance, plan_id: str) -> Sequence[dg.DagsterRun]:
    """Every run of the plan, newest first: what `gate_states` reads its evaluations from."""
    return instance.get_runs(filters=dg.RunsFilter(tags={PLAN_ID_TAG: plan_id}))


def gate_states(
    instance: dg.DagsterInstance,
    shadow_key: str,
    partitions: Sequence[str],
    plan_id: str,
    gates: Iterable[str] = GATE_NAMES,
    plan_runs: Sequence[dg.DagsterRun] | None = None,
) -> list[PartitionGate]:
    """One state per (partition, gate) for `plan_id`. `plan_runs`: `runs_of_plan`'s answer,
    when the caller read it already."""
    asset = dg.AssetKey(shadow_key)
    keys = [dg.AssetCheckKey(asset, g) for g in gates]
    infos = instance.event_log_storage.get_asset_check_partition_info(
        keys, partition_keys=list(partitions)
    )
    if plan_runs is None:
        plan_runs = runs_of_plan(instance, plan_id)
    ours = {r.run_id for r in plan_runs}
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
    # The latest write's plan from its data version; any other write an evaluation checked
    # (a partition written again since), and older writes, from their metadata.
    by_partition = {pk: sid for (pk, _), sid in latest.items() if sid}
    writers = latest_writers(instance, shadow_key, by_partition)
    writers.update(
        shadow_writers(
            instance,
            shadow_key,
            [
                i
                for i in {*by_partition.values(), *(e.target for e in evaluations.values())}
                if i not in writers
            ],
        )
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
