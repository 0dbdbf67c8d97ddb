"""(c) dbt microbatch: the same transform as a dbt-duckdb microbatch model, backfilled in place.

A throwaway dbt project is generated in a temp dir (no packages: this machine has no internet):
sources `raw_orders` (with `event_time`, so dbt filters it per batch) and `fx_rates`, and a model
`orders_daily` with `incremental_strategy='microbatch'`, `batch_size='day'`. The model's SQL is the
project's v2 SELECT with its tables swapped for `source()` calls and its $start/$end filter dropped
(dbt adds the per-batch filter), so it computes exactly the same rows.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from backfill_assets.example import orders as o
from backfill_assets.example.declaration import DAILY
from bench.harness.config import DBT

PROJECT = "bench_microbatch"
SOURCE = "shop"
_FROM_V2 = f"from {o.RAW_ORDERS} as o\njoin {o.FX_RATES} as r on r.currency = o.currency\n"
_WHERE_V2 = "where o.order_date >= $start and o.order_date < $end\n"


def model_sql() -> str:
    """The v2 SELECT as a microbatch model; fails loudly if orders.py's SQL changes shape."""
    sql = o.ORDERS_DAILY_SQL
    if _FROM_V2 not in sql or _WHERE_V2 not in sql:
        raise RuntimeError(
            "ORDERS_DAILY_SQL changed shape; update bench/contenders/dbt_microbatch.py"
        )
    begin = DAILY.start.date().isoformat()
    config = (
        "{{ config(materialized='incremental', incremental_strategy='microbatch', "
        f"event_time='order_date', batch_size='day', begin='{begin}', "
        "concurrent_batches=false) }}\n"
    )
    body = sql.replace(_WHERE_V2, "").replace(
        _FROM_V2,
        f"from {{{{ source('{SOURCE}', '{o.RAW_ORDERS}') }}}} as o\n"
        f"join {{{{ source('{SOURCE}', '{o.FX_RATES}') }}}} as r on r.currency = o.currency\n",
    )
    return config + body


def write_project(root: Path, db: Path) -> None:
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text(
        f"name: {PROJECT}\nversion: '1.0.0'\nprofile: {PROJECT}\nmodel-paths: ['models']\n"
        "flags:\n  send_anonymous_usage_stats: false\n"
    )
    # One thread, as the project's own profile: DuckDB has one writer per file anyway.
    (root / "profiles.yml").write_text(
        f"{PROJECT}:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: {json.dumps(str(db))}\n      schema: main\n      threads: 1\n"
    )
    (root / "models" / "sources.yml").write_text(
        f"version: 2\nsources:\n  - name: {SOURCE}\n    schema: main\n    tables:\n"
        f"      - name: {o.RAW_ORDERS}\n        config:\n          event_time: order_date\n"
        f"      - name: {o.FX_RATES}\n"
    )
    (root / "models" / "orders_daily.sql").write_text(model_sql())


def run_dbt_microbatch(path: Path, start: dt.date, end: dt.date) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-dbt-") as tmp:
        root = Path(tmp)
        write_project(root, path)
        cmd = [
            DBT,
            "run",
            "--project-dir",
            str(root),
            "--profiles-dir",
            str(root),
            "--select",
            "orders_daily",
            "--event-time-start",
            start.isoformat(),
            "--event-time-end",
            end.isoformat(),
        ]
        env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"dbt run failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
        results = json.loads((root / "target" / "run_results.json").read_text())["results"]
    batches = results[0].get("batch_results") or {}
    return {
        "batches": len(batches.get("successful", [])),
        "failed_batches": len(batches.get("failed", [])),
    }
