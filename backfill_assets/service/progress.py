"""What a running plan reports while it runs: one event per step a batch takes, read from the
instance's event log of the batch's run as it is written (not after the run).

`execute_plan` emits these to its `progress` callback:

- `started`: the batch holds the table's writer lease and its run starts;
- `written`: a partition of the shadow was written (its materialization, with its rows);
- `checked`: every gate of a partition was evaluated (`passed` says how);
- `finished`: the batch's run ended (`report` is its BatchReport);
- `skipped`: the batch had passed before, on this plan's shadow data (`report` too).

A `RunWatcher` follows one run from a background thread. It only reads the event log, through
the same instance, and stops (after a last read, so no event is lost) when the run has ended.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import dagster as dg

from backfill_assets.lib.planning.plan import Batch

EventKind = Literal["started", "written", "checked", "finished", "skipped"]
POLL_SECONDS = 0.25


@dataclass(frozen=True)
class ProgressEvent:
    kind: EventKind
    batch: Batch
    total_batches: int
    at: dt.datetime
    partition: str | None = None
    run_id: str | None = None
    rows: int | None = None
    passed: bool | None = None
    report: Any = None  # executor.BatchReport for `finished` and `skipped`


ProgressCallback = Callable[[ProgressEvent], None]

_WATCHED = {
    dg.DagsterEventType.ASSET_MATERIALIZATION,
    dg.DagsterEventType.ASSET_CHECK_EVALUATION,
}


class RunWatcher:
    """Follow one batch run's events from a thread and report them as ProgressEvents."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        batch: Batch,
        total_batches: int,
        emit: ProgressCallback,
        *,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._instance = instance
        self._batch = batch
        self._total = total_batches
        self._emit = emit
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._run_id: str | None = None
        self._cursor: str | None = None
        self._checked: dict[str, dict[str, bool]] = defaultdict(dict)
        self._written: set[str] = set()
        self._done: set[str] = set()

    def follow(self, run_id: str) -> None:
        """Report `started` and follow `run_id` until `stop()`."""
        self._run_id = run_id
        self._emit(self._event("started"))
        self._thread = threading.Thread(target=self._loop, name="backfill-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop following; read the events written since the last poll first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._run_id is not None:
            self._read()

    def _loop(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                self._read()
            except Exception:  # a transient storage error; the next poll or stop() reads again
                continue

    def _read(self) -> None:
        assert self._run_id is not None
        with self._lock:
            while True:
                conn = self._instance.get_records_for_run(
                    self._run_id, cursor=self._cursor, of_type=_WATCHED, limit=500
                )
                for record in conn.records:
                    self._handle(record.event_log_entry.dagster_event)
                self._cursor = conn.cursor
                if not conn.has_more:
                    return

    def _handle(self, event: dg.DagsterEvent | None) -> None:
        if event is None:
            return
        if event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            mat = event.step_materialization_data.materialization
            pk = mat.partition
            if pk is None or pk in self._written:
                return
            self._written.add(pk)
            rows = mat.metadata.get("dagster/partition_row_count")
            n = rows.value if rows is not None else None
            self._emit(self._event("written", partition=pk, rows=n if isinstance(n, int) else None))
        elif event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            ev = event.asset_check_evaluation_data
            pk = ev.partition
            if pk is None or pk in self._done:
                return
            self._checked[pk][ev.check_name] = ev.passed
            if set(self._batch.gates) <= set(self._checked[pk]):
                self._done.add(pk)
                passed = all(self._checked[pk][g] for g in self._batch.gates)
                self._emit(self._event("checked", partition=pk, passed=passed))

    def _event(self, kind: EventKind, **kw: Any) -> ProgressEvent:
        return ProgressEvent(
            kind, self._batch, self._total, dt.datetime.now(dt.UTC), run_id=self._run_id, **kw
        )


def report_event(kind: EventKind, batch: Batch, total: int, report: Any) -> ProgressEvent:
    return ProgressEvent(
        kind, batch, total, dt.datetime.now(dt.UTC), run_id=report.run_id, report=report
    )
