"""`BackfillableTable`: the one declaration that makes a daily-partitioned table backfillable.

    orders = BackfillableTable(
        spec=TableSpec(name="orders_daily", columns=..., partition_column="order_date",
                       primary_key=("order_id",), build_sql=ORDERS_DAILY_SQL, source=...),
        partitions_def=daily, daily_job="orders_daily_job", daily_expected_start=time(1, 0),
        criteria=default_criteria, deps=["raw_orders", "fx_rates"], code_version="2")
    defs = dg.Definitions.merge(orders.definitions(), dbt_defs, ...)

From it come the target asset, the shadow asset and its blocking gates, and what the planner,
the batch driver and the swap need to know (the daily job to avoid, the criteria, the schema).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dagster as dg

from backfill_assets.errors import InvalidInput
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.spec import TableSpec

if TYPE_CHECKING:
    from backfill_assets.lib.planning.build import TargetInfo


@dataclass(frozen=True)
class BackfillableTable:
    """A daily-partitioned table whose past partitions can be backfilled safely.

    Args:
        spec: name, columns, partition column, primary key and the build SELECT.
        partitions_def: the daily partitions of the table (its timezone is the plan's default).
        daily_job: the name of the daily production job that writes this table.
        daily_expected_start: local time the daily production run usually starts.
        criteria: default correctness criteria (a plan may override them from YAML).
        deps: upstream asset keys the build reads.
        code_version: bump when the build logic changes.
        legacy_builds: earlier build SELECTs by code version, to replay how history was built.
        group_name: Dagster asset group for the target and its shadow.
    """

    spec: TableSpec
    partitions_def: dg.DailyPartitionsDefinition
    daily_job: str
    daily_expected_start: dt.time
    criteria: Criteria
    deps: Sequence[str] = ()
    code_version: str = "1"
    legacy_builds: Mapping[str, str] = field(default_factory=dict)
    group_name: str = "backfillable"

    def __post_init__(self) -> None:
        self.criteria.validate(self.spec.column_names)
        if not isinstance(self.partitions_def, dg.DailyPartitionsDefinition):
            raise InvalidInput(f"{self.key}: partitions_def must be a DailyPartitionsDefinition")

    @property
    def key(self) -> str:
        return self.spec.name

    @property
    def shadow_key(self) -> str:
        return self.spec.shadow_name

    @property
    def timezone(self) -> str:
        return self.partitions_def.timezone or "UTC"

    def build_sql(self, logic_version: str | None = None) -> str:
        if logic_version in (None, "", self.code_version):
            return self.spec.build_sql
        if logic_version not in self.legacy_builds:
            raise InvalidInput(
                f"{self.key} has no build for logic version {logic_version!r}; known: "
                f"{sorted([self.code_version, *self.legacy_builds])}"
            )
        return self.legacy_builds[logic_version]

    def target_info(self) -> TargetInfo:
        """What the planner needs to know about this table."""
        from backfill_assets.lib.planning.build import TargetInfo

        start = self.partitions_def.start.date()
        end_dt = self.partitions_def.end
        return TargetInfo(
            key=self.key,
            shadow_key=self.shadow_key,
            partitions_start=start,
            partitions_end=(end_dt.date() - dt.timedelta(days=1)) if end_dt else None,
            timezone=self.timezone,
            daily_job=self.daily_job,
            daily_expected_start=self.daily_expected_start,
            columns=self.spec.column_names,
            default_criteria=self.criteria,
            bytes_per_row=self.spec.bytes_per_row,
        )

    def definitions(self) -> dg.Definitions:
        """The target asset, the shadow asset with its blocking gates, swap and rollback jobs."""
        from backfill_assets.defs.backfillable import build_table_definitions

        return build_table_definitions(self)
