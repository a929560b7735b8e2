"""Which setup to run, per engine, from the differences the statistics support.

Weights would add percent of QPS to percent of RSS, units that do not add, so the rule
is a gate, not a score. A candidate qualifies against the base when, on every priority
(default: throughput, then peak RSS), it is shown not to be worse by more than the
minimum effect (a non-inferiority test: the 95% interval's bad end stays within
1 +- min_effect) and is shown better on at least one (its interval excludes 1.0 by at
least min_effect). Criteria that are not priorities only disqualify when they are shown
worse. Qualifying candidates are ranked by the priorities in order; when none qualifies,
the base stays. A point estimate alone never moves a decision.

A soak with events adds memory evidence of another kind: the RSS step per event each
setup leaves beside the base's (analysis.ratchet.step_differences, its finding rule
stated there). It is weighed on peak RSS like a ratio, its difference taken as a share of
the base's RSS before the events, but never enters the geometric mean that ranks.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mallocbench.analysis import stats
from mallocbench.analysis.client import client_bound
from mallocbench.analysis.summary import RSS as RSS_UNIT
from mallocbench.analysis.summary import (
    RatioCell,
    RatioTable,
    min_effect_of,
    peak_rss_by_repeat,
    ratio_cell,
    relative_tables,
    rss_ratio_cells,
    setup_order,
    summarize_run,
)
from mallocbench.errors import MallocbenchError
from mallocbench.metadata import ReplayRecord
from mallocbench.results import STATUS_OK, RunResult

if TYPE_CHECKING:
    from mallocbench.analysis.ratchet import SetupRatchet, StepDifference

THROUGHPUT = "throughput"
P99 = "p99"
RSS = "rss"
CRITERIA = (THROUGHPUT, P99, RSS)
DEFAULT_PRIORITIES = (THROUGHPUT, RSS)
# Higher is better for throughput; lower for latency and memory.
HIGHER_IS_BETTER = {THROUGHPUT: True, P99: False, RSS: False}

BETTER = "better"  # shown better beyond min_effect, and nowhere shown worse
NON_INFERIOR = "non-inferior"  # every interval's bad end within min_effect
WORSE = "worse"  # shown worse beyond min_effect somewhere (or it crashed where base did not)
UNCLEAR = "unclear"  # intervals too wide to say either
UNMEASURED = "not measured"


@dataclass
class Evidence:
    """One relative value behind a claim: where it was measured and its interval."""

    where: str  # "point-query @8", or "peak RSS" for memory
    ratio: float | None
    low: float
    high: float
    verdict: str  # stats.classify's word, about the ratio (not about better/worse)
    problem: str | None = None
    # A step per soak event: its figures in bytes; ratio, low and high are then 1 plus the
    # difference over the base's RSS before its events (analysis.ratchet).
    step: StepDifference | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "where": self.where,
            "ratio": self.ratio,
            "low": None if math.isnan(self.low) else self.low,
            "high": None if math.isnan(self.high) else self.high,
            "verdict": self.verdict,
            "problem": self.problem,
        }
        if self.step is not None:
            out["step"] = self.step.to_dict()
        return out


@dataclass
class Assessment:
    """A candidate on one criterion: its status and the evidence it rests on."""

    criterion: str
    status: str
    estimate: float | None  # geomean of the ratios (candidate / base)
    better: list[Evidence] = field(default_factory=list)
    worse: list[Evidence] = field(default_factory=list)
    unclear: list[Evidence] = field(default_factory=list)  # bad end past min_effect
    cells: int = 0
    worst: Evidence | None = None  # the interval whose bad end is furthest from 1.0
    steps: list[Evidence] = field(default_factory=list)  # every step per soak event weighed

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "criterion": self.criterion,
            "status": self.status,
            "estimate": self.estimate,
            "cells": self.cells,
            "better": [e.to_dict() for e in self.better],
            "worse": [e.to_dict() for e in self.worse],
            "unclear": [e.to_dict() for e in self.unclear],
            "worst": self.worst.to_dict() if self.worst else None,
        }
        if self.steps:
            out["steps"] = [e.to_dict() for e in self.steps]
        return out


@dataclass
class Candidate:
    setup: str
    assessments: dict[str, Assessment]
    qualifies: bool
    # Why it does not qualify, each a (criterion, status): a priority it is not shown
    # better on or no worse than, or another criterion it is worse on.
    disqualified_by: list[tuple[str, str]]
    peak_rss_bytes: int | None = None
    over_budget: bool = False
    better_on_none: bool = False  # nothing against it, but better on no priority either

    def to_dict(self) -> dict[str, Any]:
        """Without the reasons it does not qualify, which the reports word."""
        return {
            "setup": self.setup,
            "qualifies": self.qualifies,
            "peak_rss_bytes": self.peak_rss_bytes,
            "over_budget": self.over_budget,
            "assessments": {k: a.to_dict() for k, a in self.assessments.items()},
        }


@dataclass(frozen=True)
class ThinEvidence:
    """Where an engine's evidence is thin: the run measured less than a decision wants."""

    only_threads: int | None = None  # the one thread count, when only one ran
    no_writes: bool = False
    unstable: int = 0  # cells
    client_bound: int = 0  # cells
    soak: bool = False  # repeats are segments of one server start
    few_repeats: int | None = None  # the repeat count, when under 3


@dataclass
class EngineRecommendation:
    engine: str
    base: str
    choice: str | None  # None: keep the base
    ranked: list[Candidate]  # qualifying first, in rank order, then the rest
    thin: ThinEvidence  # where the evidence is thin
    base_peak_rss_bytes: int | None = None
    base_over_budget: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "base": self.base,
            "choice": self.choice,
            "keep_base": self.choice is None,
            "thin_evidence": dataclasses.asdict(self.thin),  # worded by the reports
            "base_peak_rss_bytes": self.base_peak_rss_bytes,
            "base_over_budget": self.base_over_budget,
            "candidates": [c.to_dict() for c in self.ranked],
        }


@dataclass
class Recommendation:
    run_id: str
    priorities: tuple[str, ...]
    min_effect: float
    memory_budget_bytes: int | None
    engines: list[EngineRecommendation]
    exploratory: bool  # no interval anywhere: nothing can be recommended

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "priorities": list(self.priorities),
            "min_effect": self.min_effect,
            "memory_budget_bytes": self.memory_budget_bytes,
            "exploratory": self.exploratory,
            "engines": [e.to_dict() for e in self.engines],
        }


def parse_priorities(text: str) -> tuple[str, ...]:
    """ "throughput,rss" -> ("throughput", "rss"); each criterion once, known names only."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    aliases = {"qps": THROUGHPUT, "latency": P99, "memory": RSS, "p99_ms": P99}
    names = [aliases.get(n, n) for n in names]
    unknown = [n for n in names if n not in CRITERIA]
    if unknown or not names:
        raise MallocbenchError(
            f"unknown priority {', '.join(unknown) or repr(text)}: use a comma list of "
            f"{', '.join(CRITERIA)} (most important first), e.g. --priority throughput,rss"
        )
    if len(set(names)) != len(names):
        raise MallocbenchError(f"--priority {text!r} names a criterion twice: list each once")
    return tuple(names)


def _evidence(where: str, cell: RatioCell) -> Evidence:
    return Evidence(where, cell.ratio, cell.low, cell.high, cell.verdict, cell.problem)


def _weigh(out: Assessment, evidence: Evidence, cell: RatioCell, min_effect: float) -> None:
    """File one piece of evidence under better, worse and unclear, and keep the worst."""
    higher_better = HIGHER_IS_BETTER[out.criterion]
    better_word = stats.FASTER if higher_better else stats.SLOWER
    worse_word = stats.SLOWER if higher_better else stats.FASTER
    verdict = cell.verdict
    if verdict == better_word:
        out.better.append(evidence)
    elif verdict == worse_word:
        out.worse.append(evidence)
    # Non-inferiority: the interval's bad end must stay within min_effect of 1.0.
    if higher_better:
        past = not cell.has_interval or cell.low < 1.0 - min_effect
    else:
        past = not cell.has_interval or cell.high > 1.0 + min_effect
    if past and verdict != worse_word:
        out.unclear.append(evidence)
    if cell.has_interval:
        bad = cell.low if higher_better else 1 / cell.high
        if out.worst is None or bad < _bad_end(out.worst, higher_better):
            out.worst = evidence


def step_cell(difference: StepDifference) -> RatioCell:
    """A soak's step difference on the ratio scale (StepDifference.as_ratio), so that
    stats.classify and the non-inferiority test judge it by the ratchet's rule."""
    ratio, low, high = difference.as_ratio()
    return RatioCell(
        ratio,
        low,
        high,
        repeats=(difference.step.n, difference.base_step.n),
        reference_label=difference.base,
        min_effect=difference.min_effect,
        unit=RSS_UNIT,
    )


def assess(
    criterion: str,
    cells: list[tuple[str, RatioCell]],
    min_effect: float,
    steps: Sequence[StepDifference] = (),
) -> Assessment:
    """A candidate's status on one criterion from its ratio cells (candidate / base) and,
    for memory, the steps per soak event it leaves beside the base's."""
    out = Assessment(criterion, UNMEASURED, None, cells=len(cells) + len(steps))
    ratios = []
    for where, cell in cells:
        evidence = _evidence(where, cell)
        if cell.problem:
            # A crash or OOM where the base measured is the worst regression there is.
            if cell.problem != "missing":
                out.worse.append(evidence)
            continue
        if cell.ratio is not None:
            ratios.append(cell.ratio)
        _weigh(out, evidence, cell, min_effect)
    for difference in steps:
        cell = step_cell(difference)
        evidence = dataclasses.replace(
            _evidence(f"step per {difference.label} from a soak", cell), step=difference
        )
        out.steps.append(evidence)
        _weigh(out, evidence, cell, min_effect)
    out.estimate = stats.geomean(ratios) if ratios else None
    if out.worse:
        out.status = WORSE
    elif not ratios and not steps:
        out.status = UNMEASURED
    elif out.unclear:
        out.status = UNCLEAR
    elif out.better:
        out.status = BETTER
    else:
        out.status = NON_INFERIOR
    return out


def _whole(peak: float | None) -> int | None:
    return None if peak is None else int(peak)


def _bad_end(e: Evidence, higher_better: bool) -> float:
    """The interval's end on the losing side, as a gain (below 1.0 is a loss)."""
    return e.low if higher_better else 1 / e.high


def _p99_cells(result: RunResult, min_effect: float) -> dict[str, list[tuple[str, RatioCell]]]:
    """Each candidate's p99 latency over the base's per step and thread count, paired."""
    by_key: dict[tuple[str, str, str, int], dict[int, float]] = defaultdict(dict)
    for cell in result.cells:
        if cell.status == STATUS_OK and cell.p99_ms:
            by_key[(cell.setup, cell.engine, cell.step, cell.threads)][cell.repeat] = cell.p99_ms
    out: dict[str, list[tuple[str, RatioCell]]] = defaultdict(list)
    base = result.base_setup
    for (setup, engine, step, threads), base_values in sorted(by_key.items()):
        if setup != base:
            continue
        others = {
            s: by_key[(s, engine, step, threads)]
            for s in setup_order(result)
            if s != base and (s, engine, step, threads) in by_key
        }
        blocked = stats.blocked_ratios(base_values, others)
        for name, values in others.items():
            ratio = ratio_cell(
                list(values.values()),
                list(base_values.values()),
                None,
                base,
                min_effect,
                "ms",
                blocked.get(name),
            )
            out[f"{engine}/{name}"].append((f"{step} @{threads}", ratio))
    return out


def _replay_setup_key(allocator: str, knobs: Mapping[str, str]) -> tuple[str, tuple[Any, ...]]:
    return allocator, tuple(sorted((str(k), str(v)) for k, v in knobs.items()))


def replay_rss_cells(
    result: RunResult, replay: ReplayRecord, min_effect: float
) -> dict[str, RatioCell]:
    """Each candidate's replay peak RSS over the base's, for the run's setups whose allocator
    and knobs a setup of the replay has (the replay knows no server config); empty when
    the run's base is not among them."""
    names = {
        _replay_setup_key(str(s.get("allocator")), s.get("knobs") or {}): str(s.get("name"))
        for s in replay.setups or []
    }
    runs = replay.replay_runs

    def peaks(name: str) -> list[float]:
        return [v for r in runs if r.setup == name and (v := r.value("peak_heap_rss")) is not None]

    matched = {s.name: names.get(_replay_setup_key(s.allocator, s.knobs)) for s in result.setups}
    base = matched.get(result.base_setup)
    if base is None:
        return {}
    return {
        setup: ratio_cell(peaks(name), peaks(base), None, base, min_effect, RSS_UNIT)
        for setup, name in matched.items()
        if name is not None and setup != result.base_setup
    }


def _rss_evidence(
    engine: str,
    setup: str,
    rss_cells: Mapping[tuple[str, str], RatioCell],
    replay_cells: Mapping[str, RatioCell],
    replay_label: str,
) -> list[tuple[str, RatioCell]]:
    """The peak-RSS ratios behind the memory claim: the servers', then the replay's."""
    out = []
    rss = rss_cells.get((engine, setup))
    if rss:
        out.append(("peak RSS", rss))
    if setup in replay_cells:
        out.append((replay_label, replay_cells[setup]))
    return out


def _steps_by_setup(
    result: RunResult, ratchets: Sequence[SetupRatchet] | None, min_effect: float
) -> dict[tuple[str, str], list[StepDifference]]:
    """A soak's steps per event against the base's, per (engine, setup); {} without."""
    # Imported here: numpy and the soak's analysis are for runs with events only, and
    # `recommend --help` should not wait for them.
    from mallocbench.analysis.ratchet import ratchet_setups, step_differences
    from mallocbench.analysis.soak import is_soak, soak_setups

    if ratchets is None:
        if not any(s.events for s in result.sessions) or not is_soak(result):
            return {}
        ratchets = ratchet_setups(result, soak_setups(result))
    out: dict[tuple[str, str], list[StepDifference]] = defaultdict(list)
    for difference in step_differences(ratchets, result.base_setup, min_effect):
        out[(difference.engine, difference.setup)].append(difference)
    return out


def _thin_evidence(result: RunResult, engine: str) -> ThinEvidence:
    cells = [c for c in result.cells if c.engine == engine]
    threads = {c.threads for c in cells}
    repeats = len({c.repeat for c in cells})
    return ThinEvidence(
        only_threads=next(iter(threads)) if len(threads) == 1 else None,
        no_writes=not any((c.group in ("write", "insert-benchmark")) for c in cells),
        unstable=sum(c.unstable for c in cells),
        client_bound=sum(client_bound(c) for c in cells),
        # A soak's repeats are segments of one server lifetime: no start-to-start spread.
        soak=result.metadata.soak is not None,
        few_repeats=repeats if repeats < 3 else None,
    )


def _rank_key(candidate: Candidate, priorities: tuple[str, ...]) -> tuple[float, ...]:
    """Better on an earlier priority first; then the larger improvement on it."""
    key: list[float] = []
    for name in priorities:
        a = candidate.assessments[name]
        gain = 0.0
        if a.estimate:
            gain = math.log(a.estimate) * (1 if HIGHER_IS_BETTER[name] else -1)
        key += [-(a.status == BETTER), -gain]
    return tuple(key)


def _candidate(
    setup: str,
    assessments: dict[str, Assessment],
    priorities: tuple[str, ...],
    peak: int | None,
    budget: int | None,
) -> Candidate:
    against = [
        (name, assessments[name].status)
        for name in priorities
        if assessments[name].status not in (BETTER, NON_INFERIOR)
    ]
    against += [
        (name, WORSE)
        for name, a in assessments.items()
        if name not in priorities and a.status == WORSE
    ]
    none_better = not against and not any(assessments[n].status == BETTER for n in priorities)
    over = bool(budget and peak and peak > budget)
    qualifies = not against and not none_better and not over
    return Candidate(setup, assessments, qualifies, against, peak, over, none_better)


def recommend(
    result: RunResult,
    priorities: tuple[str, ...] = DEFAULT_PRIORITIES,
    min_effect: float | None = None,
    memory_budget_bytes: int | None = None,
    tables: Sequence[RatioTable] | None = None,
    rss_cells: Mapping[tuple[str, str], RatioCell] | None = None,
    replay: ReplayRecord | None = None,
    ratchets: Sequence[SetupRatchet] | None = None,
) -> Recommendation:
    """The setup to run per engine, or the base when no candidate qualifies.
    `tables`, `rss_cells` and `ratchets`: relative_tables(result, min_effect),
    rss_ratio_cells(result, min_effect) and ratchet_setups(...), when already at hand.
    `replay`: a replay of a trace of this workload, whose peak RSS ratios join the servers'
    as memory evidence. A soak's steps per event join them too (read from the samples)."""
    effect = min_effect_of(result, min_effect)
    if tables is None:
        tables = relative_tables(result, effect, summarize_run(result))
    if rss_cells is None:
        rss_cells = rss_ratio_cells(result, effect)
    p99 = _p99_cells(result, effect)
    peaks = peak_rss_by_repeat(result)
    replay_cells = replay_rss_cells(result, replay, effect) if replay else {}
    trace = os.path.basename((replay.trace_path or "") if replay else "") or "a trace"
    replay_label = f"peak RSS from a replay of {trace}"
    base = result.base_setup
    steps = _steps_by_setup(result, ratchets, effect)
    engines = []
    for engine in dict.fromkeys(c.engine for c in result.cells):
        candidates = []
        for setup in [s for s in setup_order(result) if s != base]:
            qps_cells = [
                (f"{row.step} @{t.threads}", row.cells[setup])
                for t in tables
                if t.engine == engine and setup in t.columns
                for row in t.rows
                if setup in row.cells
            ]
            if not qps_cells:
                continue
            rss = _rss_evidence(engine, setup, rss_cells, replay_cells, replay_label)
            assessments = {
                THROUGHPUT: assess(THROUGHPUT, qps_cells, effect),
                P99: assess(P99, p99.get(f"{engine}/{setup}", []), effect),
                RSS: assess(RSS, rss, effect, steps.get((engine, setup), ())),
            }
            peak = max(peaks.get((setup, engine), {}).values(), default=None)
            candidates.append(
                _candidate(setup, assessments, priorities, _whole(peak), memory_budget_bytes)
            )
        if not candidates:
            continue  # only the base ran on this engine: nothing to choose between
        qualifying = sorted(
            (c for c in candidates if c.qualifies), key=lambda c: _rank_key(c, priorities)
        )
        rest = [c for c in candidates if not c.qualifies]
        base_peak = max(peaks.get((base, engine), {}).values(), default=None)
        engines.append(
            EngineRecommendation(
                engine,
                base,
                qualifying[0].setup if qualifying else None,
                qualifying + rest,
                _thin_evidence(result, engine),
                _whole(base_peak),
                bool(memory_budget_bytes and base_peak and base_peak > memory_budget_bytes),
            )
        )
    exploratory = not any(c.has_interval for t in tables for r in t.rows for c in r.cells.values())
    return Recommendation(
        result.run_id, priorities, effect, memory_budget_bytes, engines, exploratory
    )
