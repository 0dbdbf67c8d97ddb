"""What the plan commands read from a code location: the view, from an import or a snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dagster as dg

    from backfill_assets.lib.asset_graph import AssetGraphLike
    from backfill_assets.lib.table import BackfillableTable


class NotCacheable(Exception):
    """The definitions hold something a snapshot cannot write down; the location is imported."""


# -- what the commands read --------------------------------------------------------------------


@dataclass
class LocationView:
    """What the plan commands read from a code location, imported or from its snapshot.

    `graph` is the asset graph (`Definitions.resolve_asset_graph()`), or a `SnapshotGraph` that
    answers what the impact set asks of one. `defs` is None when it came from the snapshot.
    """

    tables: dict[str, BackfillableTable]
    graph: AssetGraphLike
    daily_job_problems: list[str]
    warehouse: Any  # the `backfill_warehouse` resource, or None
    defs: dg.Definitions | None = None


def view_of(defs: dg.Definitions) -> LocationView:
    """The view of an imported location."""
    from backfill_assets.constants import WAREHOUSE_RESOURCE_KEY
    from backfill_assets.service.tables import backfill_tables, daily_job_problems

    tables = backfill_tables(defs)
    return LocationView(
        tables=tables,
        graph=defs.resolve_asset_graph(),
        daily_job_problems=daily_job_problems(defs, tables),
        warehouse=(defs.resources or {}).get(WAREHOUSE_RESOURCE_KEY),
        defs=defs,
    )
