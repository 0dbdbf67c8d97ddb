"""A table's runbook, generated from its declaration and the daily job's history: on the target
asset (what the UI shows) and from `backfill-assets runbook`; it changes when they do."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import dagster as dg
import pytest

from backfill_assets import Budget, backfill_definitions
from backfill_assets.cli import main
from backfill_assets.example.declaration import DAILY_JOB, ORDERS
from backfill_assets.lib.planning.windows import parse_window
from backfill_assets.lib.runbook import propose_window, render_runbook
from backfill_assets.service.runs import run_job

RUNBOOK = "backfill_assets/runbook"


def _asset_runbook(defs: dg.Definitions) -> str:
    node = defs.resolve_asset_graph().get(dg.AssetKey(ORDERS.key))
    value = node.metadata[RUNBOOK]
    assert isinstance(value, dg.MarkdownMetadataValue)
    return value.md_str or ""


def test_the_target_asset_carries_its_runbook_and_it_follows_the_declaration(defs):
    text = _asset_runbook(defs)
    assert text.startswith(f"# Backfill runbook: {ORDERS.key}\n")
    assert f"idle window: `{ORDERS.backfill_window}`" in text
    assert f"`{ORDERS.daily_job}` writes the last {ORDERS.daily_lookback_days} days" in text
    assert "budget: none declared" in text
    assert f"--window {ORDERS.backfill_window}" in text
    assert "net_revenue_usd = round(net_amount * fx_rate, 2)" in text  # the criteria

    changed = replace(ORDERS, backfill_window=None, backfill_budget=Budget(max_rows=50_000))
    other = _asset_runbook(backfill_definitions([changed]))
    assert other != text
    assert "idle window: none declared" in other and 'backfill_window="' in other
    assert "budget: 50,000 rows per window occurrence" in other
    assert "a batch that alone goes over the budget" in other


def test_the_proposed_window_keeps_clear_of_the_daily_run_and_its_margins():
    # A run at 01:00 for 15 minutes, 30-minute margins: busy 00:30-01:45.
    window = propose_window(dt.time(1, 0), 900)
    assert window == "02:00-08:00"
    parse_window(window)
    # A run of 23 hours leaves no hour: nothing is proposed.
    assert propose_window(dt.time(1, 0), 23 * 3600) is None


@pytest.mark.backends("embedded")
def test_the_cli_prints_the_runbook_with_the_daily_jobs_history(defs, instance, landed, capsys):
    assert main(["runbook", ORDERS.key]) == 0
    before = capsys.readouterr().out
    assert "default 900 s (no run history of orders_daily_job)" in before
    # A real run of the daily job, of a day it may write (its sources have no rows for it).
    day = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    assert run_job(defs, DAILY_JOB, instance, partition_key=day.isoformat()).success
    assert main(["runbook", ORDERS.key]) == 0
    after = capsys.readouterr().out
    assert "p95 (nearest rank) of 1 past runs of orders_daily_job" in after
    assert after.replace(after.split("\n")[0], "") != before.replace(before.split("\n")[0], "")
    assert render_runbook(ORDERS) != after  # the asset's shows the declaration alone
