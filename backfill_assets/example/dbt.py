"""dbt models downstream of the target, loaded with dagster-dbt.

Three `@dbt_assets` over one manifest, by grain: daily-partitioned models (tag `daily`),
weekly-partitioned models (tag `weekly`, ISO weeks) and unpartitioned ones. Partitioned models
receive their half-open partition window as the dbt vars `min_date` / `max_date`.

The dbt target follows the warehouse: `dev` (DuckDB) for a file path, `postgres` for a
`postgresql://` URL, whose coordinates reach the profile as BACKFILL_ASSETS_PG_* variables.

Where the dbt project lives is configuration (`BACKFILL_ASSETS_DBT_PROJECT`, default
`./dbt_project`), read when the code location loads, not derived from this package's path: an
installed wheel has no dbt project next to it.
"""

import json
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, DbtProject, dbt_assets

from backfill_assets.defs.dbt_resource import LeanDbtCliResource
from backfill_assets.example.dbt_manifest import dbt_executable, ensure_manifest
from backfill_assets.example.declaration import DAILY, WEEKLY
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV, is_postgres_url

DBT_PROJECT_ENV = "BACKFILL_ASSETS_DBT_PROJECT"
GROUP = "marts"


def dbt_project_dir() -> Path:
    """The example's dbt project: `BACKFILL_ASSETS_DBT_PROJECT`, else ./dbt_project."""
    path = Path(os.environ.get(DBT_PROJECT_ENV) or "dbt_project").resolve()
    if not (path / "dbt_project.yml").is_file():
        raise FileNotFoundError(
            f"no dbt project at {path}: set {DBT_PROJECT_ENV} to the folder holding "
            "dbt_project.yml (the repository's dbt_project/)"
        )
    return path


class _Translator(DagsterDbtTranslator):
    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        return GROUP


def dbt_target(url: str) -> tuple[list[str], dict[str, str]]:
    """The dbt target arguments and profile variables for the warehouse `url`."""
    if not is_postgres_url(url):
        return [], {}
    parts = urllib.parse.urlsplit(url)
    schema = urllib.parse.parse_qs(parts.query).get("schema", ["public"])[0]
    env = {
        "BACKFILL_ASSETS_PG_HOST": parts.hostname or "127.0.0.1",
        "BACKFILL_ASSETS_PG_PORT": str(parts.port or 5432),
        "BACKFILL_ASSETS_PG_USER": urllib.parse.unquote(parts.username or "postgres"),
        "BACKFILL_ASSETS_PG_PASSWORD": urllib.parse.unquote(parts.password or ""),
        "BACKFILL_ASSETS_PG_DBNAME": parts.path.lstrip("/") or "postgres",
        "BACKFILL_ASSETS_PG_SCHEMA": schema,
    }
    return ["--target", "postgres"], env


def _build(
    context: dg.AssetExecutionContext, dbt: DbtCliResource, partitioned: bool
) -> Iterator[Any]:
    target, env = dbt_target(os.environ.get(WAREHOUSE_ENV, ""))
    # dbt runs as a subprocess of this run, with this process's environment.
    os.environ.update(env)
    args = ["build", *target]
    if partitioned:
        window = context.partition_time_window
        dbt_vars = {
            "min_date": window.start.date().isoformat(),
            "max_date": window.end.date().isoformat(),
        }
        args += ["--vars", json.dumps(dbt_vars)]
    yield from dbt.cli(args, context=context).stream()


@dataclass(frozen=True)
class DbtModels:
    daily: dg.AssetsDefinition
    weekly: dg.AssetsDefinition
    unpartitioned: dg.AssetsDefinition
    resource: DbtCliResource

    @property
    def assets(self) -> list[dg.AssetsDefinition]:
        return [self.daily, self.weekly, self.unpartitioned]


def dbt_models(project_dir: Path) -> DbtModels:
    """The three @dbt_assets and the dbt resource, over a fresh manifest of `project_dir`."""
    project = DbtProject(project_dir=project_dir, profiles_dir=project_dir)
    manifest = ensure_manifest(project)
    translator = _Translator()

    @dbt_assets(
        manifest=manifest,
        select="tag:daily",
        partitions_def=DAILY,
        name="dbt_daily_models",
        backfill_policy=dg.BackfillPolicy.single_run(),
        dagster_dbt_translator=translator,
    )
    def dbt_daily_models(context: dg.AssetExecutionContext, dbt: DbtCliResource):
        yield from _build(context, dbt, partitioned=True)

    @dbt_assets(
        manifest=manifest,
        select="tag:weekly",
        partitions_def=WEEKLY,
        name="dbt_weekly_models",
        backfill_policy=dg.BackfillPolicy.single_run(),
        dagster_dbt_translator=translator,
    )
    def dbt_weekly_models(context: dg.AssetExecutionContext, dbt: DbtCliResource):
        yield from _build(context, dbt, partitioned=True)

    @dbt_assets(
        manifest=manifest,
        exclude="tag:daily tag:weekly",
        name="dbt_unpartitioned_models",
        dagster_dbt_translator=translator,
    )
    def dbt_unpartitioned_models(context: dg.AssetExecutionContext, dbt: DbtCliResource):
        yield from _build(context, dbt, partitioned=False)

    # dagster-dbt's adapter and `dbt --version` cost seconds per step and swap; nothing here
    # fetches row counts or column metadata through them (backfill_assets/defs/dbt_resource.py).
    resource = LeanDbtCliResource(
        project_dir=str(project_dir), profiles_dir=str(project_dir), dbt_executable=dbt_executable()
    )
    return DbtModels(dbt_daily_models, dbt_weekly_models, dbt_unpartitioned_models, resource)
