"""Property-based bad input (hypothesis): plan JSON, criteria YAML, CLI arguments, partition keys
and the Launchpad's planning config. Whatever comes in, it ends in a clear `refused:`/`invalid`
message (or a valid result), never a traceback, and nothing is written to the instance or the
warehouse.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backfill_assets.cli import main
from backfill_assets.errors import BackfillError
from backfill_assets.example import orders as o
from backfill_assets.example.declaration import ORDERS
from backfill_assets.lib.dates import parse_day
from backfill_assets.lib.planning.criteria import load_criteria_yaml
from backfill_assets.lib.planning.plan import BackfillPlan
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.service.runs import run_job
from tests.conftest import HISTORY_END, HISTORY_START, ROWS_PER_DAY, make_plan
from tests.helpers import refused_message
from tests.reliability.harness import SPEC, bad_input, state

SUPPRESSED = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=SUPPRESSED)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


class World:
    """One landed, built and planned warehouse and instance, shared by the module."""

    def __init__(self, instance: dg.DagsterInstance, path: Path, plan: BackfillPlan, root: Path):
        self.instance, self.path, self.plan, self.root = instance, path, plan, root
        self.wh = DuckDBWarehouse(path, lock_timeout_s=2)


@pytest.fixture(scope="module")
def world(defs, tmp_path_factory) -> Iterator[World]:
    from backfill_assets.example.seed import land_days

    root = tmp_path_factory.mktemp("properties")
    (root / "home").mkdir()
    path = root / "warehouse.duckdb"
    with (
        pytest.MonkeyPatch.context() as mp,
        dg.instance_for_test(temp_dir=str(root / "home")) as inst,
    ):
        mp.setenv(WAREHOUSE_ENV, str(path))
        wh = DuckDBWarehouse(path, lock_timeout_s=2)
        land_days(defs, inst, HISTORY_START, HISTORY_END, ROWS_PER_DAY)
        wh.replace_partitions(
            SPEC, HISTORY_START, HISTORY_END + dt.timedelta(days=1), build=o.ORDERS_DAILY_SQL_V1
        )
        plan = make_plan(defs, inst, wh, "2026-01-05", "2026-01-18")
        yield World(inst, path, plan, root)


def _mutations(plan: BackfillPlan) -> st.SearchStrategy[Any]:
    """A valid plan's JSON with one key replaced by anything, or dropped, or extra."""
    good = json.loads(plan.to_json())
    keys = sorted(good)

    def mutate(key: str, value: Any, how: str) -> Any:
        data = json.loads(json.dumps(good))
        if how == "replace":
            data[key] = value
        elif how == "drop":
            data.pop(key)
        else:
            data[f"x_{key}"] = value
        return data

    # A "replace" with the value already there (an empty impact list replaced by []) is not an
    # edit: approving it is right, so it is not drawn.
    return st.builds(
        mutate, st.sampled_from(keys), JSON, st.sampled_from(["replace", "drop", "extra"])
    ).filter(lambda data: data != good)


def _clean_cli(capsys, args: list[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.err.strip().splitlines()


@SETTINGS
@given(data=st.one_of(JSON, st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_any_plan_json_is_read_or_refused_cleanly(world, data):
    bad_input()
    text = data if isinstance(data, str) else json.dumps(data)
    with contextlib.suppress(BackfillError):  # refused with a message; anything else is a bug
        BackfillPlan.from_json(text)


@settings(max_examples=25, deadline=None, suppress_health_check=SUPPRESSED)
@given(data=st.data())
def test_an_edited_plan_file_is_refused_by_approve_with_one_line_and_nothing_written(
    world, capsys, data
):
    plan = data.draw(_mutations(world.plan))
    bad_input()
    before = state(world.instance, world.path)
    path = world.root / "mutated.json"
    path.write_text(json.dumps(plan))
    code, err = _clean_cli(capsys, ["approve", str(path)])
    if code == 0:  # an extra key the contract ignores would be a bug: the contract forbids them
        pytest.fail(f"an edited plan was approved: {plan}")
    assert code == 2 and err and err[-1].startswith("refused: "), err
    assert state(world.instance, world.path) == before


@SETTINGS
@given(text=st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_any_criteria_yaml_is_merged_or_refused_cleanly(world, text):
    bad_input()
    with contextlib.suppress(BackfillError):
        load_criteria_yaml(text, ORDERS.criteria).validate(ORDERS.spec.column_names)


@SETTINGS
@given(
    doc=st.dictionaries(
        st.sampled_from(["row_count", "sample", "invariants", "other"]),
        JSON,
        max_size=3,
    )
)
def test_criteria_shaped_yaml_is_merged_or_refused_cleanly(world, doc):
    bad_input()
    with contextlib.suppress(BackfillError):
        load_criteria_yaml(yaml.safe_dump(doc), ORDERS.criteria).validate(ORDERS.spec.column_names)


DATES = st.one_of(
    st.dates(min_value=dt.date(1990, 1, 1), max_value=dt.date(2040, 1, 1)).map(str),
    st.text(max_size=15),
    st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\Z"),
)
WINDOWS = st.one_of(
    st.from_regex(r"\A[0-9]{1,2}:[0-9]{2}-[0-9]{1,2}:[0-9]{2}\Z"), st.text(max_size=12)
)


@settings(max_examples=40, deadline=None, suppress_health_check=SUPPRESSED)
@given(
    start=DATES,
    end=DATES,
    window=WINDOWS,
    timezone=st.sampled_from(["UTC", "Europe/Berlin", "Mars/Base", "", "utc"]),
    rollback=st.sampled_from(["backup", "", "snapshot", "BACKUP"]),
)
def test_plan_arguments_end_in_a_plan_or_one_refused_line(
    world, capsys, start, end, window, timezone, rollback
):
    bad_input()
    before = state(world.instance, world.path)
    args = ["plan", "orders_daily", "--start", start, "--end", end, "--window", window,
            "--timezone", timezone, "--rollback", rollback]  # fmt: skip
    code, err = _clean_cli(capsys, args)
    assert code in (0, 2), err
    if code == 2:
        assert err and err[-1].startswith("refused: "), err
    assert state(world.instance, world.path) == before  # planning writes nothing


@SETTINGS
@given(key=st.one_of(st.text(max_size=25), DATES))
def test_any_partition_key_is_parsed_or_refused_before_sql(world, key):
    bad_input()
    try:
        day = parse_day(key)
    except BackfillError:
        before = state(world.instance, world.path)
        with pytest.raises(BackfillError):
            world.wh.replace_partitions(SPEC, key, dt.date(2026, 1, 10), build="select 1")  # type: ignore[arg-type]
        assert state(world.instance, world.path) == before
        return
    assert isinstance(day, dt.date)


@settings(max_examples=12, deadline=None, suppress_health_check=SUPPRESSED)
@given(
    start=DATES,
    end=DATES,
    window=WINDOWS,
    criteria_yaml=st.one_of(st.just(""), st.text(max_size=60)),
)
def test_the_launchpad_planning_job_fails_cleanly_or_proposes_and_writes_no_data(
    world, defs, start, end, window, criteria_yaml
):
    bad_input()
    fingerprint_before, runs_before, *_ = state(world.instance, world.path)
    config = {"target": "orders_daily", "start": start, "end": end, "window": window,
              "rollback": "backup", "criteria_yaml": criteria_yaml}  # fmt: skip
    result = run_job(
        defs,
        "plan_backfill_job",
        world.instance,
        raise_on_error=False,
        run_config={"ops": {"plan_backfill_op": {"config": config}}},
    )
    if not result.success:
        assert refused_message(result), "a failed planning run says why"
    fingerprint_after, runs_after, *_ = state(world.instance, world.path)
    assert fingerprint_after == fingerprint_before  # nothing written to the warehouse
    assert runs_after == runs_before + 1  # the run itself, nothing else
