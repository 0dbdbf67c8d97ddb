"""Quiet rounds on a shared machine: wait for the others to go quiet, measure what they used.

Before each timed round the bench waits until the rest of the machine is quiet: it samples the
machine's busy CPU over QUIET_WINDOW_S while the bench itself is idle, and goes on once the other
processes used at most OTHERS_LIMIT_CORES in a sample, or after QUIET_WAIT_MAX_S (then the round
runs anyway, and is judged by what happened while it ran). While the round runs, it measures how
much CPU the other processes used; a round in which they used more than OTHERS_LIMIT_CORES (plus
TICK_SLACK_S of rounding) is *noisy*: kept in latest.json, marked, and left out of the medians
and ratios. If every round of a measure was noisy, its figures come from noisy rounds and its
goals get no verdict (NO_VERDICT).

Machine CPU: the first line of /proc/stat (every CPU), user + nice + system + irq + softirq +
steal, in clock ticks (guest time is inside user already; idle and iowait are not busy).

The bench's own CPU (attributed), over the same interval:
- this process, and every descendant it has waited for: getrusage(RUSAGE_SELF) and
  getrusage(RUSAGE_CHILDREN) (the contenders, the dbt processes they wait for, the reader child);
- its live descendants: utime + stime + cutime + cstime of /proc/PID/stat, so a process running
  across the start or end of a round is counted, and so are the children it has reaped;
- helper process trees a measure registers with `LoadMonitor.attribute`: the PostgreSQL server
  (pg_ctl daemonizes it, so it is not our descendant): the postmaster and its backends; the
  backends that exited are in the postmaster's cutime/cstime.

Not attributed, so counted as the others' CPU: kernel threads working for the bench (page-cache
writeback of its DuckDB files, kworkers), interrupt and softirq time (the disk and loopback
network I/O the bench causes), a process that left the bench's tree without being reaped by it
(a daemon other than a registered helper; multiprocessing's resource tracker, which a Dagster
contender starts and which outlives it by a moment), and steal time (the hypervisor running
other machines on our CPUs, which slows a round just as much). Measured on a quiet machine, all
of that came to 0.00-0.04 cores per contender run: the limit leaves ample room for it.

others = machine busy - bench's own, never below 0; in cores = others / the round's wall time.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Other processes may use at most this many cores on average, before (quiet) and during (not
# noisy) a round. The bench itself keeps one or both of the 2 cores busy: a quarter of a core
# taken by someone else is a noticeable share of a round, a full core (a test suite) is not noise
# a ratio can cancel.
OTHERS_LIMIT_CORES = 0.25
# One quiet sample: the bench is idle for this long while the machine is watched.
QUIET_WINDOW_S = 2.0
# Give up waiting after this long; the round then runs and is judged by what happened in it.
QUIET_WAIT_MAX_S = 120.0
# /proc/stat counts whole ticks (10 ms) per CPU; a short round's "others" is rounded by a few of
# them, and the per-process and per-CPU accountings differ by as much. Allowed on top of the limit.
TICK_SLACK_S = 0.05
# Rounds agree when the spread of a ratio's per-round values over the clean rounds,
# (max - min) / median, is at most this.
AGREE_SPREAD = 0.15
NO_VERDICT = "no verdict: every round was noisy"
# Print how the wait goes at most this often.
WAIT_REPORT_EVERY_S = 10.0

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Snapshot:
    """Cumulative CPU seconds at one moment (monotonic clock)."""

    t: float
    busy_s: float
    steal_s: float
    own_s: float


def machine_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, every CPU summed."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) * _TICK_S, steal * _TICK_S


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, utime + stime + cutime + cstime in ticks) of every visible process."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_bytes()
        except OSError:  # it exited meanwhile
            continue
        # The command name is in parentheses and may hold spaces: fields start after the last ')'.
        rest = raw[raw.rindex(b")") + 2 :].split()
        table[int(entry.name)] = (int(rest[1]), sum(int(v) for v in rest[11:15]))
    return table


def _tree(table: dict[int, tuple[int, int]], roots: Iterable[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, ()))
    return seen


def _rusage_s(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


class LoadMonitor:
    """Waits for quiet before rounds and measures the others' CPU during them (see the module's
    docstring for what counts as the bench's own). `wait=False` skips the waiting (the smoke test)
    but still measures every round and marks the noisy ones."""

    def __init__(
        self,
        *,
        wait: bool = True,
        limit_cores: float = OTHERS_LIMIT_CORES,
        window_s: float = QUIET_WINDOW_S,
        max_wait_s: float = QUIET_WAIT_MAX_S,
    ):
        self.wait = wait
        self.limit_cores = limit_cores
        self.window_s = window_s
        self.max_wait_s = max_wait_s
        self._helpers: dict[int, str] = {}

    def policy(self) -> dict[str, Any]:
        """The thresholds and what is attributed to the bench, as recorded with the results."""
        return {
            "quiet_wait": self.wait,
            "others_limit_cores": self.limit_cores,
            "quiet_window_s": self.window_s,
            "quiet_wait_max_s": self.max_wait_s,
            "tick_slack_s": TICK_SLACK_S,
            "agree_spread": AGREE_SPREAD,
            "attributed_to_bench": "this process, its live and reaped descendants (contenders, "
            "dbt, the reader child), and registered helper trees (the PostgreSQL server and "
            "its backends)",
            "counted_as_others": "other processes, kernel threads working for the bench "
            "(writeback), irq/softirq time, steal time",
        }

    def attribute(self, pid: int | None, label: str) -> None:
        """Count `pid` and its descendants as the bench's own CPU (a daemonized helper)."""
        if pid is not None:
            self._helpers[pid] = label

    def forget(self, pid: int | None) -> None:
        self._helpers.pop(pid or -1, None)

    def snapshot(self) -> Snapshot:
        t = time.monotonic()
        busy, steal = machine_cpu()
        me = os.getpid()
        table = _processes()
        pids = (_tree(table, [me]) - {me}) | _tree(table, self._helpers)
        own = (
            _rusage_s(resource.RUSAGE_SELF)
            + _rusage_s(resource.RUSAGE_CHILDREN)
            + sum(table[p][1] for p in pids) * _TICK_S
        )
        return Snapshot(t, busy, steal, own)

    def _delta(self, s0: Snapshot, s1: Snapshot) -> dict[str, Any]:
        wall = max(s1.t - s0.t, 1e-9)
        others = max(0.0, (s1.busy_s - s0.busy_s) - (s1.own_s - s0.own_s))
        return {
            "wall_s": wall,
            "busy_cpu_s": s1.busy_s - s0.busy_s,
            "own_cpu_s": s1.own_s - s0.own_s,
            "others_cpu_s": others,
            "others_cores": others / wall,
            "steal_s": s1.steal_s - s0.steal_s,
            "noisy": others > self.limit_cores * wall + TICK_SLACK_S,
        }

    def wait_for_quiet(self) -> dict[str, Any]:
        """Sample the others' CPU over `window_s` until a sample is quiet or `max_wait_s` has
        passed; how long it took and whether it got quiet."""
        t0 = time.monotonic()
        reported = t0
        samples = 0
        while True:
            s0 = self.snapshot()
            time.sleep(self.window_s)
            d = self._delta(s0, self.snapshot())
            samples += 1
            waited = time.monotonic() - t0
            if not d["noisy"] or waited >= self.max_wait_s:
                return {
                    "waited_s": waited,
                    "quiet_at_start": not d["noisy"],
                    "others_cores_before": d["others_cores"],
                    "quiet_samples": samples,
                }
            if time.monotonic() - reported >= WAIT_REPORT_EVERY_S:
                reported = time.monotonic()
                print(
                    f"  [load] waiting for quiet: others use {d['others_cores']:.2f} cores "
                    f"(limit {self.limit_cores:g}), {waited:.0f} s of at most "
                    f"{self.max_wait_s:g} s",
                    flush=True,
                )

    @contextmanager
    def span(self) -> Iterator[dict[str, Any]]:
        """Wait for quiet (unless waiting is off), then measure the block; the yielded dict is
        filled with the load when the block ends (see `_delta`)."""
        if self.wait:
            before = self.wait_for_quiet()
        else:
            before = {"waited_s": 0.0, "quiet_at_start": None, "others_cores_before": None}
        record: dict[str, Any] = dict(before)
        load0 = os.getloadavg()[0]
        s0 = self.snapshot()
        yield record
        record.update(self._delta(s0, self.snapshot()))
        record["loadavg_1min"] = [load0, os.getloadavg()[0]]


def note(span: dict[str, Any]) -> str:
    """How much CPU the others used during a timed span, for the progress lines."""
    waited = f", waited {span['waited_s']:.0f} s for quiet" if span["waited_s"] >= 3 else ""
    noisy = " NOISY" if span["noisy"] else ""
    return f" (others {span['others_cores']:.2f} cores{waited}){noisy}"


def print_noisy(label: str, rnd: dict[str, Any]) -> None:
    """Say on the console that a round was noisy and will be left out."""
    if rnd["noisy"]:
        print(
            f"  {label} is noisy (others used up to {rnd['others_cores_max']:.2f} cores): "
            "left out of the medians and ratios",
            flush=True,
        )


# -- rounds: noisy or clean, which to keep, whether they agree ---------------------------------


def round_load(index: int, spans: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One round's load from the spans it was measured in (one, or one per contender run): noisy
    when any span was."""
    wall = sum(s["wall_s"] for s in spans)
    others = sum(s["others_cpu_s"] for s in spans)
    quiet = [s["quiet_at_start"] for s in spans if s["quiet_at_start"] is not None]
    return {
        "round": index,
        "noisy": any(s["noisy"] for s in spans),
        "wall_s": wall,
        "own_cpu_s": sum(s["own_cpu_s"] for s in spans),
        "others_cpu_s": others,
        "others_cores": others / wall if wall else 0.0,
        "others_cores_max": max((s["others_cores"] for s in spans), default=0.0),
        "steal_s": sum(s["steal_s"] for s in spans),
        "waited_s": sum(s["waited_s"] for s in spans),
        "quiet_at_start": all(quiet) if quiet else None,
        "loadavg_1min": [spans[0]["loadavg_1min"][0], spans[-1]["loadavg_1min"][1]]
        if spans
        else [],
    }


def kept(rounds: Sequence[dict[str, Any]]) -> list[int]:
    """Indices of the rounds the figures use: the clean ones, or every one when all were noisy
    (then the figures are shown but decide nothing: see `all_noisy`)."""
    clean = [r["round"] for r in rounds if not r["noisy"]]
    return clean or [r["round"] for r in rounds]


def all_noisy(rounds: Sequence[dict[str, Any]]) -> bool:
    return bool(rounds) and all(r["noisy"] for r in rounds)


def summary(rounds: Sequence[dict[str, Any]], what: str = "") -> dict[str, Any]:
    """A part's load, as recorded with its results."""
    noisy = sum(r["noisy"] for r in rounds)
    return {
        **({"what": what} if what else {}),
        "rounds": list(rounds),
        "n": len(rounds),
        "noisy": noisy,
        "kept": kept(rounds) if noisy < len(rounds) else [],
        "verdict": NO_VERDICT if all_noisy(rounds) else "",
        "others_cores_max": max((r["others_cores_max"] for r in rounds), default=0.0),
        "waited_s": sum(r["waited_s"] for r in rounds),
    }


def agreement(per_round: Sequence[float]) -> dict[str, Any]:
    """Whether the clean rounds tell the same story: (max - min) / median of a ratio's per-round
    values, at most AGREE_SPREAD. Fewer than two clean rounds: cannot tell (None)."""
    values = list(per_round)
    if len(values) < 2:
        return {"per_round": values, "spread": None, "agree": None}
    spread = (max(values) - min(values)) / statistics.median(values)
    return {"per_round": values, "spread": spread, "agree": spread <= AGREE_SPREAD}


def agree(agreements: Iterable[dict[str, Any]]) -> bool | None:
    """Every ratio agrees (True), one does not (False), or none can tell (None)."""
    verdicts = [a["agree"] for a in agreements if a["agree"] is not None]
    return all(verdicts) if verdicts else None


def clean_values(values_by_round: dict[int, float], rounds: Sequence[dict[str, Any]]) -> list:
    """The values of the clean rounds only, in round order (for `agreement`)."""
    return [values_by_round[r["round"]] for r in rounds if not r["noisy"]]
