"""Build a plan's impacted dbt models in shadow, from the target's shadow, before its swap.

The swap publishes what this builds together with the target, in the warehouse transaction of
the target's swap (`Companion`s), so readers never see the fixed target next to stale marts:

1. An *overlay* view of the target (`<target>__bf_overlay`): its live rows outside the plan's
   range, the plan's validated shadow rows inside it: what the target holds after the swap.
2. Every impacted dbt model materialized as a table or incremental gets a shadow relation
   (`<model>__bf_shadow`); an incremental one starts as a copy of its live table, so only the
   plan's partitions are rebuilt. Impacted views get shadow views, for the build to read through;
   they are not published (a view reads whatever the target holds).
3. One `dbt build` of those models, with the var `backfill_assets_shadow` mapping each model
   and the target's source to its shadow relation, and one partition window as vars for every
   grain (`plan_invocations`): the union of the grains' windows, where it is whole partitions of
   every grain. A finer grain then also rebuilds its partitions in that union outside its own
   window (the days of a partial first or last week), from the target's live rows. When one
   window does not fit every grain, or an unpartitioned model would read the window vars, it
   falls back to one invocation per grain (upstream grains first) and says why. The project's
   `generate_alias_name` and `source` macros (backfill_assets/dbt/backfill_assets_shadow.sql)
   honour the shadow var; without them nothing is built (a build would write the live models).
   The models' dbt tests run on the shadows: they are the `downstream_dbt_tests` gate.

Impacted assets that are not dbt tables (views aside) are only flagged: the caller refreshes them
after the swap as before.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from zoneinfo import ZoneInfo

import dagster as dg

from backfill_assets.constants import DOWNSTREAM_CHECK
from backfill_assets.errors import BackfillError, SwapRefused
from backfill_assets.lib.asset_graph import AssetGraphLike
from backfill_assets.lib.planning.plan import PUBLISHED_MATERIALIZATIONS, BackfillPlan
from backfill_assets.lib.table import BackfillableTable
from backfill_assets.lib.warehouse.base import Companion, Warehouse
from backfill_assets.lib.warehouse.identifiers import quote_ident, validate_ident

SHADOW_SUFFIX = "__bf_shadow"
OVERLAY_SUFFIX = "__bf_overlay"
SHADOW_VAR = "backfill_assets_shadow"
MANIFEST_KEY = "dagster_dbt/manifest"
UNIQUE_ID_KEY = "dagster_dbt/unique_id"
MACRO_FILE = "backfill_assets/dbt/backfill_assets_shadow.sql"


@dataclass(frozen=True)
class DbtDownstream:
    """How a table's swap builds its impacted dbt models in shadow (`backfill_definitions`'
    `downstream_dbt`).

    Args:
        resource_key: the code location's `DbtCliResource`.
        window_vars: the dbt vars your partitioned models read their half-open partition window
            from (start date, end date), as your @dbt_assets pass them.
        cli_target: warehouse URL -> (extra dbt arguments, environment variables) selecting the
            dbt target that writes that warehouse, as your @dbt_assets select it. None: the
            profile's default target.
    """

    resource_key: str = "dbt"
    window_vars: tuple[str, str] = ("min_date", "max_date")
    cli_target: Callable[[str], tuple[list[str], dict[str, str]]] | None = None


@dataclass(frozen=True)
class DbtModel:
    asset_key: str
    name: str
    relation: str  # the live relation (the model's alias)
    materialized: str

    @property
    def shadow(self) -> str:
        return validate_ident(f"{self.relation[:50]}{SHADOW_SUFFIX}", "shadow relation")


@dataclass(frozen=True)
class Downstream:
    """A plan's impact set, split by what the swap does with each asset."""

    rebuilt: tuple[DbtModel, ...]  # dbt tables: built in shadow, published with the target
    views: tuple[DbtModel, ...]  # dbt views: follow the target; shadow views only for the build
    manifest: Mapping[str, Any] | None = None
    # Anything else in the impact set is left to the refresh after the swap (or flagged).


@dataclass(frozen=True)
class Outcome:
    unique_id: str
    status: str
    failures: int | None
    message: str

    @property
    def ok(self) -> bool:
        return self.status in ("success", "pass", "warn")

    @property
    def name(self) -> str:
        """The node's name: `test.<package>.<name>.<hash>` and `model.<package>.<name>`."""
        parts = self.unique_id.split(".")
        return parts[2] if len(parts) > 2 else self.unique_id


@dataclass
class ShadowBuild:
    """What one shadow build of a plan's downstream did."""

    plan_id: str
    companions: list[Companion] = field(default_factory=list)
    # asset keys of the tables it publishes and of the views that follow the target
    published_keys: list[str] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    split: str | None = None  # why it took more than one dbt invocation
    windows: list[str] = field(default_factory=list)  # the window of each dbt invocation run
    # per partitioned table it publishes, the partition keys its invocation's window rebuilt
    rebuilt_partitions: dict[str, list[str]] = field(default_factory=dict)

    @property
    def invocations(self) -> int:
        return len(self.windows)

    @property
    def passed(self) -> bool:
        return self.error is None and all(o.ok for o in self.outcomes)

    @property
    def tests(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.unique_id.startswith("test.")]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self) -> str:
        tests = self.tests
        passed = sum(o.ok for o in tests)
        models = ", ".join(c.live for c in self.companions) or "no tables"
        head = f"{models} built in shadow; dbt tests {passed}/{len(tests)} passed"
        if self.error:
            return f"{head}; {self.error}"
        if self.failed:
            bad = "; ".join(
                f"{o.name} {o.status}" + (f" ({o.failures} rows)" if o.failures else "")
                for o in self.failed[:5]
            )
            return f"{head}; failing: {bad}"
        return head

    def evaluation(self, shadow_key: str) -> dg.AssetCheckEvaluation:
        """The `downstream_dbt_tests` gate's result, recorded on the table's shadow asset."""
        return dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey(shadow_key),
            check_name=DOWNSTREAM_CHECK,
            passed=self.passed,
            severity=dg.AssetCheckSeverity.ERROR,
            description=self.summary(),
            metadata={
                "plan_id": self.plan_id,
                "models": [c.live for c in self.companions],
                "dbt_tests": len(self.tests),
                "dbt_invocations": self.invocations,
                "dbt_windows": self.windows,
                **({"one_invocation_refused": self.split} if self.split else {}),
                "failed": [f"{o.unique_id}: {o.status} {o.message}"[:300] for o in self.failed],
                "seconds": round(self.seconds, 2),
            },
        )


def classify(plan: BackfillPlan, graph: AssetGraphLike) -> Downstream:
    """Which of the plan's impacted assets are dbt tables (rebuilt in shadow) and dbt views;
    the rest is not the shadow build's."""
    rebuilt: list[DbtModel] = []
    views: list[DbtModel] = []
    manifest: Mapping[str, Any] | None = None
    for item in plan.impact:
        key = dg.AssetKey.from_user_string(item.asset_key)
        meta = graph.get(key).metadata if graph.has(key) else {}
        wrapper, unique_id = meta.get(MANIFEST_KEY), meta.get(UNIQUE_ID_KEY)
        nodes = wrapper.manifest["nodes"] if wrapper is not None else {}
        node = nodes.get(unique_id) if unique_id else None
        if wrapper is None or node is None or node.get("resource_type") != "model":
            continue
        manifest = manifest or wrapper.manifest
        model = DbtModel(
            item.asset_key,
            node["name"],
            node.get("alias") or node["name"],
            str(node.get("config", {}).get("materialized", "")),
        )
        if model.materialized in PUBLISHED_MATERIALIZATIONS:
            rebuilt.append(model)
        elif model.materialized == "view":
            views.append(model)
    return Downstream(tuple(rebuilt), tuple(views), manifest)


def require_shadow_macros(manifest: Mapping[str, Any], models: Iterable[str]) -> None:
    """Refuse unless the dbt project overrides `generate_alias_name` and `source` with macros
    that read the shadow var: a project that ignored it would write the live models."""
    found = {
        m.get("name")
        for m in manifest.get("macros", {}).values()
        if m.get("package_name") != "dbt" and SHADOW_VAR in (m.get("macro_sql") or "")
    }
    if not {"generate_alias_name", "source"} <= found:
        raise BackfillError(
            f"the dbt project of {', '.join(models)} cannot build them in shadow: copy "
            f"{MACRO_FILE} (in the backfill_assets package) into its macros/ folder, or swap "
            "with --no-refresh to publish the target alone"
        )


def _drop(wh: Warehouse, views: Iterable[str], tables: Iterable[str]) -> None:
    for name in views:
        wh.execute(f"DROP VIEW IF EXISTS {quote_ident(name)}")
    for name in tables:
        wh.execute(f"DROP TABLE IF EXISTS {quote_ident(name)}")


def _window(
    graph: AssetGraphLike, keys: Sequence[str], start: str, end: str
) -> tuple[dt.date, dt.date]:
    # A time-window grain: dbt is handed its window (a static grain would fail here).
    pd = cast(
        "dg.TimeWindowPartitionsDefinition",
        graph.get(dg.AssetKey.from_user_string(keys[0])).partitions_def,
    )
    return (
        pd.time_window_for_partition_key(start).start.date(),
        pd.time_window_for_partition_key(end).end.date(),
    )


@dataclass(frozen=True)
class Invocation:
    """One `dbt build` of a shadow build: its models, and the partition window it passes as the
    window vars (None: it passes none, and the models build everything)."""

    names: tuple[str, ...]
    window: tuple[dt.date, dt.date] | None


def grain_invocations(
    plan: BackfillPlan, graph: AssetGraphLike, downstream: Downstream
) -> list[Invocation]:
    """One dbt invocation per grain of the plan's impacted models, upstream grains first, each
    with its grain's own partition window."""
    return [inv for _, inv in _grains(plan, graph, downstream)]


def _grains(
    plan: BackfillPlan, graph: AssetGraphLike, downstream: Downstream
) -> list[tuple[tuple[str, ...], Invocation]]:
    from backfill_assets.service.refresh import refresh_requests

    names = {m.asset_key: m.name for m in (*downstream.rebuilt, *downstream.views)}
    return [
        (
            req.asset_keys,
            Invocation(
                tuple(sorted(names[k] for k in req.asset_keys)),
                _window(graph, req.asset_keys, req.start, req.end)
                if req.start and req.end
                else None,
            ),
        )
        for req in refresh_requests(plan, graph, only=set(names))
    ]


def plan_invocations(
    plan: BackfillPlan, graph: AssetGraphLike, downstream: Downstream, config: DbtDownstream
) -> tuple[list[Invocation], str | None]:
    """The dbt invocations that build a plan's impacted models in shadow, and why there is more
    than one (None when there is one).

    One invocation builds every grain, with the union of the grains' partition windows, when:
    - that union is whole partitions of every partitioned grain, all of them existing (a weekly
      model must not be handed part of a week, nor a week it has no partition for); and
    - no unpartitioned model, no test of one and no ephemeral model it reads mentions a window
      var, in its SQL or in the macros it calls: such a model would build only the window.
    Otherwise one invocation per grain (`grain_invocations`).
    """
    grains = _grains(plan, graph, downstream)
    per_grain = [inv for _, inv in grains]
    if len(per_grain) <= 1:
        return per_grain, None
    windows = [inv.window for inv in per_grain if inv.window is not None]
    union = (min(w[0] for w in windows), max(w[1] for w in windows)) if windows else None
    why = None
    if union is not None:
        for keys, inv in grains:
            if inv.window is not None and not _whole_partitions(graph, keys[0], union):
                why = f"{union[0]}..{union[1]} is not whole partitions of {', '.join(inv.names)}"
                break
        unpartitioned = [name for inv in per_grain if inv.window is None for name in inv.names]
        if why is None and downstream.manifest is not None:
            reader = _reads_vars(downstream.manifest, unpartitioned, config.window_vars)
            if reader:
                why = (
                    f"{reader} (unpartitioned) mentions a window var "
                    f"({', '.join(config.window_vars)})"
                )
    if why is not None:
        return per_grain, why
    return [Invocation(tuple(sorted(n for inv in per_grain for n in inv.names)), union)], None


def _time_window(pd: dg.TimeWindowPartitionsDefinition, window: tuple[dt.date, dt.date]) -> Any:
    tz = ZoneInfo(pd.timezone)
    return dg.TimeWindow(
        dt.datetime.combine(window[0], dt.time(), tzinfo=tz),
        dt.datetime.combine(window[1], dt.time(), tzinfo=tz),
    )


def _partitions_in(
    graph: AssetGraphLike, models: Iterable[DbtModel], window: tuple[dt.date, dt.date]
) -> dict[str, list[str]]:
    """Per time-partitioned model, its existing partition keys inside [start, end)."""
    out = {}
    for m in models:
        pd = graph.get(dg.AssetKey.from_user_string(m.asset_key)).partitions_def
        if isinstance(pd, dg.TimeWindowPartitionsDefinition):
            keys = pd.get_partition_keys_in_time_window(_time_window(pd, window))
            out[m.asset_key] = [k for k in keys if pd.has_partition_key(k)]
    return out


def _whole_partitions(graph: AssetGraphLike, key: str, window: tuple[dt.date, dt.date]) -> bool:
    """Whether [start, end) is a run of existing whole partitions of the asset's grain."""
    pd = graph.get(dg.AssetKey.from_user_string(key)).partitions_def
    if not isinstance(pd, dg.TimeWindowPartitionsDefinition):
        return False
    tw = _time_window(pd, window)
    lo, hi = tw.start, tw.end
    keys = pd.get_partition_keys_in_time_window(tw)
    if not keys or not (pd.has_partition_key(keys[0]) and pd.has_partition_key(keys[-1])):
        return False
    first = pd.time_window_for_partition_key(keys[0])
    last = pd.time_window_for_partition_key(keys[-1])
    return first.start == lo and last.end == hi


def _reads_vars(
    manifest: Mapping[str, Any], models: Iterable[str], var_names: Sequence[str]
) -> str | None:
    """The first of `models` whose SQL, tests, ephemeral inputs or macros (recursively) mention
    one of `var_names`; None if none does. Conservative: any mention counts."""
    nodes, macros = manifest.get("nodes", {}), manifest.get("macros", {})
    mention = re.compile(r"\b(" + "|".join(re.escape(v) for v in var_names) + r")\b")
    by_name = {n["name"]: uid for uid, n in nodes.items() if n.get("resource_type") == "model"}
    tests_of: dict[str, list[str]] = {}
    for uid, n in nodes.items():
        if n.get("resource_type") == "test":
            for dep in n.get("depends_on", {}).get("nodes", []):
                tests_of.setdefault(dep, []).append(uid)

    def texts(uid: str, seen: set[str]) -> Iterator[str]:
        if uid in seen:
            return
        seen.add(uid)
        node = nodes.get(uid) or macros.get(uid) or {}
        yield node.get("raw_code") or node.get("macro_sql") or ""
        deps = node.get("depends_on", {})
        for macro in deps.get("macros", []):
            yield from texts(macro, seen)
        for dep in deps.get("nodes", []):
            if nodes.get(dep, {}).get("config", {}).get("materialized") == "ephemeral":
                yield from texts(dep, seen)

    for name in models:
        uid = by_name.get(name)
        if uid is None:
            continue
        seen: set[str] = set()
        for root in (uid, *tests_of.get(uid, [])):
            if any(mention.search(text) for text in texts(root, seen)):
                return name
    return None


def discard(wh: Warehouse, table: BackfillableTable, downstream: Downstream) -> None:
    """Drop everything a shadow build made (its overlay, shadow views and shadow tables)."""
    _drop(
        wh,
        [m.shadow for m in downstream.views] + [overlay_name(table)],
        [m.shadow for m in downstream.rebuilt],
    )


def drop_shadows(wh: Warehouse, build: ShadowBuild) -> None:
    """Drop the shadow tables of a build the swap did not publish (once published, they no
    longer exist under their shadow names: nothing is dropped)."""
    _drop(wh, [], [c.shadow for c in build.companions])


def overlay_name(table: BackfillableTable) -> str:
    return validate_ident(f"{table.spec.name[:50]}{OVERLAY_SUFFIX}", "overlay view")


def build_in_shadow(
    plan: BackfillPlan,
    table: BackfillableTable,
    graph: AssetGraphLike,
    wh: Warehouse,
    dbt: Any,
    config: DbtDownstream,
    url: str,
    log: Callable[[str], None] = lambda _: None,
) -> ShadowBuild:
    """Build the plan's impacted dbt tables in shadow and run their dbt tests there.

    On success the shadow tables stay, ready for the swap to publish (`ShadowBuild.companions`);
    the overlay and shadow views are dropped. On any failure everything it built is dropped: the
    target and the live models are never written.
    """
    t0 = time.perf_counter()
    build = ShadowBuild(plan.plan_id)
    downstream = classify(plan, graph)
    if not downstream.rebuilt:
        return build
    assert downstream.manifest is not None
    require_shadow_macros(downstream.manifest, [m.name for m in downstream.rebuilt])
    spec = table.spec
    overlay = overlay_name(table)
    shadows = {m.name: m.shadow for m in (*downstream.rebuilt, *downstream.views)}
    shadows[spec.name] = overlay
    discard(wh, table, downstream)  # what an interrupted build left
    lo, hi = plan.start, plan.end + dt.timedelta(days=1)
    pc, cols = (
        quote_ident(spec.partition_column),
        ", ".join(quote_ident(c) for c in spec.column_names),
    )
    inside = f"{pc} >= DATE '{lo.isoformat()}' AND {pc} < DATE '{hi.isoformat()}'"
    wh.execute(
        f"CREATE VIEW {quote_ident(overlay)} AS "
        f"SELECT {cols} FROM {quote_ident(spec.name)} WHERE NOT ({inside}) "
        f"UNION ALL SELECT {cols} FROM {quote_ident(spec.shadow_name)} WHERE {inside}"
    )
    try:
        for m in downstream.rebuilt:
            if m.materialized == "incremental" and wh.relation_exists(m.relation):
                shadow, live = quote_ident(m.shadow), quote_ident(m.relation)
                wh.execute(f"CREATE TABLE {shadow} AS SELECT * FROM {live}")
        target_args, env = config.cli_target(url) if config.cli_target else ([], {})
        os.environ.update(env)  # dbt runs as a subprocess with this process's environment
        invocations, build.split = plan_invocations(plan, graph, downstream, config)
        if build.split:
            log(f"one dbt invocation per grain: {build.split}")
        for inv in invocations:
            dbt_vars: dict[str, Any] = {SHADOW_VAR: shadows}
            if inv.window:
                dbt_vars.update(
                    {
                        config.window_vars[0]: inv.window[0].isoformat(),
                        config.window_vars[1]: inv.window[1].isoformat(),
                    }
                )
            args = [
                "build",
                *target_args,
                "--select",  # one argument: dagster-dbt takes one value per flag
                " ".join(inv.names),
                "--exclude-resource-type",
                "unit_test",
                "--vars",
                json.dumps(dbt_vars),
            ]
            window = f"[{inv.window[0]}, {inv.window[1]})" if inv.window else "none"
            if inv.window:
                build.rebuilt_partitions.update(
                    _partitions_in(
                        graph, [m for m in downstream.rebuilt if m.name in inv.names], inv.window
                    )
                )
            shown = " ".join(args[:1] + args[1 + len(target_args) : -2])
            log(f"dbt {shown} (in shadow, window {window})")
            invocation = dbt.cli(args, manifest=downstream.manifest, raise_on_error=False)
            build.windows.append(window)
            invocation.wait()
            results = (invocation.get_artifact("run_results.json") or {}).get("results", [])
            build.outcomes += [
                Outcome(r["unique_id"], r["status"], r.get("failures"), r.get("message") or "")
                for r in results
            ]
            if not invocation.is_successful() and all(o.ok for o in build.outcomes):
                build.error = f"dbt build failed ({invocation.get_error() or 'see its log'})"
            if not build.passed:
                break
        if build.passed:
            missing = [m.shadow for m in downstream.rebuilt if not wh.relation_exists(m.shadow)]
            if missing:
                build.error = f"dbt did not write {', '.join(missing)}"
    except Exception as e:  # dbt could not start, a warehouse error: nothing is kept
        build.error = f"{type(e).__name__}: {e}"
    build.seconds = time.perf_counter() - t0
    if build.passed:
        _drop(wh, [m.shadow for m in downstream.views] + [overlay], [])
    else:
        discard(wh, table, downstream)
    build.companions = [Companion(m.relation, m.shadow) for m in downstream.rebuilt]
    build.published_keys = [m.asset_key for m in (*downstream.rebuilt, *downstream.views)]
    return build


def refuse_failed(build: ShadowBuild, plan: BackfillPlan) -> None:
    if not build.passed:
        raise SwapRefused(
            f"plan {plan.plan_id} was not swapped: its downstream dbt models failed in shadow "
            f"({build.summary()}). Nothing was published: {plan.target} and its models are "
            "unchanged. Fix the models (or the plan) and swap again, or swap with --no-refresh "
            "to publish the target alone and leave the models stale"
        )
