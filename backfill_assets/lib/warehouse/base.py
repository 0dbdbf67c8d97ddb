"""The warehouse seam. Adapters implement `Warehouse`; nothing above this layer writes SQL.

The swap is designed as "exchange partitions": an adapter moves pointers (DuckDB: rename one
table per ISO week behind a view; Postgres: ATTACH/DETACH PARTITION) rather than copying rows,
so its cost follows the number of weeks in the plan, not the size of the table or the range.

Besides the data, an adapter keeps the coordination state that must be atomic with it, in its
`backfill_meta` schema: per-partition versions, the shadow build log, the swap log, the writer
lease of each table and the plan that holds each table.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from backfill_assets.constants import BACKUP_INFIX, BASE_SUFFIX, TEMPLATE_SUFFIX
from backfill_assets.errors import InvalidInput, SwapRefused
from backfill_assets.lib.spec import TableSpec
from backfill_assets.lib.warehouse.identifiers import validate_ident

if TYPE_CHECKING:
    import pandas as pd

    from backfill_assets.lib.adoption import ExistingRelation, TableScan
    from backfill_assets.lib.review.diff import DataDiff
    from backfill_assets.lib.warehouse.dialects import SQL


@dataclass(frozen=True)
class PartitionStats:
    """Rows and estimated bytes per partition of one table, read in one query."""

    rows: dict[dt.date, int]
    bytes_per_row: int

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


@dataclass(frozen=True)
class SampleDiff:
    """A row-level comparison of sampled shadow rows against the live target (one partition)."""

    sampled: int
    missing_in_target: int
    mismatches: dict[str, int]  # unchanged column -> sampled rows where it differs
    predicate_violations: dict[str, int]  # changed column predicate -> sampled rows failing
    fingerprint_equal: bool | None  # whole-partition hash of unchanged columns, None if skipped
    rows: list[dict[str, Any]] = field(default_factory=list)  # up to 20 failing sampled rows


@dataclass(frozen=True)
class GateInputs:
    """Per partition of [start, end): counts, duplicates, invariant violations, sample diff."""

    shadow_rows: dict[dt.date, int]
    target_rows: dict[dt.date, int]
    source_rows: dict[dt.date, int] | None
    duplicates: dict[dt.date, int]
    invariants: dict[dt.date, dict[str, int]]
    samples: dict[dt.date, SampleDiff]


@dataclass(frozen=True)
class PartitionMove:
    """What a swap or rollback put into one partition of the target and what it took out."""

    rows_in: int
    checksum_in: str
    rows_out: int
    checksum_out: str


@dataclass(frozen=True)
class SwapResult:
    plan_id: str
    action: str  # "swapped", "rolled_back", "already_swapped", "already_rolled_back"
    partitions: dict[dt.date, PartitionMove]
    weeks: int
    seconds: float
    published: tuple[str, ...] = ()  # companions the swap published (their live names)
    restored: tuple[str, ...] = ()  # companions the rollback put back (or dropped, if new)


@dataclass(frozen=True)
class Companion:
    """A relation published with the target by its swap: `shadow` (already built) replaces
    `live`, whose old table is kept as the plan's backup until released."""

    live: str
    shadow: str


COMPANION_BACKUP_INFIX = "__bfb_"
MAX_IDENT = 63  # PostgreSQL's identifier limit (longer names are truncated); DuckDB's too here


def companion_backup(live: str, plan_id: str) -> str:
    """The name a plan's swap keeps `live`'s replaced table under: `<live>__bfb_<plan id>`, or,
    when that exceeds 63 bytes, `live` shortened, the plan id's first 12 characters and 10 hex
    digits of a hash of both full names (deterministic; distinct lives stay distinct)."""
    validate_ident(live, "companion")
    validate_ident(plan_id, "plan id")
    name = f"{live}{COMPANION_BACKUP_INFIX}{plan_id}"
    if len(name) <= MAX_IDENT:
        return name
    digest = hashlib.sha256(f"{live}/{plan_id}".encode()).hexdigest()[:10]
    tail = f"{COMPANION_BACKUP_INFIX}{plan_id[:12]}_{digest}"
    return f"{live[: MAX_IDENT - len(tail)]}{tail}"


def check_companions(spec: TableSpec, companions: Sequence[Companion]) -> tuple[Companion, ...]:
    """Every companion's names validated (InvalidInput otherwise): safe identifiers, none of
    them the target's own relations, each named once."""
    out = tuple(companions)
    own = re.compile(
        rf"{re.escape(spec.name)}(|{re.escape(TEMPLATE_SUFFIX)}|{re.escape(BASE_SUFFIX)}|__w[0-9]{{4}}w[0-9]{{2}}"
        rf"|__y[0-9]{{4}}|{re.escape(BACKUP_INFIX)}.*)",
        re.ASCII,
    )
    seen: set[str] = set()
    for c in out:
        if not isinstance(c, Companion):
            raise InvalidInput(f"a companion must be a Companion(live, shadow), not {c!r}")
        for name, what in ((c.live, "companion"), (c.shadow, "companion shadow")):
            validate_ident(name, what)
            if own.fullmatch(name) or name.startswith(spec.shadow_name):
                raise InvalidInput(
                    f"{what} {name} is one of {spec.name}'s own relations; a companion is a "
                    "downstream relation published with it"
                )
            if name.lower() in seen:
                raise InvalidInput(
                    f"{what} {name} is named twice among the companions of the swap of {spec.name}"
                )
            seen.add(name.lower())
    return out


def plan_companions(
    plan_id: str,
    companions: Sequence[Companion],
    kind_of: Callable[[str], str | None],
    where: str,
) -> list[tuple[Companion, str, bool]]:
    """What a swap does with each companion: (companion, backup name, whether `live` exists).
    Refuses (SwapRefused) unless each shadow is a table, each live a table or absent, and each
    backup name free. `kind_of(name)` is "table", another kind ("view", ...), or None (absent);
    `where` names the schema, for the messages."""
    out: list[tuple[Companion, str, bool]] = []
    for c in companions:
        shadow_kind = kind_of(c.shadow)
        if shadow_kind is None:
            raise SwapRefused(
                f"the shadow of companion {c.live}, {where}{c.shadow}, does not exist; run the "
                f"downstream shadow build (into {c.shadow}) first, then swap again. Nothing was "
                "changed"
            )
        if shadow_kind != "table":
            raise SwapRefused(
                f"the shadow of companion {c.live}, {where}{c.shadow}, is a {shadow_kind}, not a "
                "table; build it as a table, then swap again. Nothing was changed"
            )
        live_kind = kind_of(c.live)
        if live_kind not in (None, "table"):
            raise SwapRefused(
                f"companion {where}{c.live} is a {live_kind}, not a table: only a table can be "
                "replaced and kept as a backup. Nothing was changed"
            )
        backup = companion_backup(c.live, plan_id)
        if kind_of(backup) is not None:
            raise SwapRefused(
                f"{where}{backup}, where plan {plan_id} keeps the replaced {c.live}, already "
                "exists; drop or rename it, then swap again. Nothing was changed"
            )
        out.append((c, backup, live_kind is not None))
    return out


# A plan's states in the warehouse's record of it (a subset of lib.states.PlanStatus: a proposed
# plan is only in the Dagster instance). Each changes in the transaction that does what it names.
APPROVED, SWAPPED, ROLLED_BACK, RELEASED, ABANDONED = (
    "approved",
    "swapped",
    "rolled_back",
    "released",
    "abandoned",
)
HOLDING_STATES = (APPROVED, SWAPPED)  # the plan holds its table


@dataclass(frozen=True)
class PlanRecord:
    """A plan as the warehouse keeps it: the state of record of what happened to its table.

    The status changes in the same transaction as what it names (the claim, the swap, the
    rollback, the release, the abandon), so it is true whatever happens to the process after
    the commit. `recorded` is the status the Dagster instance was last told; a command that
    finds it behind tells the instance (service.reconcile)."""

    plan_id: str
    table: str
    status: str
    plan_json: str
    approved_by: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)  # what the swap recorded with it
    changed_at: dt.datetime | None = None
    recorded: str | None = None

    @property
    def told(self) -> bool:
        """Whether the instance was told the current status."""
        return self.recorded == self.status


# The plans table's columns, in the order `plan_record_from_row` reads them.
PLAN_COLUMNS = "plan_id, table_name, status, plan_json, approved_by, details, changed_at, recorded"


def plan_record_from_row(row: Sequence[Any], table: str | None = None) -> PlanRecord:
    """A PlanRecord from a row of PLAN_COLUMNS (`table`: the table's name, when the row keeps
    another key for it)."""
    details = json.loads(row[5]) if row[5] else {}
    return PlanRecord(
        plan_id=str(row[0]),
        table=table if table is not None else str(row[1]),
        status=str(row[2]),
        plan_json=str(row[3] or ""),
        approved_by=str(row[4] or ""),
        details=details if isinstance(details, dict) else {},
        changed_at=row[6],
        recorded=str(row[7]) if row[7] is not None else None,
    )


def refuse_abandon(
    plan_id: str, table: str, swap_state: str | None, record: PlanRecord | None
) -> None:
    """Refuse (SwapRefused) to abandon a plan the warehouse says was swapped (or is over)."""
    if swap_state == SWAPPED or (record is not None and record.status == SWAPPED):
        raise SwapRefused(
            f"plan {plan_id} was swapped into {table}: abandoning it would leave its backup "
            f"with nothing to restore it. Roll it back (`backfill-assets rollback {plan_id}`) "
            f"or release its backup (`backfill-assets release {plan_id}`). Nothing was changed"
        )
    over = swap_state or (record.status if record is not None else None)
    if over in (ROLLED_BACK, RELEASED, ABANDONED):
        raise SwapRefused(
            f"plan {plan_id} is already {over} in the warehouse: there is nothing left to "
            "abandon. Nothing was changed"
        )


def swap_move(checksum_in: str | None, checksum_out: str | None) -> PartitionMove:
    """A partition's move from the checksums in and out (`rows:hash`; None: no rows)."""
    return PartitionMove(
        rows_of(checksum_in), checksum_in or EMPTY, rows_of(checksum_out), checksum_out or EMPTY
    )


EMPTY = "0:0000000000000000"  # the checksum of a partition without rows


def rows_of(checksum: str | None) -> int:
    """The rows a checksum (`rows:hash`) counts; 0 for None."""
    return int(checksum.split(":", 1)[0]) if checksum else 0


# Lease holders that are not runs: a command (`cmd:<uuid>`, held for the length of one change)
# and a process (`proc:<uuid>`, held for the life of a process: the runner of a plan).
COMMAND_HOLDER, PROCESS_HOLDER = "cmd:", "proc:"
# The lease of a plan's runner is kept beside the tables' writer leases, under this prefix and
# the plan's id (a name no table can have).
RUNNER_LEASE = "runner:"


def lease_name(name: str) -> str:
    """A lease's name, validated: a table's name, or `runner:<plan id>`."""
    if name.startswith(RUNNER_LEASE):
        return RUNNER_LEASE + validate_ident(name[len(RUNNER_LEASE) :], "plan id")
    return validate_ident(name, "table name")


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease: a run (its id), a command (`cmd:<uuid>`) or a process
    (`proc:<uuid>`), with the process it runs in: its host, pid and `process`, a token of the
    process's start (lib-independent: service.lease makes it) that a later process with the
    same pid does not share."""

    holder_id: str
    role: str = ""
    job_name: str = ""
    plan_id: str = ""
    host: str = ""
    pid: int = 0
    claimed_at: dt.datetime | None = None
    process: str = ""

    @property
    def run_id(self) -> str | None:
        if self.holder_id.startswith((COMMAND_HOLDER, PROCESS_HOLDER)):
            return None
        return self.holder_id

    def describe(self) -> str:
        what = (
            f"run {self.holder_id[:8]}"
            if self.run_id
            else "process"
            if self.holder_id.startswith(PROCESS_HOLDER)
            else "command"
        )
        plan = f"plan {self.plan_id}" if self.plan_id else ""
        parts = [p for p in (self.role, self.job_name, plan) if p]
        at = f", pid {self.pid} on {self.host}" if self.pid else ""
        since = f", since {self.claimed_at:%Y-%m-%d %H:%M:%S} UTC" if self.claimed_at else ""
        return f"{what} ({', '.join(parts) or 'no role'}{at}{since})"


def lease_holder_from(columns: Sequence[str], row: Sequence[Any]) -> LeaseHolder:
    """A LeaseHolder from a row of the writer lease table read with `SELECT *`: by column name,
    so that a table from before a column (an older warehouse, read without writing) reads too."""
    got = dict(zip(columns, row, strict=True))
    return LeaseHolder(
        holder_id=str(got["holder_id"]),
        role=got.get("role") or "",
        job_name=got.get("job_name") or "",
        plan_id=got.get("plan_id") or "",
        host=got.get("host") or "",
        pid=int(got.get("pid") or 0),
        claimed_at=got.get("claimed_at"),
        process=got.get("process") or "",
    )


class GateSource(Protocol):
    """What the gates read (lib/gates): everything for a batch in a few set-based queries."""

    def gate_inputs(
        self,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        *,
        plan_id: str,
        sample_size: int,
        unchanged: tuple[str, ...],
        changed_predicates: Mapping[str, str],
        invariants: Mapping[str, str],
        full_compare: bool,
    ) -> GateInputs: ...

    def diff(
        self,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        *,
        tolerance: float = ...,
        known_same: Sequence[str] = ...,
        detail: bool = ...,
    ) -> DataDiff:
        """The shadow's rows of [start, end) against the live rows of those days
        (lib/review/diff.py); reads only."""
        ...


@runtime_checkable
class JointGateSource(Protocol):
    """An adapter that reads the gates' inputs and the diff gate's diff together, the diff's
    row-by-row comparison standing for the fingerprints (PostgreSQL: postgres/gates.py). The
    others read `gate_inputs`, then `diff`."""

    def gates_and_diff(
        self,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        *,
        tolerance: float,
        plan_id: str,
        sample_size: int,
        unchanged: tuple[str, ...],
        changed_predicates: Mapping[str, str],
        invariants: Mapping[str, str],
        full_compare: bool,
    ) -> tuple[GateInputs, DataDiff]: ...


class Warehouse(GateSource, Protocol):
    """What the rest of the package needs from a warehouse (what the gates read among it)."""

    dialect: str  # "duckdb" or "postgres": the SQL dialect builds and predicates are rendered in

    @property
    def location(self) -> str: ...

    def ensure_table(self, spec: TableSpec) -> None: ...

    def replace_partitions(
        self,
        spec: TableSpec,
        start: dt.date,
        end: dt.date,
        *,
        build: SQL | pd.DataFrame,
        shadow: bool = False,
        plan_id: str | None = None,
        fingerprint: Sequence[str] = (),
    ) -> dict[dt.date, int]: ...

    def partition_stats(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> PartitionStats: ...

    def checksums(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, shadow: bool = False
    ) -> dict[dt.date, str]: ...

    def relation_exists(self, name: str) -> bool:
        """Whether a table or view `name` exists in the warehouse's schema."""
        ...

    def swap(
        self,
        spec: TableSpec,
        plan_id: str,
        days: list[dt.date],
        companions: Sequence[Companion] = (),
        details: Mapping[str, Any] | None = None,
    ) -> SwapResult:
        """Move the plan's shadow weeks into the target, keeping the replaced weeks as backup;
        in the same transaction, publish each companion (its shadow replaces its live, which is
        kept as the plan's backup) and record the plan swapped, with `details`. Refuses
        (SwapRefused), changing nothing, when a companion's shadow does not exist."""
        ...

    def rollback(self, spec: TableSpec, plan_id: str) -> SwapResult:
        """Put the backed-up weeks back, and each companion the swap published, in one
        transaction (a companion that did not exist before the swap is dropped), which also
        records the plan rolled back and frees the table."""
        ...

    def release_backup(self, spec: TableSpec, plan_id: str) -> int:
        """Drop the plan's backup weeks and its companions' backups, record the plan released
        and free the table, in one transaction; the backup weeks dropped."""
        ...

    def drop_shadow(self, spec: TableSpec, plan_id: str | None = None) -> int: ...

    def abandon(self, spec: TableSpec, plan_id: str) -> int:
        """Drop an unswapped plan's shadow, free the table, record the plan abandoned, in one
        transaction; refuses (SwapRefused) a plan that was swapped. The shadow weeks dropped."""
        ...

    def swap_moves(self, table: str, plan_id: str) -> dict[dt.date, PartitionMove]: ...

    # -- the state of record of each plan (lib/warehouse/shared/records.py) ------------------------

    def plan_record(self, plan_id: str) -> PlanRecord | None: ...

    def plan_records(self, *, untold: bool = False) -> list[PlanRecord]: ...

    def mark_recorded(self, plan_id: str, status: str) -> None: ...

    def swap_state(self, spec: TableSpec, plan_id: str) -> str | None: ...

    # -- coordination ----------------------------------------------------------------------

    def claim_writer(
        self, table: str, holder: LeaseHolder, *, takeover: str | None = None
    ) -> LeaseHolder: ...

    def release_writer(self, table: str, holder_id: str) -> bool: ...

    def writer(self, table: str) -> LeaseHolder | None: ...

    def claim_plan(
        self, table: str, plan_id: str, *, plan_json: str | None = None, approved_by: str = ""
    ) -> str: ...

    def release_plan(self, table: str, plan_id: str) -> bool: ...

    def active_plan(self, table: str) -> str | None: ...

    def partition_versions(
        self, spec: TableSpec, start: dt.date, end: dt.date
    ) -> dict[dt.date, int]: ...

    def live_week_count(self, spec: TableSpec) -> int: ...

    def table_rows(self, spec: TableSpec) -> int:
        """Rows in the live table, from the per-day counts every write, swap and rollback
        records (no scan of the table)."""
        ...

    def build_problem(self, spec: TableSpec, build: SQL) -> str | None: ...

    # -- adopting a table that already exists (lib/adoption.py) ---------------------------------

    def describe_existing(self, spec: TableSpec) -> ExistingRelation:
        """The relation named like the target, its columns, and the declaration's columns with
        their types as this engine names them; reads only."""
        ...

    def scan_existing(self, spec: TableSpec) -> TableScan:
        """One read of the existing table: rows per day, null partition values, duplicate keys,
        the days already recorded."""
        ...

    def record_existing(
        self, spec: TableSpec, start: dt.date, end: dt.date, *, fingerprint: Sequence[str] = ()
    ) -> dict[dt.date, str]:
        """Record each day of [start, end) that has no record yet (rows, checksum, and on
        DuckDB the fingerprint), in one transaction; the days recorded now, with checksums."""
        ...

    # -- plain tables (sources, reference data) and reads ----------------------------------
    # SQL passed here is written in DuckDB's dialect with `$name` parameters; other adapters
    # transpile it (lib/warehouse/dialects.py).

    def replace_plain_partitions(
        self,
        table: str,
        columns: list[tuple[str, str]],
        partition_column: str,
        select_sql: str | pd.DataFrame,
        start: dt.date,
        end: dt.date,
        params: Mapping[str, Any] | None = None,
    ) -> int: ...

    def replace_reference_table(
        self, table: str, columns: list[tuple[str, str]], rows: list[tuple]
    ) -> None: ...

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]: ...

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]: ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def session(self) -> AbstractContextManager[None]:
        """Calls made inside may share one connection (DuckDB: the file stays open between a
        batch's write and its gates); each write is still its own transaction."""
        ...
