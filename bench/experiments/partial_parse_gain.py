"""What keeping dbt's partial-parse state saves, side by side: an experiment behind the figures in
dbt_project/README.md, not a measure of `make bench`.

    python -m bench.experiments.partial_parse_gain [--rounds 5]

A copy of the example's dbt project and a DuckDB warehouse holding four weeks of its orders
(2,000 a day) and their marts. Each round times two pairs of `dbt build`s through the example's
dbt resource (a new object each, as each Dagster run has), a pair's two back to back, in an
order reversed every other round:
- `no vars, kept` and `no vars, none`: the unpartitioned model (dim_customers), as the daily
  job's unpartitioned step runs it, with `target/partial_parse.msgpack` beside the manifest
  (what `ensure_manifest` keeps) and without it (as before);
- `vars, kept` and `vars, none`: the partitioned facts over one week, with `--vars`: dbt parses
  in full either way, so these two show what the kept state costs where it cannot be used.
Each round first waits for the rest of the machine to be quiet (bench.harness.load); a round in
which other processes used more than a quarter of a core is left out. Prints each way's seconds,
the ratios per round and whether the rounds agree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

WINDOW = {"min_date": "2026-01-12", "max_date": "2026-01-19"}
PAIRS = (("no vars, kept", "no vars, none"), ("vars, kept", "vars, none"))
WAYS = tuple(way for pair in PAIRS for way in pair)


def main() -> None:
    from backfill_assets.example.dbt import dbt_models, dbt_project_dir
    from backfill_assets.example.dbt_manifest import PARTIAL_PARSE
    from bench.experiments.dbt_history import dbt_history
    from bench.harness.load import LoadMonitor, agreement, kept, round_load
    from bench.harness.measure import median

    ap = argparse.ArgumentParser(description="dbt builds with and without the partial-parse state")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    builds = {
        "no vars": ["build", "--select", "dim_customers"],
        "vars": ["build", "--select", "fct_daily_revenue", "--vars", json.dumps(WINDOW)],
    }
    load = LoadMonitor()
    with dbt_history("bench-partial-parse-") as root:
        project = root / "dbt_project"
        ignore = shutil.ignore_patterns("target", "logs", "*.duckdb")
        shutil.copytree(dbt_project_dir(), project, ignore=ignore)
        dbt_models(project)  # parses the copy: its manifest, and the state beside it
        state = project / "target" / PARTIAL_PARSE
        aside = root / PARTIAL_PARSE
        times: dict[str, list[float]] = {w: [] for w in WAYS}
        rounds = []
        for rnd in range(args.rounds):
            spans = []
            # Each pair back to back, in an order reversed every other round.
            for way in [w for pair in PAIRS for w in (pair if rnd % 2 == 0 else pair[::-1])]:
                if way.endswith("kept") and aside.exists():
                    os.replace(aside, state)
                elif way.endswith("none") and state.exists():
                    os.replace(state, aside)
                resource = dbt_models(project).resource  # a new object, as each run has
                with load.span() as span:
                    t0 = time.perf_counter()
                    invocation = resource.cli(builds[way.split(",")[0]], raise_on_error=False)
                    for _ in invocation.stream_raw_events():  # quietly: wait() prints dbt's log
                        pass
                    times[way].append(time.perf_counter() - t0)
                spans.append(span)
                if not invocation.is_successful():
                    raise SystemExit(f"dbt build failed: {invocation.get_error()}")
            rounds.append(round_load(rnd, spans))
            noisy = " (noisy: left out)" if rounds[-1]["noisy"] else ""
            line = ", ".join(f"{w} {times[w][-1]:.2f} s" for w in WAYS)
            print(f"round {rnd + 1}: {line}{noisy}", flush=True)
    keep = kept(rounds)
    for way in WAYS:
        runs = ", ".join(f"{times[way][i]:.2f}" for i in keep)
        print(f"{way}: median {median([times[way][i] for i in keep]):.2f} s ({runs})")
    for a, b in (("no vars, none", "no vars, kept"), ("vars, kept", "vars, none")):
        ratios = agreement([times[a][i] / times[b][i] for i in keep])
        per = ", ".join(f"{r:.2f}" for r in ratios["per_round"])
        agree = {True: "agree", False: "DISAGREE", None: "cannot tell"}[ratios["agree"]]
        print(f"{a} / {b}: median {median(ratios['per_round']):.2f} ({per}; rounds {agree})")
    print(f"{len(rounds) - len(keep)} of {len(rounds)} rounds noisy")


if __name__ == "__main__":
    main()
