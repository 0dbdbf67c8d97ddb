"""The command line: every command, its arguments and its help; argument errors refused as
every other refusal is."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from backfill_assets.cli.adopting import cmd_adopt
from backfill_assets.cli.common import EXIT_CODES
from backfill_assets.cli.options import add_format_option, add_location_options, add_plan_argument
from backfill_assets.cli.planning import cmd_approve, cmd_plan
from backfill_assets.cli.reporting import (
    cmd_diff,
    cmd_doctor,
    cmd_list,
    cmd_review,
    cmd_runbook,
    cmd_status,
)
from backfill_assets.cli.running import cmd_pause, cmd_run, cmd_start
from backfill_assets.cli.swapping import cmd_abandon, cmd_release, cmd_rollback, cmd_swap


def _version() -> str:
    from backfill_assets import __version__

    return f"backfill-assets {__version__}"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="backfill-assets",
        description="Safe backfills of daily-partitioned tables on Dagster: plan, approve, run "
        "into a shadow behind gates, swap atomically, roll back. Works on your code location "
        "(found as the dagster CLI finds it) and the instance in DAGSTER_HOME.",
        epilog=EXIT_CODES,
    )
    p.add_argument("--version", action="version", version=_version())
    add_location_options(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, fn: Any) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help_, description=help_, epilog=EXIT_CODES)
        s.set_defaults(func=fn)
        return s

    s = command("plan", "build a reviewable plan (no side effects)", cmd_plan)
    s.add_argument("target", help="the backfillable table (its asset key)")
    s.add_argument("--start", help="first partition, YYYY-MM-DD (inclusive)")
    s.add_argument("--end", help="last partition, YYYY-MM-DD (inclusive)")
    s.add_argument(
        "--stale",
        action="store_true",
        help="instead of --start/--end: plan the partitions whose latest materialization was "
        "built by a code version other than the table's current one (one plan per range of "
        "consecutive days; never-built partitions are reported, not planned)",
    )
    s.add_argument(
        "--built-by",
        metavar="VERSION",
        help="--stale, but only the partitions built by this code version (implies --stale)",
    )
    s.add_argument("--window", help="idle window HH:MM-HH:MM (may cross midnight)")
    s.add_argument("--timezone", help="window timezone (default: the partitions' timezone)")
    s.add_argument(
        "--rollback",
        choices=["backup"],
        help="rollback strategy (required): backup, the swap keeps the replaced rows",
    )
    s.add_argument("--criteria", help="YAML file overriding the declared criteria")
    s.add_argument("--format", choices=["json", "markdown"], default="json")
    s.add_argument("--out", help="write the plan here instead of stdout")

    s = command(
        "approve", "approve a plan (file, or id of a proposed plan); runs nothing", cmd_approve
    )
    s.add_argument("plan", help="plan file, or the id of a plan proposed in the instance")
    s.add_argument("--by", help="who approves (default: $USER)")

    s = command("run", "run an approved plan's remaining batches in order, here", cmd_run)
    add_plan_argument(s)
    s.add_argument(
        "--ignore-window",
        action="store_true",
        help="operator override: run outside the plan's window (never overlaps the "
        "daily run: that is still refused)",
    )
    s.add_argument("--batches", type=int, help="run at most this many batches now")
    add_format_option(s, "json: print the outcome as JSON on stdout (progress stays on stderr)")

    for name, fn, text in (
        ("start", cmd_start, "let the daemon's batch driver run an approved plan in its window"),
        ("pause", cmd_pause, "stop the batch driver from launching further batches of a plan"),
    ):
        s = command(name, text, fn)
        add_plan_argument(s)
        s.add_argument("--by", help="who (default: $USER)")

    s = command(
        "status", "where a plan stands: batches, gates, swap, the table's writer", cmd_status
    )
    add_plan_argument(s)
    add_format_option(s)

    s = command(
        "diff",
        "what a plan's backfill changes: its shadow against the live rows, per column and day",
        cmd_diff,
    )
    add_plan_argument(s)
    s.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    s.add_argument(
        "--tolerance",
        type=float,
        default=1e-9,
        help="a float column's values differing by at most this are the same (default: 1e-9)",
    )
    s.add_argument(
        "--chart",
        metavar="FILE.svg",
        help="also write each changed numeric column's sum per day, before and after, as SVG",
    )

    s = command(
        "review",
        "record that you reviewed a plan's diff (a table with swap_requires_review needs it)",
        cmd_review,
    )
    add_plan_argument(s)
    s.add_argument("--by", help="who reviews (default: $USER)")

    s = command("list", "the plans in the instance and their status", cmd_list)
    s.add_argument("--target", help="only the plans of this table")
    add_format_option(s)

    for name, fn, text in (
        ("swap", cmd_swap, "swap a validated plan into its target, then refresh downstream"),
        ("rollback", cmd_rollback, "restore what a plan's swap replaced, then refresh downstream"),
    ):
        s = command(name, text, fn)
        add_plan_argument(s)
        s.add_argument(
            "--no-refresh",
            action="store_true",
            help="do not rebuild the impacted downstream assets; flag them instead",
        )
        add_format_option(s)

    s = command("release", "drop a swapped plan's backup (no rollback after this)", cmd_release)
    add_plan_argument(s)

    s = command("abandon", "give up an unswapped plan and drop its shadow", cmd_abandon)
    add_plan_argument(s)

    s = command(
        "runbook",
        "a table's backfill runbook (Markdown), generated from its declaration and history",
        cmd_runbook,
    )
    s.add_argument("table", help="the backfillable table (its asset key)")

    s = command(
        "adopt",
        "bring an existing table (and its history) under the framework, in place",
        cmd_adopt,
    )
    s.add_argument("table", help="the backfillable table (its asset key), as declared")
    what = s.add_mutually_exclusive_group()
    what.add_argument(
        "--check", action="store_true", help="report what adopt finds and would do; write nothing"
    )
    what.add_argument(
        "--rollback",
        action="store_true",
        help="PostgreSQL: put back the old table a conversion kept (the days written since are "
        "copied into it)",
    )
    what.add_argument(
        "--release",
        action="store_true",
        help="PostgreSQL: drop the old table a conversion kept (no --rollback after this)",
    )
    s.add_argument(
        "--allow-duplicates",
        action="store_true",
        help="adopt a table whose keys occur more than once on a day, as it is",
    )
    s.add_argument(
        "--code-version",
        default="adopted",
        help="the code version the partitions' materializations carry (default: adopted; "
        "`plan --stale` proposes every partition built by another version than the current one)",
    )
    s.add_argument(
        "--chunk-days",
        type=int,
        default=28,
        help="days recorded per transaction, each under the table's writer lease (default: 28)",
    )
    add_format_option(s)

    s = command(
        "doctor",
        "find pools with no slots, dead runs, stale writer leases and plans; --repair fixes them",
        cmd_doctor,
    )
    s.add_argument("--repair", action="store_true", help="fix what can be fixed")
    return p


class ArgumentRefused(Exception):
    """A command line argparse cannot parse (an unknown option, a value not offered)."""


class _Parser(argparse.ArgumentParser):
    """argparse that refuses like every other refusal: one `refused:` line and exit 2 (argparse
    alone prints its usage and exits from inside the parser)."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentRefused(f"{message} (see `{self.prog} --help`)")
