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
