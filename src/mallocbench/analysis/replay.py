"""A replay analysed once: per setup, the replay's peak heap RSS, live bytes (the ideal),
RSS/live, CPU and calls/s with 95% intervals over the repeats, and each ratio to the base
setup, classified by the project's rule: a finding only when its interval excludes 1 and
it is beyond min_effect. Every report format reads the `ReplayAnalysis`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mallocbench.analysis import stats
from mallocbench.analysis.growth import Growth, analyze_growth, trace_clock
from mallocbench.model.metadata import ReplayRecord, ReplayRun
from mallocbench.model.results import json_safe
from mallocbench.model.traceinfo import server_rss

# (key in the replayer's JSON, lower is better); report.replay.METRIC_LABELS names them.
# The steady peak is the sampled peak over each replay's second half: its start makes the
# blocks live when the window opened all at once, a transient of the replay that the
# whole peak includes (native/mbreplay.c). tune decides on the steady one.
METRICS = (
    ("peak_heap_rss", True),
    ("peak_heap_rss_steady", True),
    ("rss_over_live", True),
    ("cpu_s", True),
    ("calls_per_s", False),
)


@dataclass
class Estimate:
    mean: float
    low: float
    high: float


@dataclass
class Ratio:
    ratio: float
    low: float
    high: float
    verdict: str  # stats.classify's word; only "faster"/"slower" are findings

    @property
    def finding(self) -> bool:
        return self.verdict in stats.FINDINGS


@dataclass
class SetupSummary:
    setup: str
    allocator: str
    knobs: dict[str, str]
    runs: int
    failed: int
    crashed: int  # of the failed: killed by a signal
    errors: list[str]
    ideal_peak_live: float
    metrics: dict[str, Estimate]
    ratios: dict[str, Ratio]  # to the base; empty for the base itself
    # [replay s, heap RSS, live, trace s] of the first good repeat (no trace s: stored
    # before the replayer gave it)
    rss_curve: list[list[float]]

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def _values(runs: Sequence[ReplayRun], key: str) -> list[float]:
    return [v for r in runs if (v := r.value(key)) is not None]


def _ratio(
    runs: Sequence[ReplayRun], base: Sequence[ReplayRun], key: str, min_effect: float
) -> Ratio:
    r, low, high = stats.ratio_ci(_values(runs, key), _values(base, key))
    return Ratio(r, low, high, stats.classify(r, low, high, min_effect))


def summarize(
    runs: Sequence[ReplayRun],
    setups: Sequence[tuple[str, str, dict[str, str]]],
    min_effect: float,
) -> list[SetupSummary]:
    """One summary per (setup name, allocator, knobs), the first being the base."""
    by_setup = {name: [r for r in runs if r.setup == name] for name, _, _ in setups}
    base = by_setup[setups[0][0]] if setups else []
    out = []
    for index, (name, allocator, knobs) in enumerate(setups):
        mine = by_setup[name]
        good = [r for r in mine if r.status == "ok"]
        metrics = {key: Estimate(*stats.mean_ci(_values(mine, key))) for key, _ in METRICS}
        ratios = {key: _ratio(mine, base, key, min_effect) for key, _ in METRICS} if index else {}
        ideal = good[0].value("ideal_peak_live") if good else None
        out.append(
            SetupSummary(
                setup=name,
                allocator=allocator,
                knobs=dict(knobs),
                runs=len(mine),
                failed=len(mine) - len(good),
                crashed=sum(r.status == "crashed" for r in mine),
                errors=[r.error for r in mine if r.error],
                ideal_peak_live=ideal if ideal is not None else math.nan,
                metrics=metrics,
                ratios=ratios,
                rss_curve=list(good[0].data.get("samples", [])) if good else [],
            )
        )
    return out


# The memory a decision weighs: the steady peak (the whole one includes the replay's start).
SAVING_KEY = "peak_heap_rss_steady"


@dataclass(frozen=True)
class Saving:
    """What a setup's steady peak saves against the base's, in bytes (negative: it costs),
    with the interval its ratio's gives; as a share of the server's RSS over the recorded
    window when the trace holds it (`record --pid`), else of the base's replayed heap."""

    setup: str
    bytes: float
    low: float
    high: float
    of_bytes: float  # the server's RSS, or the base's steady heap peak
    of_server: bool  # of_bytes is the server's RSS (else the replay's heap only)

    @property
    def share(self) -> Estimate:
        return Estimate(
            self.bytes / self.of_bytes, self.low / self.of_bytes, self.high / self.of_bytes
        )


def saving(setup: str, ratio: Ratio, base_bytes: float, server: float | None) -> Saving | None:
    """base x (1 - ratio): the ratio's interval turned into bytes saved; None without an
    interval or a base level."""
    if not (base_bytes > 0 and math.isfinite(ratio.low) and math.isfinite(ratio.high)):
        return None
    of = server if server else base_bytes
    return Saving(
        setup,
        base_bytes * (1 - ratio.ratio),
        base_bytes * (1 - ratio.high),
        base_bytes * (1 - ratio.low),
        of,
        bool(server),
    )


def savings(rows: Sequence[SetupSummary], record: ReplayRecord) -> tuple[Saving, ...]:
    """Each setup's saving against the base (rows[0]) on the steady peak."""
    if not rows:
        return ()
    base = rows[0].metrics[SAVING_KEY].mean
    server = server_rss((record.trace or {}).get("info") or {})
    found = (
        saving(r.setup, r.ratios[SAVING_KEY], base, server)
        for r in rows[1:]
        if SAVING_KEY in r.ratios
    )
    return tuple(s for s in found if s is not None)


@dataclass(frozen=True)
class ReplayAnalysis:
    """A run's replay, summarised: `rows[0]` is the base setup."""

    record: ReplayRecord
    rows: tuple[SetupSummary, ...]
    min_effect: float
    base: str | None  # the setup the others are compared with
    # Setups whose slowest replay took longer than the recording (at its speed) by more
    # than BEHIND, with that ratio: time-based purging then saw a slower pace than the
    # program's (with the recorded timing only).
    behind: tuple[tuple[str, float], ...] = ()
    savings: tuple[Saving, ...] = ()  # per setup but the base, on the steady peak

    def saving(self, setup: str) -> Saving | None:
        return next((s for s in self.savings if s.setup == setup), None)

    # RSS and live bytes over the trace's time, each setup's first good repeat; None at
    # --timing none, whose clock is not the program's.
    growth: Growth | None = None
    # Each setup's rss_curve samples on the trace's clock (growth.trace_clock), at
    # --timing recorded only.
    clocks: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def clock(self, setup: str) -> tuple[float, ...] | None:
        return next((c for name, c in self.clocks if name == setup), None)

    def row(self, setup: str) -> SetupSummary | None:
        return next((r for r in self.rows if r.setup == setup), None)


def analyze_replay(record: ReplayRecord, min_effect: float) -> ReplayAnalysis:
    setups = [
        (str(s.get("name")), str(s.get("allocator")), dict(s.get("knobs") or {}))
        for s in record.setups or []
    ]
    runs = record.replay_runs
    rows = summarize(runs, setups, min_effect)
    timing, speed, span = record.timing or "recorded", record.speed or 1.0, _trace_span(record)
    curves = [(row.setup, row.rss_curve) for row in rows if row.rss_curve]
    growth = analyze_growth(curves, timing, speed, min_effect, span)
    clocks = (
        tuple((name, tuple(trace_clock(c, speed, span))) for name, c in curves)
        if timing == "recorded"
        else ()
    )
    return ReplayAnalysis(
        record,
        tuple(rows),
        min_effect,
        rows[0].setup if rows else None,
        _behind(record, runs),
        savings(rows, record),
        growth,
        clocks,
    )


BEHIND = 1.1


def _trace_span(record: ReplayRecord) -> float | None:
    """The trace's recorded span in seconds (its last call's time), as the replayer read it."""
    span = float((record.trace or {}).get("duration_s") or 0)
    return span if span > 0 else None


def _behind(record: ReplayRecord, runs: Sequence[ReplayRun]) -> tuple[tuple[str, float], ...]:
    recorded = float((record.trace or {}).get("duration_s") or 0) / (record.speed or 1.0)
    if record.timing != "recorded" or recorded <= 0:
        return ()
    out: dict[str, float] = {}
    for run in runs:
        wall = run.value("wall_s")
        if wall is not None and wall / recorded > max(BEHIND, out.get(run.setup, 0.0)):
            out[run.setup] = wall / recorded
    order = [str(s.get("name")) for s in record.setups or []]
    return tuple(sorted(out.items(), key=lambda item: order.index(item[0])))
