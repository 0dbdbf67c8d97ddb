"""`backfill-assets`: plan, approve, run, status, swap, rollback, release, abandon; demo.

Thin: parse arguments, set up the instance and warehouse, call service/. Exit codes: 0 done,
1 a gate failed (the plan is halted), 2 refused or invalid input (nothing was written).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backfill_assets.errors import BackfillError, GateFailed

PROJECT_ROOT = Path(__file__).resolve().parents[1]
QUIET = "WARNING"
LOCK_TIMEOUT_ENV = "BACKFILL_ASSETS_LOCK_TIMEOUT_S"


def _defaults() -> None:
    """Project-local defaults for the embedded setup; explicit environment always wins."""
    os.environ.setdefault("DAGSTER_HOME", str(PROJECT_ROOT / "dagster_home"))
    os.environ.setdefault(
        "BACKFILL_ASSETS_WAREHOUSE", str(PROJECT_ROOT / "data" / "warehouse.duckdb")
    )
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)


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


def _context() -> tuple[Any, Any, Any, Any]:
    import dagster as dg

    from backfill_assets.definitions import BACKFILLABLE_TABLES, defs
    from backfill_assets.lib.warehouse.duckdb_adapter import DuckDBWarehouse

    instance = dg.DagsterInstance.get()
    # How long a command waits for a warehouse another process holds before it refuses. It was
    # a fixed 30 s with no way to bound it (docs/reliability.md, "file held by another process").
    timeout = os.environ.get(LOCK_TIMEOUT_ENV, "30")
    try:
        lock_timeout_s = float(timeout)
    except ValueError:
        raise BackfillError(f"{LOCK_TIMEOUT_ENV}={timeout!r} is not a number of seconds") from None
    wh = DuckDBWarehouse(os.environ["BACKFILL_ASSETS_WAREHOUSE"], lock_timeout_s=lock_timeout_s)
    return defs, BACKFILLABLE_TABLES, instance, wh


def _refuse_outside_partitions(defs: Any, job_name: str, *days: dt.date) -> None:
    """Refuse days that are not partitions of the job (before the first, or not over yet).

    Without this, Dagster raised a bare error (a traceback, not exit 2; `land` even recorded a
    failed run), and `land` wrote days in the future as if they had landed.
    """
    pdef = defs.resolve_job_def(job_name).partitions_def
    for day in days:
        if pdef is not None and not pdef.has_partition_key(day.isoformat()):
            raise BackfillError(
                f"{day} is not a partition of {job_name} ({pdef.get_first_partition_key()}.."
                f"{pdef.get_last_partition_key()}): days before the first partition do not exist "
                "and days from today on have not happened yet"
            )


def _plan_id_arg(value: str) -> str:
    """Accept a plan id or a plan file; a file must pass the plan's integrity check."""
    from backfill_assets.lib.planning.plan import BackfillPlan, verify_integrity

    p = Path(value)
    if p.suffix == ".json" or p.exists():
        if not p.exists():
            raise BackfillError(f"plan file {value} does not exist")
        plan = BackfillPlan.from_json(p.read_text())
        # A hand-edited file was read for its id only, so `run edited.json` ran the stored plan
        # as if the edits did not exist; refuse it as `approve` does.
        verify_integrity(plan)
        return plan.plan_id
    return value


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# -- commands ------------------------------------------------------------------------------------


def cmd_plan(a: argparse.Namespace) -> int:
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.lib.planning.criteria import load_criteria_yaml
    from backfill_assets.lib.planning.markdown import render_markdown
    from backfill_assets.service.planner import plan_backfill

    defs, tables, instance, wh = _context()
    criteria = None
    if a.criteria:
        path = Path(a.criteria)
        if not path.is_file():
            raise BackfillError(f"criteria file {a.criteria} does not exist")
        base = tables[a.target].criteria if a.target in tables else None
        if base is None:
            from backfill_assets.lib.planning.criteria import Criteria

            base = Criteria()
        criteria = load_criteria_yaml(path.read_text(), base)
    request = PlanRequest(
        target=a.target,
        start=a.start,
        end=a.end,
        window=a.window,
        timezone=a.timezone,
        rollback=a.rollback,
        criteria=criteria,
    )
    plan = plan_backfill(
        request,
        asset_graph=defs.resolve_asset_graph(),
        tables=tables,
        instance=instance,
        warehouse=wh,
        now=_now(),
    )
    text = plan.to_json() if a.format == "json" else render_markdown(plan)
    if a.out:
        Path(a.out).write_text(text + "\n")
        print(
            f"plan {plan.plan_id}: {len(plan.batches)} batches, {len(plan.partitions)} "
            f"partitions -> {a.out}",
            file=sys.stderr,
        )
    else:
        print(text)
    return 0


def cmd_approve(a: argparse.Namespace) -> int:
    from backfill_assets.lib.planning.plan import BackfillPlan
    from backfill_assets.service.plans import approve_plan

    path = Path(a.plan)
    if not path.is_file():
        raise BackfillError(f"plan file {a.plan} does not exist")
    plan = BackfillPlan.from_json(path.read_text())
    _, tables, instance, _ = _context()
    if plan.target not in tables:
        raise BackfillError(
            f"plan {plan.plan_id} targets {plan.target}, which is not a declared "
            f"backfillable table ({sorted(tables)})"
        )
    # The plan's criteria reach SQL in the gates; a hand-made plan with a consistent id but an
    # unsafe predicate was approved and failed only after its batch had written the shadow.
    plan.criteria.validate(tables[plan.target].spec.column_names)
    status = approve_plan(instance, plan, a.by or os.environ.get("USER", "unknown"))
    print(
        f"plan {plan.plan_id} {status}: {plan.target} {plan.start}..{plan.end}, "
        f"{len(plan.batches)} batches. Next: backfill-assets run {plan.plan_id}"
    )
    return 0


def _bar(done: int, total: int, width: int = 24) -> str:
    filled = round(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def cmd_run(a: argparse.Namespace) -> int:
    from backfill_assets.service.executor import execute_plan

    defs, tables, instance, _ = _context()
    plan_id = _plan_id_arg(a.plan)
    done = 0

    def progress(report, total):
        nonlocal done
        done += 1
        print(
            f"{_bar(done, total)} batch {report.index} {report.start}..{report.end}: "
            f"{report.status}" + (f" in {report.seconds:.1f}s" if report.seconds else ""),
            file=err,
            flush=True,
        )

    err = sys.stderr
    with _runs_output_to_log():
        reports = execute_plan(
            defs,
            instance,
            tables,
            plan_id,
            clock=_now,
            ignore_window=a.ignore_window,
            progress=progress,
            max_batches=a.batches,
            log_level=QUIET,
        )
    ran = sum(r.status == "passed" for r in reports)
    print(
        f"plan {plan_id}: {ran} batches ran and passed, "
        f"{sum(r.status.startswith('skipped') for r in reports)} already passed. "
        f"Next: backfill-assets swap {plan_id}"
    )
    return 0


def cmd_start(a: argparse.Namespace) -> int:
    from backfill_assets.defs.driver import start_plan

    _, _, instance, _ = _context()
    print(start_plan(instance, _plan_id_arg(a.plan), a.by or os.environ.get("USER", "cli"), _now()))
    return 0


def cmd_pause(a: argparse.Namespace) -> int:
    from backfill_assets.defs.driver import pause_plan

    _, _, instance, _ = _context()
    print(pause_plan(instance, _plan_id_arg(a.plan), a.by or os.environ.get("USER", "cli")))
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    import json

    from backfill_assets.service.status import plan_status, render_status

    _, tables, instance, wh = _context()
    status = plan_status(instance, tables, wh, _plan_id_arg(a.plan))
    print(
        json.dumps(status, indent=2, default=str) if a.format == "json" else render_status(status)
    )
    return 0


def _swap_like(a: argparse.Namespace, kind: str) -> int:
    from backfill_assets.service.plans import load_plan
    from backfill_assets.service.runs import run_job
    from backfill_assets.service.swap import refresh_downstream

    defs, _tables, instance, _ = _context()
    plan_id = _plan_id_arg(a.plan)
    plan, _ = load_plan(instance, plan_id)
    job = f"{plan.target}__{kind}_job"
    with _runs_output_to_log() as log:
        result = run_job(
            defs,
            job,
            instance,
            raise_on_error=False,
            log_level=QUIET,
            run_config={"ops": {f"{plan.target}__{kind}": {"config": {"plan_id": plan_id}}}},
        )
    if not result.success:
        raise BackfillError(_run_error(result) or f"{kind} failed; see {log}")
    mats = [e for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]
    print(
        f"{kind} of plan {plan_id}: {len(mats)} partitions of {plan.target} "
        f"(run {result.run_id[:8]})"
    )
    if a.no_refresh:
        stale = ", ".join(i.asset_key for i in plan.impact)
        print(
            f"downstream NOT refreshed (--no-refresh): {stale} are stale for "
            f"{plan.start}..{plan.end}"
        )
        return 0
    with _runs_output_to_log():
        refreshed = refresh_downstream(defs, instance, plan, log_level=QUIET)
    for req, ok in refreshed:
        rng = f" {req.start}..{req.end}" if req.start else " (full refresh)"
        print(f"  refreshed {', '.join(req.asset_keys)}{rng}: {'ok' if ok else 'FAILED'}")
    return 0 if all(ok for _, ok in refreshed) else 1


def _run_error(result: Any) -> str | None:
    """The BackfillError message a failed run carried (e.g. a refused swap), if any."""
    for e in result.all_events:
        if e.event_type_value == "STEP_FAILURE":
            err = e.event_specific_data.error  # type: ignore[union-attr]
            while err is not None:
                if err.cls_name in {
                    "SwapRefused",
                    "ExecutionRefused",
                    "WarehouseError",
                    "InvalidInput",
                }:
                    return err.message.split(": ", 1)[-1].strip()
                err = err.cause
    return None


def cmd_swap(a: argparse.Namespace) -> int:
    return _swap_like(a, "swap")


def cmd_rollback(a: argparse.Namespace) -> int:
    return _swap_like(a, "rollback")


def cmd_release(a: argparse.Namespace) -> int:
    from backfill_assets.service.plans import load_plan
    from backfill_assets.service.swap import release_backup

    _, tables, instance, wh = _context()
    plan_id = _plan_id_arg(a.plan)
    plan, _ = load_plan(instance, plan_id)
    n = release_backup(instance, tables[plan.target], wh, plan_id)
    print(
        f"released the backup of plan {plan_id}: {n} week tables dropped; it can no longer "
        "be rolled back"
    )
    return 0


def cmd_abandon(a: argparse.Namespace) -> int:
    from backfill_assets.service.plans import load_plan
    from backfill_assets.service.swap import abandon_plan

    _, tables, instance, wh = _context()
    plan_id = _plan_id_arg(a.plan)
    plan, _ = load_plan(instance, plan_id)
    n = abandon_plan(instance, tables[plan.target], wh, plan_id)
    print(
        f"abandoned plan {plan_id}: {n} shadow week tables dropped; {plan.target} is free "
        "for a new plan"
    )
    return 0


def cmd_land(a: argparse.Namespace) -> int:
    from backfill_assets.example.seed import land_days
    from backfill_assets.lib.dates import parse_day

    start, end = parse_day(a.start, "start"), parse_day(a.end, "end")
    if end < start:
        raise BackfillError(f"end {end} is before start {start}")
    if a.rows_per_day < 1:  # 0 or fewer rows landed empty days and recorded them as landed
        raise BackfillError(f"--rows-per-day {a.rows_per_day} must be 1 or more")
    defs, _, instance, _ = _context()
    from backfill_assets.example.seed import LAND_JOB

    _refuse_outside_partitions(defs, LAND_JOB, start, end)
    with _runs_output_to_log():
        land_days(defs, instance, start, end, a.rows_per_day)
    print(f"landed raw_orders {start}..{end} ({a.rows_per_day} orders/day)")
    return 0


def cmd_daily(a: argparse.Namespace) -> int:
    from backfill_assets.lib.dates import parse_day
    from backfill_assets.service.guards import writer_runs_in_progress
    from backfill_assets.service.runs import run_job

    day = parse_day(a.day, "partition")
    defs, tables, instance, _ = _context()
    table = next(iter(tables.values()))
    _refuse_outside_partitions(defs, table.daily_job, day)
    busy = writer_runs_in_progress(instance)
    if busy:
        raise BackfillError(f"run {busy[0].run_id[:8]} holds the writer tag; retry when it ends")
    with _runs_output_to_log():
        result = run_job(
            defs,
            table.daily_job,
            instance,
            partition_key=day.isoformat(),
            raise_on_error=False,
            log_level=QUIET,
            tags={"backfill_assets/writer": table.key, "backfill_assets/role": "daily"},
        )
    print(f"daily run {result.run_id[:8]} for {day}: {'success' if result.success else 'FAILED'}")
    return 0 if result.success else 1


def cmd_demo(a: argparse.Namespace) -> int:
    from backfill_assets.demo import run_demo

    return run_demo(days=a.days, rows_per_day=a.rows_per_day, scenario=a.scenario)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="backfill-assets",
        description="Safe backfills of daily-partitioned tables: plan, approve, run into a "
        "shadow behind gates, swap atomically, roll back.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("plan", help="build a reviewable plan (no side effects)")
    s.add_argument("target")
    s.add_argument("--start", required=True, help="first partition, YYYY-MM-DD (inclusive)")
    s.add_argument("--end", required=True, help="last partition, YYYY-MM-DD (inclusive)")
    s.add_argument("--window", help="idle window HH:MM-HH:MM (may cross midnight)")
    s.add_argument("--timezone", help="window timezone (default: the partitions' timezone)")
    s.add_argument("--rollback", help="rollback strategy: backup")
    s.add_argument("--criteria", help="YAML file overriding the declared criteria")
    s.add_argument("--format", choices=["json", "markdown"], default="json")
    s.add_argument("--out", help="write the plan here instead of stdout")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("approve", help="record a plan file as approved (nothing runs yet)")
    s.add_argument("plan")
    s.add_argument("--by", help="who approves (default: $USER)")
    s.set_defaults(func=cmd_approve)

    s = sub.add_parser("run", help="execute an approved plan's remaining batches in order")
    s.add_argument("plan", help="plan id or plan file")
    s.add_argument(
        "--ignore-window",
        action="store_true",
        help="operator override: run outside the plan's window (never overlaps the "
        "daily run: that is still refused)",
    )
    s.add_argument("--batches", type=int, help="run at most this many batches now")
    s.set_defaults(func=cmd_run)

    for name, fn, text in (
        ("start", cmd_start, "let the daemon's batch driver run an approved plan in its window"),
        ("pause", cmd_pause, "stop the batch driver from launching further batches of a plan"),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument("plan", help="plan id or plan file")
        s.add_argument("--by", help="who (default: $USER)")
        s.set_defaults(func=fn)

    s = sub.add_parser("status", help="where a plan stands: batches, gates, swap")
    s.add_argument("plan")
    s.add_argument("--format", choices=["text", "json"], default="text")
    s.set_defaults(func=cmd_status)

    for name, fn, text in (
        ("swap", cmd_swap, "swap a validated plan into its target"),
        ("rollback", cmd_rollback, "restore what a plan's swap replaced"),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument("plan")
        s.add_argument(
            "--no-refresh",
            action="store_true",
            help="do not rebuild the impacted downstream assets; flag them instead",
        )
        s.set_defaults(func=fn)

    s = sub.add_parser("release", help="drop a swapped plan's backup (no rollback after this)")
    s.add_argument("plan")
    s.set_defaults(func=cmd_release)

    s = sub.add_parser("abandon", help="give up an unswapped plan and drop its shadow")
    s.add_argument("plan")
    s.set_defaults(func=cmd_abandon)

    s = sub.add_parser("land", help="simulate the source landing days of orders")
    s.add_argument("--start", required=True)
    s.add_argument("--end", required=True)
    s.add_argument("--rows-per-day", type=int, default=2000)
    s.set_defaults(func=cmd_land)

    s = sub.add_parser("daily", help="run the daily production job for one day, now")
    s.add_argument("day")
    s.set_defaults(func=cmd_daily)

    s = sub.add_parser("demo", help="the whole story on the embedded DuckDB (resets demo state)")
    s.add_argument("--days", type=int, default=120)
    s.add_argument("--rows-per-day", type=int, default=20_000)
    s.add_argument("--scenario", choices=["story", "corruption", "all"], default="all")
    s.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _defaults()
    # Dagster flags the APIs we rely on (single-run backfill policy, partitioned checks) as
    # beta/preview at every import; that is for the developer reading docs/, not the operator.
    warnings.filterwarnings("ignore", message=r".*(beta|preview)", category=Warning)
    try:
        return int(args.func(args))
    except GateFailed as e:
        print(f"halted: {e}", file=sys.stderr)
        return 1
    except BackfillError as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
