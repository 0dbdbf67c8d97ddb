"""Find the backfillable tables of a code location from its assets.

`backfill_definitions` puts each table's declaration in its target asset's definition metadata
(the way dagster-dbt keeps its manifest on its assets), so the CLI, the sensors and the
Launchpad jobs read the tables of whatever code location they were given, never a module-level
registry.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from backfill_assets.constants import TABLE_METADATA_KEY
from backfill_assets.errors import BackfillError
from backfill_assets.lib.table import BackfillableTable


def _graph(source: Any) -> Any:
    if isinstance(source, dg.Definitions):
        return source.resolve_asset_graph()
    if isinstance(source, dg.RepositoryDefinition):
        return source.asset_graph
    return source  # an asset graph already


def backfill_tables(source: Any) -> dict[str, BackfillableTable]:
    """Every BackfillableTable declared in `source`, by table name.

    Args:
        source: `Definitions`, a `RepositoryDefinition` (a sensor's or a launched run's), or an
            asset graph.
    """
    graph = _graph(source)
    tables: dict[str, BackfillableTable] = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        table = (node.metadata or {}).get(TABLE_METADATA_KEY)
        if isinstance(table, BackfillableTable):
            tables[table.key] = table
    return tables


def table_for(
    tables: dict[str, BackfillableTable], name: str, *, what: str = "table"
) -> BackfillableTable:
    """The declared table `name`, or a refusal naming the declared ones."""
    if name in tables:
        return tables[name]
    raise BackfillError(
        f"{what} {name!r} is not a declared backfillable table of this code location; declared: "
        f"{sorted(tables) or 'none (did you add backfill_definitions([...]) to it?)'}"
    )


def daily_job_problems(repository: Any, tables: dict[str, BackfillableTable]) -> list[str]:
    """Tables whose declared daily job is not a job of the code location that writes them.

    The daily job is how every guard finds the daily runs (by name): a typo there would let
    batches run beside the real daily run, so every CLI command that loads the code location
    and the Launchpad's plan and approve jobs refuse it (`refuse_bad_daily_jobs`), and the
    driver sensor launches no batch of the table.

    Args:
        repository: `Definitions` or a `RepositoryDefinition` (a sensor's, a run's).
    """
    repo = repository.get_repository_def() if isinstance(repository, dg.Definitions) else repository
    problems = []
    for table in tables.values():
        for job_name in table.production_job_names:
            if not repo.has_job(job_name):
                writers = sorted(
                    j.name
                    for j in repo.get_all_jobs()
                    if dg.AssetKey(table.key) in j.asset_layer.selected_asset_keys
                    and not j.name.startswith("__")
                )
                problems.append(
                    f"{table.key} names {job_name!r} as its daily job, but the code location has "
                    f"no such job; set daily_job to the job that materializes {table.key} every "
                    f"day (jobs that do: {writers or 'none'})"
                )
            elif (
                dg.AssetKey(table.key) not in repo.get_job(job_name).asset_layer.selected_asset_keys
            ):
                problems.append(
                    f"{table.key} names {job_name!r} as its daily job, but that job does not "
                    f"materialize {table.key}; add it to the job's selection or name the job "
                    "that does"
                )
    return problems


def refuse_bad_daily_jobs(repository: Any, tables: dict[str, BackfillableTable]) -> None:
    problems = daily_job_problems(repository, tables)
    if problems:
        raise BackfillError("; ".join(problems))
