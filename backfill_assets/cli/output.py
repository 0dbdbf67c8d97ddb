"""The JSON that `--format json` prints, one model per command, and its JSON Schema.

The shapes are part of the CLI's contract: scripts and on-call tooling parse them. Each object
carries `format_version`; a field is only ever added within a version. The schemas are
generated from these models and shipped next to them (`schemas/*.schema.json`,
`python -m backfill_assets.cli.output` rewrites them); a test fails when a model and its
shipped schema disagree, and validates the real output of every command against them.

Only stdout carries the JSON. Refusals (exit 2) print nothing on stdout and one line on
stderr, as in text mode; a halted `run` (exit 1) prints its JSON with `outcome: "halted"`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

FORMAT_VERSION = 1
SCHEMA_DIR = Path(__file__).with_name("schemas")

GridState = Literal["passed", "failed", "not_run", "stale"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


class PlanEntry(_Out):
    plan_id: str
    target: str
    status: str = Field(description="proposed, approved, swapped, rolled_back, released, ...")


class PlanList(RootModel[list[PlanEntry]]):
    """`list --format json`: every plan in the instance (or of `--target`), by plan id."""


class GateFailureOut(_Out):
    partition: str
    gate: str
    description: str


class BatchRun(_Out):
    index: int
    start: str
    end: str = Field(description="inclusive")
    status: Literal["passed", "skipped", "failed"]
    run_id: str | None
    seconds: float
    failures: list[GateFailureOut]


class RunOut(_Out):
    """`run --format json`."""

    format_version: Literal[1] = FORMAT_VERSION
    command: Literal["run"] = "run"
    plan_id: str
    target: str
    outcome: Literal["done", "partial", "halted"] = Field(
        description="done: every batch passed; partial: --batches stopped early; halted: a gate "
        "failed (exit 1)"
    )
    batches_total: int
    batches: list[BatchRun]
    next: str = Field(description="the command to run next")


class Refreshed(_Out):
    assets: list[str]
    start: str | None = Field(description="null: a full refresh")
    end: str | None
    ok: bool


class SwapOut(_Out):
    """`swap --format json` and `rollback --format json`."""

    format_version: Literal[1] = FORMAT_VERSION
    command: Literal["swap", "rollback"]
    plan_id: str
    target: str
    range: str
    partitions: int = Field(description="partitions of the target the run moved")
    run_id: str
    refresh: Literal["done", "skipped", "failed"] = Field(
        description="skipped: --no-refresh; failed: exit 3"
    )
    refreshed: list[Refreshed]
    stale: list[str] = Field(description="downstream assets left stale for the range")


class BatchStatus(_Out):
    index: int
    start: str
    end: str
    state: str = Field(description="passed, failed, stale, pending, or the run's status")
    gates: dict[str, int] = Field(description="gate results of the batch, counted by state")
    run_id: str | None
    slot_start: str


class WriterOut(_Out):
    holder: str
    run_id: str | None
    free: bool
    why_free: str | None


class StatusOut(_Out):
    """`status --format json`."""

    format_version: Literal[1] = FORMAT_VERSION
    command: Literal["status"] = "status"
    plan_id: str
    target: str
    range: str
    status: str
    batches_passed: int
    batches_total: int
    halted: bool
    failed_gates: list[str]
    not_run: int
    swap_state: str | None
    review: str = Field(description="who reviewed the plan's diff and whether it still holds")
    diff_summary: str | None = Field(description="the diff as reviewed, in one line")
    writer: WriterOut | None
    daily_runs_in_progress: list[str]
    gates: list[str] = Field(description="the grid's columns, in order")
    grid: dict[str, dict[str, GridState]] = Field(
        description="partition -> gate -> passed, failed, not_run or stale"
    )
    batches: list[BatchStatus]


class NumericOut(_Out):
    sum_before: float = Field(description="over the live rows of the range")
    sum_after: float = Field(description="over the shadow's rows of the range")
    mean_before: float | None
    mean_after: float | None
    total_delta: float = Field(description="sum_after - sum_before")
    mean_delta: float | None = Field(description="over the rows in both whose value changed")
    delta_quantiles: dict[str, float] = Field(
        description="p01, p25, p50, p75, p99 of the per-row delta over the rows that changed"
    )


class PairOut(_Out):
    old: Any
    new: Any
    rows: int


class ColumnOut(_Out):
    name: str
    type: str
    changed_rows: int = Field(description="of the rows in both")
    changed_share: float = Field(description="changed_rows / rows in both")
    numeric: NumericOut | None
    top_pairs: list[PairOut] = Field(description="non-numeric columns: the most frequent changes")


class DayOut(_Out):
    day: str
    rows_changed: int
    sums: dict[str, list[float]] = Field(description="numeric column -> [before, after]")
    rows: int = Field(description="rows of the day on either side (in both counted once)")
    changed: dict[str, int] = Field(description="column -> rows changed, for those that changed")


class TypeChange(_Out):
    column: str
    live: str
    shadow: str


class SchemaOut(_Out):
    added: list[str]
    removed: list[str]
    changed_type: list[TypeChange]


class DiffOut(_Out):
    """`diff --format json`: a plan's shadow against the live rows, over its written batches."""

    format_version: Literal[1] = FORMAT_VERSION
    command: Literal["diff"] = "diff"
    plan_id: str
    target: str
    range: str = Field(description="the days compared, inclusive: the batches written so far")
    batches_written: int
    batches_total: int
    tolerance: float
    schema_changes: SchemaOut
    rows_in_both: int
    only_in_shadow: int
    only_in_live: int
    rows_changed: int
    columns: list[ColumnOut]
    days: list[DayOut]
    side_by_side: list[dict[str, Any]] = Field(
        description="a few changed rows: key, day, side, and {old, new} per changed column"
    )
    known_same: list[str] = Field(
        description="columns not compared row by row, equal by the gates' fingerprints"
    )

    @classmethod
    def of(cls, got: Any) -> DiffOut:
        """From a `service.review.PlanDiff`."""
        d = got.diff.to_dict()
        last = got.plan.batches[got.batches_written - 1].end
        return cls(
            plan_id=got.plan.plan_id,
            target=got.plan.target,
            range=f"{got.plan.start}..{last}",
            batches_written=got.batches_written,
            batches_total=len(got.plan.batches),
            tolerance=d["tolerance"],
            schema_changes=SchemaOut(
                added=d["schema"]["added"],
                removed=d["schema"]["removed"],
                changed_type=[
                    TypeChange(column=c, live=a, shadow=b)
                    for c, a, b in d["schema"]["changed_type"]
                ],
            ),
            rows_in_both=d["rows_in_both"],
            only_in_shadow=d["only_in_shadow"],
            only_in_live=d["only_in_live"],
            rows_changed=got.diff.rows_changed,
            columns=[
                ColumnOut(
                    name=c["name"],
                    type=c["sql_type"],
                    changed_rows=c["changed_rows"],
                    changed_share=c["changed_share"],
                    numeric=NumericOut(**c["numeric"]) if c["numeric"] else None,
                    top_pairs=[PairOut(old=o, new=n, rows=k) for o, n, k in c["top_pairs"]],
                )
                for c in d["columns"]
            ],
            days=[DayOut(**x) for x in d["days"]],
            side_by_side=d["side_by_side"],
            known_same=d["known_same"],
        )


MODELS: dict[str, type[BaseModel]] = {
    "list": PlanList,
    "run": RunOut,
    "swap": SwapOut,
    "status": StatusOut,
    "diff": DiffOut,
}


def schema_of(name: str) -> dict[str, Any]:
    return MODELS[name].model_json_schema(mode="serialization")


def shipped_schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())


def dump(model: BaseModel) -> str:
    return model.model_dump_json(indent=2)


def write_schemas() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name in MODELS:
        text = json.dumps(schema_of(name), indent=2, sort_keys=True) + "\n"
        (SCHEMA_DIR / f"{name}.schema.json").write_text(text)


if __name__ == "__main__":
    write_schemas()
