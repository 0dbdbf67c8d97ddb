"""`backfill-assets`: plan, approve, run, start, pause, status, list, swap, rollback, release,
abandon, doctor, runbook and adopt, on any code location.

Thin: parse arguments, load the code location and the instance, call service/. The tables come
from the loaded definitions (their target assets carry them), the warehouse from its
`backfill_warehouse` resource, and every command finds its table from the plan or the target.
`list` and `pause` work on the instance alone and do not import the code location. `start` reads
it: it hands a plan to the daemon, so it refuses a code location whose daily job the guards could
not find, as `plan`, `approve` and `run` do. Only `run`, `swap` and `rollback` import it every
time (they execute its jobs); the other commands read its snapshot while nothing it was built
from changed (location/snapshot.py).

Exit codes: 0 done; 1 a gate failed and the plan is halted; 2 refused or invalid input (nothing
was written); 3 the swap or rollback is done but the downstream refresh failed.

    parser.py      the commands, their arguments; options.py the options several share
    planning.py    plan, approve
    running.py     run, start, pause
    swapping.py    swap, rollback, release, abandon
    reporting.py   status, list, doctor, runbook
    adopting.py    adopt: an existing table, with its history
    context.py     what every command works with: the location, instance, warehouse
    common.py      exit codes, the clock (`common._now`), runs' output, waiting for a writer
    process.py     main: exit codes from errors, a closed stdout, signals, the exit itself

The names other modules use (the example's own CLI) are re-exported here. The clock is not:
the commands call `common._now()`, so a test sets it on `backfill_assets.cli.common`.
"""

from backfill_assets.cli.common import (
    EXIT_CODES,
    EXIT_HALTED,
    EXIT_OK,
    EXIT_REFRESH_FAILED,
    EXIT_REFUSED,
    QUIET,
    _runs_output_to_log,
)
from backfill_assets.cli.parser import build_parser
from backfill_assets.cli.process import _quiet_dagster_warnings, main, run_command

__all__ = [
    "EXIT_CODES",
    "EXIT_HALTED",
    "EXIT_OK",
    "EXIT_REFRESH_FAILED",
    "EXIT_REFUSED",
    "QUIET",
    "_quiet_dagster_warnings",
    "_runs_output_to_log",
    "build_parser",
    "main",
    "run_command",
]
