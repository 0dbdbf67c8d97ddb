"""Adopt a table that already exists: check it against its declaration, record each day's rows
and checksum in the warehouse, and give Dagster a materialization for each partition it has none
for, without a run.

- **Check first** (`check_adoption`): reads only. Refused, naming what and how to fix it: no
  such relation, a view, a table partitioned another way, a column missing, undeclared or of
  another type, rows whose partition column is null, duplicate keys (unless allowed), a plan
  holding the table.
- **In place** (DuckDB; on PostgreSQL, a table already in the framework's range-partitioned
  layout): the rows stay where they are. Days are recorded a bounded range at a time, each range
  in one transaction under the table's writer lease, so the daily job can write between two.
- **Converted online** (a plain PostgreSQL table): copied a week at a time beside it, each week
  under the writer lease, while readers read the old table; then the names are switched in one
  short transaction and the old table is kept until `release_adoption` (`rollback_adoption` puts
  it back). lib/warehouse/postgres/convert.py says how.
- **Resumable**: a day with a record is not recorded again, and a partition with a
  materialization gets no other; killed at any point, `adopt` again continues.
- **Dagster's history**: existing materializations are kept as they are; each partition without
  one gets a runless materialization carrying `code_version` (`plan --stale` reads it).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg

from backfill_assets.constants import CODE_VERSION_TAG
from backfill_assets.errors import AdoptionRefused, InvalidInput
from backfill_assets.lib.adoption import (
    ABSENT,
    OTHER_PARTITIONING,
    PARTITIONED,
    TABLE,
    VIEW,
    AdoptionCheck,
    ConvertsOnline,
    ExistingRelation,
    TableScan,
    column_problems,
)
from backfill_assets.lib.planning.cost import daily_duration
from backfill_assets.lib.runbook import propose_window
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Warehouse
from backfill_assets.lib.warehouse.identifiers import quote_ident
from backfill_assets.service.history import daily_run_durations
from backfill_assets.service.lease import Waiting, holder_for_command, writer_lease

DEFAULT_CODE_VERSION = "adopted"
DEFAULT_CHUNK_DAYS = 28
# What one runless materialization costs the instance, for the estimate only (a SQLite instance
# stores one in a few milliseconds; a PostgreSQL one in about as many).
EVENT_S = 0.01
# Recording reads the table once more than the check and hashes every row.
RECORD_FACTOR = 2.0


@dataclass(frozen=True)
class Chunk:
    """Progress: one range of days recorded."""

    start: dt.date
    end: dt.date  # exclusive
    recorded: int  # days recorded now
    materialized: int  # materializations reported now
    done: int  # chunks done so far
    of: int

    def describe(self) -> str:
        return (
            f"{self.start}..{self.end - dt.timedelta(days=1)} ({self.done}/{self.of}): "
            f"{self.recorded} days recorded, "
            f"{self.materialized} partitions materialized"
        )


@dataclass(frozen=True)
class AdoptionResult:
    table: str
    days: int  # days from the first with rows to the last
    recorded: int  # recorded by this call
    already_recorded: int
    materialized: int  # materializations reported by this call
    kept: int  # partitions that had a materialization, kept as they were
    code_version: str
    seconds: float

    def describe(self) -> str:
        return (
            f"adopted {self.table}: {self.days} days, {self.recorded} recorded now "
            f"({self.already_recorded} were already); {self.materialized} partitions "
            f"materialized as code version {self.code_version}, {self.kept} kept their own "
            f"materialization; {self.seconds:.1f} s"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "days": self.days,
            "recorded": self.recorded,
            "already_recorded": self.already_recorded,
            "materialized": self.materialized,
            "kept": self.kept,
            "code_version": self.code_version,
            "seconds": round(self.seconds, 2),
        }


def check_adoption(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    *,
    allow_duplicates: bool = False,
    now: dt.datetime | None = None,
) -> AdoptionCheck:
    """Everything `adopt` would refuse, and what it would record; reads only."""
    spec = table.spec
    rel = wh.describe_existing(spec)
    where = f"{wh.dialect} warehouse {wh.location}"
    refusals: list[str] = []
    notes: list[str] = []
    if rel.kind == ABSENT:
        refusals.append(
            f"there is no relation {spec.name} in the {where}: there is nothing to adopt. Check "
            "the table's name and BACKFILL_ASSETS_WAREHOUSE; a table that does not exist yet is "
            "created by its daily job"
        )
    elif rel.kind == VIEW:
        refusals.append(
            f"{spec.name} is a view: adopt takes the table that holds the rows. Adopt that table "
            "under the target's name, or declare the table the view reads"
        )
    elif rel.kind == OTHER_PARTITIONING:
        refusals.append(
            f"{spec.name} is partitioned by {rel.detail or 'another scheme'}, not by range on "
            f"{spec.partition_column}: the swap moves whole weeks of a range-partitioned table. "
            f"Recreate it as a plain table (CREATE TABLE ... AS SELECT), or partitioned BY RANGE "
            f"({spec.partition_column}), then adopt again"
        )
    elif rel.views and converts(wh, rel):
        refusals.append(
            f"views read {spec.name} ({', '.join(rel.views)}): a view follows the table it was "
            "created on, not its name, so after the conversion it would go on reading the old "
            f"table. Drop them, adopt, then create them again on the new {spec.name}"
        )
    columns = column_problems(spec, rel) if rel.kind != ABSENT else []
    refusals.extend(columns)
    holder = wh.active_plan(spec.name)
    if holder is not None:
        refusals.append(
            f"plan {holder} holds {spec.name}; adopt it once the plan is released "
            f"(`backfill-assets release {holder}`) or abandoned"
        )
    scan: TableScan | None = None
    materialized = partitions = 0
    estimate = 0.0
    # The rows can be read only when the declared columns are there.
    if rel.kind not in (ABSENT, VIEW) and not columns:
        scan = wh.scan_existing(spec)
        if scan.null_partition_rows:
            refusals.append(
                f"{scan.null_partition_rows:,} rows of {spec.name} have no "
                f"{spec.partition_column} (null): they belong to no partition, and no backfill "
                f"or gate would see them. Give them a day or delete them (DELETE FROM "
                f"{spec.name} WHERE {spec.partition_column} IS NULL), then adopt again"
            )
        if scan.duplicate_keys and not allow_duplicates:
            duplicated = sum(scan.duplicate_keys.values())
            example = scan.examples[0]
            refusals.append(
                f"{duplicated:,} keys ({', '.join(spec.primary_key)}) occur more than once on "
                f"{len(scan.duplicate_keys)} days, e.g. {example.key} {example.rows} times on "
                f"{example.day}: remove the duplicates, or adopt them as they are with "
                "--allow-duplicates (the duplicate-key gate then fails a backfill of those days "
                "until its build removes them)"
            )
        keys = _partition_keys(table, scan.rows_by_day, now)
        partitions = len(keys)
        materialized = len(_materialized(instance, table, keys))
        outside = len(scan.rows_by_day) - partitions
        if outside:
            first = table.partitions_def.start.date()
            notes.append(
                f"{outside} days with rows are not partitions of {table.key} (before "
                f"{first}, or after today): they are recorded in the warehouse, but Dagster has "
                "no partition to show them on; move the partitions' start_date back to show them"
            )
        if converts(wh, rel):
            notes.append(
                f"{spec.name} is "
                + (
                    f"partitioned by {rel.detail}, not in backfill_assets' layout (one partition "
                    "per ISO week under one per ISO year)"
                    if rel.kind == PARTITIONED
                    else "a plain table"
                )
                + ": it is converted online, copied a week at a time "
                "beside it while readers go on reading it, then the names are switched in one "
                f"short transaction; the old table is kept as {spec.name}__adopted until "
                f"`adopt {spec.name} --release` (`--rollback` puts it back)"
            )
        todo = len([d for d in scan.days if d not in scan.recorded])
        share = todo / len(scan.days) if scan.days else 0.0
        estimate = scan.seconds * RECORD_FACTOR * share + (partitions - materialized) * EVENT_S
    if table.backfill_window is None:
        duration, basis = daily_duration(
            daily_run_durations(instance, table.daily_job), table.daily_job
        )
        proposed = propose_window(table.daily_expected_start, duration)
        notes.append(
            f"{table.key} declares no idle window (backfill_window): "
            + (f"{proposed} keeps clear of its daily job ({basis}); " if proposed else "")
            + "declare it, and a backfill_budget, as its runbook says (`backfill-assets runbook "
            f"{table.key}`)"
        )
    return AdoptionCheck(
        table=table.key,
        where=where,
        relation=rel,
        scan=scan,
        refusals=tuple(refusals),
        notes=tuple(notes),
        materialized=materialized,
        partitions=partitions,
        estimate_s=estimate,
    )


def adopt_table(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    *,
    check: AdoptionCheck | None = None,
    code_version: str = DEFAULT_CODE_VERSION,
    allow_duplicates: bool = False,
    chunk_days: int = DEFAULT_CHUNK_DAYS,
    wait_s: float = 3600.0,
    on_wait: Callable[[Waiting], None] | None = None,
    on_chunk: Callable[[Chunk], None] | None = None,
    now: dt.datetime | None = None,
) -> AdoptionResult:
    """Adopt `table`, in place or by converting it online (see the module's docstring);
    refuses (AdoptionRefused) what the check refuses, before writing anything."""
    t0 = time.perf_counter()
    code_version = _code_version(code_version)
    if not isinstance(chunk_days, int) or chunk_days < 1:
        raise InvalidInput(
            f"--chunk-days must be a whole number of days, 1 or more; got {chunk_days}"
        )
    if check is None:
        check = check_adoption(instance, wh, table, allow_duplicates=allow_duplicates, now=now)
    if check.refusals:
        raise AdoptionRefused("; ".join(check.refusals) + ". Nothing was written")
    scan = check.scan
    assert scan is not None  # a check without refusals has read the table
    keys = _partition_keys(table, scan.rows_by_day, now)
    had = _materialized(instance, table, keys)
    days = scan.days
    already = len([d for d in days if d in scan.recorded])
    if converts(wh, check.relation):
        assert isinstance(wh, ConvertsOnline)
        recorded, materialized = _convert(
            instance, wh, table, scan, keys, had, code_version, wait_s, on_wait, on_chunk
        )
    else:
        recorded, materialized = _in_place(
            instance, wh, table, scan, keys, had, code_version, chunk_days, wait_s, on_wait,
            on_chunk,
        )  # fmt: skip
    return AdoptionResult(
        table=table.key,
        days=len(days),
        recorded=recorded,
        already_recorded=already,
        materialized=materialized,
        kept=len(had),
        code_version=code_version,
        seconds=time.perf_counter() - t0,
    )


def converts(wh: Warehouse, rel: ExistingRelation) -> bool:
    """Whether adopting `rel` converts it online (on PostgreSQL, a plain table or one
    range-partitioned by its day in a layout of its own)."""
    return isinstance(wh, ConvertsOnline) and rel.kind in (TABLE, PARTITIONED) and not rel.layout


def adoption_blocker(wh: Warehouse, table: BackfillableTable) -> str | None:
    """Why no plan may be approved for `table` until it is adopted, or None: a relation of
    its name that the framework does not write as it is (a view, a table partitioned another
    way, a table to convert, or one holding rows the framework did not write). Approving would
    let the plan hold the table, which stops its adoption, while every batch is refused."""
    spec = table.spec
    rel = wh.describe_existing(spec)
    if rel.kind == ABSENT or rel.layout:
        return None
    if rel.kind == TABLE and not converts(wh, rel):
        # DuckDB: an empty table, or one whose days the framework recorded, is its to write.
        name = quote_ident(spec.name)
        if wh.table_rows(spec) or not wh.query(f"SELECT 1 FROM {name} LIMIT 1"):
            return None
    how = (
        f"`backfill-assets adopt {spec.name} --check`, then `backfill-assets adopt {spec.name}`"
        if rel.kind in (TABLE, PARTITIONED)
        else f"`backfill-assets adopt {spec.name} --check` says what it needs"
    )
    return (
        f"{spec.name} exists in the warehouse but backfill_assets has not adopted it "
        f"({rel.kind}), so no batch of a plan could write it: adopt it first ({how}; "
        "docs/adopt.md), then approve the plan"
    )


def _refuse_held(wh: Warehouse, spec_name: str, recorded: int) -> None:
    """Under the writer lease: stop if a plan was approved for the table meanwhile."""
    plan = wh.active_plan(spec_name)
    if plan is not None:
        raise AdoptionRefused(
            f"plan {plan} was approved for {spec_name} while it was being adopted: adoption "
            f"stopped after {recorded} days recorded now. Run `backfill-assets adopt` again once "
            "the plan is released or abandoned; it continues where it stopped"
        )


def _in_place(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    scan: TableScan,
    keys: set[str],
    had: set[str],
    code_version: str,
    chunk_days: int,
    wait_s: float,
    on_wait: Callable[[Waiting], None] | None,
    on_chunk: Callable[[Chunk], None] | None,
) -> tuple[int, int]:
    """Record the days in chunks, each under the writer lease; (days recorded, materialized)."""
    spec, days = table.spec, scan.days
    chunks = [
        (days[i], min(days[i] + dt.timedelta(days=chunk_days), days[-1] + dt.timedelta(days=1)))
        for i in range(0, len(days), chunk_days)
    ]
    recorded = materialized = 0
    for n, (c0, c1) in enumerate(chunks, 1):
        chunk_recorded = 0
        if any(d not in scan.recorded for d in _days(c0, c1)):
            holder = holder_for_command("adopt")
            with writer_lease(instance, wh, spec.name, holder, wait_s=wait_s, on_wait=on_wait):
                _refuse_held(wh, spec.name, recorded)
                chunk_recorded = len(
                    wh.record_existing(spec, c0, c1, fingerprint=table.criteria.fingerprint_columns)
                )
        recorded += chunk_recorded
        fresh = _fresh(scan, c0, c1, keys, had)
        _report(instance, table, fresh, code_version)
        materialized += len(fresh)
        if on_chunk is not None:
            on_chunk(Chunk(c0, c1, chunk_recorded, len(fresh), n, len(chunks)))
    return recorded, materialized


SWITCH_ATTEMPTS = 5


def _convert(
    instance: dg.DagsterInstance,
    wh: ConvertsOnline,
    table: BackfillableTable,
    scan: TableScan,
    keys: set[str],
    had: set[str],
    code_version: str,
    wait_s: float,
    on_wait: Callable[[Waiting], None] | None,
    on_chunk: Callable[[Chunk], None] | None,
) -> tuple[int, int]:
    """Convert a plain table online, a week at a time, each under the writer lease, then switch
    the names (lib/warehouse/postgres/convert.py); (days recorded, materialized)."""
    spec = table.spec
    base: Warehouse = wh  # type: ignore[assignment]

    def lease() -> Any:
        return writer_lease(
            instance, base, spec.name, holder_for_command("adopt"), wait_s=wait_s, on_wait=on_wait
        )

    with lease():
        _refuse_held(base, spec.name, 0)
        wh.convert_start(spec)
    done = wh.converted_weeks(spec)
    weeks = sorted({d - dt.timedelta(days=d.weekday()) for d in scan.days})
    recorded = materialized = 0
    for n, week in enumerate(weeks, 1):
        end = week + dt.timedelta(days=7)
        week_recorded = 0
        if week not in done:
            with lease():
                _refuse_held(base, spec.name, recorded)
                week_recorded = len(wh.convert_week(spec, week))
        recorded += week_recorded
        fresh = _fresh(scan, week, end, keys, had)
        _report(instance, table, fresh, code_version)
        materialized += len(fresh)
        if on_chunk is not None:
            on_chunk(Chunk(week, end, week_recorded, len(fresh), n, len(weeks)))
    # What the old pipeline wrote meanwhile is copied again; the switch refuses while any is
    # left, and its attempts are short (each waits at most as long as a swap's).
    for _ in range(SWITCH_ATTEMPTS):
        for week in sorted(wh.changed_weeks(spec)):
            with lease():
                wh.convert_week(spec, week)
        with lease():
            _refuse_held(base, spec.name, recorded)
            if wh.convert_switch(spec):
                return recorded, materialized
    raise AdoptionRefused(
        f"{spec.name} kept being written while its adoption tried to switch ({SWITCH_ATTEMPTS} "
        "attempts): stop the old pipeline's writes for a moment and run `backfill-assets adopt` "
        "again; it continues where it stopped"
    )


def _fresh(
    scan: TableScan, start: dt.date, end: dt.date, keys: set[str], had: set[str]
) -> list[tuple[dt.date, int]]:
    """The days of [start, end) with rows that are partitions without a materialization."""
    return [
        (d, scan.rows_by_day[d])
        for d in _days(start, end)
        if d.isoformat() in keys and d.isoformat() not in had
    ]


@contextmanager
def _converted(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    what: str,
    wait_s: float,
    on_wait: Callable[[Waiting], None] | None,
) -> Iterator[ConvertsOnline]:
    """The warehouse, as one that converts, under the table's writer lease; refused where
    adoption is in place (there is no old table)."""
    if not isinstance(wh, ConvertsOnline):
        raise AdoptionRefused(
            f"{wh.dialect} adopts a table in place, without a copy: there is no old table to "
            f"{what}. Nothing was changed"
        )
    holder = holder_for_command("adopt")
    with writer_lease(instance, wh, table.key, holder, wait_s=wait_s, on_wait=on_wait):
        yield wh


def rollback_adoption(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    *,
    wait_s: float = 3600.0,
    on_wait: Callable[[Waiting], None] | None = None,
) -> int:
    """Put a converted table's old table back (the days written since copied into it); the
    days copied back. DuckDB adopts in place: there is nothing to put back."""
    with _converted(instance, wh, table, "put back", wait_s, on_wait) as converting:
        return converting.convert_rollback(table.spec)


def release_adoption(
    instance: dg.DagsterInstance,
    wh: Warehouse,
    table: BackfillableTable,
    *,
    wait_s: float = 3600.0,
    on_wait: Callable[[Waiting], None] | None = None,
) -> bool:
    """Drop the old table a conversion kept; whether there was one."""
    with _converted(instance, wh, table, "release", wait_s, on_wait) as converting:
        return converting.convert_release(table.spec)


def _code_version(value: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text or any(ch.isspace() for ch in text) or len(text) > 100:
        raise InvalidInput(
            f"--code-version must be one word of at most 100 characters (e.g. 1, v1, adopted); "
            f"got {value!r}"
        )
    return text


def _days(start: dt.date, end: dt.date) -> Iterable[dt.date]:
    return (start + dt.timedelta(days=i) for i in range((end - start).days))


def _partition_keys(
    table: BackfillableTable, rows_by_day: Mapping[dt.date, int], now: dt.datetime | None
) -> set[str]:
    """The days with rows that are partitions of the table's asset (up to `now`)."""
    current = now or dt.datetime.now(dt.UTC)
    valid = set(table.partitions_def.get_partition_keys(current_time=current))
    return {d.isoformat() for d in rows_by_day if d.isoformat() in valid}


def _materialized(
    instance: dg.DagsterInstance, table: BackfillableTable, keys: set[str]
) -> set[str]:
    """The partitions of `keys` that have a materialization (any run, or none)."""
    if not keys:
        return set()
    latest = instance.event_log_storage.get_latest_storage_id_by_partition(
        dg.AssetKey.from_user_string(table.key),
        dg.DagsterEventType.ASSET_MATERIALIZATION,
        partitions=keys,
    )
    return set(latest)


def _report(
    instance: dg.DagsterInstance,
    table: BackfillableTable,
    days: list[tuple[dt.date, int]],
    code_version: str,
) -> None:
    """A runless materialization per day, as the old pipeline's runs would have recorded."""
    key = dg.AssetKey.from_user_string(table.key)
    for day, rows in days:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                asset_key=key,
                partition=day.isoformat(),
                description="adopted: written before backfill_assets managed this table",
                metadata={
                    "rows": rows,
                    "dagster/partition_row_count": rows,
                    "adopted": True,
                },
                tags={CODE_VERSION_TAG: code_version},
            )
        )
