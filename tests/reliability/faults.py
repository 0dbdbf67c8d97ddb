"""Fault injection from the tests, not from the production adapter.

`install(hook)` wraps every connection the DuckDB adapter opens (in this process) in a proxy
that calls `hook(step)` around the statements of its transactions:

- after `DELETE FROM "t" ...`:                "deleted t"
- after `INSERT INTO "t" ...`:                "inserted t"
- after `ALTER TABLE "a" RENAME TO "b"`:       "renamed a to b"
- before `COMMIT`:                            "before commit"
- after `CHECKPOINT` (a write committed inside a session of the warehouse, e.g. a batch's
  shadow write before its gates):             "checkpointed"

A hook raises to fail the transaction at that point (it must roll back), or pauses so that a
SIGKILL lands inside the open transaction. Child processes import this module too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse

Hook = Callable[[str], None]

_STEPS = [
    (re.compile(r'^\s*DELETE FROM "([^"]+)"', re.I), "deleted {0}"),
    (re.compile(r'^\s*INSERT INTO "([^"]+)"', re.I), "inserted {0}"),
    (re.compile(r'^\s*ALTER TABLE "([^"]+)" RENAME TO "([^"]+)"', re.I), "renamed {0} to {1}"),
]


def step_of(sql: str) -> str | None:
    for pattern, name in _STEPS:
        m = pattern.match(sql)
        if m:
            return name.format(*m.groups())
    return None


class _Connection:
    def __init__(self, con: Any, hook: Hook) -> None:
        self._con = con
        self._hook = hook

    def execute(self, sql: str, *args: Any, **kw: Any) -> Any:
        if sql.strip().upper() == "COMMIT":
            self._hook("before commit")
        result = self._con.execute(sql, *args, **kw)
        if sql.strip().upper() == "CHECKPOINT":
            self._hook("checkpointed")
        step = step_of(sql)
        if step is not None:
            self._hook(step)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


_original_connect = DuckDBWarehouse.connect


def install(hook: Hook | None, on: type[DuckDBWarehouse] | DuckDBWarehouse = DuckDBWarehouse):
    """Call `hook` around the statements of `on`'s connections (a class: every adapter in this
    process; an instance: that one); None removes it."""
    if hook is None:
        if isinstance(on, DuckDBWarehouse):
            on.__dict__.pop("connect", None)
        else:
            on.connect = _original_connect  # type: ignore[method-assign]
        return

    @contextmanager
    def connect(self: DuckDBWarehouse, read_only: bool = False) -> Iterator[Any]:
        with _original_connect(self, read_only) as con:
            yield _Connection(con, hook)

    if isinstance(on, DuckDBWarehouse):
        on.connect = connect.__get__(on)  # type: ignore[method-assign]
    else:
        on.connect = connect  # type: ignore[method-assign]


@contextmanager
def injected(hook: Hook, on: type[DuckDBWarehouse] | DuckDBWarehouse = DuckDBWarehouse):
    install(hook, on)
    try:
        yield
    finally:
        install(None, on)
