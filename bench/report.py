"""The machine a run was measured on, and the Markdown rendering of latest.json."""

from __future__ import annotations

import datetime as dt
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.config import NOT_YET_MEASURED

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


def _goals(goals: list[dict[str, Any]]) -> list[str]:
    rows = [[g["goal"], _f(g["value"], 3), "met" if g["met"] else "**missed**"] for g in goals]
    return ["", *_table(["goal", "value", ""], rows)]


def _safety(r: dict[str, Any]) -> list[str]:
    return _contenders(r, "floor", ("backfill_assets",))


def _contenders(r: dict[str, Any], floor_name: str, phased: tuple[str, ...]) -> list[str]:
    """Contenders side by side as multiples of `floor_name`, the wall split of those in
    `phased`, the paired ratios and the goals."""
    rows = []
    floor = r["contenders"].get(floor_name, {}).get("wall_s")
    for name, c in r["contenders"].items():
        if c["status"] != "measured":
            rows.append([name, c["what"], NOT_YET_MEASURED, "", "", "", ""])
            continue
        rows.append(
            [
                name,
                c["what"],
                _f(c["wall_s"]),
                _f(c["wall_s"] / floor) if floor else "",
                _f(c["import_s"]),
                f"{c['peak_rss_mb']:.0f}",
                str(c["n"]),
            ]
        )
    out = _table(
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
    return out + _goals(r["goals"])


def _swap(r: dict[str, Any]) -> list[str]:
    rng = r["range"]
    rows = [
        [
            k,
            f"{v['live_rows']:,}",
            str(v["live_week_tables"]),
            _f(v["swap_s"] * 1000, 1),
            _f(v["rollback_s"] * 1000, 1),
            str(v["n"]),
        ]
        for k, v in r["variants"].items()
    ]
    out = [
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
                "runs",
            ],
            rows,
        ),
    ]
    out += ["", "Ratios: " + "; ".join(f"{k} = {_f(v)}" for k, v in r["ratios"].items())]
    return out + _goals(r["goals"])


def _gates(r: dict[str, Any]) -> list[str]:
    c = r["cost"]
    out = [
        f"Cost over {c['batches_timed']} batches of {c['rows_per_batch']:,} rows: shadow "
        f"write {_f(c['write_s_per_batch'])} s, gates {_f(c['gates_s_per_batch'])} s per "
        f"batch (median share {c['share_median']:.1%}, worst {c['share_max']:.1%}).",
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
            "by sampled rows alone",
            "failing gates (trials)",
        ],
        rows,
    )
    return out + _goals(r["goals"])


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
    return [*_table(["planning", ""], rows, right_from=1), "", *_goals(r["goals"])]


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
        *_contenders(b, "floor_pg", ("backfill_assets_pg", "backfill_assets_dagster_pg")),
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
    ]
    br = r["blocked_readers"]
    n = br["normal_ms"]
    out += [
        "",
        "### readers during swaps and rollbacks",
        "",
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
    ]
    rq = r["reader_queries"]
    h = rq["history"]
    shape_rows = [
        [
            k,
            v["what"],
            _f(v["partitioned_ms"]),
            _f(v["plain_ms"]),
            _f(v["ratio"]),
            "<= 1.2" if v["has_goal"] else "(none)",
        ]
        for k, v in rq["shapes"].items()
    ]
    out += [
        "",
        "### reader queries: partitioned target vs. plain table",
        "",
        f"{h['weeks']} ISO weeks ({h['first_day']}..{h['last_day']}) x "
        f"{h['rows_per_day']:,} rows/day = {h['rows']:,} rows; target: {h['partitions']} "
        f"partitions, {h['partitioned_mib']:.0f} MiB; plain table: indexes on "
        + " and ".join(f"({', '.join(c)})" for c in h["plain_indexes"])
        + f", {h['plain_mib']:.0f} MiB. Loaded in {_f(h['load_s'], 1)} s. Medians of "
        f"{rq['reps']} runs per round, ratio = median over {rq['rounds']} rounds.",
        "",
        *_table(
            ["shape", "what", "partitioned ms", "plain ms", "ratio", "goal"],
            shape_rows,
            right_from=2,
        ),
    ]
    return out + _goals(r["goals"])


RENDERERS = {
    "safety_overhead": _safety,
    "swap_scaling": _swap,
    "gates": _gates,
    "planning": _planning,
    "postgres": _postgres,
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
