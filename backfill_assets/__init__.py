"""backfill_assets: safe-by-construction backfills of daily-partitioned tables on Dagster.

Plan (no side effects) -> execute into a shadow table behind blocking gates -> swap atomically,
keeping a backup -> roll back in one step if needed.

    from backfill_assets import BackfillableTable, TableSpec, Column, Criteria, backfill_definitions

The public names are imported lazily (PEP 562), so `import backfill_assets.lib.dates` or the
command line's start-up does not pay for Dagster's import unless it needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_EXPORTS = {
    "BackfillableTable": "backfill_assets.lib.table",
    "Budget": "backfill_assets.lib.planning.batches",
    "TableSpec": "backfill_assets.lib.spec",
    "Column": "backfill_assets.lib.spec",
    "SourceRef": "backfill_assets.lib.spec",
    "Criteria": "backfill_assets.lib.planning.criteria",
    "RowCountCriterion": "backfill_assets.lib.planning.criteria",
    "SampleCriterion": "backfill_assets.lib.planning.criteria",
    "ChangedColumn": "backfill_assets.lib.planning.criteria",
    "Invariant": "backfill_assets.lib.planning.criteria",
    "backfill_definitions": "backfill_assets.defs.factory",
    "backfill_tables": "backfill_assets.service.tables",
    "DbtDownstream": "backfill_assets.service.downstream",
    "WarehouseResource": "backfill_assets.defs.resources",
    "BackfillableTableComponent": "backfill_assets.defs.component",
    "BackfillControlComponent": "backfill_assets.defs.component",
    "BackfillError": "backfill_assets.errors",
    "GateFailed": "backfill_assets.errors",
    "InvalidInput": "backfill_assets.errors",
    "PlanRefused": "backfill_assets.errors",
    "SwapRefused": "backfill_assets.errors",
    "WarehouseError": "backfill_assets.errors",
}

__all__ = [
    "BackfillControlComponent",
    "BackfillError",
    "BackfillableTable",
    "BackfillableTableComponent",
    "Budget",
    "ChangedColumn",
    "Column",
    "Criteria",
    "DbtDownstream",
    "GateFailed",
    "InvalidInput",
    "Invariant",
    "PlanRefused",
    "RowCountCriterion",
    "SampleCriterion",
    "SourceRef",
    "SwapRefused",
    "TableSpec",
    "WarehouseError",
    "WarehouseResource",
    "backfill_definitions",
    "backfill_tables",
]

if TYPE_CHECKING:
    from backfill_assets.defs.component import (
        BackfillableTableComponent,
        BackfillControlComponent,
    )
    from backfill_assets.defs.factory import backfill_definitions
    from backfill_assets.defs.resources import WarehouseResource
    from backfill_assets.errors import (
        BackfillError,
        GateFailed,
        InvalidInput,
        PlanRefused,
        SwapRefused,
        WarehouseError,
    )
    from backfill_assets.lib.planning.batches import Budget
    from backfill_assets.lib.planning.criteria import (
        ChangedColumn,
        Criteria,
        Invariant,
        RowCountCriterion,
        SampleCriterion,
    )
    from backfill_assets.lib.spec import Column, SourceRef, TableSpec
    from backfill_assets.lib.table import BackfillableTable
    from backfill_assets.service.downstream import DbtDownstream
    from backfill_assets.service.tables import backfill_tables


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'backfill_assets' has no attribute {name!r}")
