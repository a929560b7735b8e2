"""A recommendation in words: the decision per engine, and the numbers each claim rests on.

Plain text that reads as Markdown too (bullets, no tables), so the terminal, report.md,
the HTML page and `mallocbench recommend` print the same sentences.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mallocbench import formatting as fmt
from mallocbench.analysis import recommend as rec
from mallocbench.analysis import stats
from mallocbench.analysis.recommend import (
    Assessment,
    Candidate,
    EngineRecommendation,
    Evidence,
    Recommendation,
)
from mallocbench.formatting import percent
from mallocbench.report.words import candidate_reasons, thin_clauses

if TYPE_CHECKING:
    from mallocbench.deploy import Deployment

NAMES = {rec.THROUGHPUT: "throughput", rec.P99: "p99 latency", rec.RSS: "peak RSS"}
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
STEP_WORDS = {
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
        f"{e.where} {d.difference / mib:+,.2f} MiB{interval} vs {d.base} "
        f"({d.step.mean / mib:+,.2f} against {d.base_step.mean / mib:+,.2f} MiB per event, "
        f"{d.step.n} and {d.base_step.n} events; {counted} counts): {word}"
    )


def evidence_text(e: Evidence) -> str:
    """ "point-query @8 0.95 [0.91, 0.99]"; memory has one value, so no place."""
    if e.step is not None:
        return step_text(e)
    where = "" if e.where == "peak RSS" else f"{e.where} "
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
    name = NAMES[a.criterion]
    lower = not rec.HIGHER_IS_BETTER[a.criterion]
    ratios = a.cells - len(a.steps)  # the geomean leaves the steps out
    estimate = f" (geomean {a.estimate:.2f})" if a.estimate and ratios > 1 else ""
    band = percent(min_effect)
    if a.status == rec.UNMEASURED:
        return f"{name}: not measured"
    if a.status == rec.WORSE:
        return f"{name}: worse{estimate}: {_some(a.worse)}"
    if a.status == rec.UNCLEAR:
        side = f"above {1 + min_effect:.2f}" if lower else f"below {1 - min_effect:.2f}"
        if a.cells == 1:
            return f"{name}: unclear, the interval reaches {side}: {_some(a.unclear)}"
        return (
            f"{name}: unclear{estimate}: {len(a.unclear)} of {a.cells} intervals reach {side}, "
            f"e.g. {_some(a.unclear)}"
        )
    if a.status == rec.BETTER:
        way = "lower" if lower else "higher"
        text = f"{name}: better ({way} by at least {band}){estimate}: {_some(a.better)}"
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
    for name in (*r.priorities, *[n for n in rec.CRITERIA if n not in r.priorities]):
        a = c.assessments[name]
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
        failed = a.status not in (rec.BETTER, rec.NON_INFERIOR)
        if (name in r.priorities and failed) or a.status == rec.WORSE:
            texts.append(assessment_text(a, r.min_effect))
    if not texts:
        texts.append(
            "better on no priority: "
            + "; ".join(assessment_text(c.assessments[n], r.min_effect) for n in r.priorities)
        )
    if c.over_budget:
        texts.append(f"peak RSS {fmt.mib(c.peak_rss_bytes)} is over the memory budget")
    # What the statistics do support stays in view, though it does not qualify the setup.
    supported = [
        assessment_text(a, r.min_effect) for a in c.assessments.values() if a.status == rec.BETTER
    ]
    if supported:
        texts.append("though " + "; ".join(supported))
    return texts


def engine_headline(e: EngineRecommendation) -> str:
    if e.choice is None:
        return f"{e.engine}: keep {e.base} (no change recommended)"
    return f"{e.engine}: run {e.choice} instead of {e.base}"


def engine_lines(e: EngineRecommendation, r: Recommendation) -> list[str]:
    lines = [engine_headline(e)]
    if e.choice is not None:
        chosen = e.ranked[0]
        lines += _candidate_lines(chosen, r, "  ")
        others = [c.setup for c in e.ranked[1:] if c.qualifies]
        if others:
            lines.append(f"  - also qualified, ranked lower: {', '.join(others)}")
    else:
        lines.append(
            f"  no setup is shown better than {e.base} on "
            f"{' or '.join(NAMES[p] for p in r.priorities)} by at least "
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


def recommendation_lines(r: Recommendation) -> list[str]:
    """The whole recommendation, one engine after another."""
    lines = [
        f"Priorities: {', '.join(NAMES[p] for p in r.priorities)} (most important first); "
        f"minimum effect ±{percent(r.min_effect)}; 95% intervals paired by block."
    ]
    if r.exploratory:
        lines.append(
            "Exploratory run (no intervals): nothing can be recommended; run at least 3 "
            "repeats (or --target-ci)."
        )
    if any(c.assessments[rec.RSS].steps for e in r.engines for c in e.ranked):
        lines.append(STEP_RULE)
    for e in r.engines:
        lines += ["", *engine_lines(e, r)]
    return lines


def verdict_lines(r: Recommendation) -> list[str]:
    """One line per engine for a report's verdict section."""
    out = []
    for e in r.engines:
        line = engine_headline(e)
        if e.choice is not None:
            chosen = e.ranked[0]
            better = [NAMES[n] for n in r.priorities if chosen.assessments[n].status == rec.BETTER]
            line += f": better on {', '.join(better)}, not worse on the rest"
        else:
            # A supported difference that does not make a recommendation is still one.
            found = [
                f"{c.setup} {NAMES[n]} {_some(a.better)}"
                for c in e.ranked
                for n, a in c.assessments.items()
                if a.status == rec.BETTER
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
    data = r.to_dict()
    for engine, e in zip(data["engines"], r.engines, strict=True):
        engine["thin_evidence"] = thin_clauses(e.thin)
        engine["candidates"] = [_candidate_dict(c) for c in e.ranked]
    return data


def _candidate_dict(c: Candidate) -> dict[str, Any]:
    record = c.to_dict()
    first = {"setup": record.pop("setup"), "qualifies": record.pop("qualifies")}
    return {**first, "reasons": candidate_reasons(c), **record}


@dataclass(frozen=True)
class Advice:
    """What `recommend` prints: the recommendation and, when one setup was chosen for
    every engine asked about, how to deploy it."""

    recommendation: Recommendation
    deployment: Deployment | None = None


def advice_text(a: Advice) -> str:
    lines = recommendation_lines(a.recommendation)
    if a.deployment is not None:
        # Imported here: every report reads this module, few deploy anything.
        from mallocbench.deploy import render

        lines += ["", render(a.deployment)]
    return "\n".join(lines)


def advice_markdown(a: Advice) -> str:
    return f"# mallocbench recommend: {a.recommendation.run_id}\n\n{advice_text(a)}"


def advice_json(a: Advice) -> str:
    data = recommendation_dict(a.recommendation)
    if a.deployment is not None:
        data["deployment"] = a.deployment.to_dict()
    return json.dumps(data, indent=1)
