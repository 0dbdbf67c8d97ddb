"""What the instance says about a plan's gates: per partition, per gate, passed and current.

"Current" means the gate's latest evaluation came after the partition's latest shadow write:
a partition re-written after its check (by a re-run or a hand-launched backfill) is not
validated until its gates run again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import dagster as dg

from backfill_assets.constants import GATE_NAMES

PASSED = "passed"
FAILED = "failed"
NOT_RUN = "not run"
STALE = "stale"  # passed, but the shadow partition was written again since


@dataclass(frozen=True)
class GateState:
    partition: str
    gate: str
    state: str  # PASSED, FAILED, NOT_RUN, STALE


def gate_states(
    instance: dg.DagsterInstance,
    shadow_key: str,
    partitions: Sequence[str],
    gates: Iterable[str] = GATE_NAMES,
) -> list[GateState]:
    """One state per (partition, gate), read from the event log in one query per call."""
    asset = dg.AssetKey(shadow_key)
    keys = [dg.AssetCheckKey(asset, g) for g in gates]
    infos = instance.event_log_storage.get_asset_check_partition_info(
        keys, partition_keys=list(partitions)
    )
    by = {(i.check_key.name, i.partition_key): i for i in infos}
    out: list[GateState] = []
    for pk in partitions:
        for key in keys:
            info = by.get((key.name, pk))
            if info is None:
                state = NOT_RUN
            else:
                status = info.latest_execution_status.value
                if status == "SUCCEEDED":
                    written = info.latest_materialization_storage_id or 0
                    state = PASSED if info.latest_check_event_storage_id > written else STALE
                elif status == "FAILED":
                    state = FAILED
                else:
                    state = NOT_RUN
            out.append(GateState(pk, key.name, state))
    return out


def blockers(states: Iterable[GateState]) -> list[GateState]:
    return [s for s in states if s.state != PASSED]


def describe_blockers(bad: Sequence[GateState], limit: int = 12) -> str:
    """One line a human reads: which partitions, which gates, in what state."""
    parts = [f"{s.partition} {s.gate} {s.state}" for s in bad[:limit]]
    more = f" and {len(bad) - limit} more" if len(bad) > limit else ""
    return "; ".join(parts) + more
