"""What a recommendation weighs and what it says: the criteria and their direction, the
statuses and outcomes, the user's budgets and priorities (parsed once, from the command
line or a run's stored [decision]), and the value records every renderer reads.

The rule that fills them is analysis.recommend's; the evidence per criterion is
analysis.evidence's.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mallocbench.analysis.continuation import BlocksPrediction
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import RunResult
from mallocbench.units import parse_fraction

if TYPE_CHECKING:
    from mallocbench.analysis.ratchet import StepDifference

THROUGHPUT = "throughput"
P99 = "p99"
RSS = "rss"
CPU = "cpu"  # the server's CPU time per operation
CRITERIA = (THROUGHPUT, P99, RSS, CPU)
DEFAULT_PRIORITIES = (THROUGHPUT, RSS)
# Higher is better for throughput; lower for latency, memory and CPU.
HIGHER_IS_BETTER = {THROUGHPUT: True, P99: False, RSS: False, CPU: False}
CPU_METRIC = "server_cpu_us_per_op"

# What a replay measures of the criteria, by the replayer's key: the steady peak (the
# whole one includes the replay's start, a transient the server never had) and CPU.
REPLAY_KEYS = {RSS: "peak_heap_rss_steady", CPU: "cpu_s"}
REPLAY_PRIORITIES = (RSS, CPU)  # a trace is recorded to save memory: memory first

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


class Place(enum.Enum):
    """What kind of measurement a piece of evidence is."""

    CELL = "cell"  # a step at a thread count
    PEAK_RSS = "peak RSS"  # the servers' peak RSS over the run
    REPLAY_PEAK = "replay peak"  # the peak RSS of a replay of the server's trace
    SOAK_STEP = "soak step"  # the RSS step per event of one label in a soak
    REPLAY = "replay"  # a replay of a trace (advise's decision)


@dataclass(frozen=True)
class Where:
    """Where a piece of evidence was measured (report.recommend.where_text words it)."""

    place: Place
    step: str = ""  # CELL
    threads: int = 0  # CELL
    name: str = ""  # the trace's file name (REPLAY_PEAK, REPLAY) or the event label


@dataclass
class Evidence:
    """One relative value behind a claim: where it was measured and its interval."""

    where: Where
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


def loss_admitted(a: Assessment, max_loss: float) -> bool:
    """Every interval's bad end within `max_loss` of 1.0; a crash or a missing
    interval is a loss no percentage admits."""
    if any(e.problem or not has_interval(e) for e in (*a.worse, *a.unclear)):
        return False
    if a.worst is None:
        return True
    higher = HIGHER_IS_BETTER[a.criterion]
    # A rounding hair: a loss written as the interval prints (1.10) is within 10%.
    return bad_end(a.worst, higher) >= _bad_end_at(max_loss, higher) - 1e-9


def loss_to_admit(a: Assessment) -> float | None:
    """The smallest --max-loss that would admit this loss, as a fraction; None when
    none would (a crash, or no interval)."""
    if a.worst is None or not loss_admitted(a, math.inf):
        return None
    e = a.worst
    return max(0.0, 1.0 - e.low) if HIGHER_IS_BETTER[a.criterion] else max(0.0, e.high - 1)


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
    where: Where
    width_now: float
    width_needed: float
    prediction: BlocksPrediction | None = None
    seconds_per_block: float | None = None
    replay: bool = False  # the interval is a replay's: more repeats of it, not blocks

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        del out["replay"]
        out["where"] = self.where  # a record the report words, not a dict of its fields
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


def has_interval(e: Evidence) -> bool:
    return not (math.isnan(e.low) or math.isnan(e.high))


def _bad_end_at(max_loss: float, higher_better: bool) -> float:
    """The bad end (as bad_end states it) of an interval that loses exactly max_loss."""
    return 1.0 - max_loss if higher_better else 1.0 / (1.0 + max_loss)


def bad_end(e: Evidence, higher_better: bool) -> float:
    """The interval's end on the losing side, as a gain (below 1.0 is a loss)."""
    return e.low if higher_better else 1 / e.high
