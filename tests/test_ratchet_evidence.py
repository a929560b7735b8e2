"""A soak's RSS step per event as memory evidence for `recommend`, on a recorded soak.

The fixture is the quieter of the last session's two real runs of
examples/dump-ratchet.toml (five dumps per setup, 45 s apart; samples cut to t, RSS and
QPS). Its steps are sub-MiB and do not differ between setups; a finding is made by adding
a known step after each of one setup's recorded dumps."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from mallocbench.analysis import stats
from mallocbench.analysis.criteria import RSS, THROUGHPUT, Assessment
from mallocbench.analysis.ratchet import welch_interval
from mallocbench.analysis.recommend import recommend
from mallocbench.model.results import RunResult
from mallocbench.report.recommend import (
    STEP_RULE,
    recommendation_dict,
    recommendation_lines,
    where_text,
)
from mallocbench.report.words import candidate_reasons

FIXTURES = Path(__file__).parent / "fixtures"
MiB = float(1 << 20)
WHERE = "step per dump from a soak"


@functools.cache
def recorded() -> dict[str, Any]:
    return json.loads((FIXTURES / "results-dump-ratchet.json").read_text())


def with_steps(setup: str, step_mib: float) -> RunResult:
    """The recording with `step_mib` more RSS left after each of `setup`'s dumps: every
    sample from a dump's end on carries the steps of the dumps ended by then."""
    data = copy.deepcopy(recorded())
    (session,) = [s for s in data["sessions"] if s["setup"] == setup]
    ends = [float(e["end"]) for e in session["events"]]
    for cell in data["cells"]:
        if cell["setup"] == setup:
            for sample in cell["samples"]:
                done = sum(1 for end in ends if end <= sample["t"])
                sample["rss_bytes"] += int(done * step_mib * MiB)
    return RunResult.from_dict(data)


def rss_of(result: RunResult, min_effect: float) -> dict[str, Assessment]:
    rec = recommend(result, (RSS, THROUGHPUT), min_effect)
    (engine,) = rec.engines
    return {c.setup: c.assessments[RSS] for c in engine.ranked}


def test_recorded_dumps_leave_no_difference_and_none_is_claimed() -> None:
    rss = rss_of(with_steps("glibc", 0.0), 0.03)
    assert set(rss) == {"jemalloc", "jemalloc-decay", "tcmalloc"}
    for setup, a in rss.items():
        (step,) = a.steps
        assert where_text(step.where) == WHERE and step.step is not None, setup
        d = step.step
        assert d.base == "glibc" and d.step.n == d.base_step.n == 5
        assert d.low is not None and d.high is not None and d.low < 0 < d.high, d
        # 3% of glibc's ~199 MiB before its dumps: every interval lies well within it.
        assert d.threshold_bytes == pytest.approx(0.03 * d.base_before_bytes)
        assert 190 * MiB < d.base_before_bytes < 210 * MiB
        assert step.verdict == stats.SAME
        assert step not in a.better + a.worse + a.unclear
    # tcmalloc +0.32 against glibc's +0.20 MiB per dump (the ratchet table's figures).
    tcmalloc = rss["tcmalloc"].steps[0].step
    assert tcmalloc is not None and tcmalloc.difference / MiB == pytest.approx(0.12, abs=0.01)
    assert tcmalloc.low is not None and tcmalloc.high is not None
    assert tcmalloc.low / MiB == pytest.approx(-0.22, abs=0.01)
    assert tcmalloc.high / MiB == pytest.approx(0.47, abs=0.01)


def test_a_setup_that_leaves_more_per_dump_is_shown_worse_on_memory() -> None:
    result = with_steps("tcmalloc", 8.0)
    rec = recommend(result, (RSS, THROUGHPUT), 0.03)
    (engine,) = rec.engines
    tcmalloc = next(c for c in engine.ranked if c.setup == "tcmalloc")
    a = tcmalloc.assessments[RSS]
    (step,) = a.steps
    assert step.verdict == stats.FASTER and step in a.worse and a.status == "worse"
    assert step.step is not None and step.step.low is not None
    assert step.step.low > step.step.threshold_bytes  # 8 MiB against ~6 MiB that counts
    assert "rss: worse" in candidate_reasons(tcmalloc)
    text = "\n".join(recommendation_lines(rec))
    assert STEP_RULE in text
    assert f"; peak RSS: worse: {WHERE} +8." in text
    assert "leaves more per event" in text
    exported = json.dumps(recommendation_dict(rec))
    assert '"where": "step per dump from a soak"' in exported and '"difference_bytes"' in exported


def test_a_base_that_leaves_more_makes_the_others_better_and_the_gate_counts() -> None:
    rss = rss_of(with_steps("glibc", 8.0), 0.03)
    for a in rss.values():
        (step,) = a.steps
        assert step.verdict == stats.SLOWER and step in a.better  # less RSS left: better
    # 2 MiB more per dump is shown (the interval excludes 0) but is under 3% of ~199 MiB:
    # no finding at 3%, the same within it; a finding once any size counts.
    rss = rss_of(with_steps("glibc", 2.0), 0.03)
    for a in rss.values():
        (step,) = a.steps
        assert step.step is not None and step.step.high is not None and step.step.high < 0
        assert step.verdict == stats.SAME and step not in a.better + a.worse + a.unclear
    for a in rss_of(with_steps("glibc", 2.0), 0.0).values():
        assert a.steps[0].verdict == stats.SLOWER and a.steps[0] in a.better


def test_a_soak_without_events_has_no_step_evidence() -> None:
    soak = RunResult.from_dict(json.loads((FIXTURES / "results-soak.json").read_text()))
    rec = recommend(soak, (RSS, THROUGHPUT))
    assert all(not c.assessments[RSS].steps for e in rec.engines for c in e.ranked)
    assert STEP_RULE not in recommendation_lines(rec)
    assert '"steps"' not in json.dumps(recommendation_dict(rec)) and "soak" not in json.dumps(
        [c.assessments[RSS].to_dict() for e in rec.engines for c in e.ranked], default=where_text
    )


def test_welch_interval_needs_two_events_a_side() -> None:
    assert welch_interval([1.0], [1.0, 2.0]) == (None, None)
    low, high = welch_interval([3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 2.0])
    assert low is not None and high is not None and low < 2.0 < high
    assert (low + high) / 2 == pytest.approx(4.0 - 2.0)
