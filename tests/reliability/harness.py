"""Shared tools of the fault and bad-input suite: the figures registry, state snapshots, and
child processes to SIGKILL.

Every fault a test injects and every bad input it tries is counted here; every check of the
target against what it must hold goes through `expect_target`, which counts the rows a wrong
target would have lost. `conftest.py` prints the figures at the end of the session.
"""

from __future__ import annotations

import datetime as dt
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

from backfill_assets.constants import PLANS_PARTITIONS
from backfill_assets.example.declaration import ORDERS

SPEC = ORDERS.spec
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Figures:
    faults_injected: int = 0
    bad_inputs_tried: int = 0
    rows_lost: int = 0
    losses: list[str] = field(default_factory=list)
    # Commands run after a crash between the warehouse and the instance, or after a plan's
    # record was erased, each checked to tell the truth (test_state_of_record.py).
    record_cases: int = 0


FIGURES = Figures()
CHILDREN: list[Child] = []


def fault(n: int = 1) -> None:
    """Count `n` injected faults (a SIGKILL, an exception raised inside a transaction)."""
    FIGURES.faults_injected += n


def bad_input(n: int = 1) -> None:
    """Count `n` bad inputs tried."""
    FIGURES.bad_inputs_tried += n


def record_case(n: int = 1) -> None:
    """Count `n` commands checked against the state of record after a crash or an erased
    record."""
    FIGURES.record_cases += n


def _rows(checksum: str | None) -> int:
    return int(checksum.split(":")[0]) if checksum else 0


def rows_lost(actual: Mapping[dt.date, str], expected: Mapping[dt.date, str]) -> int:
    """Rows of `expected` the target does not hold as expected: every row of a partition whose
    checksum differs counts as lost (a partition with the right count but other content lost its
    rows too)."""
    return sum(_rows(cs) for day, cs in expected.items() if actual.get(day) != cs)


def expect_target(
    case: str, actual: Mapping[dt.date, str], *allowed: Mapping[dt.date, str]
) -> Mapping[dt.date, str]:
    """Assert the target's checksums equal one of the `allowed` states and return it.

    With several allowed states (all old or all new), a target matching none is mixed; its loss
    is counted against the closest one.
    """
    for state in allowed:
        if dict(actual) == dict(state):
            return state
    lost = min(rows_lost(actual, state) for state in allowed) or 1
    FIGURES.rows_lost += lost
    FIGURES.losses.append(f"{case}: {lost} rows")
    raise AssertionError(
        f"{case}: the target matches none of the {len(allowed)} allowed states "
        f"({lost} rows lost or mixed)"
    )


def target_checksums(wh: Any, start: dt.date, end_inclusive: dt.date) -> dict[dt.date, str]:
    return wh.checksums(SPEC, start, end_inclusive + dt.timedelta(days=1))


def after_swap(
    old: Mapping[dt.date, str], shadow: Mapping[dt.date, str], days: list[dt.date]
) -> dict[dt.date, str]:
    """What the target must hold after swapping `days`: the shadow there, the old rest."""
    out = {d: cs for d, cs in old.items() if d not in days}
    out.update({d: shadow[d] for d in days if d in shadow})
    return out


# -- state snapshots ------------------------------------------------------------------------------


def fingerprint(path: Path) -> tuple | None:
    """Every table's row count and content hash, every view's SQL, every sequence's value.

    Logical, not bytes: opening a DuckDB file may rewrite it without changing what it holds.
    """
    if not path.exists():
        return None
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT internal ORDER BY ALL"
        ).fetchall()
        out: list[tuple] = []
        for schema, table in tables:
            row = con.execute(f'SELECT count(*), bit_xor(hash(t)) FROM "{schema}"."{table}" t')
            out.append((schema, table, *row.fetchone()))  # type: ignore[misc]
        out += con.execute(
            "SELECT schema_name, view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY ALL"
        ).fetchall()
        out += con.execute(
            "SELECT schema_name, sequence_name, last_value FROM duckdb_sequences() ORDER BY ALL"
        ).fetchall()
        return tuple(out)
    finally:
        con.close()


def state(instance: dg.DagsterInstance, warehouse_path: Path) -> tuple:
    """What a refused input must leave unchanged: the warehouse, the runs, the stored plans."""
    from backfill_assets.service.plans import plan_statuses

    return (
        fingerprint(warehouse_path),
        len(instance.get_runs()),
        tuple(instance.get_dynamic_partitions(PLANS_PARTITIONS)),
        tuple(sorted(plan_statuses(instance).items())),
    )


# -- child processes ------------------------------------------------------------------------------


def reap_leftovers() -> None:
    """SIGKILL (by pid) children a failed test left running, e.g. paused inside a transaction."""
    while CHILDREN:
        child = CHILDREN.pop()
        if child.proc.poll() is None:
            os.kill(child.proc.pid, signal.SIGKILL)
        if not child._err.closed:
            child.reap()


class Child:
    """A Python child process whose stdout lines can be awaited, to SIGKILL at a known point."""

    def __init__(self, code: str, env: Mapping[str, str], log: Path):
        self.log = log
        self._err = open(log, "w", encoding="utf8")  # noqa: SIM115 - closed in `reap`
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            cwd=PROJECT_ROOT,
            env={**os.environ, "PYTHONWARNINGS": "ignore", **env},
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        CHILDREN.append(self)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float = 90.0) -> str:
        """Block until the child prints a line starting with `prefix`; return that line."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise AssertionError(f"child never printed {prefix!r}: {self.tail()}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.reap()
                raise AssertionError(
                    f"child exited ({self.proc.returncode}) before printing {prefix!r}: "
                    f"{self.tail()}"
                )
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def kill(self) -> None:
        """SIGKILL: no handler, no cleanup, no rollback in the child."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.reap()
        fault()

    def reap(self) -> int:
        try:
            code = self.proc.wait(timeout=30)
        finally:
            if self.proc.stdin:
                self.proc.stdin.close()
            self._err.close()
        return code

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""

    def drain(self) -> list[str]:
        """Lines printed so far that nobody awaited (after the child is gone)."""
        out = []
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return out
            if line is not None:
                out.append(line)
