"""A replay's peak RSS as memory evidence for `recommend`, labelled as from a replay."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import run_cli
from mallocbench.analysis.criteria import RSS, THROUGHPUT, Recommendation
from mallocbench.analysis.recommend import recommend
from mallocbench.model.metadata import ReplayRecord, ReplayRun
from mallocbench.model.results import RunResult
from mallocbench.report.recommend import recommendation_dict, where_text

FIXTURES = Path(__file__).parent / "fixtures"
MIB = 1024 * 1024


def small() -> RunResult:
    return RunResult.from_dict(json.loads((FIXTURES / "results-small.json").read_text()))


def replay(je_knobs: dict[str, str], je_peaks: list[float]) -> ReplayRecord:
    """glibc and a jemalloc setup replayed three times each."""
    runs = [
        ReplayRun(name, i, "ok", {"peak_heap_rss": peak * MIB}).to_dict()
        for name, peaks in (("glibc", [100.0, 101.0, 99.0]), ("je-replayed", je_peaks))
        for i, peak in enumerate(peaks)
    ]
    return ReplayRecord(
        trace_path="/srv/traces/prod.mbt",
        timing="recorded",
        repeats=3,
        setups=[
            {"name": "glibc", "allocator": "glibc", "knobs": {}},
            {"name": "je-replayed", "allocator": "jemalloc", "knobs": je_knobs},
        ],
        runs=runs,
    )


def rss_evidence(rec_replay: ReplayRecord | None) -> list[tuple[str, str]]:
    return evidence_of(recommend(small(), (RSS, THROUGHPUT), replay=rec_replay))


def evidence_of(rec: Recommendation) -> list[tuple[str, str]]:
    out = []
    for engine in rec.engines:
        for candidate in engine.ranked:
            a = candidate.assessments[RSS]
            out += [(where_text(e.where), e.verdict) for e in a.better + a.worse + a.unclear]
    return out


def test_replay_rss_joins_the_memory_evidence_labelled_as_a_replay() -> None:
    je = {"MALLOC_CONF": "background_thread:true"}  # the run's `je` setup
    without = rss_evidence(None)
    assert not any("replay" in where for where, _ in without)
    lower = replay(je, [70.0, 71.0, 69.0])  # 30% less, tight: shown lower (better)
    rec = recommend(small(), (RSS, THROUGHPUT), replay=lower)
    found = evidence_of(rec)
    label = "peak RSS from a replay of prod.mbt"
    assert (label, "slower") in found  # "slower" is the ratio's word: below 1.0
    assert set(found) - {(label, "slower")} == set(without)
    assert label in json.dumps(recommendation_dict(rec))  # `recommend --format json` says where


def test_a_replay_of_other_knobs_or_too_few_repeats_adds_nothing_shown() -> None:
    other = replay({"MALLOC_CONF": "narenas:1"}, [70.0, 71.0, 69.0])
    assert not any("replay" in where for where, _ in rss_evidence(other))
    wide = replay({"MALLOC_CONF": "background_thread:true"}, [60.0, 140.0, 100.0])
    rec = recommend(small(), (RSS, THROUGHPUT), replay=wide)
    for engine in rec.engines:
        for candidate in engine.ranked:
            better = candidate.assessments[RSS].better
            assert not any("replay" in where_text(e.where) for e in better)


def test_recommend_refuses_a_replay_that_is_not_one() -> None:
    source = str(FIXTURES / "results-small.json")
    out = run_cli("recommend", source, "--replay", source)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a replay" in lines[0], out.stderr
    ok = run_cli("recommend", source, "--replay", str(FIXTURES / "results-replay.json"))
    assert ok.returncode == 0, ok.stderr
