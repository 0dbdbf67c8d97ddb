"""A Dagster Component: declare a backfillable table in YAML, in a `dg`-style project.

    # defs/events/defs.yaml
    type: backfill_assets.BackfillableTableComponent
    attributes:
      name: events
      columns: {event_id: BIGINT, event_date: DATE, user_id: BIGINT, amount: DOUBLE}
      partition_column: event_date
      primary_key: [event_id]
      partitions_start: "2025-01-01"
      timezone: Europe/Berlin
      build_sql: "select ... from raw_events where event_date >= $start and event_date < $end"
      daily_job: events_daily
      daily_expected_start: "01:00"
      criteria:
        row_count: {compare_to: [target]}
        sample: {unchanged_columns: [user_id]}

It builds the same `BackfillableTable` as the Python declaration and returns what
`backfill_definitions([table])` returns for it. A `dg` project gives every component its own copy
of what it returns, so the control plane shared by all tables (the plans asset and the Launchpad
jobs) comes once, from one `BackfillControlComponent`, or from `backfill_definitions` in Python:

    # defs/backfill_control/defs.yaml
    type: backfill_assets.BackfillControlComponent
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import dagster as dg
from pydantic import Field

from backfill_assets.defs.factory import backfill_definitions
from backfill_assets.lib.planning.batches import Budget
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.spec import Column, SourceRef, TableSpec
from backfill_assets.lib.table import BackfillableTable


class SourceModel(dg.Model):
    table: str
    partition_column: str


class BudgetModel(dg.Model):
    """`Budget`: the most a backfill may take in one occurrence of the idle window."""

    max_seconds: float | None = None
    max_rows: int | None = None


class BackfillableTableComponent(dg.Component, dg.Model, dg.Resolvable):
    """A daily-partitioned table made backfillable: target, shadow, gates, plans, swap."""

    name: str = Field(description="Table name (also the target asset key).")
    columns: dict[str, str] = Field(description="Column name -> SQL type, in table order.")
    partition_column: str
    primary_key: list[str]
    partitions_start: str = Field(description="First daily partition, YYYY-MM-DD.")
    timezone: str = "UTC"
    build_sql: str = Field(description="One SELECT producing every column for [$start, $end).")
    daily_job: str = Field(description="The job that writes the table every day.")
    daily_expected_start: str = Field(description="Local HH:MM the daily run usually starts.")
    criteria: dict[str, Any] = Field(default_factory=dict)
    deps: list[str] = Field(default_factory=list)
    source: SourceModel | None = None
    code_version: str = "1"
    group_name: str = "backfillable"
    daily_lookback_days: int = 3
    backfill_window: str | None = None
    backfill_budget: BudgetModel | None = Field(
        default=None,
        description="max_seconds and/or max_rows a backfill may take per window occurrence.",
    )
    swap_requires_review: bool = Field(
        default=False,
        description="Refuse the swap until a named person reviewed the plan's diff.",
    )
    reviewer_must_differ: bool = Field(
        default=False, description="With swap_requires_review: the reviewer is not the approver."
    )
    define_daily_job: bool = Field(
        default=False,
        description="Also define `daily_job` as an asset job over the table alone.",
    )
    sensor_interval_s: int | None = Field(
        default=None,
        description="Seconds between two evaluations of the table's batch driver and refresh "
        "sensors, 5 to 3600 (default: BACKFILL_ASSETS_SENSOR_INTERVAL_S, else 15).",
    )

    def table(self) -> BackfillableTable:
        spec = TableSpec(
            name=self.name,
            columns=tuple(Column(n, t) for n, t in self.columns.items()),
            partition_column=self.partition_column,
            primary_key=tuple(self.primary_key),
            source=SourceRef(self.source.table, self.source.partition_column)
            if self.source
            else None,
        )
        return BackfillableTable(
            spec=spec,
            partitions_def=dg.DailyPartitionsDefinition(
                start_date=self.partitions_start, timezone=self.timezone
            ),
            build=self.build_sql,
            daily_job=self.daily_job,
            daily_expected_start=dt.time.fromisoformat(self.daily_expected_start),
            criteria=Criteria.from_dict(self.criteria),
            deps=tuple(self.deps),
            code_version=self.code_version,
            group_name=self.group_name,
            daily_lookback_days=self.daily_lookback_days,
            backfill_window=self.backfill_window,
            backfill_budget=Budget(self.backfill_budget.max_seconds, self.backfill_budget.max_rows)
            if self.backfill_budget
            else None,
            swap_requires_review=self.swap_requires_review,
            reviewer_must_differ=self.reviewer_must_differ,
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        table = self.table()
        defs = backfill_definitions(
            [table], control=False, sensor_interval_s=self.sensor_interval_s
        )
        if not self.define_daily_job:
            return defs
        job = dg.define_asset_job(
            table.daily_job,
            selection=[table.key],
            partitions_def=table.partitions_def,
            description=f"The daily production run of {table.key}.",
        )
        return dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))


class BackfillControlComponent(dg.Component, dg.Model, dg.Resolvable):
    """The control plane every backfillable table shares: the `backfill_plans` asset, the plan,
    approve, start and pause jobs, and the warehouse resource. Declare it once per project."""

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return backfill_definitions([])
