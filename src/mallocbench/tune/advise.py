"""`mallocbench advise`: from a trace to one decision, within one budget.

Three stages share the budget. The search is tune's (driver.run_searches: one study per
allocator, the default first) and so is the choice of each allocator's finalists
(driver.judge_all: the front re-measured with repeats, then analysis.choice's
noise-aware pick per priority). The finalists, each allocator's default beside its
picks, are then replayed together with repeats, interleaved, as `mallocbench replay`
replays setups (a replay run of its own, kept in OUT's store), and the decision is
analysis.recommend's rule on that replay against the first allocator's default.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mallocbench import allocators
from mallocbench.allocators import knobs
from mallocbench.allocators.base import Allocator
from mallocbench.analysis.advise import Decision, decision
from mallocbench.analysis.criteria import CPU, DecisionRule, Recommendation
from mallocbench.analysis.recommend import replay_recommendation
from mallocbench.analysis.replay import ReplayAnalysis, analyze_replay
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import RunResult
from mallocbench.model.traceinfo import server_rss
from mallocbench.patterns.experiment import PatternSetup
from mallocbench.replay.trace import TraceInfo
from mallocbench.tune import driver
from mallocbench.tune.evaluate import ReplayEvaluator, auto_portion
from mallocbench.tune.objectives import parse_objectives
from mallocbench.tune.result import AllocatorTune

# Of the budget, what tune's search and front take (3/5 and 2/5 of it, as in tune); the
# rest is the finalists' replay.
TUNE_SHARE = 0.7
FRONT_REPEATS = 3  # each allocator's front, for the noise-aware pick's intervals
TRIALS_HINT = 30  # settings per allocator the portion is sized for, as tune's default
CANDIDATES = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
SEARCH_DIR = "search"  # under OUT: tune.db and the search's documents


def installed_allocators(spec: str | None) -> list[Allocator]:
    """--allocators checked as tune checks them; by default every one installed here."""
    if spec:
        return driver.check_allocators(spec)
    found = [a for a in (allocators.get(n) for n in CANDIDATES) if a.available]
    if not found:
        raise MallocbenchError("no allocator is installed here: glibc's malloc should be")
    return found


@dataclass
class AdvicePlan:
    """A checked advise: nothing in it is refused once the first trial has run."""

    trace: Path
    info: TraceInfo
    tuned: list[Allocator]
    budget_s: float
    repeats: int
    min_effect: float
    rule: DecisionRule
    timing: str
    speed: float
    out: Path
    max_cpu: float | None = None
    memory_at_any_cost: bool = False
    seed: int | None = None

    @property
    def duration_s(self) -> float:
        return float(self.info.data.get("duration_s") or 0)

    def evaluator(self) -> ReplayEvaluator:
        """tune's replay of a portion sized so that about TRIALS_HINT settings per
        allocator fit the search's share; the finalists replay the same portion."""
        trial_s = self.budget_s * TUNE_SHARE * driver.SEARCH_SHARE / len(self.tuned) / TRIALS_HINT
        portion = auto_portion(trial_s, self.timing, self.speed, self.duration_s)
        return ReplayEvaluator(self.trace, self.timing, self.speed, self.duration_s, portion)

    def replay_s(self, portion_s: float | None) -> float | None:
        """One replay's length at recorded timing; None at --timing none."""
        if self.timing != "recorded":
            return None
        return (portion_s or self.duration_s) / self.speed

    def least_s(self, portion_s: float | None) -> float | None:
        """The repeats' time however short the search, at recorded timing: per allocator
        its default and front's ends and knee FRONT_REPEATS times, then its default and
        one pick --repeats times (None at --timing none: a replay's length is unknown)."""
        one = self.replay_s(portion_s)
        if one is None:
            return None
        per_allocator = (driver.MIN_FRONT + 1) * FRONT_REPEATS + 2 * self.repeats
        return len(self.tuned) * per_allocator * one

    def tune_plan(self, evaluator: ReplayEvaluator) -> driver.Plan:
        return driver.Plan(
            trace=str(self.trace.resolve()), evaluator_name=evaluator.describe(),
            objectives=parse_objectives("rss,time", "replay"), constraints=[],
            spaces=driver.spaces_for(self.tuned, ()), tuned=self.tuned,
            out=self.out / SEARCH_DIR, resume=False, trials=None,
            budget_s=self.budget_s * TUNE_SHARE, repeats=FRONT_REPEATS,
            min_effect=self.min_effect, seed=self.seed, evaluation=evaluator.facts(),
            max_cpu=self.max_cpu, memory_at_any_cost=self.memory_at_any_cost,
        )  # fmt: skip


@dataclass(frozen=True)
class Finalist:
    name: str
    allocator: Allocator
    setting: dict[str, str]  # knob -> value, as tune's search names them; {}: the default
    picked_for: tuple[str, ...] = ()  # the priorities tune's rule picked it for

    def setup(self) -> PatternSetup:
        return PatternSetup(
            self.name, self.allocator, knobs.environment(self.allocator, self.setting)
        )


def finalists(results: Sequence[AllocatorTune]) -> list[Finalist]:
    """Each allocator's default, then the settings tune's rule picked on its front (one
    entry per setting, with every priority that picked it)."""
    out: list[Finalist] = []
    for result in results:
        allocator = allocators.get(result.allocator)
        out.append(Finalist(allocator.name, allocator, {}))
        picked: dict[str, list[str]] = {}
        for priority, label in result.chosen.items():
            if label:
                picked.setdefault(label, []).append(priority)
        for label, priorities in picked.items():
            name = f"{allocator.name}-tuned-{label.lstrip('#')}"
            setting = dict(result.point(label).setting)
            out.append(Finalist(name, allocator, setting, tuple(priorities)))
    return out


@dataclass
class AdviceRun:
    """Everything advise measured and decided, for the reports."""

    plan: AdvicePlan
    evaluation: dict[str, Any]  # how the search measured a setting (tune's facts)
    searched: list[AllocatorTune]  # tune's result per allocator
    finalists: list[Finalist]
    result: RunResult  # the finalists' replay run
    replay: ReplayAnalysis
    recommendation: Recommendation
    decision: Decision | None
    elapsed_s: float
    portion_s: float | None
    server_rss: float | None
    max_cpu_excluded: dict[str, float] = field(default_factory=dict)  # setup -> CPU ratio

    @property
    def repeat_replays(self) -> int:
        """The replays made after the search: each front point FRONT_REPEATS times, each
        finalist --repeats times."""
        points = sum(len(r.points) for r in self.searched)
        return points * FRONT_REPEATS + len(self.finalists) * self.plan.repeats


def excluded_by_max_cpu(r: Recommendation, max_cpu: float | None) -> dict[str, float]:
    """Candidates whose CPU ratio to the default is over --max-cpu (on its estimate, as
    tune's pick bounds it), with that ratio."""
    if max_cpu is None or not r.engines:
        return {}
    out = {}
    for c in r.engines[0].ranked:
        cpu = c.assessments[CPU].estimate
        if cpu is not None and cpu > max_cpu:
            out[c.setup] = cpu
    return out


def decide(
    plan: AdvicePlan, result: RunResult
) -> tuple[Recommendation, ReplayAnalysis, dict[str, float]]:
    """recommend's rule on the finalists' replay; --max-cpu leaves out the finalists it
    bounds (tune's pick already kept to it: this bounds the allocators' defaults too)."""
    record = result.metadata.replay
    assert record is not None, "the finalists' run is a replay"
    replay = analyze_replay(record, plan.min_effect)
    server = server_rss((record.trace or {}).get("info") or {})
    label = plan.trace.name
    r = replay_recommendation(record, result.run_id, plan.rule, plan.min_effect, server, label)
    over = excluded_by_max_cpu(r, plan.max_cpu)
    if over:
        kept = [s for s in record.setups or [] if s.get("name") not in over]
        runs = [x for x in record.runs or [] if x.get("setup") not in over]
        narrowed = dataclasses.replace(record, setups=kept, runs=runs)
        r = replay_recommendation(
            narrowed, result.run_id, plan.rule, plan.min_effect, server, label
        )
    return r, replay, over


def finish(
    plan: AdvicePlan,
    evaluation: dict[str, Any],
    searched: list[AllocatorTune],
    chosen: list[Finalist],
    result: RunResult,
    started: float,
    portion_s: float | None,
) -> AdviceRun:
    r, replay, over = decide(plan, result)
    record = result.metadata.replay
    assert record is not None
    return AdviceRun(
        plan, evaluation, searched, chosen, result, replay, r, decision(r, replay),
        time.monotonic() - started, portion_s,
        server_rss((record.trace or {}).get("info") or {}), over,
    )  # fmt: skip
