"""The example's code location: `dagster dev` (via workspace.yaml), the CLI and the tests load it.

It is a user of the framework like any other: it declares `orders_daily`, merges
`backfill_definitions([ORDERS])` with its own sources, dbt models, daily job and sensors.
`defs` is built when the code location loads (Dagster's `@definitions`), so the dbt project's
location is read then, from configuration.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from backfill_assets import DbtDownstream, backfill_definitions
from backfill_assets.example.dbt import dbt_models, dbt_project_dir, dbt_target
from backfill_assets.example.declaration import ORDERS
from backfill_assets.example.production import production_definitions
from backfill_assets.example.sources import fx_rates, land_orders_job, raw_orders


def example_definitions(dbt_project: Path | None = None) -> dg.Definitions:
    dbt = dbt_models(dbt_project or dbt_project_dir())
    return dg.Definitions.merge(
        # The impacted dbt models are built in shadow, gated on their dbt tests and published
        # with orders_daily by its swap (the dbt project has backfill_assets' shadow macros).
        backfill_definitions(
            [ORDERS], downstream_dbt=DbtDownstream(resource_key="dbt", cli_target=dbt_target)
        ),
        production_definitions(dbt),
        dg.Definitions(
            assets=[raw_orders, fx_rates, *dbt.assets],
            jobs=[land_orders_job],
            resources={"dbt": dbt.resource},
            # DuckDB lets one process write the file at a time: the steps of a run (the daily
            # run's dbt models) take turns in the run's own process instead of racing for it.
            executor=dg.in_process_executor,
        ),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return example_definitions()
