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
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from mallocbench.analysis import criteria, stats
from mallocbench.analysis.continuation import predict, seconds_per_block
from mallocbench.analysis.criteria import (
    BETTER,
    CHANGE,
    CPU,
    DEFAULT_PRIORITIES,
    HIGHER_IS_BETTER,
    KEEP,
    MAX_LOSS,
    MEMORY_BUDGET,
    NON_INFERIOR,
    P99,
    REPLAY_KEYS,
    RSS,
    THROUGHPUT,
    TRADE_OFF,
    UNCLEAR,
    UNDECIDED,
    UNMEASURED,
    WORSE,
    Assessment,
    BudgetKind,
    Budgets,
    Candidate,
    DecisionRule,
    EngineRecommendation,
    Evidence,
    Hold,
    Outcome,
    Place,
    Recommendation,
    ThinEvidence,
    Where,
    has_interval,
)
from mallocbench.analysis.evidence import (
    assess,
    cpu_per_op,
    paired_cells,
    replay_cells,
    replay_rss_cells,
    replay_values,
    rss_evidence,
    steps_by_setup,
    thin_evidence,
)
from mallocbench.analysis.summary import (
    RatioCell,
    RatioTable,
    min_effect_of,
    peak_rss_by_repeat,
    relative_tables,
    rss_ratio_cells,
    setup_order,
    summarize_run,
)
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import ReplayRecord
from mallocbench.model.results import RunResult

if TYPE_CHECKING:
    from mallocbench.analysis.ratchet import SetupRatchet


def _whole(peak: float | None) -> int | None:
    return None if peak is None else int(peak)


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
    if name in budgets.max_loss and criteria.loss_admitted(a, budgets.max_loss[name]):
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
    prediction = predict(e.low, e.high, e.df, e.blocks, needed) if has_interval(e) else None
    now = stats.interval_width(e.low, e.high) if has_interval(e) else math.inf
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
    payable = all(criteria.loss_to_admit(c.assessments[n]) is not None for n in blocking)
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
            needed = criteria.loss_to_admit(assessments[name])
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
    thin = thin_evidence(result, engine)
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
    paired = {
        P99: paired_cells(result, effect),
        CPU: paired_cells(result, effect, cpu_per_op, "us"),
    }
    peaks = peak_rss_by_repeat(result)
    replay_cells = replay_rss_cells(result, replay, effect) if replay else {}
    trace = os.path.basename((replay.trace_path or "") if replay else "")
    base = result.base_setup
    steps = steps_by_setup(result, ratchets, effect)
    per_block = seconds_per_block(result)
    engines = []
    for engine in dict.fromkeys(c.engine for c in result.cells):
        candidates = []
        for setup in [s for s in setup_order(result) if s != base]:
            qps_cells = [
                (Where(Place.CELL, row.step, t.threads), row.cells[setup])
                for t in tables
                if t.engine == engine and setup in t.columns
                for row in t.rows
                if setup in row.cells
            ]
            if not qps_cells:
                continue
            rss = rss_evidence(engine, setup, rss_cells, replay_cells, trace)
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


def check_replay_priorities(priorities: tuple[str, ...], key: str = "--priority") -> None:
    unmeasured = [p for p in priorities if p not in REPLAY_KEYS]
    if unmeasured:
        raise MallocbenchError(
            f"{key} {','.join(priorities)}: a replay measures no {', '.join(unmeasured)}; "
            f"give {' and/or '.join(REPLAY_KEYS)}, e.g. {key} rss,cpu"
        )


def _replay_candidate(
    setup: str,
    cells: Mapping[str, Mapping[str, RatioCell]],
    where: Where,
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
             for n, v in replay_values(record, REPLAY_KEYS[RSS]).items()}  # fmt: skip
    names = list(peaks)
    base_peak = peaks[names[0]] if names else None

    def predicted(name: str) -> float | None:
        peak = peaks.get(name)
        if peak is None or base_peak is None or not server_rss:
            return peak
        return server_rss + peak - base_peak

    where = Where(Place.REPLAY, name=os.path.basename(record.trace_path or ""))
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
