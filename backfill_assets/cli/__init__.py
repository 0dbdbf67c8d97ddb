"""`backfill-assets`: plan, approve, run, start, pause, status, list, swap, rollback, release,
abandon and doctor, on any code location.

Thin: parse arguments, load the code location and the instance, call service/. The tables come
from the loaded definitions (their target assets carry them), the warehouse from its
`backfill_warehouse` resource, and every command finds its table from the plan or the target.
`list` and `pause` work on the instance alone and do not import the code location. `start` reads
it: it hands a plan to the daemon, so it refuses a code location whose daily job the guards could
not find, as `plan`, `approve` and `run` do. Only `run`, `swap` and `rollback` import it every
time (they execute its jobs); the other commands read its snapshot while nothing it was built
from changed (cli/snapshot.py).

Exit codes: 0 done; 1 a gate failed and the plan is halted; 2 refused or invalid input (nothing
was written); 3 the swap or rollback is done but the downstream refresh failed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from backfill_assets.errors import BackfillError, GateFailed, InvalidInput

if TYPE_CHECKING:
    import dagster as dg

    from backfill_assets.lib.table import BackfillableTable
    from backfill_assets.lib.warehouse.base import Warehouse

QUIET = "WARNING"
EXIT_OK, EXIT_HALTED, EXIT_REFUSED, EXIT_REFRESH_FAILED = 0, 1, 2, 3
EXIT_CODES = (
    "exit codes: 0 done; 1 a gate failed and the plan is halted; 2 refused or invalid input "
    "(nothing written); 3 swapped (or rolled back) but the downstream refresh failed"
)
MAX_INPUT_BYTES = 8 * 1024 * 1024


@dataclass
class Context:
    """What every command works with: the code location, its tables, instance, warehouse.

    `graph` is the location's asset graph (or its snapshot's: cli/snapshot.py); `defs` its
    Definitions, only for the commands that execute runs (`_context(a, jobs=True)`)."""

    defs: dg.Definitions | None
    graph: Any
    tables: dict[str, BackfillableTable]
    instance: dg.DagsterInstance
    wh: Warehouse
    wait_s: float

    @property
    def definitions(self) -> dg.Definitions:
        assert self.defs is not None, "a command that runs jobs asks _context(a, jobs=True)"
        return self.defs


def _instance() -> dg.DagsterInstance:
    """The instance in DAGSTER_HOME, for the commands that read and record plans only (`list`,
    `pause`): they do not import the code location, which takes seconds (a dbt project brings
    dbt with it)."""
    import dagster as dg

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise BackfillError(
            "DAGSTER_HOME is not set: point it at the folder of the Dagster instance your "
            "deployment uses (the one with dagster.yaml)"
        )
    if not os.path.isabs(home):
        raise BackfillError(
            f"DAGSTER_HOME is {home!r}, a relative path; set it to the absolute path of your "
            f"instance's folder (the one with dagster.yaml), e.g. {Path(home).absolute()}"
        )
    if not Path(home).is_dir():
        raise BackfillError(
            f"DAGSTER_HOME {home} does not exist or is not a folder; create it (mkdir -p "
            f"{home}) or point DAGSTER_HOME at the folder of your Dagster instance"
        )
    try:
        instance = dg.DagsterInstance.get()
        instance.get_runs(limit=1)  # the storage opens here: say now if it cannot
    except Exception as e:  # Dagster's and SQLAlchemy's own errors: nothing was written
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        writable = os.access(home, os.W_OK)
        raise BackfillError(
            f"cannot open the Dagster instance in DAGSTER_HOME {home} ({first})"
            + (
                "; the folder cannot be written (a read-only file system?), and the instance "
                "writes its runs and events there: make it writable, or point DAGSTER_HOME at "
                "a writable folder"
                if not writable
                else "; check its dagster.yaml and storage"
            )
        ) from None
    return instance


def _context(
    a: argparse.Namespace,
    *,
    jobs: bool = False,
    instance: dg.DagsterInstance | None = None,
    reconcile: bool = True,
) -> Context:
    """The code location, the instance (`instance`, if the caller opened it) and the
    warehouse. `jobs`: the command executes runs and needs the location's Definitions; the
    other commands read the location's snapshot while it is current, which spares them
    importing it (cli/snapshot.py). `reconcile`: tell the instance first what the warehouse
    did that it was not told (every command but `doctor`, which reports it)."""
    import dagster as dg

    from backfill_assets.cli.location import load_location, resolve_spec
    from backfill_assets.constants import WAREHOUSE_RESOURCE_KEY
    from backfill_assets.lib.warehouse.connect import LOCK_TIMEOUT_ENV, lock_timeout_from

    instance = instance if instance is not None else _instance()
    if jobs:
        from backfill_assets.service.runs import hold_connections

        # It executes runs here, one after another, each storing dozens of events.
        hold_connections(instance)
    spec = resolve_spec(
        module=a.module_name,
        file=a.python_file,
        workspace=a.workspace,
        attribute=a.attribute,
        location=a.location,
        cwd=Path.cwd(),
    )
    view = load_location(spec, snapshot_ok=not jobs)
    if not view.tables:
        raise BackfillError(
            f"{spec.describe()} declares no backfillable table; merge "
            "backfill_definitions([...]) into its Definitions"
        )
    # A daily job the guards cannot find by name would let batches run beside the real one.
    if view.daily_job_problems:
        raise BackfillError("; ".join(view.daily_job_problems))
    if view.warehouse is None:
        raise BackfillError(f"{spec.describe()} has no {WAREHOUSE_RESOURCE_KEY} resource")
    wait_s = lock_timeout_from(os.environ.get(LOCK_TIMEOUT_ENV))
    try:
        # With this instance: initializing it alone builds an ephemeral one (a few 100 ms).
        with dg.build_resources({"warehouse": view.warehouse}, instance=instance) as initialized:
            wh = initialized.warehouse.adapter()
    except dg.DagsterInvalidConfigError as e:
        raise BackfillError(
            f"the {WAREHOUSE_RESOURCE_KEY} resource is misconfigured: {_config_problem(e)}"
        ) from None
    if reconcile:
        _reconcile(instance, wh)
    return Context(view.defs, view.graph, view.tables, instance, wh, wait_s)


def _reconcile(instance: dg.DagsterInstance, wh: Warehouse) -> None:
    """Before any command acts: tell the instance what the warehouse, the state of record, did
    to a plan that the instance was not told (a process died between the two), and say so."""
    from backfill_assets.service.reconcile import reconcile_untold

    for said in reconcile_untold(instance, wh):
        print(f"recorded from the warehouse: {said}", file=sys.stderr)


def _config_problem(e: Any) -> str:
    """What is wrong with a resource's config, without Dagster's stack traces; for the
    warehouse's unset environment variable, what to set it to."""
    from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV

    parts = []
    for err in getattr(e, "errors", None) or [e]:
        text = str(getattr(err, "message", err)).split("Stack Trace:")[0]
        # "Post processing at path root:...:url of original value {...} failed: dagster._config.
        # errors.PostProcessingError: <what is wrong>": only what is wrong.
        text = re.sub(r"^Post processing at path .*? failed:\s+[\w.]+Error: ", "", text.strip())
        parts.append(" ".join(text.split()))
    out = "; ".join(parts)
    if f'environment variable "{WAREHOUSE_ENV}" which is not set' in out:
        out = out.rstrip(".") + (
            f". Set {WAREHOUSE_ENV} to the warehouse: a DuckDB file path or a postgresql:// URL"
        )
    return out


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


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _who(a: argparse.Namespace) -> str:
    return getattr(a, "by", None) or os.environ.get("USER", "unknown")


# -- commands ------------------------------------------------------------------------------------


def cmd_plan(a: argparse.Namespace) -> int:
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.lib.planning.criteria import Criteria, load_criteria_yaml
    from backfill_assets.lib.planning.markdown import render_markdown
    from backfill_assets.service.planner import plan_backfill, plan_stale

    stale = a.stale or a.built_by is not None
    if a.timezone is not None and not a.timezone.strip():
        raise InvalidInput(
            "--timezone is empty; name an IANA timezone (e.g. UTC or Europe/Berlin), or leave "
            "the option out to use the partitions' timezone"
        )
    if a.out:
        _refuse_unwritable_out(Path(a.out))
    if stale and (a.start or a.end):
        raise InvalidInput(
            "--stale finds the range from what is stale: leave out --start and --end, or leave "
            "out --stale to plan the range you name"
        )
    if not stale and not (a.start and a.end):
        raise InvalidInput(
            "plan needs --start and --end (YYYY-MM-DD, inclusive), or --stale to plan the "
            "partitions built by an older code version"
        )
    c = _context(a)
    criteria = None
    if a.criteria:
        text = read_input_file(a.criteria, "criteria file")
        base = c.tables[a.target].criteria if a.target in c.tables else Criteria()
        criteria = load_criteria_yaml(text, base)
    request = PlanRequest(
        target=a.target,
        start=a.start or "",
        end=a.end or "",
        window=a.window,
        timezone=a.timezone,
        rollback=a.rollback,
        criteria=criteria,
    )
    inputs = {
        "asset_graph": c.graph,
        "tables": c.tables,
        "instance": c.instance,
        "warehouse": c.wh,
        "now": _now(),
    }
    if not stale:
        plans = [plan_backfill(request, **inputs)]
    else:
        scan, plans = plan_stale(request, built_by=a.built_by, **inputs)
        for line in scan.summary():
            print(line, file=sys.stderr)
        if not plans:
            print(
                f"nothing to backfill: no partition of {a.target} is {scan.rule}", file=sys.stderr
            )
            return EXIT_OK
        if len(plans) > 1 and a.format == "json" and not a.out:
            raise InvalidInput(
                f"{len(plans)} stale ranges make {len(plans)} plans, one per range; pass --out "
                "FILE.json to write FILE-1.json ... (or --format markdown to read them here)"
            )
    for i, plan in enumerate(plans, start=1):
        text = plan.to_json() if a.format == "json" else render_markdown(plan)
        if a.out:
            out = _numbered(Path(a.out), i) if len(plans) > 1 else Path(a.out)
            try:
                out.write_text(text + "\n")
            except OSError as e:
                raise InvalidInput(f"cannot write the plan to {out}: {e.strerror or e}") from None
            print(
                f"plan {plan.plan_id}: {plan.start}..{plan.end}, {len(plan.batches)} batches, "
                f"{len(plan.partitions)} partitions -> {out}",
                file=sys.stderr,
            )
        else:
            print(text)
    if len(plans) > 1:
        print(
            f"{len(plans)} plans, one per stale range, in date order. A table holds one plan's "
            "shadow and backup at a time: approve the next once the one before it is swapped "
            "and its backup released (`backfill-assets release PLAN`), or abandoned",
            file=sys.stderr,
        )
    return EXIT_OK


def _refuse_unwritable_out(out: Path) -> None:
    """Refuse an --out the plan could not be written to, before anything is planned."""
    folder = out.parent
    if not folder.is_dir():
        raise InvalidInput(
            f"--out {out}: the folder {folder} does not exist; create it first (mkdir -p "
            f"{folder}) or write the plan somewhere else"
        )
    if out.is_dir():
        raise InvalidInput(f"--out {out} is a folder; name a file, e.g. {out / 'plan.json'}")
    target = out if out.exists() else folder
    if not os.access(target, os.W_OK):
        raise InvalidInput(
            f"--out {out} cannot be written ({'the file' if out.exists() else 'its folder'} "
            "is read-only); write the plan somewhere else"
        )


def _numbered(path: Path, i: int) -> Path:
    """plan.json -> plan-1.json: one file per plan when --stale finds several ranges."""
    return path.with_name(f"{path.stem}-{i}{path.suffix}")


def cmd_approve(a: argparse.Namespace) -> int:
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.reconcile import current_plan
    from backfill_assets.service.tables import table_for

    p = Path(a.plan)
    if p.suffix == ".json" or p.exists():
        plan = _read_plan(a.plan)
        c = _context(a)
    else:
        c = _context(a)
        plan, _ = current_plan(c.instance, c.wh, a.plan, allow_proposed=True)
    table = table_for(c.tables, plan.target, what=f"plan {plan.plan_id}'s target")
    status = approve_plan(c.instance, c.wh, table, plan, _who(a), asset_graph=c.graph)
    print(
        f"plan {plan.plan_id} {status}: {plan.target} {plan.start}..{plan.end}, "
        f"{len(plan.batches)} batches. Next: backfill-assets run {plan.plan_id} (or start it "
        "for the daemon's batch driver)"
    )
    return EXIT_OK


def cmd_run(a: argparse.Namespace) -> int:
    from backfill_assets.cli.output import BatchRun, GateFailureOut, RunOut, dump
    from backfill_assets.cli.progress import PlanProgress
    from backfill_assets.service.executor import BatchReport, execute_plan
    from backfill_assets.service.reconcile import current_plan

    c = _context(a, jobs=True)
    plan_id = _plan_id_arg(a.plan)
    plan, _ = current_plan(c.instance, c.wh, plan_id)
    reports: list[BatchReport] = []
    shown = PlanProgress(plan, sys.stderr)
    waiting = _say_waiting()

    def progress(event: Any) -> None:
        if event.report is not None:
            reports.append(event.report)
        shown(event)

    def output(outcome: str) -> str:
        next_ = {
            "done": f"backfill-assets swap {plan_id}",
            "partial": f"backfill-assets run {plan_id}",
            "halted": f"fix the cause, then backfill-assets run {plan_id}",
        }[outcome]
        return dump(
            RunOut(
                plan_id=plan_id,
                target=plan.target,
                outcome=outcome,  # type: ignore[arg-type]
                batches_total=len(plan.batches),
                batches=[
                    BatchRun(
                        index=r.index,
                        start=r.start.isoformat(),
                        end=r.end.isoformat(),
                        status="skipped" if r.status.startswith("skipped") else r.status,  # type: ignore[arg-type]
                        run_id=r.run_id,
                        seconds=round(r.seconds, 3),
                        failures=[
                            GateFailureOut(
                                partition=f.partition, gate=f.gate, description=f.description
                            )
                            for f in r.failures
                        ],
                    )
                    for r in reports
                ],
                next=next_,
            )
        )

    try:
        with shown, _runs_output_to_log():
            execute_plan(
                c.definitions,
                c.instance,
                c.wh,
                c.tables,
                plan_id,
                clock=_now,
                ignore_window=a.ignore_window,
                progress=progress,
                max_batches=a.batches,
                log_level=QUIET,
                wait_s=c.wait_s,
                on_wait=waiting,
            )
    except GateFailed:
        if a.format == "json":
            print(output("halted"))
        raise
    ran = sum(r.status == "passed" for r in reports)
    outcome = "done" if len(reports) == len(plan.batches) else "partial"
    if a.format == "json":
        print(output(outcome))
        return EXIT_OK
    skipped = sum(r.status.startswith("skipped") for r in reports)
    left = len(plan.batches) - len(reports)
    print(
        f"plan {plan_id}: {ran} batches ran and passed, {skipped} already passed"
        + (
            f", {left} left. Next: backfill-assets run {plan_id}"
            if left
            else f". Next: backfill-assets swap {plan_id}"
        )
    )
    return EXIT_OK


def cmd_start(a: argparse.Namespace) -> int:
    from backfill_assets.service.batch_driver import start_plan

    # The code location too (or its snapshot): its daily jobs are checked (_context) before the
    # daemon may launch batches that the guards keep clear of them by name.
    c = _context(a)
    print(start_plan(c.instance, _plan_id_arg(a.plan), _who(a), _now(), c.wh))
    return EXIT_OK


def cmd_pause(a: argparse.Namespace) -> int:
    from backfill_assets.errors import ExecutionRefused
    from backfill_assets.service.batch_driver import pause_plan
    from backfill_assets.service.reconcile import current_plan

    # The instance alone: pausing must work while the code location does not load.
    instance = _instance()
    plan_id = _plan_id_arg(a.plan)
    try:
        print(pause_plan(instance, plan_id, _who(a)))
    except ExecutionRefused:
        # The instance may have lost its record of the plan (erased in the UI): the
        # warehouse's record restores it, then the plan is paused.
        c = _context(a, instance=instance)
        if c.wh.plan_record(plan_id) is None:
            raise
        current_plan(instance, c.wh, plan_id)
        print(pause_plan(instance, plan_id, _who(a)))
    return EXIT_OK


def cmd_status(a: argparse.Namespace) -> int:
    from backfill_assets.service.status import plan_status, render_status

    c = _context(a)
    status = plan_status(c.instance, c.tables, c.wh, _plan_id_arg(a.plan))
    if a.format != "json":
        print(render_status(status))
        return EXIT_OK
    # Only here: building the output models costs 0.1 s of a command meant to answer in 1.5 s.
    from backfill_assets.cli.output import StatusOut, dump

    print(dump(StatusOut(**status)))
    return EXIT_OK


def cmd_list(a: argparse.Namespace) -> int:
    from backfill_assets.cli.output import PlanEntry, PlanList, dump
    from backfill_assets.service.plans import plan_statuses
    from backfill_assets.service.reconcile import reconcile

    instance = _instance()
    statuses = {
        pid: (target, str(status)) for pid, (target, status) in plan_statuses(instance).items()
    }
    try:
        wh = _context(a, instance=instance).wh
    except BackfillError as e:
        # The instance alone still lists what it recorded; the warehouse's word is missing.
        print(f"listing the instance's records only (the warehouse was not read: {e})",
              file=sys.stderr)  # fmt: skip
    else:
        # The warehouse's record of each plan it keeps is the truth, and the instance is told
        # (a record erased in the UI, say).
        for rec in wh.plan_records():
            if statuses.get(rec.plan_id, (None, None))[1] != rec.status:
                reconcile(instance, wh, rec)
            statuses[rec.plan_id] = (rec.table, rec.status)
    rows = [
        {"plan_id": pid, "target": target, "status": status}
        for pid, (target, status) in sorted(statuses.items())
        if a.target is None or target == a.target
    ]
    if a.format == "json":
        print(dump(PlanList([PlanEntry(**r) for r in rows])))
    elif not rows:
        print("no plans in this instance")
    else:
        for r in rows:
            print(f"{r['plan_id']}  {r['target']:<30} {r['status']}")
    return EXIT_OK


def _swap_like(a: argparse.Namespace, kind: str) -> int:
    from backfill_assets.cli.output import Refreshed, SwapOut, dump
    from backfill_assets.constants import rollback_job, swap_job, swap_run_config
    from backfill_assets.errors import SwapRefused
    from backfill_assets.lib.states import PlanStatus
    from backfill_assets.service.executor import refuse_unless_local, run_error
    from backfill_assets.service.plans import published_keys
    from backfill_assets.service.reconcile import current_plan
    from backfill_assets.service.refresh import refresh_downstream
    from backfill_assets.service.runs import run_as_writer
    from backfill_assets.service.tables import table_for

    c = _context(a, jobs=True)
    plan_id = _plan_id_arg(a.plan)
    plan, status = current_plan(c.instance, c.wh, plan_id)
    table = table_for(c.tables, plan.target, what=f"plan {plan_id}'s target")
    refuse_unless_local(c.instance, f"backfill-assets {kind}")
    # Say so now rather than after waiting for the table's writer.
    allowed = (
        (PlanStatus.APPROVED, PlanStatus.SWAPPED)
        if kind == "swap"
        else (
            PlanStatus.SWAPPED,
            PlanStatus.ROLLED_BACK,
        )
    )
    if status not in allowed:
        raise SwapRefused(
            f"plan {plan_id} is {status}; only "
            + (
                "an approved plan can be swapped"
                if kind == "swap"
                else "a swapped plan whose backup was not released can be rolled back"
            )
        )
    job = swap_job(plan.target) if kind == "swap" else rollback_job(plan.target)
    waiting = _say_waiting()
    with _runs_output_to_log() as log:
        result = run_as_writer(
            c.definitions,
            job,
            c.instance,
            c.wh,
            table,
            role=kind,
            plan_id=plan_id,
            wait_s=c.wait_s,
            on_wait=waiting,
            raise_on_error=False,
            log_level=QUIET,
            run_config=swap_run_config(plan.target, kind, plan_id, downstream=not a.no_refresh),
        )
    if not result.success:
        error = run_error(result)
        raise BackfillError(error[1] if error else f"{kind} failed; see {log}")
    # The target's partitions: the run also records those of the models published with it.
    mats = [
        e
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
        and e.asset_key is not None
        and e.asset_key.to_user_string() == plan.target
    ]
    impacted = [i.asset_key for i in plan.impact]

    def output(refresh: str, refreshed: list[Any], stale: list[str]) -> str:
        return dump(
            SwapOut(
                command=kind,  # type: ignore[arg-type]
                plan_id=plan_id,
                target=plan.target,
                range=f"{plan.start}..{plan.end}",
                partitions=len(mats),
                run_id=result.run_id,
                refresh=refresh,  # type: ignore[arg-type]
                refreshed=[
                    Refreshed(
                        assets=list(req.asset_keys),
                        start=str(req.start) if req.start else None,
                        end=str(req.end) if req.end else None,
                        ok=ok,
                    )
                    for req, ok in refreshed
                ],
                stale=stale,
            )
        )

    text = a.format != "json"
    if text:
        print(
            f"{kind} of plan {plan_id}: {len(mats)} partitions of {plan.target} "
            f"(run {result.run_id[:8]})"
        )
    # Published with the target by the swap (its rollback restored them): never refreshed.
    published = published_keys(c.instance, plan_id)
    views = {i.asset_key for i in plan.impact if i.at_swap == "view"}
    marts = [k for k in published if k not in views]
    if text and marts:
        print(
            ("restored with " if kind == "rollback" else "published with ")
            + f"{plan.target} in the same transaction: {', '.join(marts)}"
            + (f" (views reading it: {', '.join(sorted(views & set(published)))})" if views else "")
        )
    if a.no_refresh:
        stale = [k for k in impacted if k not in published]
        if text:
            print(
                f"downstream NOT refreshed (--no-refresh): {', '.join(stale)} are stale for "
                f"{plan.start}..{plan.end}"
            )
        else:
            print(output("skipped", [], stale))
        return EXIT_OK
    with _runs_output_to_log():
        refreshed = refresh_downstream(
            c.definitions,
            c.instance,
            c.wh,
            table,
            plan,
            wait_s=c.wait_s,
            log_level=QUIET,
            skip=published,
        )
    failed = [key for req, ok in refreshed if not ok for key in req.asset_keys]
    if text:
        for req, ok in refreshed:
            rng = f" {req.start}..{req.end}" if req.start else " (full refresh)"
            print(f"  refreshed {', '.join(req.asset_keys)}{rng}: {'ok' if ok else 'FAILED'}")
    else:
        print(output("failed" if failed else "done", refreshed, failed))
    if not failed:
        return EXIT_OK
    print(
        f"{kind} done, but the downstream refresh failed: the marts above marked FAILED are stale "
        f"for {plan.start}..{plan.end}; fix the cause and re-run them",
        file=sys.stderr,
    )
    return EXIT_REFRESH_FAILED


def cmd_swap(a: argparse.Namespace) -> int:
    return _swap_like(a, "swap")


def cmd_rollback(a: argparse.Namespace) -> int:
    return _swap_like(a, "rollback")


def cmd_release(a: argparse.Namespace) -> int:
    from backfill_assets.service.lease import holder_for_command, writer_lease
    from backfill_assets.service.swap import release_backup

    c = _context(a)
    plan_id = _plan_id_arg(a.plan)
    holder = holder_for_command("release", plan_id)
    target = _target_of(c, plan_id)
    with writer_lease(c.instance, c.wh, target, holder, wait_s=c.wait_s, on_wait=_say_waiting()):
        plan, n = release_backup(c.instance, c.tables, c.wh, plan_id)
    print(
        f"released the backup of plan {plan_id}: {n} backup weeks dropped; it can no longer "
        f"be rolled back and {plan.target} is free for a new plan"
    )
    return EXIT_OK


def cmd_abandon(a: argparse.Namespace) -> int:
    from backfill_assets.service.lease import holder_for_command, writer_lease
    from backfill_assets.service.swap import abandon_plan

    c = _context(a)
    plan_id = _plan_id_arg(a.plan)
    holder = holder_for_command("abandon", plan_id)
    target = _target_of(c, plan_id)
    with writer_lease(c.instance, c.wh, target, holder, wait_s=c.wait_s, on_wait=_say_waiting()):
        target, n = abandon_plan(c.instance, c.tables, c.wh, plan_id)
    print(
        f"abandoned plan {plan_id}: {n} shadow week tables dropped; {target} is free for a new plan"
    )
    return EXIT_OK


def _target_of(c: Context, plan_id: str) -> str:
    """The table a plan (or a warehouse claim of it) belongs to, for its writer lease."""
    from backfill_assets.errors import ExecutionRefused
    from backfill_assets.service.reconcile import current_plan

    try:
        return current_plan(c.instance, c.wh, plan_id, allow_proposed=True)[0].target
    except ExecutionRefused:
        for name in c.tables:
            if c.wh.active_plan(name) == plan_id:
                return name
        raise


def cmd_doctor(a: argparse.Namespace) -> int:
    from backfill_assets.service.doctor import diagnose

    c = _context(a, reconcile=False)  # it reports what the instance was not told
    findings = diagnose(c.instance, c.wh, c.tables, repair=a.repair)
    for f in findings:
        print(f.line())
    open_ = [f for f in findings if not f.repaired]
    if not findings:
        print(
            "doctor: nothing wrong found (pools, dead runs, writer leases, plan records, plan "
            "claims, run queue)"
        )
    elif open_ and not a.repair:
        print(f"doctor: {len(open_)} problems; `backfill-assets doctor --repair` fixes them")
    return EXIT_OK


# -- the parser ----------------------------------------------------------------------------------


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
    loc = p.add_argument_group(
        "code location (default: [tool.dagster] or [tool.dg] in ./pyproject.toml)"
    )
    loc.add_argument("-m", "--module-name", help="Python module holding the Definitions")
    loc.add_argument("-f", "--python-file", help="Python file holding the Definitions")
    loc.add_argument("-w", "--workspace", help="workspace.yaml (with -l when it has several)")
    loc.add_argument("-a", "--attribute", help="the Definitions' attribute (default: defs)")
    loc.add_argument("-l", "--location", help="location name in the workspace")
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
    s.add_argument("plan", help="plan id or plan file")
    s.add_argument(
        "--ignore-window",
        action="store_true",
        help="operator override: run outside the plan's window (never overlaps the "
        "daily run: that is still refused)",
    )
    s.add_argument("--batches", type=int, help="run at most this many batches now")
    s.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="json: print the outcome as JSON on stdout (progress stays on stderr)",
    )

    for name, fn, text in (
        ("start", cmd_start, "let the daemon's batch driver run an approved plan in its window"),
        ("pause", cmd_pause, "stop the batch driver from launching further batches of a plan"),
    ):
        s = command(name, text, fn)
        s.add_argument("plan", help="plan id or plan file")
        s.add_argument("--by", help="who (default: $USER)")

    s = command(
        "status", "where a plan stands: batches, gates, swap, the table's writer", cmd_status
    )
    s.add_argument("plan", help="plan id or plan file")
    s.add_argument("--format", choices=["text", "json"], default="text")

    s = command("list", "the plans in the instance and their status", cmd_list)
    s.add_argument("--target", help="only the plans of this table")
    s.add_argument("--format", choices=["text", "json"], default="text")

    for name, fn, text in (
        ("swap", cmd_swap, "swap a validated plan into its target, then refresh downstream"),
        ("rollback", cmd_rollback, "restore what a plan's swap replaced, then refresh downstream"),
    ):
        s = command(name, text, fn)
        s.add_argument("plan", help="plan id or plan file")
        s.add_argument(
            "--no-refresh",
            action="store_true",
            help="do not rebuild the impacted downstream assets; flag them instead",
        )
        s.add_argument("--format", choices=["text", "json"], default="text")

    s = command("release", "drop a swapped plan's backup (no rollback after this)", cmd_release)
    s.add_argument("plan", help="plan id or plan file")

    s = command("abandon", "give up an unswapped plan and drop its shadow", cmd_abandon)
    s.add_argument("plan", help="plan id or plan file")

    s = command(
        "doctor",
        "find pools with no slots, dead runs, stale writer leases and plans; --repair fixes them",
        cmd_doctor,
    )
    s.add_argument("--repair", action="store_true", help="fix what can be fixed")
    return p


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


class ArgumentRefused(Exception):
    """A command line argparse cannot parse (an unknown option, a value not offered)."""


class _Parser(argparse.ArgumentParser):
    """argparse that refuses like every other refusal: one `refused:` line and exit 2 (argparse
    alone prints its usage and exits from inside the parser)."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentRefused(f"{message} (see `{self.prog} --help`)")


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


if __name__ == "__main__":
    sys.exit(main())
