"""The console script's process: exit codes from errors, stdout that survives a closed pipe,
Ctrl-C and SIGTERM wherever it was started, and an exit without the interpreter's teardown."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any

from backfill_assets.cli.common import EXIT_HALTED, EXIT_REFUSED
from backfill_assets.cli.parser import ArgumentRefused, build_parser
from backfill_assets.errors import BackfillError, GateFailed

if TYPE_CHECKING:
    import argparse


def _quiet_dagster_warnings() -> None:
    # Dagster flags the APIs we rely on (single-run backfill policy, partitioned checks) as
    # beta/preview at every import; that is for the developer reading docs/, not the operator.
    warnings.filterwarnings("ignore", message=r".*(beta|preview)", category=Warning)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command; map errors to exit codes and one clear line on stderr."""
    try:
        return int(args.func(args))
    except GateFailed as e:
        print(f"halted: {e}", file=sys.stderr)
        return EXIT_HALTED
    except BackfillError as e:
        print(f"refused: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        print("interrupted: nothing more was started (a run already under way was ended)",
              file=sys.stderr)  # fmt: skip
        return 130


class _PipeSafe:
    """stdout that survives its reader going away (`backfill-assets rollback P | head -1`).

    Without it, the first print after `head` exits raised BrokenPipeError: a traceback, and the
    rest of the command (the downstream refresh after a rollback) never ran. Now the output is
    dropped and the command finishes its work and returns its own exit code.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone_away()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone_away()

    def _gone_away(self) -> None:
        self._gone = True
        # The interpreter flushes the real stdout at exit; point it at /dev/null first.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _answer_ctrl_c_and_sigterm() -> None:
    """Make SIGINT raise KeyboardInterrupt even when it was inherited ignored.

    A shell without job control (a script's `backfill-assets run … &`, nohup, some CI runners)
    starts background commands with SIGINT ignored. Python then never turns it into
    KeyboardInterrupt, and Dagster maps SIGTERM to SIGINT's handler whenever it captures
    interrupts around a run, so SIGTERM was ignored too: a waiting `run` could only be stopped
    with SIGKILL. Every command here answers both, wherever it was started.
    """
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A parent that ran Dagster with SIGINT ignored had its SIGTERM mapped to "ignore" too, and
    # passes that on: a SIGTERM then has to end this command as Ctrl-C does.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def _exit_without_teardown() -> None:
    """The console script leaves as soon as Python's exit handlers have run.

    After them, the interpreter would tear down every module and object a command imported:
    0.3 s of a 1.5 s `status` for Dagster's ~2,000 modules, with nothing left to close (every
    connection, file and run is closed by then, and the threads were joined before the exit
    handlers ran). Registered first, this handler runs last of them, flushes the standard
    streams and ends the process with the command's exit code.
    """
    import atexit

    def leave() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if "logging" in sys.modules:  # its own exit handler may have been registered first
            sys.modules["logging"].shutdown()
        os._exit(_EXIT_CODE[0])

    atexit.register(leave)


# The console script's exit code, for `_exit_without_teardown`. An exception that escapes `main`
# leaves with 1, as Python itself would.
_EXIT_CODE = [1]


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the console script, not a caller's main([...]) in its own process
        _exit_without_teardown()
        _answer_ctrl_c_and_sigterm()
    try:
        code = _main(argv)
    except SystemExit as e:  # --help, --version
        _EXIT_CODE[0] = e.code if isinstance(e.code, int) else int(e.code is not None)
        raise
    _EXIT_CODE[0] = code
    return code


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except ArgumentRefused as e:
        print(f"refused: {e}", file=sys.stderr)
        return EXIT_REFUSED
    _quiet_dagster_warnings()
    stdout = sys.stdout
    sys.stdout = _PipeSafe(stdout)  # type: ignore[assignment]
    try:
        return run_command(args)
    finally:
        sys.stdout = stdout
