"""A table built by a Python function returning a pandas DataFrame: the same shadow write, gates,
swap and rollback as SQL builds (tests/test_adoption.py runs the whole cycle), and a frame of the
wrong shape refused with a clear message before anything is written."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from backfill_assets.errors import InvalidInput
from backfill_assets.lib.frames import check_frame
from backfill_assets.lib.spec import Column, TableSpec
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from tests.reliability.harness import fingerprint

SPEC = TableSpec(
    name="stores",
    columns=(
        Column("store_id", "BIGINT"),
        Column("day", "DATE"),
        Column("visitors", "BIGINT"),
        Column("revenue", "DOUBLE"),
    ),
    partition_column="day",
    primary_key=("store_id", "day"),
)
START, END = dt.date(2026, 1, 5), dt.date(2026, 1, 7)


def good() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "store_id": [1, 2, 1, 2],
            "day": pd.to_datetime(["2026-01-05", "2026-01-05", "2026-01-06", "2026-01-06"]),
            "visitors": [10, 20, 30, 40],
            "revenue": [25.0, 50.0, 75.0, 100.0],
        }
    )


BAD = {
    "missing_column": (lambda f: f.drop(columns=["revenue"]), "missing columns ['revenue']"),
    "extra_column": (lambda f: f.assign(note="x"), "columns not in the table ['note']"),
    "wrong_type": (lambda f: f.assign(visitors=f["visitors"] * 1.5), "visitors is float64"),
    "text_for_a_number": (lambda f: f.assign(revenue="a lot"), "revenue is"),
    "duplicate_key": (
        lambda f: pd.concat([f, f.head(1)], ignore_index=True),
        "2 rows share a primary key",
    ),
    "null_key": (lambda f: f.assign(store_id=[1, None, 1, 2]), "store_id is float64"),
    "day_outside_the_range": (
        lambda f: f.assign(day=pd.to_datetime(["2026-01-05"] * 3 + ["2026-01-09"])),
        "day outside the range: 2026-01-09",
    ),
    "not_a_frame": (lambda f: f.to_dict("records"), "returned list, not a pandas DataFrame"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_python_build_of_the_wrong_shape_is_refused_before_anything_is_written(
    tmp_path: Path, case: str
):
    mangle, needle = BAD[case]
    path = tmp_path / "wh.duckdb"
    wh = DuckDBWarehouse(path)
    wh.replace_partitions(SPEC, START, END, build=check_frame(SPEC, good(), START, END))
    before = fingerprint(path)
    with pytest.raises(InvalidInput) as refused:
        check_frame(SPEC, mangle(good()), START, END)
    assert needle in str(refused.value)
    assert "nothing written" in str(refused.value)
    assert fingerprint(path) == before


def test_a_python_build_writes_what_it_returns_with_the_columns_in_table_order(tmp_path: Path):
    wh = DuckDBWarehouse(tmp_path / "wh.duckdb")
    shuffled = good()[["revenue", "day", "visitors", "store_id"]]
    counts = wh.replace_partitions(SPEC, START, END, build=check_frame(SPEC, shuffled, START, END))
    assert counts == {START: 2, START + dt.timedelta(days=1): 2}
    assert wh.query("select sum(revenue), sum(visitors) from stores") == [(250.0, 100)]


@pytest.mark.slow
def test_a_batch_whose_python_build_breaks_the_schema_is_refused_and_writes_no_shadow(
    tmp_path, monkeypatch
):
    import sys

    import dagster as dg

    from backfill_assets import backfill_definitions, backfill_tables
    from backfill_assets.lib.planning.build import PlanRequest
    from backfill_assets.service.approval import approve_plan
    from backfill_assets.service.planner import plan_backfill
    from tests.helpers import NOW, execute

    sys.path.insert(0, str(Path(__file__).parent / "fixture_project"))
    try:
        from shop.tables import STORES, build_stores_v1  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    path = tmp_path / "shop.duckdb"
    monkeypatch.setenv("BACKFILL_ASSETS_WAREHOUSE", str(path))
    wh = DuckDBWarehouse(path, lock_timeout_s=5)
    start, end = dt.date(2026, 1, 1), dt.date(2026, 1, 15)
    wh.replace_partitions(
        STORES.spec, start, end, build=check_frame(STORES.spec, build_stores_v1(start, end),
                                                   start, end)
    )  # fmt: skip

    def broken(s: dt.date, e: dt.date) -> pd.DataFrame:
        return build_stores_v1(s, e).drop(columns=["revenue"])

    table = replace(STORES, build=broken)
    defs = backfill_definitions([table])
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        request = PlanRequest("stores", "2026-01-05", "2026-01-11", "03:00-23:00", None, "backup")
        plan = plan_backfill(
            request,
            asset_graph=defs.resolve_asset_graph(),
            tables=backfill_tables(defs),
            instance=instance,
            warehouse=wh,
            now=NOW,
        )
        approve_plan(instance, wh, table, plan, "tests")
        before = fingerprint(path)
        with pytest.raises(InvalidInput, match="missing columns \\['revenue'\\]"):
            execute(defs, instance, wh, plan, ignore_window=True)
        after = fingerprint(path)
    # Nothing was written but the writer lease the batch's run took (and its end freed).
    data = [t for t in after or () if t[1] not in ("writer_lease",)]
    assert data == [t for t in before or () if t[1] not in ("writer_lease",)]
