"""The target asset: the live table, written only on the declared daily path.

Any other run of it (a UI "Materialize..." of a past range above all) is refused before it
writes, and the same range is proposed as a plan instead (service.frontdoor).
"""

import datetime as dt

import dagster as dg

from backfill_assets.constants import (
    DOWNSTREAM_DBT_METADATA_KEY,
    ROLE_DAILY,
    TABLE_METADATA_KEY,
    WAREHOUSE_RESOURCE_KEY,
)
from backfill_assets.defs.table.steps import (
    claim_writer,
    partition_dates,
    rows_metadata,
    utc_now,
    warehouse_resource,
)
from backfill_assets.errors import InvalidInput
from backfill_assets.lib.runbook import render_runbook
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.service.downstream import DbtDownstream
from backfill_assets.service.frontdoor import daily_path_refusal, propose_instead
from backfill_assets.service.runs import code_location
from backfill_assets.service.tables import backfill_tables
from backfill_assets.service.writes import write_partitions


def build_target_asset(
    table: BackfillableTable, downstream: DbtDownstream | None
) -> dg.AssetsDefinition:
    """The table's target asset. It carries the declaration in its metadata, where the CLI, the
    sensors and the Launchpad jobs find the tables of a code location (service.tables)."""
    spec = table.spec

    @dg.asset(
        name=spec.name,
        partitions_def=table.partitions_def,
        deps=[dg.AssetKey(d) for d in table.deps],
        code_version=table.code_version,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=table.group_name,
        kinds={"table"},
        required_resource_keys={WAREHOUSE_RESOURCE_KEY},
        description=table.description
        or f"Daily-partitioned table {spec.name}. Written live only by its daily job "
        f"{table.daily_job} (the last {table.daily_lookback_days} days); a backfill of it "
        "becomes a plan that writes the shadow and swaps after every gate passed.",
        metadata={
            TABLE_METADATA_KEY: table,
            "backfill_assets/declaration": dg.MetadataValue.json(table.describe()),
            "backfill_assets/runbook": dg.MetadataValue.md(render_runbook(table)),
            "primary_key": list(spec.primary_key),
            "partition_column": spec.partition_column,
            DOWNSTREAM_DBT_METADATA_KEY: downstream is not None,
        },
    )
    def target(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        start, end = partition_dates(context)
        now = utc_now()
        wh = warehouse_resource(context).adapter()
        refusal = daily_path_refusal(
            table, context.job_name, start, end - dt.timedelta(days=1), now
        )
        if refusal is not None:
            graph = code_location(context)
            tables = backfill_tables(graph) if graph is not None else {table.key: table}
            plan_id, next_step = propose_instead(
                context.instance, table, tables, graph, wh, start, end - dt.timedelta(days=1), now
            )
            raise dg.Failure(
                description=f"Refused: {refusal}. Nothing was written. {next_step}.",
                metadata={"proposed_plan": plan_id or "none"},
                allow_retries=False,
            )
        try:
            claim_writer(context, wh, table, ROLE_DAILY)
            counts = write_partitions(wh, table, start, end, shadow=False)
        except InvalidInput as e:
            # A table the warehouse will not take over (one to adopt first): a refusal the run
            # shows as such, not a retryable error with a traceback.
            raise dg.Failure(description=f"Refused: {e}", allow_retries=False) from e
        # The whole table's rows (Dagster's `dagster/row_count`), from the per-day counts the
        # warehouse records with every write; the shadow has no such total of its own.
        return dg.MaterializeResult(
            metadata={**rows_metadata(context, counts), "dagster/row_count": wh.table_rows(spec)}
        )

    return target
