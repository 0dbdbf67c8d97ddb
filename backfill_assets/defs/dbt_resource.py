"""A `DbtCliResource` that starts dbt and nothing else.

dagster-dbt's `DbtCliResource.cli()` does two things besides starting the dbt subprocess:
- it builds a dbt adapter in the calling process for every invocation, importing dbt and
  loading its macros. The first in a process is slow (a run's process, the CLI's swap); later
  ones are cheap. The adapter serves only `fetch_row_counts()` and `fetch_column_metadata()`
  on the invocation;
- it runs `dbt --version` once per resource object, which Dagster builds once per run: a
  second dbt start-up.

`LeanDbtCliResource` skips both: it passes no adapter, as dagster-dbt itself does for dbt's
Fusion engine, and it reads dbt's version from the installed dbt-core package when its
`dbt_executable` is the `dbt` of this Python environment (otherwise it asks the executable, as
dagster-dbt does). Everything else is dagster-dbt's: the subprocess, the events, the artifacts,
the partial-parse copy. Use it wherever the invocations' `fetch_row_counts()` or
`fetch_column_metadata()` are not called, as in the swap's shadow build of the impacted dbt
models (`DbtDownstream`) and the example's dbt assets. It shortens each run's first
`dbt build`: `python -m bench.experiments.dbt_resource_gain` measures by how much (the figures
are in docs/performance.md and the bench's results, not here).

It overrides two private methods of dagster-dbt 0.29 (the version this project pins);
tests/test_dbt_resource.py fails if either stops being called. For that reason it is not part
of the package's top-level API (`backfill_assets.__all__`): import it from this module.
"""

from __future__ import annotations

import shutil
import sys
from functools import cached_property
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any

from dagster_dbt import DbtCliResource
from packaging import version


def same_environment_dbt(executable: str) -> bool:
    """Whether `executable` is the `dbt` script installed beside this interpreter."""
    found = shutil.which(executable)
    here = Path(sys.executable).with_name("dbt")
    return found is not None and here.exists() and Path(found).resolve() == here.resolve()


class LeanDbtCliResource(DbtCliResource):
    """`DbtCliResource` without dagster-dbt's in-process dbt adapter or its `dbt --version`
    subprocess (see the module's docstring). Same fields, same `cli()`; the invocations it
    returns cannot `fetch_row_counts()` or `fetch_column_metadata()`.

    Not exported from `backfill_assets`: it overrides private methods of dagster-dbt
    (`_initialize_dbt_core_adapter`, `_cli_version`), which any dagster-dbt release may change
    without notice, so the package does not promise it as public API. Import it from
    `backfill_assets.defs.dbt_resource`; tests/test_dbt_resource.py guards the overrides."""

    def _initialize_dbt_core_adapter(self, args: Any) -> Any:
        return None

    @cached_property
    def _cli_version(self) -> version.Version:
        if same_environment_dbt(self.dbt_executable):
            return version.parse(installed_version("dbt-core"))
        return DbtCliResource._cli_version.func(self)  # type: ignore[attr-defined]
