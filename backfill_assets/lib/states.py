"""The states of a plan, of a batch and of a gate, and which run statuses count as in progress.

String enums: they compare equal to (and serialise as) the strings stored in the instance, so
plans recorded before the enums read the same.
"""

from __future__ import annotations

from enum import StrEnum

import dagster as dg


class PlanStatus(StrEnum):
    """A plan's lifecycle. `approved` and `swapped` hold the target (see ACTIVE)."""

    PROPOSED = "proposed"
    APPROVED = "approved"
    SWAPPED = "swapped"
    ROLLED_BACK = "rolled_back"
    RELEASED = "released"
    ABANDONED = "abandoned"


# A plan holds its target (no other plan may be approved for it) while approved or swapped: a
# second plan swapped over a swapped one would be undone by the first one's rollback.
ACTIVE_PLAN_STATUSES = frozenset({PlanStatus.APPROVED, PlanStatus.SWAPPED})


class BatchState(StrEnum):
    """Where one batch of a plan stands, as the driver and `status` read it."""

    PASSED = "passed"  # every gate of every partition passed, on shadow data this plan wrote
    PENDING = "pending"  # not run yet, or its failure was acknowledged by starting the plan again
    FAILED_GATES = "failed gates"  # its latest run failed a gate: the plan is halted
    FAILED_RUN = "failed run"  # its latest run failed (or was canceled) before its gates passed
    RUNNING = "running"  # a run of it is queued or in progress


class GateState(StrEnum):
    """One gate of one partition, for one plan."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_RUN = "not run"  # never evaluated on a shadow this plan wrote
    STALE = "stale"  # passed, but the shadow partition was written again since


# Runs that hold, or wait for, the writer of a table. CANCELING is included: the run's process may
# still be writing. Every "is something still running" question uses this one set.
IN_PROGRESS_RUN_STATUSES = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)
FINISHED_RUN_STATUSES = (
    dg.DagsterRunStatus.SUCCESS,
    dg.DagsterRunStatus.FAILURE,
    dg.DagsterRunStatus.CANCELED,
)
