"""advise's answer in numbers: the setting to deploy (or the default to keep), its peak
RSS and CPU ratios to the default with their intervals, and what it saves, from the
recommendation over a replay of the finalists (analysis.recommend's rule) and that
replay's analysis.

The ratios are the recommendation's own (paired by repeat), so the answer and the
reasons printed above it never disagree.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from mallocbench.analysis import criteria
from mallocbench.analysis.choice import Interval
from mallocbench.analysis.replay import Ratio, ReplayAnalysis, Saving, saving
from mallocbench.model.traceinfo import server_rss

SAME = Interval(1.0, 1.0, 1.0)  # the default against itself


@dataclass(frozen=True)
class Decision:
    kind: criteria.Outcome  # the recommendation's outcome: change, trade-off, undecided, keep
    setup: str  # what to run: the chosen setup, or the base (the default) to keep
    base: str
    rss: Interval  # steady peak RSS, setup / base
    cpu: Interval
    saving: Saving | None  # None: no interval to turn into bytes
    # The candidate a trade-off or an undecided outcome is about (what a budget or more
    # repeats would deploy), with its ratios; None for a change or a keep.
    subject: str | None = None
    subject_rss: Interval | None = None
    subject_cpu: Interval | None = None
    subject_saving: Saving | None = None

    @property
    def deploy(self) -> bool:
        return self.kind == criteria.CHANGE and self.setup != self.base


def _interval(a: criteria.Assessment) -> Interval | None:
    """A replay's one ratio on a criterion, with its interval."""
    e = a.worst or next(iter((*a.better, *a.worse, *a.unclear)), None)
    if e is None or e.ratio is None or math.isnan(e.low):
        return None
    return Interval(e.ratio, e.low, e.high)


def _saving(setup: str, rss: Interval, replay: ReplayAnalysis) -> Saving | None:
    base = (
        replay.rows[0].metrics[criteria.REPLAY_KEYS[criteria.RSS]].mean if replay.rows else math.nan
    )
    server = server_rss((replay.record.trace or {}).get("info") or {})
    return saving(setup, Ratio(rss.point, rss.low, rss.high, ""), base, server)


def decision(r: criteria.Recommendation, replay: ReplayAnalysis) -> Decision | None:
    """None: the replay measured nothing. With no setup judged beside the base (every
    one failed, or --max-cpu left all out), the base is kept."""
    if not r.engines:
        if not replay.rows:
            return None
        base = replay.rows[0].setup
        return Decision(criteria.KEEP, base, base, SAME, SAME, _saving(base, SAME, replay))
    e = r.engines[0]
    subject = e.subject
    if e.kind == criteria.CHANGE and subject is not None:
        rss = _interval(subject.assessments[criteria.RSS]) or SAME
        cpu = _interval(subject.assessments[criteria.CPU]) or SAME
        return Decision(
            e.kind, subject.setup, e.base, rss, cpu, _saving(subject.setup, rss, replay)
        )
    kept = Decision(e.kind, e.base, e.base, SAME, SAME, _saving(e.base, SAME, replay))
    if subject is None:
        return kept
    subject_rss = _interval(subject.assessments[criteria.RSS])
    return dataclasses.replace(
        kept,
        subject=subject.setup,
        subject_rss=subject_rss,
        subject_cpu=_interval(subject.assessments[criteria.CPU]),
        subject_saving=_saving(subject.setup, subject_rss, replay) if subject_rss else None,
    )
