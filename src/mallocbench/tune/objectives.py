"""What a tune minimises or bounds: an evaluation's measured quantities, by short name.

`--objectives rss,time` and `--constraint 'rss<=2G'` name these; anything else is refused
before a trial runs, since a search on an unmeasured number would optimise nothing. A
trace replay and a run on servers measure different things under the same short names
where they mean the same to the user (rss: peak RSS, time: CPU cost), so each evaluation
has a catalogue of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.units import parse_size


@dataclass(frozen=True)
class Metric:
    name: str  # what the user writes
    key: str  # the replayer's JSON key (report/tune.py names the metric by it)
    unit: str  # bytes, s, ms, us, x, 1/s
    lower_is_better: bool = True
    priority: str = ""  # the priority that puts this metric first (memory, speed)

    @property
    def direction(self) -> str:
        return "minimize" if self.lower_is_better else "maximize"


# "time" is CPU time: under recorded timing the wall time is the trace's own length,
# so the cost a knob adds (purging, locking) shows in the CPU the replay burns. "rss" is
# the steady peak, over each replay's second half: a replay's start makes the blocks live
# when the window opened all at once, and some allocators peak there (jemalloc 1.15x the
# base's at 2 s of a 60 s window, 1.09x from 6 s on), a transient the recorded server,
# long past its own start, never had.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("rss", "peak_heap_rss_steady", "bytes", priority="memory"),
        Metric("rss_over_live", "rss_over_live", "x", priority="memory"),
        Metric("time", "cpu_s", "s", priority="speed"),
        Metric("wall", "wall_s", "s", priority="speed"),
        Metric("calls_per_s", "calls_per_s", "1/s", False, priority="speed"),
    )
}


# On servers (`--on servers`): one short run of the experiment's step per setting. "rss"
# is the server's peak RSS over its life (the allocator's whole footprint, the engine's
# cache included), "time" the server's CPU per operation: at a fixed duration, total CPU
# grows with throughput, so only a cost per operation compares settings.
SERVER_METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("rss", "peak_rss_bytes", "bytes", priority="memory"),
        Metric("time", "server_cpu_us_per_op", "us", priority="speed"),
        Metric("qps", "qps", "1/s", False, priority="speed"),
        Metric("p99", "p99_ms", "ms", priority="speed"),
    )
}

REPLAY = "replay"
SERVERS = "servers"
CATALOGUES = {REPLAY: METRICS, SERVERS: SERVER_METRICS}
_MEASURED_BY = {REPLAY: "by a trace replay", SERVERS: "on servers"}


def metric(name: str, where: str, on: str = REPLAY) -> Metric:
    catalogue = CATALOGUES[on]
    found = catalogue.get(name.strip())
    if found is None:
        other = next((o for o, c in CATALOGUES.items() if o != on and name.strip() in c), None)
        elsewhere = f" (only --on {other})" if other else did_you_mean(name.strip(), catalogue)
        raise MallocbenchError(
            f"{where} {name.strip()!r} is not measured {_MEASURED_BY[on]}{elsewhere}: "
            f"use one of {', '.join(catalogue)}"
        )
    return found


def parse_objectives(text: str, on: str = REPLAY) -> list[Metric]:
    names = [n for n in (p.strip() for p in text.split(",")) if n]
    if not names:
        raise MallocbenchError("--objectives is empty: give e.g. rss,time")
    out = [metric(n, "objective", on) for n in names]
    if len({m.name for m in out}) != len(out):
        raise MallocbenchError(f"--objectives {text!r} names one objective twice: once each")
    return out


_CONSTRAINT = re.compile(r"^\s*(\w+)\s*(<=|>=)\s*(\S.*?)\s*$")


@dataclass(frozen=True)
class Constraint:
    metric: Metric
    op: str  # <= or >=
    bound: float
    text: str

    def violation(self, values: Mapping[str, float]) -> float:
        """Optuna's convention: <= 0 when satisfied, else how far off (relative)."""
        value = values.get(self.metric.key, math.nan)
        if not math.isfinite(value):
            return math.inf
        gap = value - self.bound if self.op == "<=" else self.bound - value
        return gap / abs(self.bound) if self.bound else gap

    def satisfied(self, values: Mapping[str, float]) -> bool:
        return self.violation(values) <= 0


def _bound(m: Metric, text: str, where: str) -> float:
    if m.unit == "bytes":
        return float(parse_size(text, where))
    number = text.removesuffix(m.unit) if m.unit in ("s", "ms", "us") else text
    try:
        value = float(number)
    except ValueError:
        unit = {
            "s": " in seconds",
            "ms": " in milliseconds",
            "us": " in microseconds",
            "x": " (a ratio)",
            "1/s": " per second",
        }[m.unit]
        raise MallocbenchError(f"{where} = {text!r} is not a number{unit}") from None
    if not math.isfinite(value) or value < 0:
        raise MallocbenchError(f"{where} = {text!r} must be a number of 0 or more")
    return value


def parse_constraint(text: str, on: str = REPLAY) -> Constraint:
    match = _CONSTRAINT.match(text)
    if match is None:
        raise MallocbenchError(
            f"--constraint {text!r} is not METRIC<=VALUE or METRIC>=VALUE: e.g. 'rss<=2G'"
        )
    name, op, value = match.groups()
    m = metric(name, "constraint on", on)
    return Constraint(m, op, _bound(m, value, f"--constraint {name}"), text.strip())


def parse_constraints(texts: Sequence[str], on: str = REPLAY) -> list[Constraint]:
    return [parse_constraint(t, on) for t in texts]
