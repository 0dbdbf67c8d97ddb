"""`BackfillableTable`: the one declaration that makes a daily-partitioned table backfillable.

    events = BackfillableTable(
        spec=TableSpec(name="events", columns=(Column("event_id", "BIGINT"), ...),
                       partition_column="event_date", primary_key=("event_id",)),
        partitions_def=dg.DailyPartitionsDefinition(start_date="2025-01-01"),
        build=EVENTS_SQL,              # DuckDB SQL, {"duckdb": ..., "postgres": ...}, or a
                                       # function (start, end) -> pandas.DataFrame
        daily_job="events_daily",      # the job that writes it every day: the one live writer
        daily_expected_start=dt.time(1, 0),
        criteria=EVENTS_CRITERIA,
    )
    defs = dg.Definitions.merge(backfill_definitions([events]), my_own_defs)

It is plain data: `backfill_assets.defs.backfill_definitions` turns it into Dagster definitions,
the planner reads `target_info()`, and the gates and the swap read `spec` and `criteria`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

import dagster as dg

from backfill_assets.errors import BackfillError, InvalidInput
from backfill_assets.lib.planning.batches import Budget
from backfill_assets.lib.planning.build import TargetInfo
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.planning.windows import parse_window
from backfill_assets.lib.spec import TableSpec

if TYPE_CHECKING:
    import pandas as pd

# A build is one SELECT producing every column for the days [$start, $end) (named parameters bound
# by the warehouse), or a Python function returning a pandas DataFrame for those days. Either must
# be deterministic for a given day. SQL is written in DuckDB's dialect and transpiled for another
# warehouse (lib/warehouse/dialects.py), or given per dialect: {"duckdb": ..., "postgres": ...}.
PythonBuild = Callable[[dt.date, dt.date], "pd.DataFrame"]
Build = Union[str, Mapping[str, str], PythonBuild]  # noqa: UP007 - a callable alias in a string


@dataclass(frozen=True)
class BackfillableTable:
    """A daily-partitioned table whose past partitions can be backfilled safely.

    Args:
        spec: name, columns, partition column and primary key.
        partitions_def: the daily partitions of the table (its timezone is the plan's default).
        build: a SQL SELECT over [$start, $end) in DuckDB's dialect (transpiled for PostgreSQL),
            SQL per dialect ({"duckdb": ..., "postgres": ...}), or a function (start, end) ->
            DataFrame.
        daily_job: the name of the daily production job that writes this table. Its runs (found
            by job name) are the only ones that may write the live table, and only partitions
            within `daily_lookback_days`; backfills keep clear of them.
        daily_expected_start: local time (partitions' timezone) the daily run usually starts.
        criteria: default correctness criteria (a plan may override them from YAML).
        deps: upstream asset keys the build reads.
        code_version: bump when the build logic changes.
        group_name: Dagster asset group for the target and its shadow.
        production_jobs: other jobs allowed to write recent partitions, like the daily job.
        daily_lookback_days: how far back the daily path may (re)write partitions.
        backfill_window: the idle window ("HH:MM-HH:MM", partitions' timezone) of the plan
            proposed when someone launches a backfill of the target from the UI. Without it the
            launch is refused and nothing is proposed.
        writer_wait_seconds: how long a run waits for this table's writer lease (another writer
            of the table is running) before it fails with who holds it.
        backfill_budget: the most a backfill may use of the warehouse in one occurrence of its
            idle window (`Budget(max_seconds=..., max_rows=...)`, estimated); the planner spreads
            the batches over more occurrences to stay within it, and refuses a batch that alone
            goes over it.
        swap_requires_review: the swap is refused until a named person has reviewed the plan's
            diff (`backfill-assets review PLAN --by NAME`), and again once the shadow is written
            after that review.
        reviewer_must_differ: with `swap_requires_review`, the reviewer may not be the plan's
            approver (a two-person rule).
    """

    spec: TableSpec
    partitions_def: dg.DailyPartitionsDefinition
    build: Build = field(hash=False)  # a per-dialect dict is not hashable
    daily_job: str
    daily_expected_start: dt.time
    criteria: Criteria
    deps: tuple[str, ...] = ()
    code_version: str = "1"
    group_name: str = "backfillable"
    production_jobs: tuple[str, ...] = ()
    daily_lookback_days: int = 3
    backfill_window: str | None = None
    writer_wait_seconds: float = 3600.0
    backfill_budget: Budget | None = None
    swap_requires_review: bool = False
    reviewer_must_differ: bool = False
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        name = getattr(self.spec, "name", "?")
        if not isinstance(self.spec, TableSpec):
            raise InvalidInput(f"{name}: spec must be a TableSpec")
        if self.reviewer_must_differ and not self.swap_requires_review:
            raise InvalidInput(
                f"{name}: reviewer_must_differ applies to the review swap_requires_review asks "
                "for; set swap_requires_review=True too, or drop reviewer_must_differ"
            )
        if not isinstance(self.partitions_def, dg.DailyPartitionsDefinition):
            raise InvalidInput(f"{name}: partitions_def must be a DailyPartitionsDefinition")
        if isinstance(self.build, str):
            if not self.build.strip():
                raise InvalidInput(f"{name}: build is an empty SQL string")
        elif isinstance(self.build, Mapping):
            from backfill_assets.lib.warehouse.dialects import DIALECTS

            bad = [k for k, v in self.build.items() if k not in DIALECTS or not isinstance(v, str)]
            if bad or not self.build or not all(v.strip() for v in self.build.values()):
                raise InvalidInput(
                    f"{name}: build per dialect must map {list(DIALECTS)} to non-empty SQL "
                    f"strings; got keys {sorted(map(str, self.build))}"
                )
            object.__setattr__(self, "build", dict(self.build))
        elif not callable(self.build):
            raise InvalidInput(
                f"{name}: build must be a SQL SELECT, SQL per dialect, or a function (start, end) "
                "-> DataFrame"
            )
        if not isinstance(self.daily_job, str) or not self.daily_job:
            raise InvalidInput(f"{name}: daily_job must name the job that writes it every day")
        if not isinstance(self.daily_expected_start, dt.time):
            raise InvalidInput(f"{name}: daily_expected_start must be a datetime.time")
        for attr in ("deps", "production_jobs"):
            value = getattr(self, attr)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise InvalidInput(f"{name}: {attr} must be a list of names")
            object.__setattr__(self, attr, tuple(value))
        if not isinstance(self.daily_lookback_days, int) or self.daily_lookback_days < 1:
            raise InvalidInput(f"{name}: daily_lookback_days must be an integer of 1 or more")
        if self.writer_wait_seconds <= 0:
            raise InvalidInput(f"{name}: writer_wait_seconds must be positive")
        if self.backfill_window is not None:
            try:
                parse_window(self.backfill_window)
            except BackfillError as e:
                raise InvalidInput(f"{name}: backfill_window: {e}") from None
        if self.backfill_budget is not None and not isinstance(self.backfill_budget, Budget):
            raise InvalidInput(
                f"{name}: backfill_budget must be a Budget(max_seconds=..., max_rows=...)"
            )
        self.criteria.validate(self.spec.column_names)

    @property
    def key(self) -> str:
        return self.spec.name

    @property
    def shadow_key(self) -> str:
        return self.spec.shadow_name

    @property
    def timezone(self) -> str:
        return self.partitions_def.timezone or "UTC"

    @property
    def production_job_names(self) -> tuple[str, ...]:
        """Jobs whose runs may write recent partitions of the live table (the daily path)."""
        return (self.daily_job, *self.production_jobs)

    @property
    def build_kind(self) -> str:
        return "sql" if isinstance(self.build, str | Mapping) else "python"

    def target_info(self) -> TargetInfo:
        """What the planner needs to know about this table."""
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
            budget=self.backfill_budget,
        )

    def describe(self) -> dict[str, Any]:
        """The declaration as JSON-native data (shown on the target asset in the UI)."""
        return {
            "name": self.key,
            "columns": {c.name: c.sql_type for c in self.spec.columns},
            "partition_column": self.spec.partition_column,
            "primary_key": list(self.spec.primary_key),
            "build": "SQL" if self.build_kind == "sql" else "Python (pandas DataFrame)",
            "daily_job": self.daily_job,
            "production_jobs": list(self.production_job_names),
            "daily_lookback_days": self.daily_lookback_days,
            "backfill_window": self.backfill_window,
            "backfill_budget": {
                "max_seconds": self.backfill_budget.max_seconds,
                "max_rows": self.backfill_budget.max_rows,
            }
            if self.backfill_budget
            else None,
            "criteria": self.criteria.to_dict(),
        }
