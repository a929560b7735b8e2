"""Which setup to run, per engine, from the differences the statistics support.

Weights would add percent of QPS to percent of RSS, units that do not add, so the rule
is a gate, not a score. A candidate qualifies against the base when, on every priority
(default: throughput, then peak RSS), it is shown not to be worse by more than the
minimum effect (a non-inferiority test: the 95% interval's bad end stays within
1 +- min_effect) and is shown better on at least one (its interval excludes 1.0 by at
least min_effect). Criteria that are not priorities only disqualify when they are shown
worse. Qualifying candidates are ranked by the priorities in order. A point estimate
alone never moves a decision.

A loss is a price, not a veto, once the user names what they will pay: a budget
(--max-loss OBJECTIVE=PCT: every interval's bad end within PCT; --memory-budget: the
setup's peak RSS within it) admits a loss on its objective, and a candidate whose every
loss a budget admits qualifies like the others. Without a budget on it, a candidate
shown better on the first priority and shown worse elsewhere is a trade-off: the
decision is the user's, and the outcome says so with the budgets that would take it. A
shown loss beyond a budget the user gave decides against it. When no candidate
qualifies and none is a trade-off, one shown better on a priority but unclear on another
(not shown worse on the first) leaves the engine undecided: more blocks could decide it.
Otherwise the base stays (keep).

A soak with events adds memory evidence of another kind: the RSS step per event each
setup leaves beside the base's (analysis.ratchet.step_differences, its finding rule
stated there). It is weighed on peak RSS like a ratio, its difference taken as a share of
the base's RSS before the events, but never enters the geometric mean that ranks.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mallocbench.analysis import stats
from mallocbench.analysis.client import client_bound
from mallocbench.analysis.continuation import BlocksPrediction, predict, seconds_per_block
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
from mallocbench.model.metadata import ReplayRecord
from mallocbench.model.results import STATUS_OK, Cell, RunResult
from mallocbench.units import parse_fraction

if TYPE_CHECKING:
    from mallocbench.analysis.ratchet import SetupRatchet, StepDifference

THROUGHPUT = "throughput"
P99 = "p99"
RSS = "rss"
CPU = "cpu"  # the server's CPU time per operation
CRITERIA = (THROUGHPUT, P99, RSS, CPU)
DEFAULT_PRIORITIES = (THROUGHPUT, RSS)
# Higher is better for throughput; lower for latency, memory and CPU.
HIGHER_IS_BETTER = {THROUGHPUT: True, P99: False, RSS: False, CPU: False}
CPU_METRIC = "server_cpu_us_per_op"

# What an engine's recommendation is (recommendation.kind in JSON).
Outcome = Literal["change", "trade-off", "undecided", "keep"]
CHANGE: Outcome = "change"  # a setup qualifies: run it
TRADE_OFF: Outcome = "trade-off"  # wins the first priority, loses another: the user's call
UNDECIDED: Outcome = "undecided"  # a supported gain waits on an unclear priority
KEEP: Outcome = "keep"  # nothing qualifies and nothing waits on evidence: keep the base

# Which budget admitted a loss (Candidate.admitted_by).
BudgetKind = Literal["max-loss", "memory-budget"]
MAX_LOSS: BudgetKind = "max-loss"
MEMORY_BUDGET: BudgetKind = "memory-budget"


class Status(enum.StrEnum):
    """An assessment's status on one criterion; its value is the word reports print."""

    BETTER = "better"  # shown better beyond min_effect, and nowhere shown worse
    NON_INFERIOR = "non-inferior"  # every interval's bad end within min_effect
    WORSE = "worse"  # shown worse beyond min_effect somewhere (or it crashed where base did not)
    UNCLEAR = "unclear"  # intervals too wide to say either
    UNMEASURED = "not measured"


BETTER, NON_INFERIOR, WORSE = Status.BETTER, Status.NON_INFERIOR, Status.WORSE
UNCLEAR, UNMEASURED = Status.UNCLEAR, Status.UNMEASURED


@dataclass
class Evidence:
    """One relative value behind a claim: where it was measured and its interval."""

    where: str  # "point-query @8", or "peak RSS" for memory
    ratio: float | None
    low: float
    high: float
    verdict: str  # stats.classify's word, about the ratio (not about better/worse)
    problem: str | None = None
    reference: float | None = None  # the base's own value there, in the criterion's unit
    # A paired interval's blocks and degrees of freedom (0 and nan: not paired).
    blocks: int = 0
    df: float = math.nan
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
            "reference": self.reference,
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
    # The base's level in the criterion's unit (QPS, ms, bytes, us per operation): the
    # geometric mean of its values where the ratios were measured; None without.
    base_level: float | None = None
    replay: bool = False  # measured by replaying a trace (steady peak, the replay's CPU)

    @property
    def change(self) -> float | None:
        """The estimate in the user's unit: the candidate's level minus the base's."""
        if self.estimate is None or self.base_level is None:
            return None
        return self.base_level * (self.estimate - 1)

    def loss_admitted(self, max_loss: float) -> bool:
        """Every interval's bad end within `max_loss` of 1.0; a crash or a missing
        interval is a loss no percentage admits."""
        if any(e.problem or not _has_interval(e) for e in (*self.worse, *self.unclear)):
            return False
        if self.worst is None:
            return True
        higher = HIGHER_IS_BETTER[self.criterion]
        # A rounding hair: a loss written as the interval prints (1.10) is within 10%.
        return _bad_end(self.worst, higher) >= _bad_end_at(max_loss, higher) - 1e-9

    def loss_to_admit(self) -> float | None:
        """The smallest --max-loss that would admit this loss, as a fraction; None when
        none would (a crash, or no interval)."""
        if self.worst is None or not self.loss_admitted(math.inf):
            return None
        e = self.worst
        return max(0.0, 1.0 - e.low) if HIGHER_IS_BETTER[self.criterion] else max(0.0, e.high - 1)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "criterion": self.criterion,
            "status": self.status,
            "estimate": self.estimate,
            "base_level": self.base_level,
            "change": self.change,
            "cells": self.cells,
            "better": [e.to_dict() for e in self.better],
            "worse": [e.to_dict() for e in self.worse],
            "unclear": [e.to_dict() for e in self.unclear],
            "worst": self.worst.to_dict() if self.worst else None,
        }
        if self.steps:
            out["steps"] = [e.to_dict() for e in self.steps]
        return out


@dataclass(frozen=True)
class Budgets:
    """What the user will pay for a gain: an absolute peak RSS, and a loss per criterion."""

    memory_bytes: int | None = None
    max_loss: Mapping[str, float] = field(default_factory=dict)  # criterion -> fraction


@dataclass(frozen=True)
class Hold:
    """An unclear priority that keeps a supported gain from deciding, by the interval
    that needs the most blocks: its width now, the width at which an interval around
    its ratio stands clear of the minimum effect on the losing side (0: the ratio sits on
    that line, and no width decides it), and the blocks the run's own variance predicts
    for that (analysis.continuation), with the wall time one block took."""

    criterion: str
    where: str
    width_now: float
    width_needed: float
    prediction: BlocksPrediction | None = None
    seconds_per_block: float | None = None
    replay: bool = False  # the interval is a replay's: more repeats of it, not blocks

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        del out["replay"]
        out["width_now"] = None if math.isinf(self.width_now) else self.width_now
        return out


@dataclass
class Candidate:
    setup: str
    assessments: dict[str, Assessment]
    qualifies: bool
    # Why it does not qualify, each a (criterion, status): a priority it is not shown
    # better on or no worse than, or another criterion it is worse on, no budget admitting.
    disqualified_by: list[tuple[str, str]]
    peak_rss_bytes: int | None = None
    over_budget: bool = False
    better_on_none: bool = False  # nothing against it, but better on no priority either
    outcome: Outcome = KEEP  # CHANGE (it qualifies), TRADE_OFF, UNDECIDED or KEEP
    # The losses a budget let through, each (criterion, MAX_LOSS or MEMORY_BUDGET).
    admitted_by: list[tuple[str, BudgetKind]] = field(default_factory=list)
    rejected_by: list[str] = field(default_factory=list)  # criteria whose budget it exceeds
    holds: list[Hold] = field(default_factory=list)  # UNDECIDED: what waits on evidence
    # TRADE_OFF: per lost criterion the smallest --max-loss that takes it (a fraction),
    # and the smallest round --memory-budget that takes a peak-RSS loss (bytes).
    loss_to_admit: dict[str, float] = field(default_factory=dict)
    memory_budget_to_admit: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Without the reasons it does not qualify, which the reports word."""
        return {
            "setup": self.setup,
            "qualifies": self.qualifies,
            "outcome": self.outcome,
            "peak_rss_bytes": self.peak_rss_bytes,
            "over_budget": self.over_budget,
            "admitted_by": [list(a) for a in self.admitted_by],
            "rejected_by": self.rejected_by,
            "holds": [h.to_dict() for h in self.holds],
            "loss_to_admit": self.loss_to_admit,
            "memory_budget_to_admit": self.memory_budget_to_admit,
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
    choice: str | None  # the setup to run (kind CHANGE); None: keep the base for now
    # Qualifying first, in rank order, then the trade-offs, the undecided, the rest; the
    # first is the one the kind is about.
    ranked: list[Candidate]
    thin: ThinEvidence  # where the evidence is thin
    base_peak_rss_bytes: int | None = None
    base_over_budget: bool = False
    kind: Outcome = KEEP

    @property
    def subject(self) -> Candidate | None:
        """The candidate the outcome names: the choice, the trade-off or the undecided."""
        return self.ranked[0] if self.kind != KEEP and self.ranked else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "base": self.base,
            "kind": self.kind,
            "choice": self.choice,
            "subject": self.subject.setup if self.subject else None,
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
    max_loss: dict[str, float] = field(default_factory=dict)  # criterion -> fraction
    experiment_file: str | None = None  # what `run --resume` would continue
    replay_trace: str | None = None  # a replay's decision (advise): the trace replayed

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "priorities": list(self.priorities),
            "min_effect": self.min_effect,
            "memory_budget_bytes": self.memory_budget_bytes,
            "max_loss": self.max_loss,
            "exploratory": self.exploratory,
            "engines": [e.to_dict() for e in self.engines],
        }


def parse_priorities(text: str, key: str = "--priority") -> tuple[str, ...]:
    """ "throughput,rss" -> ("throughput", "rss"); each criterion once, known names only."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    names = [ALIASES.get(n, n) for n in names]
    unknown = [n for n in names if n not in CRITERIA]
    if unknown or not names:
        raise MallocbenchError(
            f"unknown priority {', '.join(unknown) or repr(text)}: use a comma list of "
            f"{', '.join(CRITERIA)} (most important first), e.g. {key} throughput,rss"
        )
    if len(set(names)) != len(names):
        raise MallocbenchError(f"{key} {text!r} names a criterion twice: list each once")
    return tuple(names)


ALIASES = {"qps": THROUGHPUT, "latency": P99, "memory": RSS, "p99_ms": P99}


def parse_max_loss(items: Sequence[str], key: str = "--max-loss") -> dict[str, float]:
    """["rss=10%", "p99=0.05"] -> {"rss": 0.10, "p99": 0.05}: the loss the user accepts
    per objective, each once."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        criterion = ALIASES.get(name.strip().lower(), name.strip().lower())
        if not sep or criterion not in CRITERIA:
            raise MallocbenchError(
                f"{key} {item!r} is not OBJECTIVE=PCT: write e.g. {key} rss=10% "
                f"(objectives: {', '.join(CRITERIA)})"
            )
        if criterion in out:
            raise MallocbenchError(f"{key} names {criterion} twice: give each objective once")
        out[criterion] = parse_fraction(value.strip(), f"{key} {criterion}")
    return out


@dataclass(frozen=True)
class DecisionRule:
    """What a recommendation weighs: the priorities and the budgets."""

    priorities: tuple[str, ...] = DEFAULT_PRIORITIES
    memory_budget_bytes: int | None = None
    max_loss: Mapping[str, float] = field(default_factory=dict)


def stored_rule(result: RunResult) -> DecisionRule:
    """The run's own rule, from its experiment's [decision] table (the default without);
    names checked again, since a stored file may have been edited by hand."""
    record = result.metadata.decision
    if record is None:
        return DecisionRule()
    priorities: tuple[str, ...] = DEFAULT_PRIORITIES
    if record.priorities:
        priorities = parse_priorities(
            ",".join(record.priorities), f"the [decision] of run {result.run_id}"
        )
    losses = parse_max_loss(
        [f"{k}={v}" for k, v in (record.max_loss or {}).items()],
        f"the [decision] of run {result.run_id}",
    )
    return DecisionRule(priorities, record.memory_budget_bytes, losses)


def _has_interval(e: Evidence) -> bool:
    return not (math.isnan(e.low) or math.isnan(e.high))


def _bad_end_at(max_loss: float, higher_better: bool) -> float:
    """The bad end (as _bad_end states it) of an interval that loses exactly max_loss."""
    return 1.0 - max_loss if higher_better else 1.0 / (1.0 + max_loss)


def _evidence(where: str, cell: RatioCell) -> Evidence:
    return Evidence(
        where,
        cell.ratio,
        cell.low,
        cell.high,
        cell.verdict,
        cell.problem,
        cell.reference,
        cell.blocks,
        cell.df,
    )


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
    level_cells: int | None = None,
) -> Assessment:
    """A candidate's status on one criterion from its ratio cells (candidate / base) and,
    for memory, the steps per soak event it leaves beside the base's. The base's level
    comes from the first `level_cells` cells (all by default): a replay's bytes are not
    the server's."""
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
    levels = [c.reference for _, c in cells[:level_cells] if c.reference and not c.problem]
    out.base_level = stats.geomean(levels) if levels else None
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


def _p99(cell: Cell) -> float | None:
    return cell.p99_ms


def _cpu(cell: Cell) -> float | None:
    value = (cell.metrics or {}).get(CPU_METRIC)
    return float(value) if value else None


def _paired_cells(
    result: RunResult,
    min_effect: float,
    value_of: Callable[[Cell], float | None] = _p99,
    unit: str = "ms",
) -> dict[str, list[tuple[str, RatioCell]]]:
    """Each candidate's value (p99 latency, CPU per operation) over the base's per step
    and thread count, paired by block."""
    by_key: dict[tuple[str, str, str, int], dict[int, float]] = defaultdict(dict)
    for cell in result.cells:
        value = value_of(cell) if cell.status == STATUS_OK else None
        if value:
            by_key[(cell.setup, cell.engine, cell.step, cell.threads)][cell.repeat] = value
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
                unit,
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


def _admitting_budget(
    name: str, a: Assessment, peak: int | None, budgets: Budgets
) -> BudgetKind | None:
    """The budget that admits this loss, if one does: a --max-loss on its criterion, or
    for peak RSS the memory budget the setup's peak fits in."""
    if name in budgets.max_loss and a.loss_admitted(budgets.max_loss[name]):
        return MAX_LOSS
    if name == RSS and budgets.memory_bytes and peak and peak <= budgets.memory_bytes:
        return MEMORY_BUDGET
    return None


def _at_issue(
    assessments: dict[str, Assessment], priorities: tuple[str, ...]
) -> list[tuple[str, str]]:
    """(criterion, status) of each priority not shown better or no worse, and each other
    criterion shown worse: what keeps a candidate from qualifying unless a budget admits it."""
    out = [
        (name, assessments[name].status)
        for name in priorities
        if assessments[name].status not in (BETTER, NON_INFERIOR)
    ]
    return out + [
        (name, WORSE)
        for name, a in assessments.items()
        if name not in priorities and a.status == WORSE
    ]


def _evidence_hold(e: Evidence, criterion: str, min_effect: float, per_block: float | None) -> Hold:
    """One unclear interval: how wide it is, how wide one around its ratio may be to
    stand clear of the minimum effect on the losing side, and the blocks that takes."""
    line = 1 - min_effect if HIGHER_IS_BETTER[criterion] else 1 + min_effect
    ratio = e.ratio if e.ratio and e.ratio > 0 else 1.0
    needed = abs(math.log(ratio / line))  # on the log scale, as the intervals are built
    width_needed = ratio * (math.exp(needed) - math.exp(-needed))
    prediction = predict(e.low, e.high, e.df, e.blocks, needed) if _has_interval(e) else None
    now = stats.interval_width(e.low, e.high) if _has_interval(e) else math.inf
    return Hold(criterion, e.where, now, width_needed, prediction, per_block)


def _hold_of(a: Assessment, min_effect: float, per_block: float | None) -> Hold:
    return dataclasses.replace(_hold(a, min_effect, per_block), replay=a.replay)


def _hold(a: Assessment, min_effect: float, per_block: float | None) -> Hold:
    """What holds a criterion: of its unclear intervals, the one needing most blocks
    (no prediction, e.g. no interval, counts as most)."""
    holds = [_evidence_hold(e, a.criterion, min_effect, per_block) for e in a.unclear]

    def blocks(h: Hold) -> float:
        p = h.prediction
        return math.inf if p is None or p.blocks is None else p.blocks

    return max(holds, key=lambda h: (blocks(h), h.width_now))


def _round_budget(peak: int) -> int:
    """A memory budget to type: the peak rounded up to two significant figures of MiB."""
    mib = peak / (1 << 20)
    step = 10 ** max(0, math.floor(math.log10(max(mib, 1))) - 1)
    return int(math.ceil(mib / step) * step) << 20


def _outcome(
    c: Candidate, priorities: tuple[str, ...], min_effect: float, per_block: float | None
) -> Outcome:
    """CHANGE, TRADE_OFF, UNDECIDED or KEEP for one candidate (the module's docstring)."""
    better = [n for n in priorities if c.assessments[n].status == BETTER]
    if c.over_budget or c.rejected_by or not better:
        return CHANGE if c.qualifies else KEEP
    blocking = dict(c.disqualified_by)
    if not blocking:
        return CHANGE
    unclear = [n for n in priorities if blocking.get(n) == UNCLEAR]
    # A loss no budget could take (a crash, no interval) is no price to weigh.
    payable = all(c.assessments[n].loss_to_admit() is not None for n in blocking)
    if priorities[0] in better and set(blocking.values()) == {WORSE} and payable:
        return TRADE_OFF
    if unclear and blocking.get(priorities[0]) not in (WORSE, UNMEASURED):
        c.holds = [_hold_of(c.assessments[n], min_effect, per_block) for n in unclear]
        return UNDECIDED
    return KEEP


def _candidate(
    setup: str,
    assessments: dict[str, Assessment],
    priorities: tuple[str, ...],
    peak: int | None,
    budgets: Budgets,
    min_effect: float,
    per_block: float | None = None,
) -> Candidate:
    against, admitted, rejected = [], [], []
    for name, status in _at_issue(assessments, priorities):
        budget = None
        if status in (WORSE, UNCLEAR):
            budget = _admitting_budget(name, assessments[name], peak, budgets)
        if budget is not None:
            admitted.append((name, budget))
            continue
        against.append((name, status))
        # A shown loss beyond a budget decides against; an unclear one past it may yet
        # come within it, so it waits on evidence like any unclear priority.
        budgeted = name in budgets.max_loss or (name == RSS and budgets.memory_bytes)
        if budgeted and status == WORSE:
            rejected.append(name)
    none_better = not against and not any(assessments[n].status == BETTER for n in priorities)
    over = bool(budgets.memory_bytes and peak and peak > budgets.memory_bytes)
    qualifies = not against and not none_better and not over
    c = Candidate(setup, assessments, qualifies, against, peak, over, none_better)
    c.admitted_by, c.rejected_by = admitted, rejected
    c.outcome = _outcome(c, priorities, min_effect, per_block)
    if c.outcome == TRADE_OFF:
        for name, _ in against:
            needed = assessments[name].loss_to_admit()
            if needed is not None:
                c.loss_to_admit[name] = needed
        if RSS in c.loss_to_admit and peak:
            c.memory_budget_to_admit = _round_budget(peak)
    return c


# The order outcomes rank in: the first present decides the engine's kind.
OUTCOME_ORDER = (CHANGE, TRADE_OFF, UNDECIDED, KEEP)


def _rank(candidates: list[Candidate], priorities: tuple[str, ...]) -> list[Candidate]:
    """Qualifying first, then trade-offs, undecided, the rest; each by the priorities."""
    return sorted(
        candidates,
        # The rest keep the run's order: nothing ranks what is not recommended.
        key=lambda c: (
            OUTCOME_ORDER.index(c.outcome),
            *(_rank_key(c, priorities) if c.outcome != KEEP else ()),
        ),
    )


def _engine(
    result: RunResult,
    engine: str,
    candidates: list[Candidate],
    priorities: tuple[str, ...],
    budget: int | None,
) -> EngineRecommendation:
    base_peak = max(
        peak_rss_by_repeat(result).get((result.base_setup, engine), {}).values(), default=None
    )
    thin = _thin_evidence(result, engine)
    return decided(engine, result.base_setup, candidates, priorities, thin, base_peak, budget)


def decided(
    engine: str,
    base: str,
    candidates: list[Candidate],
    priorities: tuple[str, ...],
    thin: ThinEvidence,
    base_peak: float | None,
    budget: int | None,
) -> EngineRecommendation:
    """The outcome over candidates each judged by `_candidate`: a run's engine, or a
    replay's setups (`replay_recommendation`), by the one rule."""
    ranked = _rank(candidates, priorities)
    kind = ranked[0].outcome
    return EngineRecommendation(
        engine,
        base,
        ranked[0].setup if kind == CHANGE else None,
        ranked,
        thin,
        _whole(base_peak),
        bool(budget and base_peak and base_peak > budget),
        kind,
    )


def recommend(
    result: RunResult,
    priorities: tuple[str, ...] = DEFAULT_PRIORITIES,
    min_effect: float | None = None,
    memory_budget_bytes: int | None = None,
    tables: Sequence[RatioTable] | None = None,
    rss_cells: Mapping[tuple[str, str], RatioCell] | None = None,
    replay: ReplayRecord | None = None,
    ratchets: Sequence[SetupRatchet] | None = None,
    max_loss: Mapping[str, float] | None = None,
) -> Recommendation:
    """The setup to run per engine, the trade-off to weigh, or the base to keep.
    `tables`, `rss_cells` and `ratchets`: relative_tables(result, min_effect),
    rss_ratio_cells(result, min_effect) and ratchet_setups(...), when already at hand.
    `replay`: a replay of a trace of this workload, whose peak RSS ratios join the servers'
    as memory evidence. A soak's steps per event join them too (read from the samples).
    `memory_budget_bytes` and `max_loss` (criterion -> fraction): the budgets."""
    effect = min_effect_of(result, min_effect)
    if tables is None:
        tables = relative_tables(result, effect, summarize_run(result))
    if rss_cells is None:
        rss_cells = rss_ratio_cells(result, effect)
    budgets = Budgets(memory_budget_bytes, dict(max_loss or {}))
    paired = {P99: _paired_cells(result, effect), CPU: _paired_cells(result, effect, _cpu, "us")}
    peaks = peak_rss_by_repeat(result)
    replay_cells = replay_rss_cells(result, replay, effect) if replay else {}
    trace = os.path.basename((replay.trace_path or "") if replay else "") or "a trace"
    replay_label = f"peak RSS from a replay of {trace}"
    base = result.base_setup
    steps = _steps_by_setup(result, ratchets, effect)
    per_block = seconds_per_block(result)
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
            servers = 1 if (engine, setup) in rss_cells else 0
            key = f"{engine}/{setup}"
            assessments = {
                THROUGHPUT: assess(THROUGHPUT, qps_cells, effect),
                P99: assess(P99, paired[P99].get(key, []), effect),
                RSS: assess(RSS, rss, effect, steps.get((engine, setup), ()), servers),
                CPU: assess(CPU, paired[CPU].get(key, []), effect),
            }
            peak = max(peaks.get((setup, engine), {}).values(), default=None)
            candidates.append(
                _candidate(setup, assessments, priorities, _whole(peak), budgets, effect, per_block)
            )
        if candidates:  # else only the base ran on this engine: nothing to choose between
            engines.append(_engine(result, engine, candidates, priorities, memory_budget_bytes))
    exploratory = not any(c.has_interval for t in tables for r in t.rows for c in r.cells.values())
    return Recommendation(
        result.run_id,
        priorities,
        effect,
        memory_budget_bytes,
        engines,
        exploratory,
        dict(budgets.max_loss),
        result.metadata.experiment_file,
    )


# ----------------------------------------------------------------- a replay's setups

# What a replay measures of the criteria, by the replayer's key: the steady peak (the
# whole one includes the replay's start, a transient the server never had) and CPU.
REPLAY_KEYS = {RSS: "peak_heap_rss_steady", CPU: "cpu_s"}
REPLAY_PRIORITIES = (RSS, CPU)  # a trace is recorded to save memory: memory first


def check_replay_priorities(priorities: tuple[str, ...], key: str = "--priority") -> None:
    unmeasured = [p for p in priorities if p not in REPLAY_KEYS]
    if unmeasured:
        raise MallocbenchError(
            f"{key} {','.join(priorities)}: a replay measures no {', '.join(unmeasured)}; "
            f"give {' and/or '.join(REPLAY_KEYS)}, e.g. {key} rss,cpu"
        )


def _replay_values(record: ReplayRecord, key: str) -> dict[str, dict[int, float]]:
    """Each setup's values by repeat (a block: the setups replay interleaved per repeat)."""
    runs = record.replay_runs
    return {
        str(s.get("name")): {
            r.repeat: v
            for r in runs
            if r.setup == s.get("name") and (v := r.value(key)) is not None
        }
        for s in record.setups or []
    }


def replay_cells(record: ReplayRecord, key: str, min_effect: float) -> dict[str, RatioCell]:
    """Each setup's value over the base's (the first setup), paired by repeat; a setup
    none of whose replays gave a value is a failure where the base measured."""
    values = _replay_values(record, key)
    names = list(values)
    if not names or not values[names[0]]:
        return {}
    base = names[0]
    measured = {n: values[n] for n in names[1:] if len(values[n]) >= 2}
    blocked = stats.blocked_ratios(values[base], measured) if measured else {}
    unit = RSS_UNIT if key == REPLAY_KEYS[RSS] else "s"
    return {
        n: ratio_cell(
            list(values[n].values()),
            list(values[base].values()),
            None if values[n] else "failed",
            base,
            min_effect,
            unit,
            blocked.get(n),
        )
        for n in names[1:]
    }


def _replay_candidate(
    setup: str,
    cells: Mapping[str, Mapping[str, RatioCell]],
    where: str,
    peak: float | None,
    rule: DecisionRule,
    min_effect: float,
) -> Candidate | None:
    if setup not in cells[RSS] or setup not in cells[CPU]:
        return None
    measured = {
        RSS: assess(RSS, [(where, cells[RSS][setup])], min_effect),
        # the replay's CPU seconds are not the server's per operation: no level in its unit
        CPU: assess(CPU, [(where, cells[CPU][setup])], min_effect, level_cells=0),
    }
    assessments = {
        THROUGHPUT: assess(THROUGHPUT, [], min_effect),
        P99: assess(P99, [], min_effect),
        **{n: dataclasses.replace(a, replay=True) for n, a in measured.items()},
    }
    budgets = Budgets(rule.memory_budget_bytes, dict(rule.max_loss))
    return _candidate(setup, assessments, rule.priorities, _whole(peak), budgets, min_effect)


def replay_recommendation(
    record: ReplayRecord,
    run_id: str,
    rule: DecisionRule,
    min_effect: float,
    server_rss: float | None = None,
    label: str = "replay",
) -> Recommendation:
    """recommend's rule on a replay's setups against its base (the first): peak RSS (the
    steady one) and CPU, paired by repeat, judged and ranked as a run's setups are. A
    setup's peak for --memory-budget is the server's RSS moved by its difference from
    the base's when the trace holds the server's RSS, else its replayed heap."""
    check_replay_priorities(rule.priorities)
    cells = {c: replay_cells(record, key, min_effect) for c, key in REPLAY_KEYS.items()}
    peaks = {n: stats.mean(list(v.values())) if v else None
             for n, v in _replay_values(record, REPLAY_KEYS[RSS]).items()}  # fmt: skip
    names = list(peaks)
    base_peak = peaks[names[0]] if names else None

    def predicted(name: str) -> float | None:
        peak = peaks.get(name)
        if peak is None or base_peak is None or not server_rss:
            return peak
        return server_rss + peak - base_peak

    trace = os.path.basename(record.trace_path or "") or "trace"
    where = f"replay of {trace}"
    found = (_replay_candidate(n, cells, where, predicted(n), rule, min_effect) for n in names[1:])
    candidates = [c for c in found if c is not None]
    engines = []
    if candidates:
        thin = ThinEvidence(
            few_repeats=(record.repeats or 0) if (record.repeats or 0) < 3 else None
        )
        engines.append(
            decided(label, names[0], candidates, rule.priorities, thin,
                    predicted(names[0]), rule.memory_budget_bytes)
        )  # fmt: skip
    return Recommendation(
        run_id,
        rule.priorities,
        min_effect,
        rule.memory_budget_bytes,
        engines,
        # exploratory: setups compared, none with an interval (not: none to compare)
        bool(candidates) and not any(c.has_interval for by in cells.values() for c in by.values()),
        dict(rule.max_loss),
        replay_trace=record.trace_path,
    )
