"""The decision's four outcomes on stored runs: a trade-off is named with its price and
the budgets that take it, a budget decides it, a supported gain held by an unclear
priority says what would decide it, and an A/A pair keeps the base.

The stored runs (fixtures/results-tradeoff.json, results-demo-myrocks.json) are built by
decision_runs.py from exact ratios; the first test checks they still are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cli_runner import run_cli, small_experiment
from decision_runs import DEMO_FILE, TRADE_OFF_FILE, demo_run, trade_off_run
from mallocbench.analysis import criteria
from mallocbench.analysis import recommend as rec
from mallocbench.analysis.run_analysis import analyze
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import DecisionRecord
from mallocbench.model.results import RunResult
from mallocbench.report.markdown import render as markdown_render
from mallocbench.report.recommend import recommendation_dict, recommendation_lines, verdict_lines
from mallocbench.run import schema
from mallocbench.run.loading import from_dict

FIXTURES = Path(__file__).parent / "fixtures"
HEADLINE = re.compile(
    r"innodb: tcmalloc: 1\.29x throughput \[1\.25, 1\.33\] \(\+2\d\d QPS of 8\d\d\), "
    r"0\.92x p99 \(-1\.\d\d ms of 1\d\.\d\d\), for 1\.09x peak RSS \[1\.08, 1\.10\] "
    r"\(\+19 MiB of 215\): a trade-off; take it with `--memory-budget 240M` or "
    r"`--max-loss rss=10%`, or keep glibc"
)


def stored(path: Path) -> RunResult:
    return RunResult.from_dict(json.loads(path.read_text()))


def recommend_json(path: Path, *args: str) -> dict[str, Any]:
    done = run_cli("recommend", str(path), "--format", "json", *args)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_the_stored_runs_are_what_their_builder_makes() -> None:
    for path, run in ((TRADE_OFF_FILE, trade_off_run()), (DEMO_FILE, demo_run())):
        assert json.loads(path.read_text()) == json.loads(json.dumps(run.to_dict())), path


def test_a_first_priority_win_that_costs_memory_is_a_trade_off_with_both_budgets() -> None:
    r = rec.recommend(stored(TRADE_OFF_FILE))
    (engine,) = r.engines
    assert engine.kind == criteria.TRADE_OFF and engine.choice is None
    tcmalloc = engine.ranked[0]
    assert tcmalloc.setup == "tcmalloc" and tcmalloc.disqualified_by == [
        (criteria.RSS, criteria.WORSE)
    ]
    assert tcmalloc.loss_to_admit[criteria.RSS] == pytest.approx(0.098, abs=0.002)
    assert tcmalloc.memory_budget_to_admit == 240 << 20
    text = "\n".join(recommendation_lines(r))
    assert HEADLINE.search(text), text
    assert "keep glibc (no change" not in text
    # The verdict line of every report is the same headline.
    assert HEADLINE.search(verdict_lines(r)[0])


def test_the_recommend_command_carries_the_trade_off_and_deploys_nothing() -> None:
    data = recommend_json(TRADE_OFF_FILE)
    assert data["kind"] == criteria.TRADE_OFF and data["engines"][0]["subject"] == "tcmalloc"
    assert data["engines"][0]["choice"] is None and "deployment" not in data
    rss = data["engines"][0]["candidates"][0]["assessments"]["rss"]
    assert rss["change"] / (1 << 20) == pytest.approx(19, abs=0.6)
    assert rss["base_level"] / (1 << 20) == pytest.approx(215, abs=1)


@pytest.mark.parametrize(
    ("budget", "kind", "named"),
    [
        (("--max-loss", "rss=10%"), criteria.CHANGE, "within --max-loss rss=10%"),
        (("--memory-budget", "240M"), criteria.CHANGE, "within --memory-budget 240 MiB"),
        (
            ("--max-loss", "rss=5%"),
            criteria.KEEP,
            "tcmalloc's peak RSS loss is beyond --max-loss rss=5%",
        ),
        (("--memory-budget", "230M"), criteria.KEEP, "keep glibc"),
    ],
)
def test_a_budget_decides_the_trade_off(budget: tuple[str, str], kind: str, named: str) -> None:
    data = recommend_json(TRADE_OFF_FILE, *budget)
    (engine,) = data["engines"]
    assert engine["kind"] == kind
    if kind == criteria.CHANGE:
        assert engine["choice"] == "tcmalloc"
        assert data["deployment"]["setup"]["name"] == "tcmalloc"
    else:
        assert engine["choice"] is None and "deployment" not in data
    text = run_cli("recommend", str(TRADE_OFF_FILE), *budget).stdout
    headline = text.splitlines()[2]
    assert named in headline, headline
    if kind == criteria.CHANGE:
        assert "run tcmalloc instead of glibc" in headline and "(+19 MiB of 215)" in headline


def test_an_a_a_pair_keeps_the_base() -> None:
    for r in (rec.recommend(stored(FIXTURES / "results-aa.json")), _aa_pair()):
        assert [e.kind for e in r.engines] == [criteria.KEEP] * len(r.engines)
        assert all(e.choice is None and e.subject is None for e in r.engines)
        assert "(no change recommended)" in "\n".join(recommendation_lines(r))


def _aa_pair() -> criteria.Recommendation:
    """tcmalloc's cells relabelled as a second glibc: the same noise, no true difference."""
    run = stored(TRADE_OFF_FILE)
    base = {(c.step, c.threads, c.repeat): c for c in run.cells if c.setup == "glibc"}
    run.setups = run.setups[:2]
    run.cells = [c for c in run.cells if c.setup in ("glibc", "tcmalloc")]
    for c in run.cells:
        if c.setup == "tcmalloc":
            twin = base[(c.step, c.threads, c.repeat)]
            assert twin.qps is not None
            c.qps = twin.qps * (1.004 if c.repeat % 2 else 0.997)
            c.p99_ms = twin.p99_ms
    peaks = {s.repeat: s.peak_rss_bytes for s in run.sessions if s.setup == "glibc"}
    run.sessions = [s for s in run.sessions if s.setup in ("glibc", "tcmalloc")]
    for s in run.sessions:
        s.peak_rss_bytes = peaks[s.repeat]
    return rec.recommend(run, max_loss={criteria.RSS: 0.10})


def test_the_demo_reads_undecided_with_what_holds_it_not_a_bare_keep() -> None:
    r = rec.recommend(stored(DEMO_FILE))
    (engine,) = r.engines
    assert engine.kind == criteria.UNDECIDED
    assert engine.ranked[0].setup == "jemalloc"
    (hold,) = engine.ranked[0].holds
    assert hold.criterion == criteria.THROUGHPUT and hold.width_now > hold.width_needed > 0
    done = run_cli("recommend", str(DEMO_FILE))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "keep glibc (no change recommended)" not in text
    assert "myrocks: undecided: jemalloc 0.77x peak RSS [0.74, 0.81]" in text
    assert "what holds it: throughput at random-points range=100 @16: 23.6% wide now" in text
    # What would decide it, from the run's own variance (tests/test_continuation.py):
    # the blocks in all, the extra ones and their minutes at the run's 150 s per block.
    assert re.search(
        r"predicts 11 blocks in all \(8 more; 5 to 48 within its 95% range\), about 20 "
        r"minutes at 2\.5 minutes per block",
        text,
    ), text
    command = re.search(r"to add evidence: `(mallocbench run [^`]+)`", text)
    assert command is not None, text
    assert command.group(1).startswith(
        f"mallocbench run examples/quick.toml --out {FIXTURES} --resume --target-ci 10.5% "
        "--max-repeats 48 --budget "
    )
    # tcmalloc's supported 0.78x stays in view too, undecided as well: it says what holds
    # it (its own throughput interval, nearer 1, needs more blocks); mimalloc, with no
    # supported gain, only what speaks against it.
    assert re.search(r"tcmalloc: .*peak RSS: better .*0\.78", text)
    assert re.search(
        r"tcmalloc: .*what holds it: throughput at random-points range=100 @16: 22\.9% wide "
        r"now, 4\.2% around its ratio would decide it; the run's variance predicts 57 blocks",
        text,
    ), text
    assert not re.search(r"mimalloc: .*what holds it", text)


def test_a_budget_on_an_unclear_priority_takes_it_or_leaves_it_undecided() -> None:
    # The demo's jemalloc: 0.77x peak RSS, throughput 1.02 [0.91, 1.15].
    taken = recommend_json(DEMO_FILE, "--max-loss", "throughput=15%")["engines"][0]
    assert taken["kind"] == criteria.CHANGE and taken["choice"] == "jemalloc"
    text = run_cli("recommend", str(DEMO_FILE), "--max-loss", "throughput=15%").stdout
    assert "what the budget takes: throughput unclear, its worst interval" in text
    # A 5% budget: the interval reaches past it, but more blocks may bring it within.
    waits = recommend_json(DEMO_FILE, "--max-loss", "throughput=5%")["engines"][0]
    assert waits["kind"] == criteria.UNDECIDED and waits["choice"] is None


def test_the_reports_carry_the_outcome_and_the_runs_own_decision_table(tmp_path: Path) -> None:
    run = stored(TRADE_OFF_FILE)
    assert "a trade-off; take it with" in markdown_render(analyze(run))
    # The experiment's [decision] travels with the run: its reports decide by it.
    run.metadata.decision = DecisionRecord(max_loss={"rss": 0.1})
    analysis = analyze(run)
    assert analysis.recommendation.engines[0].kind == criteria.CHANGE
    assert "**innodb: run tcmalloc instead of glibc" in markdown_render(analysis)
    data = recommendation_dict(analysis.recommendation)
    assert data["kind"] == criteria.CHANGE and data["max_loss"] == {"rss": 0.1}
    # The command line wins over the stored table.
    path = tmp_path / "results.json"
    path.write_text(json.dumps(run.to_dict()))
    assert recommend_json(path)["kind"] == criteria.CHANGE
    assert recommend_json(path, "--max-loss", "rss=5%")["kind"] == criteria.KEEP


BASE_EXPERIMENT: dict[str, Any] = {
    "name": "t",
    "engines": ["innodb"],
    "steps": ["point-query"],
    "setup": [{"name": "glibc", "allocator": "glibc"}],
}


def test_the_decision_table_parses_and_refuses_bad_values_in_one_line() -> None:
    table = {"priority": ["throughput", "p99"], "memory_budget": "2G", "max_loss": {"rss": "10%"}}
    decision = from_dict({**BASE_EXPERIMENT, "decision": table}).decision
    assert decision is not None
    assert decision.priorities == (criteria.THROUGHPUT, criteria.P99)
    assert decision.memory_budget_bytes == 2 << 30 and decision.max_loss == {criteria.RSS: 0.10}
    for bad, needle in (
        ({"max_loss": {"speed": "5%"}}, "decision.max_loss 'speed=5%' is not OBJECTIVE=PCT"),
        ({"max_loss": {"rss": "lots"}}, "is not a fraction"),
        ({"priority": "speed"}, "unknown priority speed"),
        ({"memory_budget": "big"}, "decision.memory_budget"),
        ({"budgets": 1}, "budgets"),
    ):
        with pytest.raises(MallocbenchError, match=re.escape(needle)):
            from_dict({**BASE_EXPERIMENT, "decision": bad})
    properties = schema.build()["properties"]["decision"]["properties"]
    assert set(properties) == {"priority", "memory_budget", "max_loss"}


def test_dry_run_shows_the_decision_and_refuses_a_bad_one(tmp_path: Path) -> None:
    good = small_experiment(tmp_path, extra='[decision]\nmax_loss = { rss = "10%" }')
    done = run_cli("run", str(good), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "decision priorities throughput, rss (the default); max loss rss 10%" in done.stdout
    bad = small_experiment(tmp_path, extra='[decision]\nmax_loss = { rss = "200%" }')
    refused = run_cli("run", str(bad), "--dry-run")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.count("\n") == 1 and "max_loss" in refused.stderr


def test_recommend_refuses_a_bad_max_loss_in_one_line() -> None:
    for item, needle in (("rss", "OBJECTIVE=PCT"), ("rss=x", "not a fraction"), ("a=1%", "a=1%")):
        done = run_cli("recommend", str(TRADE_OFF_FILE), "--max-loss", item)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("mallocbench: error: ") and needle in done.stderr
