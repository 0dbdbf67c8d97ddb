"""The machine a run was measured on, and the Markdown rendering of latest.json."""

from __future__ import annotations

import datetime as dt
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.harness.config import NOT_YET_MEASURED
from bench.harness.load import NO_VERDICT
from bench.measures.cli_latency import GOAL_S as CLI_GOAL_S

PACKAGES = ("duckdb", "dagster", "dbt-core", "dbt-duckdb", "psycopg", "dagster-postgres")


def machine() -> dict[str, Any]:
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        **versions,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _load(values: list[float] | None) -> str:
    return "/".join(f"{v:.1f}" for v in values) if values else "?"


def _f(v: float, digits: int = 2) -> str:
    return f"{v:.{digits}f}"


def _table(header: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _met(g: dict[str, Any]) -> str:
    if g["met"] is None:
        return f"_{g.get('verdict', NO_VERDICT)}_"
    return "met" if g["met"] else "**missed**"


def _goals(goals: list[dict[str, Any]]) -> list[str]:
    rows = [[g["goal"], _f(g["value"], 3), _met(g)] for g in goals]
    return ["", *_table(["goal", "value", ""], rows)]


def _agree_word(value: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "cannot tell"}[value]


def _banner(r: dict[str, Any]) -> list[str]:
    """At the top of a part whose every round was noisy: no verdict, in bold."""
    verdict = (r.get("load") or {}).get("verdict")
    return [f"**{verdict}**: the figures below decide nothing.", ""] if verdict else []


def _part_load(r: dict[str, Any]) -> list[str]:
    """A part's load: its rounds, which were noisy, the others' CPU in each, and whether the
    clean rounds agree (each ratio's per-round values and spread)."""
    load = r.get("load")
    if not load:
        return []
    per_round = ", ".join(
        f"{x['others_cores_max']:.2f}" + (" (noisy)" if x["noisy"] else "") for x in load["rounds"]
    )
    if load["verdict"]:
        noisy = "all noisy, no verdict"
    else:
        noisy = f"{load['noisy']} noisy" + (", left out" if load["noisy"] else "")
    out = [
        "",
        f"Load ({load.get('what', '')}): {load['n']} round(s), {noisy}; others' CPU per round "
        f"(cores; the busiest run of a round that has several): {per_round}; waited "
        f"{_f(load['waited_s'], 0)} s for quiet.",
    ]
    if load["verdict"]:
        return out
    agreements = r.get("agreement") or {}
    if agreements:
        out += [
            "",
            f"Rounds agree: {_agree_word(r.get('rounds_agree'))} (per-round values over the "
            "clean rounds; spread = (max - min) / median): "
            + "; ".join(
                f"{k} "
                + ", ".join(_f(v) for v in a["per_round"])
                + (f" (spread {a['spread']:.0%})" if a["spread"] is not None else "")
                for k, a in agreements.items()
            ),
        ]
    return out


def _run_load(run: dict[str, Any]) -> list[str]:
    """The load over the whole run: the policy, the noisy rounds, whether rounds agree."""
    load = run.get("load")
    if not load:
        return []
    pol = load["policy"]
    limit = f"{pol['others_limit_cores']:g} cores"
    wait = (
        f"Before each timed round the bench waited until other processes used at most {limit} "
        f"over {pol['quiet_window_s']:g} s (giving up after {pol['quiet_wait_max_s']:g} s); it "
        f"waited {_f(load['waited_s'], 0)} s in all."
        if pol["quiet_wait"]
        else "The bench did not wait for quiet before its rounds (--no-quiet-wait)."
    )
    rows = [
        [
            label,
            str(p["rounds"]),
            str(p["noisy"]),
            _f(p["others_cores_max"]),
            p["verdict"] or _agree_word(p["rounds_agree"]),
        ]
        for label, p in load["parts"].items()
    ]
    agreed = load["rounds_agree"]
    verdicts = []
    if load["all_noisy"]:
        verdicts.append(
            f"**{NO_VERDICT}** in {', '.join(load['all_noisy'])}: do not quote this run there."
        )
    if agreed is False:
        verdicts.append(
            f"**The rounds do not agree** in {', '.join(load.get('disagree', []))}: do not "
            "quote this run there; measure again."
        )
    elif agreed and not verdicts:
        verdicts.append("The rounds agree: this run can be quoted.")
    elif agreed is None and not verdicts:
        verdicts.append("Whether the rounds agree cannot be told (fewer than two clean rounds).")
    headline = " ".join(verdicts)
    return [
        "",
        "## Load",
        "",
        f"{wait} A round in which other processes used more than {limit} (on average over the "
        f"round, beyond {pol['tick_slack_s']:g} CPU-s of tick rounding) is noisy: kept in "
        f"latest.json, left out of the medians and ratios. {load['noisy_rounds']} of "
        f"{load['rounds']} rounds were noisy; others used at most "
        f"{_f(load['others_cores_max'])} cores in a round. Rounds agree when each ratio's "
        f"per-round spread over the clean rounds is at most {pol['agree_spread']:.0%}.",
        "",
        headline,
        "",
        *_table(
            ["part", "rounds", "noisy", "others' cores (max)", "rounds agree"], rows, right_from=1
        ),
    ]


def _safety(r: dict[str, Any]) -> list[str]:
    return _contenders(
        r,
        "floor",
        ("backfill_assets", "backfill_assets_dagster", "backfill_assets_dagster_downstream"),
    )


def _contenders(r: dict[str, Any], floor_name: str, phased: tuple[str, ...]) -> list[str]:
    """Contenders side by side as multiples of `floor_name`, the wall split of those in
    `phased`, the paired ratios and the goals."""
    rows = []
    floor = r["contenders"].get(floor_name, {}).get("wall_s")
    for name, c in r["contenders"].items():
        if c["status"] != "measured":
            rows.append([name, c["what"], NOT_YET_MEASURED, "", "", "", ""])
            continue
        left_out = c.get("n_noisy_left_out", 0)
        rows.append(
            [
                name,
                c["what"],
                _f(c["wall_s"]),
                _f(c["wall_s"] / floor) if floor else "",
                _f(c["import_s"]),
                f"{c['peak_rss_mb']:.0f}",
                str(c["n"]) + (f" (+{left_out} noisy)" if left_out else ""),
            ]
        )
    out = _banner(r) + _table(
        [
            "contender",
            "how",
            "wall s (median)",
            "x floor",
            "of which imports s",
            "peak RSS MiB",
            "runs",
        ],
        rows,
        right_from=2,
    )
    for name in phased:
        phases = r["contenders"].get(name, {}).get("phases_s")
        if phases:
            out += [
                "",
                f"{name} wall split (median s): "
                + ", ".join(f"{k.removesuffix('_s')} {_f(v)}" for k, v in phases.items()),
            ]
    out += [
        "",
        "Ratios (median of per-round ratios; ratio of medians in brackets): "
        + "; ".join(
            f"{k} = {_f(v['paired_median'])} ({_f(v['of_medians'])})"
            for k, v in r["ratios"].items()
        ),
    ]
    return out + _part_load(r) + _goals(r["goals"])


def _swap(r: dict[str, Any]) -> list[str]:
    rng = r["range"]
    rows = [
        [
            k,
            f"{v['live_rows']:,}",
            str(v["live_week_tables"]),
            _f(v["swap_s"] * 1000, 1),
            _f(v["rollback_s"] * 1000, 1),
            _f(v["daily_s"] * 1000, 1) if "daily_s" in v else "-",
            str(v["n"]),
        ]
        for k, v in r["variants"].items()
    ]
    out = [
        *_banner(r),
        f"Range {rng['start']}..{rng['end']} ({rng['weeks']} weeks x 7 x "
        f"{rng['rows_per_day']:,} rows/day) swapped into a target with 1x and 10x history.",
        "",
        *_table(
            [
                "history",
                "live rows",
                "live week tables",
                "swap ms (median)",
                "rollback ms (median)",
                "daily write of a day ms (median)",
                "runs",
            ],
            rows,
        ),
    ]
    out += ["", "Ratios: " + "; ".join(f"{k} = {_f(v)}" for k, v in r["ratios"].items())]
    return out + _part_load(r) + _goals(r["goals"])


def _gates(r: dict[str, Any]) -> list[str]:
    c = r["cost"]
    out = [
        *_banner(r),
        f"Cost over {c['batches_timed']} batches of {c['rows_per_batch']:,} rows: shadow "
        f"write {_f(c['write_s_per_batch'])} s, gates {_f(c['gates_s_per_batch'])} s per "
        f"batch (median share without the diff {c['share_median']:.1%}, worst "
        f"{c['share_max']:.1%}; the diff alone {c.get('diff_share_median', 0):.1%}, gates and "
        f"diff {c.get('with_diff_share_median', 0):.1%}).",
        "Gate time by warehouse call (median s per batch): "
        + ", ".join(f"{k} {_f(v, 3)}" for k, v in c["gates_s_by_query"].items()),
        "",
    ]
    rows = [
        [
            k,
            str(v["trials"]),
            f"{v['rows_planted_median']:g}",
            f"{v['caught_share']:.0%}",
            f"{v['rows_sampled_median']:g}",
            f"{v['sampled_rows_alone_share']:.0%}",
            ", ".join(f"{g} {n}" for g, n in sorted(v["failed_gate_counts"].items())) or "-",
        ]
        for k, v in r["detection"]["kinds"].items()
    ]
    out += _table(
        [
            "corruption (one partition)",
            "trials",
            "rows",
            "caught by gates",
            "rows sampled",
            "by sampled rows alone",
            "failing gates (trials)",
        ],
        rows,
    )
    return out + _part_load(r) + _goals(r["goals"])


def _planning(r: dict[str, Any]) -> list[str]:
    rows = [
        [
            "assets in the graph / downstream of the target",
            f"{r['assets']:,} / {r['downstream_assets']:,}",
        ],
        ["partitions / weekly batches", f"{r['partitions']:,} / {r['batches']}"],
        [
            "Dagster AssetSelection.downstream().resolve() s (median)",
            _f(r["dagster_downstream_s"], 3),
        ],
        ["whole plan (impact through partition mappings + build) s (median)", _f(r["plan_s"], 3)],
        ["plan / Dagster downstream", _f(r["plan_over_dagster"], 1)],
    ]
    return [
        *_banner(r),
        *_table(["planning", ""], rows, right_from=1),
        *_part_load(r),
        *_goals(r["goals"]),
    ]


def _postgres(r: dict[str, Any]) -> list[str]:
    server = r["server"]
    out = [
        f"One throwaway PostgreSQL {server['server_version']} server ("
        + ", ".join(f"{k} {v}" for k, v in server.items() if k != "server_version")
        + ").",
    ]
    b = r["backfill"]
    rng = b["range"]
    out += [
        "",
        "### backfill: a_pg (floor), d_pg (warehouse level), d'_pg (through Dagster)",
        "",
        f"Range {rng['start']}..{rng['end']} ({rng['days']} days x {rng['rows_per_day']:,} "
        f"rows/day = {rng['rows']:,} rows), v1 -> v2; every contender starts from a copy of one "
        f"template database (raw landed in {_f(rng['land_raw_s'], 1)} s, targets built in "
        f"{_f(rng['build_targets_s'], 1)} s). Peak RSS is the client process's.",
        "",
        *_contenders(
            b,
            "floor_pg",
            (
                "backfill_assets_pg",
                "backfill_assets_dagster_pg",
                "backfill_assets_dagster_downstream_pg",
            ),
        ),
    ]
    sw = r["swap"]
    srng = sw["range"]
    rows = [
        [
            k,
            f"{v['live_rows']:,}",
            str(v["live_partitions"]),
            _f(v["swap_s"] * 1000, 1),
            _f(v["rollback_s"] * 1000, 1),
            str(v["n"]),
        ]
        for k, v in sw["variants"].items()
    ]
    out += [
        "",
        "### swap and rollback",
        "",
        *_banner(sw),
        f"Range {srng['start']}..{srng['end']} ({srng['weeks']} weeks x 7 x "
        f"{srng['rows_per_day']:,} rows/day) swapped into a target with 1x and 10x history.",
        "",
        *_table(
            [
                "history",
                "live rows",
                "live partitions",
                "swap ms (median)",
                "rollback ms (median)",
                "runs",
            ],
            rows,
        ),
        "",
        "Ratios: " + "; ".join(f"{k} = {_f(v)}" for k, v in sw["ratios"].items()),
        *_part_load(sw),
    ]
    br = r["blocked_readers"]
    n = br["normal_ms"]
    out += [
        "",
        "### readers during swaps and rollbacks",
        "",
        *_banner(br),
        f"{br['queries']:,} one-day queries of the swapped range from another process over "
        f"{br['rounds']} swap+rollback rounds on the {br['history']} target: normal latency "
        f"median {_f(n['median'])} ms, p99 {_f(n['p99'])} ms, max {_f(n['max'])} ms "
        f"({n['n']:,} queries).",
        "",
        *_table(
            ["during", "queries overlapping", "median ms", "max ms", "op ms (median)"],
            [
                [
                    kind,
                    str(br[kind]["queries_overlapping"]),
                    _f(br[kind]["median_ms"]),
                    _f(br[kind]["max_ms"]),
                    _f(br[f"{kind}_ms_with_readers"], 1),
                ]
                for kind in ("swap", "rollback")
            ],
        ),
        "",
        f"Longest extra wait of a reader behind a swap or rollback: "
        f"{_f(br['longest_wait_ms'], 1)} ms.",
        *_part_load(br),
    ]
    rq = r["reader_queries"]
    h = rq["history"]
    out += [
        "",
        "### reader queries: partitioned target vs. plain table",
        "",
        *_banner(rq),
        f"{h['weeks']} ISO weeks ({h['first_day']}..{h['last_day']}) x "
        f"{h['rows_per_day']:,} rows/day = {h['rows']:,} rows; target: {h['partitions']} "
        f"partitions, {h['partitioned_mib']:.0f} MiB; plain table: indexes on "
        + " and ".join(f"({', '.join(c)})" for c in h["plain_indexes"])
        + f", {h['plain_mib']:.0f} MiB. Loaded in {_f(h['load_s'], 1)} s.",
        *_shapes(rq, "partitioned"),
    ]
    return out + _goals(r["goals"])


def _shapes(rq: dict[str, Any], subject: str) -> list[str]:
    """The reader shapes' table (bench.measures.reader_shapes) and its rounds' load."""
    rows = [
        [
            k,
            v["what"],
            _f(v[f"{subject}_ms"]),
            _f(v["plain_ms"]),
            _f(v["ratio"]),
            str(v.get("times_per_query", "")),
            "<= 1.2" if v["has_goal"] else "(none)",
        ]
        for k, v in rq["shapes"].items()
    ]
    return [
        f"Each shape: {rq['reps']} parameter sets, each timed the number of times shown per "
        f"table and round; figure = median per round, ratio = median over {rq['rounds']} "
        "rounds.",
        "",
        *_table(
            ["shape", "what", f"{subject} ms", "plain ms", "ratio", "timed", "goal"],
            rows,
            right_from=2,
        ),
        *_part_load(rq),
    ]


def _target_layout(h: dict[str, Any]) -> str:
    """How the readers' target held its rows (runs from before `target_kind` was recorded
    measured a view over one table per week)."""
    kind, weeks = h.get("target_kind", "view"), h["week_tables"]
    if kind == "table":
        return "one table, written by the adapter's daily write"
    return f"a view over {weeks} week tables"


def _readers(r: dict[str, Any]) -> list[str]:
    h = r["history"]
    out = [
        *_banner(r),
        f"{h['weeks']} ISO weeks ({h['first_day']}..{h['last_day']}) x "
        f"{h['rows_per_day']:,} rows/day = {h['rows']:,} rows; target: "
        f"{_target_layout(h)}; plain table: the same rows in date order, no "
        f"indexes. File {h['file_mib']:.0f} MiB, loaded in {_f(h['load_s'], 1)} s.",
        "",
        *_shapes(r, "target"),
    ]
    return out + _goals(r["goals"])


def _driver(r: dict[str, Any]) -> list[str]:
    rows = [
        ["past plans (proposed, approved, swapped, released)", f"{r['past_plans']:,}"],
        ["driver sensor tick, no past plans, ms (median)", _f(r["tick_ms_no_past_plans"], 1)],
        [
            f"driver sensor tick, {r['past_plans']:,} past plans, ms (median)",
            _f(r["tick_ms_with_past_plans"], 1),
        ],
        ["with / without", _f(r["with_over_without"], 2)],
    ]
    return [
        *_banner(r),
        *_table(["driver", ""], rows, right_from=1),
        *_part_load(r),
        *_goals(r["goals"]),
    ]


def _cli(r: dict[str, Any]) -> list[str]:
    s, beyond = r["seconds"], r.get("beyond_open_instance_s", {})
    goals = {g["goal"].split()[1] for g in r["goals"]}
    rows = [
        [
            name,
            _f(s[name], 2),
            _f(beyond[name], 2) if name in beyond else "",
            f"<= {CLI_GOAL_S:g}" if name in goals else "",
        ]
        for name in s
    ]
    return [
        *_banner(r),
        "Each command is the console script in a fresh process, as an operator runs it (median "
        f"s over the clean rounds), on the example's code location, a SQLite instance and "
        f"{r['history_days']} days of orders_daily. `open instance` is what every command pays "
        "before its own work: a fresh interpreter importing Dagster and opening the instance "
        "(all that `list` and `pause` need). `import location` is a fresh interpreter importing "
        "the example's definitions (Dagster, dagster-dbt and dbt): what `run`, `swap` and "
        "`rollback` pay first, and the other commands only when the location's snapshot is not "
        "current (backfill_assets/location/snapshot.py). The first command before the rounds "
        f"(`doctor`, untimed in the rounds) imported it and wrote the snapshot: "
        f"{_f(r.get('first_command_s', float('nan')), 2)} s.",
        "",
        *_table(["command", "s (median)", "beyond open instance s", "goal"], rows, right_from=1),
        *_part_load(r),
        *_goals(r["goals"]),
    ]


def _dbt_refresh(r: dict[str, Any]) -> list[str]:
    s = r["seconds"]
    inv = r["invocation"]
    rows = [
        [
            "shadow build (the swap's, one invocation)",
            _f(s["shadow build"], 2),
            _f(r["shadow_over_single"], 2),
        ],
        ["single dbt build of the same models and window", _f(s["single dbt build"], 2), "1.00"],
        [
            f"one dbt build per grain ({r['per_grain_invocations']})",
            _f(s["per grain"], 2),
            _f(r["per_grain_over_single"], 2),
        ],
    ]
    return [
        *_banner(r),
        f"The example's impacted models ({', '.join(inv['models'])}) for a plan of "
        f"{r['plan']} over {r['history_days']} days of {r['rows_per_day']:,} orders a day "
        f"(DuckDB); one window for every grain: [{', '.join(inv['window'])}).",
        "",
        *_table(["build", "s (median)", "/ single"], rows, right_from=1),
        *_part_load(r),
        *_goals(r["goals"]),
    ]


def _adoption(r: dict[str, Any]) -> list[str]:
    d, p = r["duckdb"], r["postgres"]
    rows = [
        ["DuckDB table: days / rows", f"{d['days']:,} / {d['rows']:,}"],
        ["DuckDB one full scan s (median)", _f(d["full_scan_s"], 2)],
        ["DuckDB adopt in place s (median)", _f(d["adopt_s"], 2)],
        ["DuckDB adopt / full scan", _f(d["adopt_over_scan"], 2)],
    ]
    if "convert_s" in p:
        rows += [
            ["PostgreSQL table: days / rows", f"{p['days']:,} / {p['rows']:,}"],
            ["PostgreSQL CREATE TABLE AS copy s (median)", _f(p["ctas_s"], 2)],
            ["PostgreSQL convert online s (median)", _f(p["convert_s"], 2)],
            ["PostgreSQL convert / copy", _f(p["convert_over_ctas"], 2)],
            ["PostgreSQL longest reader wait ms", _f(p["longest_reader_wait_ms"], 1)],
        ]
    else:
        rows.append(["PostgreSQL", p.get("reason", "not run")])
    return [
        *_banner(d),
        *_table(["adoption", ""], rows, right_from=1),
        *_part_load(d),
        *(_part_load(p) if "load" in p else []),
        *_goals(r["goals"]),
    ]


def _daemon(r: dict[str, Any]) -> list[str]:
    out = [
        f"A plan of {r['batches']} ISO weeks ({r['orders_per_day']:,} orders a day) started for "
        "the batch driver under `dagster dev`, on the shipped instance config; per batch, its "
        "run's creation to its end less its warehouse work (done again afterwards and timed): "
        "what Dagster adds (median over the batches, then over the clean rounds).",
        "",
    ]
    rows = []
    for name in ("sqlite", "postgres"):
        s = r[name]
        if "orchestration_s" not in s:
            rows.append([name, s.get("reason", "not run"), "", "", "", "", ""])
            continue
        rows.append(
            [
                f"{name} ({s['storage']})",
                _f(s["orchestration_s"], 2),
                _f(s["worst_s"], 2),
                _f(s["work_s"], 2),
                _f(s["between_s"], 2),
                f"{_f(s['last_over_first'], 2)} ({s['k']} / {s['k']})",
                _f(s["start_to_done_s"], 1),
            ]
        )
    out += _table(
        [
            "storage",
            "Dagster adds s (median)",
            "worst s",
            "warehouse work s",
            "between batches s",
            "last k / first k",
            "start to last end s",
        ],
        rows,
    )
    for name in ("sqlite", "postgres"):
        out += _part_load(r[name])
    return out + _goals(r["goals"])


RENDERERS = {
    "safety_overhead": _safety,
    "swap_scaling": _swap,
    "gates": _gates,
    "planning": _planning,
    "readers": _readers,
    "driver": _driver,
    "cli": _cli,
    "dbt_refresh": _dbt_refresh,
    "postgres": _postgres,
    "adoption": _adoption,
    "daemon": _daemon,
}


def markdown(doc: dict[str, Any]) -> str:
    m, run = doc["machine"], doc["run"]
    out = [
        "# backfill_assets bench: latest run",
        "",
        *_table(["machine", ""], [[k, str(v)] for k, v in m.items()], right_from=9),
        "",
        f"Size `{run['size']}` ({run['repeats']} rounds), total wall "
        f"{_f(run['total_wall_s'], 1)} s, load average (1/5/15 min) "
        f"{_load(run.get('loadavg_1_5_15_start'))} at start, "
        f"{_load(run.get('loadavg_1_5_15_end'))} at end (nproc {m['nproc']}). Sizes: `"
        + ", ".join(f"{k}={v}" for k, v in run["sizes"].items() if k != "name")
        + "`.",
        *_run_load(run),
    ]
    for name in RENDERERS:
        entry = doc.get(name, {"status": "not run"})
        out += ["", f"## {name}", ""]
        if entry.get("status") != "measured":
            reason = f": {entry['reason']}" if entry.get("reason") else ""
            out.append(f"_{entry.get('status')}{reason}_")
            continue
        if entry.get("measured_at") and entry["measured_at"] != run["started_at"]:
            out.append(f"(measured in an earlier run, {entry['measured_at']})")
        out += RENDERERS[name](entry["results"])
    return "\n".join(out) + "\n"
