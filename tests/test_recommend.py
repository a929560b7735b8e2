"""recommend: only differences the statistics support move a decision.

The runs are built the way the runner stores them (cells per block, sessions with their
peak RSS), with noise drawn per block, so the rule is judged on the shapes it meets.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from cli_runner import run_cli
from mallocbench.analysis import criteria
from mallocbench.analysis import recommend as rec
from mallocbench.analysis.run_analysis import analyze
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import RunMetadata
from mallocbench.model.results import Cell, RunResult, SessionInfo, SetupInfo
from mallocbench.report.markdown import render as markdown_render
from mallocbench.report.recommend import recommendation_lines
from mallocbench.report.words import thin_clauses

STEPS = ("point-query range=100", "read-only-order range=1000")
MIB = 1 << 20


def _run(
    qps_factor: float,
    rss_factor: float,
    blocks: int = 8,
    noise: float = 0.01,
    seed: int = 1,
    p99_factor: float = 1.0,
    threads: tuple[int, ...] = (8, 16),
) -> RunResult:
    """glibc (base) against jemalloc with the given true ratios, paired by block."""
    rng = random.Random(seed)
    cells, sessions = [], []
    for block in range(blocks):
        drift = rng.gauss(0, 0.05)  # the block's shared luck: pairing removes it
        for setup, qf, rf, pf in (
            ("glibc", 1, 1, 1),
            ("jemalloc", qps_factor, rss_factor, p99_factor),
        ):
            for step in STEPS:
                for t in threads:
                    qps = 10000 * qf * (1 + drift) * (1 + rng.gauss(0, noise))
                    p99 = 4.0 * pf * (1 + rng.gauss(0, noise))
                    group = "point" if step.startswith("point") else "range-agg"
                    cells.append(Cell(setup, "myrocks", step, t, block, group, qps=qps, p99_ms=p99))
            peak = int(800 * MIB * rf * (1 + rng.gauss(0, noise)))
            sessions.append(
                SessionInfo(f"{setup}-{block}", setup, "myrocks", block, peak_rss_bytes=peak)
            )
    return RunResult(
        "rec-1",
        "rec",
        "glibc",
        metadata=RunMetadata(min_effect=0.03),
        setups=[
            SetupInfo("glibc", "glibc"),
            SetupInfo(
                "jemalloc",
                "jemalloc",
                allocator_library="/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                knobs={"MALLOC_CONF": "background_thread:true"},
            ),
        ],
        sessions=sessions,
        cells=cells,
    )


def _only(r: criteria.Recommendation) -> criteria.EngineRecommendation:
    (engine,) = r.engines
    return engine


def test_less_rss_and_no_throughput_loss_recommends_it_with_the_evidence() -> None:
    r = rec.recommend(_run(qps_factor=1.0, rss_factor=0.75))
    engine = _only(r)
    assert engine.choice == "jemalloc"
    chosen = engine.ranked[0].assessments
    assert chosen[criteria.RSS].status == criteria.BETTER
    assert chosen[criteria.THROUGHPUT].status == criteria.NON_INFERIOR
    # Non-inferior: every throughput interval's low end within 3% of 1.0.
    cells = chosen[criteria.THROUGHPUT].cells
    assert cells == 4 and not chosen[criteria.THROUGHPUT].unclear
    text = "\n".join(recommendation_lines(r))
    assert "myrocks: run jemalloc instead of glibc" in text
    assert "peak RSS: better (lower by at least 3%)" in text
    assert re.search(r"peak RSS: better .*: 0\.7\d \[0\.7\d, 0\.7\d\]", text)
    assert re.search(r"throughput: not worse .*all 4 intervals stay above 0\.97", text)


def test_an_a_a_run_recommends_no_change() -> None:
    for seed in range(5):
        r = rec.recommend(_run(qps_factor=1.0, rss_factor=1.0, seed=seed))
        engine = _only(r)
        assert engine.choice is None, seed
        assert "keep glibc (no change recommended)" in "\n".join(recommendation_lines(r))


def test_a_memory_saving_that_costs_throughput_is_not_recommended() -> None:
    r = rec.recommend(_run(qps_factor=0.85, rss_factor=0.7))
    engine = _only(r)
    assert engine.choice is None
    (candidate,) = engine.ranked
    assert candidate.assessments[criteria.THROUGHPUT].status == criteria.WORSE
    # A win on a later priority does not buy a loss on the first: no trade-off, keep.
    assert engine.kind == criteria.KEEP
    assert "throughput: worse" in "\n".join(recommendation_lines(r))


def test_noisy_throughput_leaves_the_decision_open_not_in_favour() -> None:
    """A point estimate that looks fine is not evidence: wide intervals say unclear."""
    r = rec.recommend(_run(qps_factor=1.0, rss_factor=0.75, blocks=3, noise=0.12))
    engine = _only(r)
    assert engine.choice is None
    assert engine.ranked[0].assessments[criteria.THROUGHPUT].status == criteria.UNCLEAR
    # The supported memory saving waits on throughput: undecided, with what holds it.
    assert engine.kind == criteria.UNDECIDED
    assert [h.criterion for h in engine.ranked[0].holds] == [criteria.THROUGHPUT]
    thin = thin_clauses(engine.thin)
    assert "2 repeats" not in thin and any("repeat" not in t for t in thin)


def test_priorities_order_the_ranking_and_watch_the_rest() -> None:
    # Faster but more memory: with throughput first and rss a priority, rss vetoes it...
    faster_fatter = _run(qps_factor=1.2, rss_factor=1.3)
    assert _only(rec.recommend(faster_fatter)).choice is None
    assert _only(rec.recommend(faster_fatter)).kind == criteria.TRADE_OFF
    # ...with throughput alone, the RSS growth is shown worse, which still vetoes it.
    only_qps = rec.recommend(faster_fatter, priorities=(criteria.THROUGHPUT,))
    assert _only(only_qps).choice is None
    # A p99 loss vetoes a candidate even when p99 is not a priority.
    slower_tail = _run(qps_factor=1.0, rss_factor=0.7, p99_factor=1.3)
    engine = _only(rec.recommend(slower_tail))
    assert engine.choice is None
    assert engine.ranked[0].assessments[criteria.P99].status == criteria.WORSE


def test_a_memory_budget_excludes_what_does_not_fit() -> None:
    run = _run(qps_factor=1.0, rss_factor=0.75)
    fits = rec.recommend(run, memory_budget_bytes=700 * MIB)
    assert _only(fits).choice == "jemalloc"
    assert _only(fits).base_over_budget
    too_small = rec.recommend(run, memory_budget_bytes=500 * MIB)
    assert _only(too_small).choice is None
    assert _only(too_small).ranked[0].over_budget


def test_thin_evidence_is_named() -> None:
    r = rec.recommend(_run(qps_factor=1.0, rss_factor=0.75, threads=(8,), blocks=2))
    thin = thin_clauses(_only(r).thin)
    assert "one thread count only (8)" in thin
    assert "no write steps" in thin
    assert "2 repeats" in thin


def test_priorities_parse_and_refuse_unknown_names() -> None:
    assert criteria.parse_priorities("rss, qps") == (criteria.RSS, criteria.THROUGHPUT)
    with pytest.raises(MallocbenchError, match="unknown priority speed"):
        criteria.parse_priorities("speed")
    with pytest.raises(MallocbenchError, match="twice"):
        criteria.parse_priorities("rss,memory")


def test_the_markdown_report_carries_the_recommendation() -> None:
    text = markdown_render(analyze(_run(qps_factor=1.0, rss_factor=0.75)))
    assert "## Recommendation" in text
    assert "**myrocks: run jemalloc instead of glibc**" in text


def test_recommend_command_prints_json_and_refuses_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_run(qps_factor=1.0, rss_factor=0.75).to_dict()))
    done = run_cli("recommend", str(path), "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["engines"][0]["choice"] == "jemalloc"
    assert data["deployment"]["setup"]["name"] == "jemalloc"
    bad = run_cli("recommend", str(path), "--priority", "speed")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "unknown priority speed" in bad.stderr
    budget = run_cli("recommend", str(path), "--memory-budget", "lots")
    assert budget.returncode == 2 and "--memory-budget" in budget.stderr


def test_write_dropin_writes_the_chosen_setup_and_nothing_when_keeping(tmp_path: Path) -> None:
    from mallocbench.deploy.systemd import dropin_environment

    chosen = tmp_path / "chosen.json"
    chosen.write_text(json.dumps(_run(qps_factor=1.0, rss_factor=0.75).to_dict()))
    done = run_cli("recommend", str(chosen), "--write-dropin", str(tmp_path / "etc"))
    assert done.returncode == 0, done.stderr
    (dropin,) = (tmp_path / "etc").glob("mariadb.service.d/*.conf")
    env = dropin_environment(dropin)
    assert env["LD_PRELOAD"].endswith(".so.2") and "jemalloc" in env["LD_PRELOAD"]
    assert env["MALLOC_CONF"] == "background_thread:true"
    assert "systemctl daemon-reload" in done.stderr
    same = tmp_path / "same.json"
    same.write_text(json.dumps(_run(qps_factor=1.0, rss_factor=1.0).to_dict()))
    kept = run_cli("recommend", str(same), "--write-dropin", str(tmp_path / "etc2"))
    assert kept.returncode == 0, kept.stderr
    assert "no drop-in written" in kept.stderr
    assert not (tmp_path / "etc2").exists()
