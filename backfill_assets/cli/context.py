"""What every command works with (`Context`): the code location or its snapshot, its tables,
the instance and the warehouse; and the instance alone (`_instance`) for `list` and `pause`."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backfill_assets.errors import BackfillError

if TYPE_CHECKING:
    import argparse

    import dagster as dg

    from backfill_assets.lib.asset_graph import AssetGraphLike
    from backfill_assets.lib.table import BackfillableTable
    from backfill_assets.lib.warehouse.base import Warehouse


@dataclass
class Context:
    """What every command works with: the code location, its tables, instance, warehouse.

    `graph` is the location's asset graph (or its snapshot's: location/snapshot.py); `defs` its
    Definitions, only for the commands that execute runs (`_context(a, jobs=True)`)."""

    defs: dg.Definitions | None
    graph: AssetGraphLike
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
    importing it (location/snapshot.py). `reconcile`: tell the instance first what the warehouse
    did that it was not told (every command but `doctor`, which reports it)."""
    import dagster as dg

    from backfill_assets.constants import WAREHOUSE_RESOURCE_KEY
    from backfill_assets.lib.warehouse.connect import LOCK_TIMEOUT_ENV, lock_timeout_from
    from backfill_assets.location.loader import load_location, resolve_spec

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
