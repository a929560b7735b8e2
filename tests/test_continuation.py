"""The blocks an undecided setup needs, predicted from the run's own variance, against
continuations of that run simulated with that variance: the central prediction reaches
the width in about half of them, the range's ends in few and nearly all.

The run is the demo's stored MyRocks run (decision_runs.demo_run): jemalloc's 0.77x peak
RSS waits on a throughput interval 24% wide; 10.5% would decide it.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from decision_runs import DEMO_FILE
from mallocbench.analysis import criteria, stats
from mallocbench.analysis import recommend as rec
from mallocbench.analysis.continuation import (
    MAX_BLOCKS,
    blocks_for,
    half_width,
    predict,
    residual_variance,
)
from mallocbench.model.results import RunResult

SIMULATIONS = 400
SETUP = "jemalloc"


def demo() -> RunResult:
    return RunResult.from_dict(json.loads(DEMO_FILE.read_text()))


def blocks_of(run: RunResult) -> dict[str, dict[int, float]]:
    """Per setup, the held cell's throughput per block (the demo has one cell)."""
    out: dict[str, dict[int, float]] = {}
    for c in run.cells:
        assert c.qps is not None
        out.setdefault(c.setup, {})[c.repeat] = c.qps
    return out


def continue_run(
    measured: dict[str, dict[int, float]], total: int, sd: float, rng: random.Random
) -> tuple[float, float]:
    """The jemalloc interval after the run goes on to `total` blocks. Each setup's true
    level is its measured geometric mean off by what its measured blocks leave unknown
    (the same variance over their count); each new block adds a block effect and
    residual noise of the run's variance."""
    values = {name: dict(blocks) for name, blocks in measured.items()}
    done = len(measured["glibc"])
    truth = {
        name: stats.geomean(list(blocks.values())) * math.exp(rng.gauss(0, sd / math.sqrt(done)))
        for name, blocks in measured.items()
    }
    for block in range(done, total):
        shared = rng.gauss(0, 0.05)  # the block's luck, which pairing removes
        for name in measured:
            values[name][block] = truth[name] * math.exp(shared + rng.gauss(0, sd))
    base = values.pop("glibc")
    found = stats.blocked_ratios(base, values)[SETUP]
    return found.low, found.high


def reached(total: int | None, needed: float, sd: float, seed: int) -> float:
    """The share of simulated continuations to `total` blocks whose interval is within
    the needed half-width."""
    assert total is not None
    rng = random.Random(seed)
    measured = blocks_of(demo())
    hits = sum(
        half_width(*continue_run(measured, total, sd, rng)) <= needed for _ in range(SIMULATIONS)
    )
    return hits / SIMULATIONS


def test_the_predicted_blocks_reach_the_width_in_about_half_of_the_continuations() -> None:
    r = rec.recommend(demo())
    (engine,) = r.engines
    assert engine.kind == criteria.UNDECIDED and engine.ranked[0].setup == SETUP
    (hold,) = engine.ranked[0].holds
    p = hold.prediction
    assert p is not None and p.blocks_now == 3
    assert p.fewest is not None and p.blocks is not None and p.most is not None
    assert p.fewest < p.blocks < p.most
    cell = next(e for e in engine.ranked[0].assessments[criteria.THROUGHPUT].unclear)
    needed = abs(math.log(cell.ratio / (1 - r.min_effect)))  # type: ignore[operator]
    s2 = residual_variance(half_width(cell.low, cell.high), cell.df, cell.blocks)
    sd = math.sqrt(s2)
    # The prediction is the least count whose expected width is narrow enough: about
    # half of the continuations get there by then, and fewer than half one block sooner.
    assert 0.4 <= reached(p.blocks, needed, sd, seed=1) <= 0.8
    assert reached(p.blocks - 1, needed, sd, seed=4) <= 0.6
    # The range's ends: the variance at the low end of its range is seldom the truth.
    assert reached(p.fewest, needed, sd, seed=2) <= 0.2
    assert reached(p.most, needed, sd, seed=3) >= 0.9
    # Minutes come from the run's own blocks: 150 s each in the stored run.
    assert hold.seconds_per_block == pytest.approx(150.0)


def test_a_prediction_needs_a_paired_interval_and_says_when_blocks_run_out() -> None:
    assert predict(0.9, 1.1, math.nan, 3, 0.05) is None  # unpaired: no df
    assert predict(0.9, 1.1, 6, 1, 0.05) is None  # one block: no spread
    # Already narrow enough: the blocks at hand.
    enough = predict(0.99, 1.01, 6, 3, 0.05)
    assert enough is not None and enough.blocks == 3
    # A width no count of blocks reaches within the cap.
    assert blocks_for(1e-6, 0.01, 3, 3) is None
    far = predict(0.5, 2.0, 2, 2, 1e-4)
    assert far is not None and far.most is None and far.blocks is None
    assert MAX_BLOCKS >= 1000
