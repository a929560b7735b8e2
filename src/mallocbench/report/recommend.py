"""A recommendation in words: the decision per engine, and the numbers each claim rests on.

Plain text that reads as Markdown too (bullets, no tables), so the terminal, report.md,
the HTML page and `mallocbench recommend` print the same sentences.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from mallocbench import units as fmt
from mallocbench.analysis import criteria, stats
from mallocbench.analysis.continuation import MAX_BLOCKS
from mallocbench.analysis.criteria import (
    Assessment,
    Candidate,
    EngineRecommendation,
    Evidence,
    Place,
    Recommendation,
    Where,
)
from mallocbench.report.words import candidate_reasons, thin_clauses
from mallocbench.units import percent

if TYPE_CHECKING:
    from rich.console import Console

    from mallocbench.deploy.deployment import Deployment

NAMES = {
    criteria.THROUGHPUT: "throughput",
    criteria.P99: "p99 latency",
    criteria.RSS: "peak RSS",
    criteria.CPU: "server CPU per operation",
}
SHORT = {
    criteria.THROUGHPUT: "throughput",
    criteria.P99: "p99",
    criteria.RSS: "peak RSS",
    criteria.CPU: "CPU/op",
}
# A replay's criteria (advise): the steady peak, and the replay's own CPU time, not the
# server's per operation.
REPLAY_NAMES = {criteria.RSS: "steady peak RSS", criteria.CPU: "CPU time"}


def name_of(criterion: str, replay: bool = False) -> str:
    return REPLAY_NAMES[criterion] if replay and criterion in REPLAY_NAMES else NAMES[criterion]


def short_of(criterion: str, replay: bool = False) -> str:
    return REPLAY_NAMES[criterion] if replay and criterion in REPLAY_NAMES else SHORT[criterion]


def names_of(r: Recommendation, criteria: Sequence[str]) -> list[str]:
    return [name_of(n, r.replay_trace is not None) for n in criteria]


MIB = float(1 << 20)
EXAMPLES = 3  # evidence items shown per kind before "and N more"


def _bound(x: float) -> str:
    return f"{x:.2f}"


STEP_RULE = (
    "Step per event from a soak: a setup's mean RSS step per event (RSS after the event "
    "settled minus before it) minus the base's, with a 95% Welch interval over the two "
    "setups' events; a finding only when the interval excludes 0 and the difference is "
    "at least the minimum effect times the base's RSS before its events."
)
# stats.classify's words on the step's ratio scale: above 1.0 is more RSS left per event.
STEP_WORDS: dict[str, str] = {
    stats.FASTER: "leaves more per event",
    stats.SLOWER: "leaves less per event",
    stats.SAME: "the same within",
}


def step_text(e: Evidence) -> str:
    """ "step per dump from a soak +0.17 MiB [-0.21, +0.55] vs glibc (...): no difference
    shown"; worded as more or less only when it is a finding."""
    d = e.step
    assert d is not None
    mib = float(1 << 20)
    if d.low is None or d.high is None:
        interval = " (no interval)"
    else:
        interval = f" [{d.low / mib:+,.2f}, {d.high / mib:+,.2f}]"
    counted = f"{d.threshold_bytes / mib:,.2f} MiB" if d.threshold_bytes > 0 else "any size"
    word = STEP_WORDS.get(e.verdict, "no difference shown")
    if e.verdict == stats.SAME:
        word += f" {counted}"
    return (
        f"{where_text(e.where)} {d.difference / mib:+,.2f} MiB{interval} vs {d.base} "
        f"({d.step.mean / mib:+,.2f} against {d.base_step.mean / mib:+,.2f} MiB per event, "
        f"{d.step.n} and {d.base_step.n} events; {counted} counts): {word}"
    )


def where_text(w: Where) -> str:
    """Where a piece of evidence was measured: "point-query @8", "peak RSS", ..."""
    if w.place is Place.CELL:
        return f"{w.step} @{w.threads}"
    if w.place is Place.REPLAY_PEAK:
        return f"peak RSS from a replay of {w.name or 'a trace'}"
    if w.place is Place.SOAK_STEP:
        return f"step per {w.name} from a soak"
    if w.place is Place.REPLAY:
        return f"replay of {w.name or 'trace'}"
    return "peak RSS"


def _worded(value: Any) -> Any:
    """A recommendation's record with each Where in words, as its JSON holds them."""
    if isinstance(value, Where):
        return where_text(value)
    if isinstance(value, dict):
        return {k: _worded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_worded(v) for v in value]
    return value


def evidence_text(e: Evidence) -> str:
    """ "point-query @8 0.95 [0.91, 0.99]"; memory has one value, so no place."""
    if e.step is not None:
        return step_text(e)
    where = "" if e.where.place is Place.PEAK_RSS else f"{where_text(e.where)} "
    if e.problem:
        return f"{where}{e.problem}"
    ratio = "?" if e.ratio is None else f"{e.ratio:.2f}"
    if e.low != e.low or e.high != e.high:  # nan: no interval
        return f"{where}{ratio} (no interval)"
    return f"{where}{ratio} [{_bound(e.low)}, {_bound(e.high)}]"


def _some(items: list[Evidence]) -> str:
    text = "; ".join(evidence_text(e) for e in items[:EXAMPLES])
    if len(items) > EXAMPLES:
        text += f"; and {len(items) - EXAMPLES} more"
    return text


def assessment_text(a: Assessment, min_effect: float) -> str:
    """One clause: the status, why, and the cells it comes from; a soak's steps per event
    always among them (a step that decides nothing is still shown, never as a finding)."""
    text = _status_text(a, min_effect)
    shown = [evidence_text(e) for e in a.steps]
    return "; ".join([text, *(t for t in shown if t not in text)])


def _status_text(a: Assessment, min_effect: float) -> str:
    name = name_of(a.criterion, a.replay)
    lower = not criteria.HIGHER_IS_BETTER[a.criterion]
    ratios = a.cells - len(a.steps)  # the geomean leaves the steps out
    estimate = f" (geomean {a.estimate:.2f})" if a.estimate and ratios > 1 else ""
    band = percent(min_effect)
    if a.status == criteria.UNMEASURED:
        return f"{name}: not measured"
    # A soak's steps weigh beside the ratios but stay out of the estimate: its units
    # would then price a different claim than the status.
    units = f" ({units_text(a)})" if units_text(a) and not a.steps else ""
    if a.status == criteria.WORSE:
        return f"{name}: worse{estimate}{units}: {_some(a.worse)}"
    if a.status == criteria.UNCLEAR:
        side = f"above {1 + min_effect:.2f}" if lower else f"below {1 - min_effect:.2f}"
        if a.cells == 1:
            return f"{name}: unclear, the interval reaches {side}: {_some(a.unclear)}"
        return (
            f"{name}: unclear{estimate}: {len(a.unclear)} of {a.cells} intervals reach {side}, "
            f"e.g. {_some(a.unclear)}"
        )
    if a.status == criteria.BETTER:
        way = "lower" if lower else "higher"
        text = f"{name}: better ({way} by at least {band}){estimate}{units}: {_some(a.better)}"
        if a.cells > 1 and a.worst:
            text += f"; no interval reaches a loss of {band}, the closest: {evidence_text(a.worst)}"
        return text
    whole = "the interval stays" if a.cells == 1 else f"all {a.cells} intervals stay"
    side = f"below {1 + min_effect:.2f}" if lower else f"above {1 - min_effect:.2f}"
    worst = f"; the closest: {evidence_text(a.worst)}" if a.worst and a.cells > 1 else ""
    if a.cells == 1 and a.worst:
        worst = f": {evidence_text(a.worst)}"
    return f"{name}: not worse{estimate}: {whole} {side}{worst}"


def _candidate_lines(c: Candidate, r: Recommendation, indent: str) -> list[str]:
    lines = []
    for name in (*r.priorities, *[n for n in criteria.CRITERIA if n not in r.priorities]):
        a = c.assessments[name]
        if name not in r.priorities and a.status == criteria.UNMEASURED:
            continue  # a watched criterion the run did not measure weighs nothing
        watched = "" if name in r.priorities else " [not a priority: only a loss disqualifies]"
        lines.append(f"{indent}- {assessment_text(a, r.min_effect)}{watched}")
    if c.peak_rss_bytes and r.memory_budget_bytes:
        headroom = r.memory_budget_bytes - c.peak_rss_bytes
        lines.append(
            f"{indent}- memory budget {fmt.mib(r.memory_budget_bytes)}: peak RSS "
            f"{fmt.mib(c.peak_rss_bytes)}, headroom {fmt.mib(headroom)}"
        )
    return lines


def _against(c: Candidate, r: Recommendation) -> list[str]:
    """Why a candidate did not qualify, each reason with its numbers."""
    texts = []
    for name, a in c.assessments.items():
        failed = a.status not in (criteria.BETTER, criteria.NON_INFERIOR)
        if (name in r.priorities and failed) or a.status == criteria.WORSE:
            texts.append(assessment_text(a, r.min_effect))
    if not texts:
        texts.append(
            "better on no priority: "
            + "; ".join(assessment_text(c.assessments[n], r.min_effect) for n in r.priorities)
        )
    if c.over_budget:
        texts.append(f"peak RSS {fmt.mib(c.peak_rss_bytes)} is over the memory budget")
    for name in c.rejected_by:
        texts.append(
            f"{name_of(name, r.replay_trace is not None)} loses more than "
            f"{budget_given(name, r)} allows"
        )
    # What the statistics do support stays in view, though it does not qualify the setup.
    supported = [
        assessment_text(a, r.min_effect)
        for a in c.assessments.values()
        if a.status == criteria.BETTER
    ]
    if supported:
        texts.append("though " + "; ".join(supported))
    return texts


def units_text(a: Assessment) -> str:
    """The estimate in the user's unit beside the ratio: "+19 MiB of 215", "-2,900 QPS
    of 10,000", "+0.31 ms of 4.00"; empty without the base's level."""
    change, level = a.change, a.base_level
    if change is None or level is None:
        return ""
    if a.criterion == criteria.RSS:
        return f"{change / MIB:+,.0f} MiB of {level / MIB:,.0f}"
    if a.criterion == criteria.THROUGHPUT:
        return f"{change:+,.0f} QPS of {level:,.0f}"
    if a.criterion == criteria.P99:
        return f"{change:+,.2f} ms of {level:,.2f}"
    return f"{change:+,.1f} us of {level:,.1f} CPU per operation"


def ratio_claim(a: Assessment, interval: bool = True) -> str:
    """ "1.29x throughput [1.25, 1.33]" (one cell) or "1.29x throughput (geomean of 4)",
    then the same in the user's unit."""
    assert a.estimate is not None
    text = f"{a.estimate:.2f}x {short_of(a.criterion, a.replay)}"
    ratios = a.cells - len(a.steps)
    only = a.worst if ratios == 1 and a.worst and a.worst.step is None else None
    if interval and only is not None:
        text += f" {fmt.interval(only.low, only.high)}"
    elif ratios > 1:
        text += f" (geomean of {ratios})"
    units = units_text(a)
    return f"{text} ({units})" if units else text


def max_loss_text(criterion: str, fraction: float) -> str:
    """ "--max-loss rss=10%": whole percents, rounded up so that it admits the loss."""
    pct = max(1, math.ceil(fraction * 100 - 1e-9))
    return f"--max-loss {criterion}={pct}%"


def budget_commands(c: Candidate) -> list[str]:
    """The options that would take a trade-off: a memory budget (for a peak-RSS loss)
    with the other losses' --max-loss, and --max-loss for every loss."""
    others = [max_loss_text(n, f) for n, f in c.loss_to_admit.items() if n != criteria.RSS]
    out = []
    if c.memory_budget_to_admit:
        memory = f"--memory-budget {c.memory_budget_to_admit >> 20}M"
        out.append(" ".join([memory, *others]))
    out.append(" ".join(max_loss_text(n, f) for n, f in c.loss_to_admit.items()))
    return [o for o in out if o]


def _trade_off_headline(e: EngineRecommendation, c: Candidate, r: Recommendation) -> str:
    gains = [
        ratio_claim(c.assessments[n], interval=n == r.priorities[0])
        for n in criteria.CRITERIA
        if c.assessments[n].status == criteria.BETTER
    ]
    losses = [ratio_claim(c.assessments[n]) for n, _ in c.disqualified_by]
    take = " or ".join(f"`{o}`" for o in budget_commands(c))
    return (
        f"{e.engine}: {c.setup}: {', '.join(gains)}, for {', '.join(losses)}: a trade-off; "
        f"take it with {take}, or keep {e.base}"
    )


def _undecided_headline(e: EngineRecommendation, c: Candidate) -> str:
    gains = [ratio_claim(a) for a in c.assessments.values() if a.status == criteria.BETTER]
    held = " and ".join(name_of(h.criterion, h.replay) for h in c.holds)
    return (
        f"{e.engine}: undecided: {c.setup} {', '.join(gains)}, but {held} unclear; "
        f"keep {e.base} until more blocks decide"
    )


def budget_given(name: str, r: Recommendation, budget: str = criteria.MAX_LOSS) -> str:
    """The budget the user gave on a criterion, as they would type it."""
    if name in r.max_loss and budget == criteria.MAX_LOSS:
        if math.isinf(r.max_loss[name]):  # advise's --memory-at-any-cost takes any CPU
            return "--memory-at-any-cost"
        return f"--max-loss {name}={percent(r.max_loss[name])}"
    return f"--memory-budget {fmt.mib(r.memory_budget_bytes)}"


def _admitted_claim(a: Assessment) -> str:
    """A loss shown is claimed with its ratio; an unclear one only by how far its worst
    interval reaches, since the statistics do not show it."""
    if a.status == criteria.WORSE and a.estimate is not None:
        return ratio_claim(a)
    worst = f", its worst interval {evidence_text(a.worst)}" if a.worst else ""
    return f"{name_of(a.criterion, a.replay)} unclear{worst}"


def admitted_text(c: Candidate, r: Recommendation) -> str:
    """ "1.09x peak RSS [1.08, 1.10] (+19 MiB of 215) within --max-loss rss=10%"."""
    return "; ".join(
        f"{_admitted_claim(c.assessments[name])} within {budget_given(name, r, budget)}"
        for name, budget in c.admitted_by
    )


def budgets_text(r: Recommendation) -> str:
    """ "; budgets: --max-loss rss=10%, --memory-budget 240 MiB", or nothing."""
    given = [budget_given(n, r) for n in r.max_loss]
    if r.memory_budget_bytes:
        given.append(budget_given(criteria.RSS, r, criteria.MEMORY_BUDGET))
    return f"; budgets: {', '.join(given)}" if given else ""


def engine_headline(e: EngineRecommendation, r: Recommendation | None = None) -> str:
    c = e.subject
    if e.kind == criteria.CHANGE and c is not None:
        text = f"{e.engine}: run {c.setup} instead of {e.base}"
        if c.admitted_by and r is not None:
            text += f" (what the budget takes: {admitted_text(c, r)})"
        return text
    if e.kind == criteria.TRADE_OFF and c is not None and r is not None:
        return _trade_off_headline(e, c, r)
    if e.kind == criteria.UNDECIDED and c is not None:
        return _undecided_headline(e, c)
    refused = [c for c in e.ranked if c.rejected_by] if r is not None else []
    if refused and r is not None:
        by = "; ".join(
            f"{c.setup}'s {' and '.join(names_of(r, c.rejected_by))} loss is beyond "
            + ", ".join(budget_given(n, r) for n in c.rejected_by)
            for c in refused
        )
        return f"{e.engine}: keep {e.base} (no change recommended: {by})"
    return f"{e.engine}: keep {e.base} (no change recommended)"


def _blocks(n: int | None) -> str:
    return f"{n}" if n is not None else f"over {MAX_BLOCKS}"


def prediction_text(h: criteria.Hold) -> str:
    """ "the run's variance predicts 9 blocks in all (6 more; 5 to 23 within its 95%
    range), about 14 minutes at 2.3 per block"; empty without a prediction."""
    p = h.prediction
    if p is None:
        return ""
    if p.blocks == p.blocks_now:
        return "; the run's variance says its blocks should do: rerun the analysis"
    extra = "" if p.blocks is None else f" ({p.blocks - p.blocks_now} more"
    span = f"{_blocks(p.fewest)} to {_blocks(p.most)} within its 95% range"
    text = f"; the run's variance predicts {_blocks(p.blocks)} blocks in all"
    text += f"{extra}; {span})" if extra else f" ({span})"
    if h.seconds_per_block and p.blocks is not None:
        minutes = (p.blocks - p.blocks_now) * h.seconds_per_block / 60
        per_block = h.seconds_per_block / 60
        text += f", about {minutes:,.0f} minutes at {per_block:,.1f} minutes per block"
    return text


def hold_text(h: criteria.Hold) -> str:
    """ "throughput at random-points range=100 @16: 23.6% wide now, 10.3% would decide
    it; the run's variance predicts ..." """
    now = "no interval" if math.isinf(h.width_now) else f"{h.width_now * 100:.1f}% wide now"
    name = name_of(h.criterion, h.replay)
    where = f"{name} at {where_text(h.where)}" if h.where.place is not Place.PEAK_RSS else name
    if h.replay:
        where = f"{name} of the {where_text(h.where)}"
    if h.width_needed <= 0:
        return f"{where}: {now}; its ratio sits on the minimum effect, no width decides it"
    return (
        f"{where}: {now}, {h.width_needed * 100:.1f}% around its ratio would decide it"
        + prediction_text(h)
    )


def continue_command(h: criteria.Hold, r: Recommendation, source: str | None) -> str:
    """The command that adds the blocks: for throughput, `run --resume --target-ci` at the
    width needed, bounded by the blocks and minutes the variance's range allows; for p99,
    CPU or peak RSS (which --target-ci does not watch), a new run with the blocks in
    its repeats; for peak RSS also a replay of a trace, memory's evidence without servers."""
    experiment = shlex.quote(r.experiment_file) if r.experiment_file else "EXPERIMENT.toml"
    p = h.prediction
    # --target-ci stops at Stein's count; the range's high end bounds it all the same.
    most = max(p.most or MAX_BLOCKS, p.stein or MAX_BLOCKS) if p else None
    if r.replay_trace is not None:  # advise's: the same advice, with more repeats
        repeats = max(p.blocks, 3) if p and p.blocks else "N"
        return f"mallocbench advise {shlex.quote(r.replay_trace)} --repeats {repeats}"
    if h.criterion != criteria.THROUGHPUT:
        blocks = p.blocks if p and p.blocks else "N"
        command = f"mallocbench run {experiment} --out NEW --set repeats={blocks}"
        if h.criterion == criteria.RSS:
            where = shlex.quote(source) if source else "OUT"
            command += (
                f"`, or replay a trace: `mallocbench replay TRACE --out REPLAY` then "
                f"`mallocbench recommend {where} --replay REPLAY"
            )
        return command
    target = max(h.width_needed, 0.001) * 100
    command = (
        f"mallocbench run {experiment} {_run_place(source)} --resume --target-ci {target:.1f}%"
    )
    if p is not None and most is not None:
        command += f" --max-repeats {max(most, 2)}"
        if h.seconds_per_block:
            minutes = math.ceil((most - p.blocks_now) * h.seconds_per_block / 60) + 1
            command += f" --budget {minutes}m"
    return command


def _run_place(source: str | None) -> str:
    """Where `run --resume` finds the run: the store it is in, or the --out directory
    whose results.json was given."""
    if not source:
        return "--out OUT"
    if source.endswith((".sqlite", ".db")) or "://" in source:
        return f"--store {shlex.quote(source)}"
    path = PurePath(source)
    where = path.parent if path.suffix == ".json" else path
    return f"--out {shlex.quote(str(where))}"


def _against_or_held(c: Candidate, r: Recommendation) -> list[str]:
    """What speaks against a lower-ranked setup; an undecided one says what holds it too,
    as the one ranked first does."""
    held = ["what holds it: " + "; ".join(hold_text(h) for h in c.holds)] if c.holds else []
    return _against(c, r) + held


def _undecided_lines(c: Candidate, r: Recommendation, source: str | None) -> list[str]:
    lines = [f"  - what holds it: {hold_text(h)}" for h in c.holds]
    commands = dict.fromkeys(continue_command(h, r, source) for h in c.holds)
    lines += [f"  - to add evidence: `{command}`" for command in commands]
    lines.append(f"  - {c.setup}:")
    return lines + _candidate_lines(c, r, "    ")


def engine_lines(
    e: EngineRecommendation, r: Recommendation, source: str | None = None
) -> list[str]:
    lines = [engine_headline(e, r)]
    subject = e.subject
    if e.kind == criteria.CHANGE and subject is not None:
        lines += _candidate_lines(subject, r, "  ")
        others = [c.setup for c in e.ranked[1:] if c.qualifies]
        if others:
            lines.append(f"  - also qualified, ranked lower: {', '.join(others)}")
    elif e.kind in (criteria.TRADE_OFF, criteria.UNDECIDED) and subject is not None:
        if e.kind == criteria.TRADE_OFF:
            lines += _candidate_lines(subject, r, "  ")
        else:
            lines += _undecided_lines(subject, r, source)
        lines += [f"  - {c.setup}: " + "; ".join(_against_or_held(c, r)) for c in e.ranked[1:]]
    else:
        lines.append(
            f"  no setup is shown better than {e.base} on "
            f"{' or '.join(names_of(r, r.priorities))} by at least "
            f"{percent(r.min_effect)} without a loss or an unclear result on the others:"
        )
        for c in e.ranked:
            lines.append(f"  - {c.setup}: " + "; ".join(_against(c, r)))
    if e.base_over_budget:
        lines.append(f"  - {e.base} itself peaks over the memory budget")
    thin = thin_clauses(e.thin)
    if thin:
        lines.append("  - thin evidence: " + ", ".join(thin))
    return lines


def recommendation_lines(r: Recommendation, source: str | None = None) -> list[str]:
    """The whole recommendation, one engine after another; `source`: where the run is,
    for the commands that add evidence."""
    lines = [
        f"Priorities: {', '.join(names_of(r, r.priorities))} (most important first); "
        f"minimum effect ±{percent(r.min_effect)}{budgets_text(r)}; 95% intervals paired "
        "by block."
    ]
    if r.exploratory:
        lines.append(
            "Exploratory run (no intervals): nothing can be recommended; run at least 3 "
            "repeats (or --target-ci)."
        )
    if any(c.assessments[criteria.RSS].steps for e in r.engines for c in e.ranked):
        lines.append(STEP_RULE)
    for e in r.engines:
        lines += ["", *engine_lines(e, r, source)]
    return lines


def verdict_lines(r: Recommendation) -> list[str]:
    """One line per engine for a report's verdict section."""
    out = []
    for e in r.engines:
        line = engine_headline(e, r)
        if e.kind == criteria.UNDECIDED and e.subject is not None:
            line += "; what holds it: " + "; ".join(hold_text(h) for h in e.subject.holds)
        elif e.choice is not None:
            chosen = e.ranked[0]
            better = names_of(
                r, [n for n in r.priorities if chosen.assessments[n].status == criteria.BETTER]
            )
            line += f": better on {', '.join(better)}, not worse on the rest"
        else:
            # A supported difference that does not make a recommendation is still one.
            found = [
                f"{c.setup} {name_of(n, a.replay)} {_some(a.better)}"
                for c in e.ranked
                for n, a in c.assessments.items()
                if a.status == criteria.BETTER
            ]
            if found:
                line += "; supported: " + "; ".join(found)
        thin = thin_clauses(e.thin)
        if thin:
            line += f" (thin evidence: {', '.join(thin)})"
        out.append(line)
    return out


def recommendation_dict(r: Recommendation) -> dict[str, Any]:
    """The recommendation as `recommend --format json` prints it, thin evidence worded."""
    data = _worded(r.to_dict())
    kinds = {e.kind for e in r.engines}
    # One outcome for the whole run when its engines agree; else each engine's own.
    data["kind"] = next(iter(kinds)) if len(kinds) == 1 else None
    for engine, e in zip(data["engines"], r.engines, strict=True):
        engine["thin_evidence"] = thin_clauses(e.thin)
        engine["candidates"] = [_candidate_dict(c) for c in e.ranked]
    return data


def _candidate_dict(c: Candidate) -> dict[str, Any]:
    record = _worded(c.to_dict())
    first = {"setup": record.pop("setup"), "qualifies": record.pop("qualifies")}
    return {**first, "reasons": candidate_reasons(c), **record}


@dataclass(frozen=True)
class Advice:
    """What `recommend` prints: the recommendation and, when one setup was chosen for
    every engine asked about, how to deploy it."""

    recommendation: Recommendation
    deployment: Deployment | None = None
    source: str | None = None  # where the run is, for the commands that add evidence


def advice_text(a: Advice) -> str:
    lines = recommendation_lines(a.recommendation, a.source)
    if a.deployment is not None:
        # Imported here: every report reads this module, few deploy anything.
        from mallocbench.deploy.forms import render

        lines += ["", render(a.deployment)]
    return "\n".join(lines)


def advice_markdown(a: Advice) -> str:
    return f"# mallocbench recommend: {a.recommendation.run_id}\n\n{advice_text(a)}"


def advice_json(a: Advice) -> str:
    data = recommendation_dict(a.recommendation)
    if a.deployment is not None:
        data["deployment"] = a.deployment.to_dict()
    return json.dumps(data, indent=1)


@dataclass(frozen=True)
class DropIn:
    """--dropin-dir's outcome: the drop-in written for `service`, or none (the kinds of
    the engines' choices, none a change)."""

    path: Path | None
    service: str
    kinds: list[str]


def print_dropin(d: DropIn, console: Console) -> None:
    if d.path is None:
        kinds = ", ".join(d.kinds) or "keep"
        console.print(f"no change recommended ({kinds}): no drop-in written")
        return
    console.print(
        f"wrote {d.path}; apply with: systemctl daemon-reload && systemctl restart {d.service}"
    )
