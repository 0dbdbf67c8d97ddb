"""What the commands share: their exit codes, the clock, where the output of the runs they
execute goes, and how they say they are waiting for a table's writer."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

QUIET = "WARNING"
EXIT_OK, EXIT_HALTED, EXIT_REFUSED, EXIT_REFRESH_FAILED = 0, 1, 2, 3
EXIT_CODES = (
    "exit codes: 0 done; 1 a gate failed and the plan is halted; 2 refused or invalid input "
    "(nothing written); 3 swapped (or rolled back) but the downstream refresh failed"
)


def _now() -> dt.datetime:
    """The commands' clock. They call it as `common._now()`, so that a test sets it here,
    once, for every command."""
    return dt.datetime.now(dt.UTC)


@contextlib.contextmanager
def _runs_output_to_log() -> Iterator[Path]:
    """dbt and Dagster print a lot while runs execute; keep it in a log file, not the terminal.

    Progress lines are printed by the callers outside this block (or to the saved streams).
    """
    log = Path(os.environ["DAGSTER_HOME"]) / "logs" / "backfill-assets-cli.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(log, "a", encoding="utf8") as fh,
        contextlib.redirect_stdout(fh),
        contextlib.redirect_stderr(fh),
    ):
        yield log


def _say_waiting(stream: Any = None) -> Any:
    """An on_wait callback: say on stderr (at once, then every 30 s) who holds the table."""
    err = stream if stream is not None else sys.stderr

    def say(w: Any) -> None:
        print(
            f"waiting for the writer of {w.table}: held by {w.holder.describe()} "
            f"({w.waited_s:.0f} s so far; Ctrl-C stops waiting)",
            file=err,
            flush=True,
        )

    return say
