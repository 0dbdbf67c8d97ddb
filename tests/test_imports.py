"""Every public name, and every module, imports first: no import circle, inside a layer either.

A circle between two modules of `lib` (lib/spec -> lib/warehouse/identifiers ->
lib/warehouse/__init__ -> base -> lib/spec) once made `from backfill_assets import TableSpec`,
imported first in a fresh interpreter, fail with a circular ImportError. The README's example
worked only because `BackfillableTable` came first in its import list, and the import contracts
could not see it: both ends were in `lib`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import backfill_assets

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def _import_first(code: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120
    )
    return proc.returncode, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


@pytest.mark.slow
def test_each_public_name_imports_first_in_a_fresh_interpreter():
    # A public name loads its module on first access (PEP 562): importing any one name of a
    # module first imports that module first, so one interpreter per module covers its names.
    by_module: dict[str, list[str]] = {}
    for name in backfill_assets.__all__:
        by_module.setdefault(backfill_assets._EXPORTS[name], []).append(name)
    assert {"TableSpec", "Column", "BackfillableTable", "backfill_definitions"} <= set(
        backfill_assets.__all__
    )
    statements = [f"from backfill_assets import {', '.join(n)}" for n in by_module.values()]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(statements, pool.map(_import_first, statements), strict=True))
    failed = {code: err for code, (rc, err) in results.items() if rc != 0}
    assert not failed, failed


EVERY_MODULE_FIRST = """
import importlib, pkgutil, sys
import backfill_assets

names = sorted(m.name for m in pkgutil.walk_packages(backfill_assets.__path__, "backfill_assets."))
failed = []
for name in names:
    # Forget the package (not Dagster): `name` is the first of its modules to be imported.
    for key in [k for k in sys.modules if k.split(".")[0] == "backfill_assets"]:
        del sys.modules[key]
    try:
        importlib.import_module(name)
    except Exception as e:
        failed.append(f"{name}: {e!r}")
print(len(names))
print("\\n".join(failed))
"""


@pytest.mark.slow
def test_every_module_of_the_package_imports_first():
    proc = subprocess.run(
        [sys.executable, "-c", EVERY_MODULE_FIRST],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, *failed = proc.stdout.strip().splitlines()
    assert int(count) > 50  # every module was found, not an empty walk
    assert not [f for f in failed if f], failed
