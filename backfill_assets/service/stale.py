"""What is stale: the partitions of a table whose latest build came from other logic.

After a logic fix the table's `code_version` is bumped. Every run that writes the target records
the code version that built each partition on its materialization (Dagster's
`dagster/code_version` tag; the swap carries the version that built the shadow, the rollback the
version it restores). So the partitions still built by old logic are read from Dagster's
materialization history, not remembered by hand.

A partition is stale when its latest materialization was built by a code version other than the
table's current one, or, when the user names one (`built_by`), by that version. A materialization
without a recorded code version counts as stale under the first rule. Partitions of the table's
partitions definition that were never built are reported, never planned: there is nothing there
to replace, and the daily pipeline, not a backfill, builds them.

Stale partitions are grouped into ranges of consecutive days. Each range gets a plan of its own
(see `backfill-assets plan --stale`): one plan covers one contiguous range, as every plan does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

import dagster as dg

from backfill_assets.constants import CODE_VERSION_TAG
from backfill_assets.errors import InvalidInput
from backfill_assets.lib.dates import days
from backfill_assets.lib.table import BackfillableTable

_CHUNK = 500  # storage ids per query when reading the latest materializations


@dataclass(frozen=True)
class Build:
    """How a partition's latest materialization was built."""

    code_version: str | None  # None: the materialization recorded none
    at: dt.datetime  # UTC
    run_id: str  # "" for a materialization reported outside a run

    def describe(self) -> str:
        by = (
            f"code version {self.code_version}"
            if self.code_version is not None
            else "no recorded code version"
        )
        run = f" (run {self.run_id[:8]})" if self.run_id else ""
        return f"built by {by} on {self.at:%Y-%m-%d}{run}"


@dataclass(frozen=True)
class StaleScan:
    """What `find_stale` found for one table."""

    table: str
    current_version: str
    rule: str  # the rule in words, e.g. "built by a code version other than 2"
    stale: dict[dt.date, Build]
    never_built: tuple[dt.date, ...]
    built: int  # partitions with a materialization

    @property
    def ranges(self) -> list[tuple[dt.date, dt.date]]:
        """The stale days as ranges of consecutive days, oldest first."""
        return day_ranges(self.stale)

    def why(self, start: dt.date, end: dt.date) -> dict[str, str]:
        """partition -> why it is stale, for the stale days in [start, end]."""
        return {
            d.isoformat(): b.describe() for d, b in sorted(self.stale.items()) if start <= d <= end
        }

    def summary(self) -> list[str]:
        """What was found, in lines for a person."""
        lines = [
            f"{self.table}: {len(self.stale)} of {self.built} built partitions {self.rule}"
            + (f", in {len(self.ranges)} range(s):" if self.stale else "")
        ]
        for start, end in self.ranges:
            span = days(start, end + dt.timedelta(days=1))
            versions = sorted({self.stale[d].code_version or "none recorded" for d in span})
            n = (end - start).days + 1
            lines.append(
                f"  {start}..{end} ({n} day{'s' if n != 1 else ''}, code version "
                f"{', '.join(versions)})"
            )
        if self.never_built:
            spans = ", ".join(
                f"{a}..{b}" if a != b else str(a) for a, b in day_ranges(self.never_built)
            )
            lines.append(
                f"  never built, not planned ({len(self.never_built)} days): {_shorten(spans)}"
            )
        return lines


def day_ranges(dates: Iterable[dt.date]) -> list[tuple[dt.date, dt.date]]:
    """Consecutive days grouped into (first, last) ranges, oldest first."""
    out: list[tuple[dt.date, dt.date]] = []
    for d in sorted(dates):
        if out and d == out[-1][1] + dt.timedelta(days=1):
            out[-1] = (out[-1][0], d)
        else:
            out.append((d, d))
    return out


def latest_builds(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, partitions: Iterable[str]
) -> dict[str, Build]:
    """partition -> how its latest materialization was built, for the partitions of
    `partitions` that have one: one index query for the latest event per partition, then the
    events themselves by storage id."""
    wanted = set(partitions)
    latest = instance.event_log_storage.get_latest_storage_id_by_partition(
        asset_key, dg.DagsterEventType.ASSET_MATERIALIZATION, partitions=wanted
    )
    ids = sorted(latest.values())
    out: dict[str, Build] = {}
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset_key, storage_ids=chunk), limit=len(chunk)
        ).records
        for rec in records:
            mat = rec.asset_materialization
            if mat is None or mat.partition is None:
                continue
            out[mat.partition] = Build(
                code_version=(mat.tags or {}).get(CODE_VERSION_TAG),
                at=dt.datetime.fromtimestamp(rec.timestamp, dt.UTC),
                run_id=rec.run_id or "",
            )
    return out


def find_stale(
    instance: dg.DagsterInstance,
    table: BackfillableTable,
    *,
    now: dt.datetime,
    built_by: str | None = None,
) -> StaleScan:
    """The partitions of `table` (up to `now`) whose latest build is stale.

    Raises:
        InvalidInput: `built_by` names the table's current code version (nothing built by it is
            stale), or is blank.
    """
    current = table.code_version
    if built_by is not None:
        built_by = built_by.strip()
        if not built_by:
            raise InvalidInput("--built-by needs a code version, e.g. --built-by 1")
        if built_by == current:
            raise InvalidInput(
                f"{built_by!r} is {table.key}'s current code version: partitions it built are "
                "up to date. Name the old version (--built-by OLD), or leave --built-by out to "
                "find every partition built by another version"
            )
        rule = f"built by code version {built_by}"
    else:
        rule = f"built by a code version other than {current} (the current one)"
    keys = table.partitions_def.get_partition_keys(current_time=now)
    builds = latest_builds(instance, dg.AssetKey.from_user_string(table.key), keys)
    stale: dict[dt.date, Build] = {}
    never: list[dt.date] = []
    for key in keys:
        day = dt.date.fromisoformat(key)
        build = builds.get(key)
        if build is None:
            never.append(day)
        elif (built_by is None and build.code_version != current) or (
            built_by is not None and build.code_version == built_by
        ):
            stale[day] = build
    return StaleScan(
        table=table.key,
        current_version=current,
        rule=rule,
        stale=stale,
        never_built=tuple(never),
        built=len(builds),
    )


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
