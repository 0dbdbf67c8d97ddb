"""Live progress of `backfill-assets run` on stderr, while each batch runs.

On a terminal: a rich progress bar that redraws in place (batch i/n, the partitions done,
elapsed time and an ETA from the plan's estimate), with one line per finished batch above it.
Anywhere else (a CI log, a pipe, `2> file`): one plain line per event, flushed as it happens.
Colour follows rich, which honours `NO_COLOR`; it is also off when `NO_COLOR` is set at all.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backfill_assets.lib.planning.plan import BackfillPlan
    from backfill_assets.service.progress import ProgressEvent


def bar(done: int, total: int, width: int = 24) -> str:
    filled = round(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def _seconds(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s // 60:.0f}m{s % 60:02.0f}s"
    return f"{s // 3600:.0f}h{s % 3600 // 60:02.0f}m"


class PlanProgress:
    """Receives the executor's ProgressEvents for one plan and shows them (a context manager)."""

    def __init__(
        self,
        plan: BackfillPlan,
        stream: IO[str] | None = None,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.t0 = clock()
        self.batch_t0 = self.t0
        self.total_partitions = len(plan.partitions)
        self.partitions_done = 0
        self.batches_done = 0
        self.batch_estimate = {b.index: b.estimated_seconds for b in plan.batches}
        self.estimated_done = 0.0  # the estimates of the batches that ran here
        self.actual_done = 0.0  # and what they took
        self.remaining_estimate = sum(self.batch_estimate.values())
        self.current = ""
        self._rich: Any = None
        self._task: Any = None

    # -- the context manager ---------------------------------------------------------------

    def __enter__(self) -> PlanProgress:
        if self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.text import Text

            owner = self

            class EtaColumn(ProgressColumn):
                def render(self, task: Any) -> Text:
                    return Text(f"ETA {owner.eta()}")

            console = Console(
                file=self.stream,
                force_terminal=True,
                no_color=bool(os.environ.get("NO_COLOR")) or None,
            )
            self._rich = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("partitions {task.completed:.0f}/{task.total:.0f}"),
                TimeElapsedColumn(),
                EtaColumn(),
                console=console,
                transient=False,
            )
            self._rich.start()
            self._task = self._rich.add_task(
                f"plan {self.plan.plan_id}", total=self.total_partitions
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rich is not None:
            self._rich.stop()

    # -- figures ---------------------------------------------------------------------------

    def eta(self) -> str:
        """The plan's estimate for what is left, scaled by how the batches run here compared
        with their estimates (once one has finished)."""
        pace = self.actual_done / self.estimated_done if self.estimated_done > 0 else 1.0
        in_batch = self.clock() - self.batch_t0 if self.current else 0.0
        left = self.remaining_estimate * pace - in_batch
        return _seconds(left) if left > 0 else "soon"

    def _status(self) -> str:
        return (
            f"partitions {self.partitions_done}/{self.total_partitions}, elapsed "
            f"{_seconds(self.clock() - self.t0)}, ETA {self.eta()}"
        )

    # -- events ----------------------------------------------------------------------------

    def __call__(self, event: ProgressEvent) -> None:
        b = event.batch
        where = f"batch {b.index}/{event.total_batches} {b.start}..{b.end}"
        if event.kind == "started":
            self.batch_t0 = self.clock()
            self.current = where
            self._line(f"{where}: started (run {(event.run_id or '')[:8]}); {self._status()}")
        elif event.kind == "written":
            rows = f", {event.rows:,} rows" if event.rows is not None else ""
            self._line(f"{where}: {event.partition} written to the shadow{rows}", quiet=True)
        elif event.kind == "checked":
            self.partitions_done += 1
            verdict = "gates passed" if event.passed else "a gate FAILED"
            self._line(f"{where}: {event.partition} {verdict}; {self._status()}")
        else:  # finished or skipped
            report = event.report
            self.batches_done += 1
            estimate = self.batch_estimate.get(b.index, 0.0)
            self.remaining_estimate = max(0.0, self.remaining_estimate - estimate)
            if event.kind == "skipped":
                self.partitions_done += len(b.partitions)
            else:
                self.estimated_done += estimate
                self.actual_done += report.seconds
            self.current = ""
            took = f" in {report.seconds:.1f}s" if report.seconds else ""
            self._line(
                f"{bar(self.batches_done, event.total_batches)} batch {b.index} "
                f"{b.start}..{b.end}: {report.status}{took}",
                always=True,
            )

    def _line(self, text: str, *, quiet: bool = False, always: bool = False) -> None:
        """A plain line when not on a terminal; on a terminal, redraw the bar (and print the
        `always` lines above it). `quiet` lines only go to plain output."""
        if self._rich is None:
            stamp = dt.datetime.now(dt.UTC).strftime("%H:%M:%S")
            print(f"{stamp} {text}", file=self.stream, flush=True)
            return
        if always:
            self._rich.console.print(text, markup=False, highlight=False)
        elif not quiet and self.current:
            self._rich.update(self._task, description=self.current)
        self._rich.update(self._task, completed=self.partitions_done)
