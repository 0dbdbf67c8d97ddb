"""The options several commands share (the code location's, a plan, --format) and the readers
of their values: a plan id or plan file, an input file, --by."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from backfill_assets.errors import InvalidInput

MAX_INPUT_BYTES = 8 * 1024 * 1024


def add_location_options(p: argparse.ArgumentParser) -> None:
    """Where the code location is, as the `dagster` CLI takes it (location/loader.py)."""
    loc = p.add_argument_group(
        "code location (default: [tool.dagster] or [tool.dg] in ./pyproject.toml)"
    )
    loc.add_argument("-m", "--module-name", help="Python module holding the Definitions")
    loc.add_argument("-f", "--python-file", help="Python file holding the Definitions")
    loc.add_argument("-w", "--workspace", help="workspace.yaml (with -l when it has several)")
    loc.add_argument("-a", "--attribute", help="the Definitions' attribute (default: defs)")
    loc.add_argument("-l", "--location", help="location name in the workspace")


def add_plan_argument(s: argparse.ArgumentParser) -> None:
    """The plan a command acts on (read by `_plan_id_arg`)."""
    s.add_argument("plan", help="plan id or plan file")


def add_format_option(s: argparse.ArgumentParser, help_: str | None = None) -> None:
    """`--format json` of the commands that report state (docs/cli.md, cli/output.py)."""
    s.add_argument("--format", choices=["text", "json"], default="text", help=help_)


def read_input_file(path: str, what: str) -> bytes:
    """The bytes of a user's input file, refused clearly when missing, a folder, or huge."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInput(f"{what} {path} does not exist (or is not a file)")
    if p.stat().st_size > MAX_INPUT_BYTES:
        raise InvalidInput(
            f"{what} {path} is {p.stat().st_size:,} bytes; that is not a {what} (at most "
            f"{MAX_INPUT_BYTES:,})"
        )
    return p.read_bytes()


def _read_plan(path: str) -> Any:
    from backfill_assets.lib.planning.plan import BackfillPlan

    return BackfillPlan.from_json(read_input_file(path, "plan file"))


def _plan_id_arg(value: str) -> str:
    """Accept a plan id or a plan file; a file must pass the plan's integrity check."""
    from backfill_assets.lib.planning.plan import verify_integrity

    p = Path(value)
    if p.suffix == ".json" or p.exists():
        plan = _read_plan(value)
        # A hand-edited file was read for its id only, so `run edited.json` ran the stored plan
        # as if the edits did not exist; refuse it as `approve` does.
        verify_integrity(plan)
        return plan.plan_id
    return value


def _who(a: argparse.Namespace) -> str:
    return getattr(a, "by", None) or os.environ.get("USER", "unknown")
