"""Helpers the tests share: run a plan, swap or roll back the way the CLI does (in-process, under
the table's writer lease), and read a refusal out of a failed run. Polling for a condition is
`backfill_assets.testing.waiting.poll`, which the bench uses too."""

from __future__ import annotations

import datetime as dt
from typing import Any

import dagster as dg

from backfill_assets.constants import (
    ROLE_SWAP,
    rollback_job,
    swap_job,
    swap_run_config,
)
from backfill_assets.example.declaration import ORDERS
from backfill_assets.service.executor import execute_plan, run_error
from backfill_assets.service.runs import run_as_writer

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def execute(defs: dg.Definitions, instance: Any, wh: Any, plan: Any, **kw: Any) -> Any:
    from backfill_assets.service.tables import backfill_tables

    kw.setdefault("clock", lambda: NOW)
    kw.setdefault("wait_s", 5)
    return execute_plan(defs, instance, wh, backfill_tables(defs), plan.plan_id, **kw)


def swap_or_rollback(
    defs: dg.Definitions,
    instance: Any,
    wh: Any,
    plan_id: str,
    kind: str = ROLE_SWAP,
    downstream: bool = True,
) -> dg.ExecuteInProcessResult:
    """The swap (or rollback) job in this process, as `backfill-assets swap` runs it
    (`downstream=False`: as `swap --no-refresh` does)."""
    job = swap_job(ORDERS.key) if kind == ROLE_SWAP else rollback_job(ORDERS.key)
    return run_as_writer(
        defs,
        job,
        instance,
        wh,
        ORDERS,
        role=kind,
        plan_id=plan_id,
        wait_s=5,
        raise_on_error=False,
        run_config=swap_run_config(ORDERS.key, kind, plan_id, downstream),
    )


def refused_message(result: dg.ExecuteInProcessResult) -> str:
    error = run_error(result)
    return error[1] if error else ""


def failure_description(result: dg.ExecuteInProcessResult) -> str:
    """The description of the dg.Failure (or the message of the error) that failed a step."""
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            data = event.event_specific_data
            info = getattr(data, "user_failure_data", None)
            if info is not None and info.description:
                return info.description
            err = getattr(data, "error", None)
            if err is not None:
                return err.message
    return ""
