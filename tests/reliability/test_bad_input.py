"""Bad input is refused cleanly: exit code 2 (or a failed run) with one clear message, and
nothing written: the warehouse, the instance's runs and its stored plans stay as they were.

One warehouse and instance serve the whole module (built once: a landed source, a target built
by logic v1, one approved plan), since every case here must leave them unchanged anyway. Date,
window and timezone refusals of `plan` are in tests/test_cli.py; the other entry points are here.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from backfill_assets.cli import main
from backfill_assets.errors import InvalidInput
from backfill_assets.example import orders as o
from backfill_assets.example.cli import main as example_main
from backfill_assets.lib.planning.criteria import Criteria
from backfill_assets.lib.planning.plan import BackfillPlan, compute_plan_id, rollback_command
from backfill_assets.lib.warehouse.connect import WAREHOUSE_ENV
from backfill_assets.lib.warehouse.duckdb import DuckDBWarehouse
from backfill_assets.lib.warehouse.predicates import validate_predicate
from backfill_assets.service.runs import run_job
from tests.conftest import HISTORY_END, HISTORY_START, ROWS_PER_DAY, make_plan
from tests.reliability.harness import (
    PROJECT_ROOT,
    SPEC,
    bad_input,
    expect_target,
    state,
    target_checksums,
)

INJECTED_KEY = "2026-01-01'; drop table orders_daily; --"
INJECTED_TARGET = 'orders_daily"; drop table x; --'
PLAN_ARGS = ["--window", "02:00-06:00", "--timezone", "UTC", "--rollback", "backup"]


@dataclass(frozen=True)
class Env:
    instance: dg.DagsterInstance
    path: Path
    wh: DuckDBWarehouse
    plan: BackfillPlan
    root: Path
    old: dict[dt.date, str]


@pytest.fixture(scope="module")
def env(defs, tmp_path_factory) -> Iterator[Env]:
    from backfill_assets.example.seed import land_days

    root = tmp_path_factory.mktemp("bad_input")
    (root / "home").mkdir()
    path = root / "warehouse.duckdb"
    with (
        pytest.MonkeyPatch.context() as mp,
        dg.instance_for_test(temp_dir=str(root / "home")) as inst,
    ):
        mp.setenv(WAREHOUSE_ENV, str(path))
        wh = DuckDBWarehouse(path, lock_timeout_s=2)
        land_days(defs, inst, HISTORY_START, HISTORY_END, ROWS_PER_DAY)
        end = HISTORY_END + dt.timedelta(days=1)
        wh.replace_partitions(SPEC, HISTORY_START, end, build=o.ORDERS_DAILY_SQL_V1)
        plan = make_plan(defs, inst, wh, "2026-01-05", "2026-01-18")
        old = target_checksums(wh, HISTORY_START, HISTORY_END)
        yield Env(inst, path, wh, plan, root, old)


def _unchanged(env: Env, case: str, before: tuple) -> None:
    assert state(env.instance, env.path) == before, f"{case} changed the warehouse or instance"
    expect_target(case, target_checksums(env.wh, HISTORY_START, HISTORY_END), env.old)


def refused(env: Env, capsys, args: list[str], needle: str, cli=main) -> str:
    """Run the CLI; assert exit 2, one `refused:` line naming `needle`, nothing written."""
    bad_input()
    before = state(env.instance, env.path)
    capsys.readouterr()
    code = cli(args)
    err = capsys.readouterr().err.strip().splitlines()
    lines = [line for line in err if line.startswith("refused: ")]
    assert code == 2, f"{args} exited {code}: {err[-3:]}"
    assert len(lines) == 1 and err[-1] == lines[0], err[-3:]
    assert needle.lower() in lines[0].lower(), lines[0]
    _unchanged(env, " ".join(args), before)
    return lines[0]


# -- dates -----------------------------------------------------------------------------------------

TODAY = dt.datetime.now(dt.UTC).date().isoformat()
LAND = {
    "malformed": (["--start", "01/01/2026", "--end", "2026-01-02"], "YYYY-MM-DD"),
    "impossible": (["--start", "2026-02-01", "--end", "2026-02-30"], "not a real calendar date"),
    "reversed": (["--start", "2026-01-10", "--end", "2026-01-01"], "before start"),
    "future": (["--start", "2031-01-01", "--end", "2031-01-02"], "not a partition"),
    "today": (["--start", TODAY, "--end", TODAY], "not happened yet"),
    "before_partitions": (["--start", "2024-06-01", "--end", "2024-06-02"], "not a partition"),
    "injected_key": (["--start", INJECTED_KEY, "--end", "2026-01-02"], "not a date"),
    "zero_rows": (["--start", "2026-01-01", "--end", "2026-01-02", "--rows-per-day", "0"], "rows"),
}
DAILY = {
    "malformed": ("2026-1-5", "YYYY-MM-DD"),
    "impossible": ("2026-02-30", "not a real calendar date"),
    "future": ("2031-01-01", "not a partition"),
    "today": (TODAY, "not happened yet"),
    "before_partitions": ("2024-06-01", "not a partition"),
    "injected_key": (INJECTED_KEY, "not a date"),
}


@pytest.mark.parametrize("case", sorted(LAND))
def test_land_refuses_bad_dates_with_exit_2_and_lands_nothing(env, capsys, case):
    # Regression: days outside the partitions raised a bare Dagster error (a traceback; one even
    # recorded a failed run), future days were landed as if they had happened, and 0 rows a day
    # "landed" empty days.
    args, needle = LAND[case]
    refused(env, capsys, ["land", *args], needle, cli=example_main)


@pytest.mark.parametrize("case", sorted(DAILY))
def test_daily_refuses_bad_dates_with_exit_2_and_runs_nothing(env, capsys, case):
    # Regression: a day outside the partitions raised DagsterUnknownPartitionError (a traceback).
    day, needle = DAILY[case]
    refused(env, capsys, ["daily", day], needle, cli=example_main)


def test_plan_refuses_an_injected_partition_key(env, capsys):
    refused(env, capsys, ["plan", "orders_daily", "--start", INJECTED_KEY, "--end",
                          "2026-01-10", *PLAN_ARGS], "not a date")  # fmt: skip


def test_the_warehouse_refuses_a_malformed_partition_key_before_any_sql(env):
    # Regression: replace_partitions and swap failed with a bare TypeError/AttributeError.
    before = state(env.instance, env.path)
    day = dt.date(2026, 1, 5)
    calls = [
        lambda: env.wh.replace_partitions(SPEC, INJECTED_KEY, day, build=""),  # type: ignore[arg-type]
        lambda: env.wh.replace_partitions(SPEC, day, "2026-02-30", build="", shadow=True),  # type: ignore[arg-type]
        lambda: env.wh.swap(SPEC, env.plan.plan_id, [day, INJECTED_KEY]),  # type: ignore[list-item]
    ]
    for call in calls:
        bad_input()
        with pytest.raises(InvalidInput, match="not a"):
            call()
    _unchanged(env, "malformed partition key to the warehouse", before)


def test_dagster_refuses_an_injected_partition_key_before_creating_a_run(env, defs):
    bad_input()
    before = state(env.instance, env.path)
    with pytest.raises(dg.DagsterUnknownPartitionError):
        run_job(defs, "orders_daily__shadow_job", env.instance, partition_key=INJECTED_KEY)
    _unchanged(env, "injected partition key to the shadow job", before)


# -- targets and keys ------------------------------------------------------------------------------


def test_plan_refuses_an_injected_asset_key(env, capsys):
    refused(env, capsys, ["plan", INJECTED_TARGET, "--start", "2026-01-05", "--end",
                          "2026-01-10", *PLAN_ARGS], "unknown")  # fmt: skip


@pytest.mark.parametrize("command", ["run", "status", "swap", "rollback", "release", "abandon"])
def test_commands_refuse_an_injected_plan_id(env, capsys, command):
    refused(env, capsys, [command, "p0'; drop table orders_daily; --"], "not approved")


# Criteria predicates are SQL by design, restricted to a read-only expression over one row.
ESCAPES = {
    "statement": "net_amount >= 0; drop table orders_daily",
    "line_comment": "net_amount >= 0 -- or anything",
    "block_comment": "net_amount >= 0 /* or anything */",
    "subquery": "(select count(*) from raw_orders) > 0",
    "exists": "exists (select 1)",
    "other_table": "raw_orders.amount > 0",
    "table_function": "read_csv('/etc/passwd') is not null",
    "pragma": "pragma version",
    "setting": "current_setting('threads') is not null",
    "quoted_identifier": '"net_amount" >= 0',
    "string_literal_trick": "status = 'a'';drop table orders_daily;--'",
    "escape_string": "e'\\x27' = status",
    "parameter": "status = $1",
    "union": "net_amount >= 0 union all select 1",
    # Regression: unbalanced parentheses were accepted and closed the `coalesce((P), false)`
    # the predicate is placed in.
    "closes_its_wrapper": "net_amount >= 0), (true",
    "leaves_open": "((net_amount >= 0)",
}


def _criteria_yaml(predicate: str) -> str:
    return yaml.safe_dump({"invariants": [{"name": "evil", "predicate": predicate}]})


def _tampered(plan: BackfillPlan, **changes: Any) -> dict[str, Any]:
    """The plan's JSON with `changes`, and an id, shadow and rollback command made consistent
    again: what a careful hand-editor (or attacker) would write."""
    data = json.loads(plan.to_json())
    data.update(changes)
    data["shadow"] = data["target"] + "__shadow"
    data["plan_id"] = compute_plan_id(
        target=data["target"],
        start=plan.start,
        end=plan.end,
        window=plan.window.label,
        timezone=plan.window.timezone,
        rollback=plan.rollback.strategy,
        criteria=Criteria.from_dict(data["criteria"]),
    )
    data["rollback"]["command"] = rollback_command(data["plan_id"])
    return data


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_predicate_escape_attempts_are_refused_on_every_path_to_sql(env, capsys, case):
    predicate = ESCAPES[case]
    # 1. The criteria YAML of `plan --criteria`.
    crit = env.root / f"criteria_{case}.yml"
    crit.write_text(_criteria_yaml(predicate))
    args = ["plan", "orders_daily", "--start", "2026-01-05", "--end", "2026-01-10", *PLAN_ARGS]
    refused(env, capsys, [*args, "--criteria", str(crit)], "predicate")
    # 2. A hand-made plan file whose id matches its (evil) criteria.
    criteria = json.loads(env.plan.to_json())["criteria"]
    criteria["invariants"] = [{"name": "evil", "predicate": predicate}]
    path = env.root / f"plan_{case}.json"
    path.write_text(json.dumps(_tampered(env.plan, criteria=criteria)))
    # Regression: `approve` recorded such a plan; its batch then wrote the shadow before the
    # gate refused the predicate.
    refused(env, capsys, ["approve", str(path)], "predicate")
    # 3. The warehouse itself, should a predicate reach it some other way.
    bad_input(2)
    before = state(env.instance, env.path)
    with pytest.raises(InvalidInput, match="predicate"):
        validate_predicate(predicate, SPEC.column_names)
    with pytest.raises(InvalidInput, match="predicate"):
        env.wh.gate_inputs(
            SPEC,
            dt.date(2026, 1, 5),
            dt.date(2026, 1, 6),
            plan_id="p",
            sample_size=10,
            unchanged=(),
            changed_predicates={},
            invariants={"evil": predicate},
            full_compare=False,
        )
    _unchanged(env, f"predicate {case} to the warehouse", before)


def test_the_ui_planning_job_fails_its_run_on_a_predicate_escape_and_proposes_nothing(env, defs):
    from tests.helpers import refused_message

    bad_input()
    fingerprint_before, runs_before, *plans_before = state(env.instance, env.path)
    config = {
        "target": "orders_daily",
        "start": "2026-01-05",
        "end": "2026-01-10",
        "window": "02:00-06:00",
        "rollback": "backup",
        "criteria_yaml": _criteria_yaml(ESCAPES["statement"]),
    }
    result = run_job(
        defs,
        "plan_backfill_job",
        env.instance,
        raise_on_error=False,
        run_config={"ops": {"plan_backfill_op": {"config": config}}},
    )
    assert not result.success
    assert "contains a comment or ';'" in refused_message(result)
    fingerprint_after, runs_after, *plans_after = state(env.instance, env.path)
    assert (fingerprint_after, runs_after, plans_after) == (
        fingerprint_before,
        runs_before + 1,  # the failed run, and nothing else
        plans_before,
    )


# -- plan files ------------------------------------------------------------------------------------


def _plan_files(plan: BackfillPlan) -> dict[str, tuple[str, str]]:
    """name -> (file text, what the refusal names)."""
    good = json.loads(plan.to_json())

    def edited(**changes: Any) -> str:
        data = json.loads(json.dumps(good))
        for key, value in changes.items():
            data[key] = value
        return json.dumps(data)

    batches = json.loads(json.dumps(good["batches"]))
    moved = json.loads(json.dumps(batches))
    moved[0]["end"] = "2026-01-12"  # one day more in batch 1
    no_gate = json.loads(json.dumps(batches))
    no_gate[1]["gates"] = [g for g in no_gate[1]["gates"] if g != "sample_gate"]
    text = plan.to_json()
    return {
        "batch_range_changed": (edited(batches=moved), "batch 1"),
        "gate_removed": (edited(batches=no_gate), "lacks gates"),
        "unknown_schema_version": (edited(schema_version=99), "schema_version"),
        "truncated": (text[: len(text) // 2], "not valid JSON"),
        "empty": ("", "not valid JSON"),
        "not_an_object": ("[]", "JSON object"),
        "missing_batches": (
            json.dumps({k: v for k, v in good.items() if k != "batches"}),
            "missing keys",
        ),
        "range_widened": (edited(end="2026-01-25"), "plan_id"),
        "other_targets_shadow": (edited(shadow="raw_orders__shadow"), "shadow"),
        "other_target": (
            json.dumps(_tampered(plan, target="raw_orders")),
            "not a declared backfillable table",
        ),
        "injected_target": (
            json.dumps(_tampered(plan, target=INJECTED_TARGET)),
            "not a declared backfillable table",
        ),
        # The plan id does not cover the impact: emptied, no downstream model would be refreshed.
        "impact_emptied": (edited(impact=[]), "impacted downstream assets, but the asset lineage"),
        # pydantic alone reads a number as seconds since 1970.
        "created_at_a_number": (edited(created_at=0), "created_at 0 is not an ISO datetime"),
    }


PLAN_FILE_CASES = [
    "batch_range_changed",
    "gate_removed",
    "unknown_schema_version",
    "truncated",
    "empty",
    "not_an_object",
    "missing_batches",
    "range_widened",
    "other_targets_shadow",
    "other_target",
    "injected_target",
    "impact_emptied",
    "created_at_a_number",
]
# Files that hold together (their id matches) but name a target that is not backfillable: `run`
# reads them for the id, which was never approved.
CONSISTENT = ("other_target", "injected_target")
# Approve checks the impact against the lineage; `run FILE` checks the file's integrity, which
# does not cover the impact, then runs the plan stored under its id (the approved one).
APPROVE_ONLY = ("impact_emptied",)


@pytest.mark.parametrize("case", PLAN_FILE_CASES)
def test_approve_and_run_refuse_an_edited_or_broken_plan_file(env, capsys, case):
    files = _plan_files(env.plan)
    assert sorted(files) == sorted(PLAN_FILE_CASES)
    text, needle = files[case]
    path = env.root / f"{case}.json"
    path.write_text(text)
    refused(env, capsys, ["approve", str(path)], needle)
    if case in APPROVE_ONLY:
        return
    # Regression: `run FILE` read the file for its id only, so an edited copy of an approved
    # plan ran the stored plan as if the edits did not exist.
    refused(env, capsys, ["run", str(path)], "not approved" if case in CONSISTENT else needle)


# -- round two: what an independent probe found (each a regression) --------------------------------

# Predicates that parsed as tokens but were wrong: a dangling operator failed only when the gate
# ran (after the batch wrote the shadow); an impossible date literal was accepted.
WRONG_PREDICATES = {
    "dangling_and": ("net_amount >= 0 and", "not a complete SQL expression"),
    "impossible_date": ("order_date < date '9999-99-99'", "is not a real date"),
    "impossible_timestamp": ("ordered_at < timestamp '2026-13-01 00:00:00'", "not a real"),
}


@pytest.mark.parametrize("case", sorted(WRONG_PREDICATES))
def test_a_wrong_predicate_is_refused_at_plan_and_approve_time(env, capsys, case):
    predicate, needle = WRONG_PREDICATES[case]
    crit = env.root / f"wrong_{case}.yml"
    crit.write_text(_criteria_yaml(predicate))
    args = ["plan", "orders_daily", "--start", "2026-01-05", "--end", "2026-01-10", *PLAN_ARGS]
    refused(env, capsys, [*args, "--criteria", str(crit)], needle)
    criteria = json.loads(env.plan.to_json())["criteria"]
    criteria["invariants"] = [{"name": "wrong", "predicate": predicate}]
    path = env.root / f"wrong_plan_{case}.json"
    path.write_text(json.dumps(_tampered(env.plan, criteria=criteria)))
    refused(env, capsys, ["approve", str(path)], needle)


def test_a_window_in_full_width_digits_is_refused(env, capsys):
    # Regression: `\d` matched full-width digits, and int() read them.
    window = "\uff10\uff12:\uff10\uff10-\uff10\uff16:\uff10\uff10"
    refused(env, capsys, ["plan", "orders_daily", "--start", "2026-01-05", "--end",
                          "2026-01-10", "--window", window, "--timezone", "UTC",
                          "--rollback", "backup"], "is not HH:MM-HH:MM")  # fmt: skip


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_FILES = {
    # name: (bytes of the file, what the refusal says)
    "binary_10_mb": (bytes(range(256)) * (10 * 4096), "that is not a plan file"),
    "binary_small": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe" * 64, "not UTF-8 text"),
    "nested_100000_deep": (_deep_json(100_000).encode(), "nested too deeply"),
    "nul_bytes": (b'{"schema_version": 1\x00}', "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_plan_file_that_is_not_a_plan_is_refused_without_a_traceback(env, capsys, case):
    # Regression: a 10 MB binary file raised UnicodeDecodeError, JSON nested 100,000 deep
    # raised RecursionError: tracebacks, not exit 2.
    data, needle = BAD_FILES[case]
    path = env.root / f"bad_{case}.json"
    path.write_bytes(data)
    refused(env, capsys, ["approve", str(path)], needle)
    refused(env, capsys, ["run", str(path)], needle)
    refused(env, capsys, ["status", str(path)], needle)


BAD_CRITERIA = {
    "binary": (bytes(range(256)) * 16, "not UTF-8 text"),
    "nul_in_text": (b"sample:\n  size: 5\x00\n", "NUL bytes"),
    "nested_deep": (b"[" * 5000 + b"]" * 5000, "criteria"),
    "not_a_mapping": (b"- 1\n- 2\n", "must be a mapping"),
    "huge": (b"#" * (9 * 1024 * 1024), "not a criteria file"),
}


@pytest.mark.parametrize("case", sorted(BAD_CRITERIA))
def test_a_criteria_file_that_is_not_yaml_criteria_is_refused_without_a_traceback(
    env, capsys, case
):
    # Regression: a binary criteria file raised UnicodeDecodeError.
    data, needle = BAD_CRITERIA[case]
    path = env.root / f"bad_criteria_{case}.yml"
    path.write_bytes(data)
    args = ["plan", "orders_daily", "--start", "2026-01-05", "--end", "2026-01-10", *PLAN_ARGS]
    refused(env, capsys, [*args, "--criteria", str(path)], needle)


def test_output_into_a_closed_pipe_is_no_traceback_and_the_command_completes(env, tmp_path):
    # Regression: `backfill-assets rollback ... | head -1` died with BrokenPipeError after its
    # first line, before the rest of its work.
    bad_input()
    before = state(env.instance, env.path)
    exe = Path(sys.executable).with_name("backfill-assets")
    shell_env = {
        **os.environ,
        "DAGSTER_HOME": str(env.instance.root_directory),
        WAREHOUSE_ENV: str(env.path),
    }
    done = subprocess.run(
        f"'{exe}' list | head -c 1; '{exe}' status {env.plan.plan_id} | head -n 1; "
        f"echo exit=${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        cwd=PROJECT_ROOT,
        env=shell_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.stdout.strip().endswith("exit=0"), done.stdout
    assert state(env.instance, env.path) == before


@pytest.mark.parametrize(
    ("dates", "needle"),
    [
        (("0001-01-01", "2026-01-10"), "before the first partition"),
        (("2026-01-05", "9999-12-31"), "has not landed yet"),
        (("0001-01-01", "9999-12-31"), "before the first partition"),
    ],
)
def test_plan_refuses_dates_at_the_ends_of_the_calendar(env, capsys, dates, needle):
    # Regression: an OverflowError traceback with exit 1 (reserved for a failed gate).
    start, end = dates
    refused(env, capsys, ["plan", "orders_daily", "--start", start, "--end", end, *PLAN_ARGS],
            needle)  # fmt: skip


def test_plan_refuses_an_empty_timezone(env, capsys):
    # Regression: `--timezone ""` was silently taken as UTC.
    args = [*PLAN_ARGS]
    args[args.index("--timezone") + 1] = ""
    refused(env, capsys, ["plan", "orders_daily", "--start", "2026-01-05", "--end",
                          "2026-01-10", *args], "--timezone is empty")  # fmt: skip


def _read_only_folder(path: Path) -> Path:
    """An empty folder on a read-only tmpfs (the tests run as root, who writes anything else)."""
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"mounting a tmpfs needs root: {done.stderr}"
    return path


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    folder = _read_only_folder(tmp_path / "read_only")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_plan_refuses_an_out_path_it_could_not_write(env, capsys, tmp_path, read_only):
    # Regression: a traceback with exit 1, after planning, for each of these.
    plan = ["plan", "orders_daily", "--start", "2026-01-05", "--end", "2026-01-10", *PLAN_ARGS]
    refused(env, capsys, [*plan, "--out", str(tmp_path / "missing" / "p.json")], "does not exist")
    refused(env, capsys, [*plan, "--out", str(tmp_path)], "is a folder")
    refused(env, capsys, [*plan, "--out", str(read_only / "p.json")], "cannot be written")


EVERY_COMMAND = [
    ["plan", "orders_daily", "--start", "2026-01-05", "--end", "2026-01-10", *PLAN_ARGS],
    ["approve", "p0000000000"],
    ["run", "p0000000000"],
    ["start", "p0000000000"],
    ["pause", "p0000000000"],
    ["status", "p0000000000"],
    ["list"],
    ["swap", "p0000000000"],
    ["rollback", "p0000000000"],
    ["release", "p0000000000"],
    ["abandon", "p0000000000"],
    ["doctor"],
]


@pytest.mark.parametrize("case", ["unset", "missing", "relative", "read_only"])
def test_every_command_refuses_a_dagster_home_it_cannot_use(
    env, capsys, monkeypatch, tmp_path, case
):
    # Regression: a traceback with exit 1 from Dagster, for every command.
    needle = {
        "unset": "DAGSTER_HOME is not set",
        "missing": "does not exist",
        "relative": "relative path",
        "read_only": "cannot be written",
    }[case]
    if case == "unset":
        monkeypatch.delenv("DAGSTER_HOME")
    elif case == "missing":
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "no_such_home"))
    elif case == "relative":
        monkeypatch.setenv("DAGSTER_HOME", "dagster_home")
    else:
        home = _read_only_folder(tmp_path / "read_only_home")
        monkeypatch.setenv("DAGSTER_HOME", str(home))
    try:
        for args in EVERY_COMMAND:
            refused(env, capsys, args, needle)
    finally:
        if case == "read_only":
            subprocess.run(["umount", str(tmp_path / "read_only_home")], check=False)
