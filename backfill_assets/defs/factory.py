"""`backfill_definitions`: everything the framework contributes for a list of tables."""

from __future__ import annotations

import os
from collections.abc import Sequence

import dagster as dg

from backfill_assets.constants import WAREHOUSE_RESOURCE_KEY
from backfill_assets.defs.control import CONTROL_DEFINITIONS
from backfill_assets.defs.resources import DEFAULT_WAREHOUSE, WarehouseResource
from backfill_assets.defs.table.definitions import table_definitions
from backfill_assets.defs.table.sensors import DEFAULT_SENSOR_INTERVAL_S
from backfill_assets.errors import InvalidInput
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.connect import dialect_of, open_warehouse
from backfill_assets.lib.warehouse.dialects import sql_for
from backfill_assets.service.downstream import DbtDownstream

_CHECKED: set[tuple[str, str, int]] = set()
SENSOR_INTERVAL_ENV = "BACKFILL_ASSETS_SENSOR_INTERVAL_S"
# Dagster's sensor daemon looks at its sensors every 5 s: a shorter interval changes nothing.
MIN_SENSOR_INTERVAL_S = 5
MAX_SENSOR_INTERVAL_S = 3600


def sensor_interval(value: int | str | None) -> int:
    """The sensors' interval in seconds: `value` (an int, or the text of the environment
    variable), else BACKFILL_ASSETS_SENSOR_INTERVAL_S, else 15. Refused unless a whole number
    from 5 to 3600."""
    source = "sensor_interval_s"
    if value is None:
        value, source = os.environ.get(SENSOR_INTERVAL_ENV), SENSOR_INTERVAL_ENV
        if value is None or not value.strip():
            return DEFAULT_SENSOR_INTERVAL_S
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        seconds = None
    if (
        seconds is None
        or isinstance(value, bool | float)
        or not MIN_SENSOR_INTERVAL_S <= seconds <= MAX_SENSOR_INTERVAL_S
    ):
        raise InvalidInput(
            f"{source}={value!r} must be a whole number of seconds from {MIN_SENSOR_INTERVAL_S} "
            f"(how often Dagster's sensor daemon looks) to {MAX_SENSOR_INTERVAL_S}; unset, it "
            f"is {DEFAULT_SENSOR_INTERVAL_S}"
        )
    return seconds


def backfill_definitions(
    tables: Sequence[BackfillableTable],
    *,
    warehouse: WarehouseResource | None = None,
    control: bool = True,
    downstream_dbt: DbtDownstream | None = None,
    sensor_interval_s: int | None = None,
) -> dg.Definitions:
    """The Dagster definitions that make `tables` backfillable, to merge with your own.

    For each table: the target asset (written live only by its daily job), the shadow asset with
    its blocking gates, the shadow (batch), swap and rollback jobs, and its batch driver and
    refresh sensors. Shared by all tables: the `backfill_plans` asset and the plan, approve,
    start and pause jobs. And the `backfill_warehouse` resource.

        defs = dg.Definitions.merge(backfill_definitions([events, stores]), my_own_defs)

    Calling it again with the same tables returns the same objects, so merging twice is harmless.

    Args:
        tables: the backfillable tables.
        warehouse: where they live; default: the `BACKFILL_ASSETS_WAREHOUSE` environment
            variable (a DuckDB file path or a postgresql:// URL), read at run time.
        control: include the shared control plane (plans asset, plan/approve/start/pause jobs).
            The YAML component leaves it out: a `dg` project's components each get their own
            copy of what they return, so the control plane comes once, from
            `BackfillControlComponent` (or a `backfill_definitions` call in Python).
        downstream_dbt: how each swap builds the tables' impacted dbt models in shadow, gates
            them on their dbt tests and publishes them with the target in one transaction
            (needs the macros of backfill_assets/dbt/backfill_assets_shadow.sql in the dbt
            project). None: they are refreshed after the swap, in place.
        sensor_interval_s: the least seconds between two evaluations of each table's batch
            driver and refresh sensors, so how soon a batch follows the one before it (5 to
            3600). Default: the `BACKFILL_ASSETS_SENSOR_INTERVAL_S` environment variable, read
            when the code location loads, else 15.
    """
    tables = list(tables)
    for t in tables:
        if not isinstance(t, BackfillableTable):
            raise InvalidInput(
                f"backfill_definitions takes BackfillableTable declarations, got {type(t).__name__}"
            )
    names = [t.key for t in tables]
    if len(set(names)) != len(names):
        raise InvalidInput(f"backfill_definitions got the same table twice: {sorted(names)}")
    if not tables and not control:
        raise InvalidInput("backfill_definitions needs at least one BackfillableTable")
    interval = sensor_interval(sensor_interval_s)
    refuse_builds_that_cannot_run(tables, warehouse or DEFAULT_WAREHOUSE)
    return dg.Definitions.merge(
        *(
            table_definitions(t, downstream=downstream_dbt, sensor_interval_s=interval)
            for t in tables
        ),
        *([CONTROL_DEFINITIONS] if control else []),
        dg.Definitions(resources={WAREHOUSE_RESOURCE_KEY: warehouse or DEFAULT_WAREHOUSE}),
    )


def refuse_builds_that_cannot_run(
    tables: Sequence[BackfillableTable], warehouse: WarehouseResource
) -> None:
    """At load time, refuse a table whose SQL build cannot run on the configured warehouse: it
    must transpile to the warehouse's dialect, and on PostgreSQL the server must be able to plan
    it (checked when the server is reachable and the tables the build reads exist)."""
    url = warehouse.url.get_value() if isinstance(warehouse.url, dg.EnvVar) else warehouse.url
    if not url:
        return
    dialect = dialect_of(url)
    for table in tables:
        if table.build_kind != "sql" or (url, table.key, id(table)) in _CHECKED:
            continue
        build = table.build  # str or per-dialect mapping
        try:
            sql_for(build, dialect)  # type: ignore[arg-type]
        except InvalidInput as e:
            raise InvalidInput(
                f"table {table.key}: its build cannot run on {dialect}: {e}"
            ) from None
        if dialect != "duckdb":
            wh = open_warehouse(url, lock_timeout_s=5)
            problem = wh.build_problem(table.spec, build)  # type: ignore[arg-type]
            if problem:
                raise InvalidInput(
                    f"table {table.key}: its build SQL, written for {dialect}, cannot run there: "
                    f"{problem}. Fix the SQL, or declare it per dialect: build={{'duckdb': ..., "
                    f"'{dialect}': ...}}"
                )
        _CHECKED.add((url, table.key, id(table)))
