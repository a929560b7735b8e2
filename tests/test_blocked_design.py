"""Relative values paired by block, and the stopping rule that keeps their coverage."""

from __future__ import annotations

import math
import random

import pytest

from mallocbench.analysis import stats
from mallocbench.analysis.convergence import wide_cells
from mallocbench.model.metadata import AdaptiveRecord
from mallocbench.model.results import Cell, RunResult, SetupInfo


def test_pooled_residual_by_hand() -> None:
    # log throughput, 3 setups x 3 blocks; block effects are shared, so only the
    # setup x block residual is left: worked out here with the textbook sums.
    rows = [[0.0, 0.1, 0.2], [0.05, 0.1, 0.3], [0.1, 0.2, 0.2]]
    grand = sum(map(sum, rows)) / 9
    setup = [sum(r) / 3 for r in rows]
    block = [sum(r[k] for r in rows) / 3 for k in range(3)]
    expected = (
        sum((rows[s][k] - setup[s] - block[k] + grand) ** 2 for s in range(3) for k in range(3)) / 4
    )
    mse, df = stats.block_residual(rows)
    assert df == 4 and mse == pytest.approx(expected)


def test_blocks_cancel_drift_that_independent_samples_cannot() -> None:
    # The machine's speed swings +-20% between blocks; jemalloc is 5% faster in each.
    speed = [0.8, 1.2, 1.0, 0.9, 1.1]
    base = {k: 1000 * s for k, s in enumerate(speed)}
    je = {k: 1050 * s * (1.002 if k % 2 else 0.998) for k, s in enumerate(speed)}
    (paired,) = stats.blocked_ratios(base, {"je": je}).values()
    assert paired.pooled and paired.blocks == 5 and paired.df == 4
    assert 1.03 < paired.low < 1.05 < paired.high < 1.07
    unpaired = stats.relative(list(je.values()), list(base.values()))
    assert unpaired.low < 1.0 < unpaired.high  # the drift swamps the effect


def test_a_setup_measured_in_more_blocks_than_the_others_keeps_them_all() -> None:
    base = {0: 100.0, 1: 110.0, 2: 90.0}
    full = {0: 101.0, 1: 111.0, 2: 91.0}
    partial = {0: 120.0, 2: 108.0}
    out = stats.blocked_ratios(base, {"full": full, "partial": partial})
    # "full" is paired with the base over its 3 blocks (2 df) rather than pooled over
    # the 2 blocks every setup measured...
    assert not out["full"].pooled and out["full"].blocks == 3 and out["full"].df == 2
    assert out["full"].ratio == pytest.approx(303 / 300)
    # ...and "partial" over the blocks it has: 1 df.
    assert out["partial"].blocks == 2 and out["partial"].df == 1
    assert out["partial"].ratio == pytest.approx(228 / 190)


def test_one_block_gives_no_interval() -> None:
    (one,) = stats.blocked_ratios({0: 100.0}, {"je": {0: 120.0}}).values()
    assert one.ratio == pytest.approx(1.2) and math.isnan(one.low)


def _stopping_coverage(stein: bool, runs: int, rng: random.Random) -> float:
    """How often the 95% interval holds the true ratio when --target-ci picks the blocks.

    The run's rule: 3 blocks of every cell, then one more block at a time while the
    interval is wider than the target, at most 20 blocks.
    """
    target, sigma, covered = 0.04, 0.03, 0
    for _ in range(runs):
        base: dict[int, float] = {}
        je: dict[int, float] = {}
        while True:
            block = len(base)
            drift = rng.gauss(0, 0.1)
            base[block] = 1000 * math.exp(drift + rng.gauss(0, sigma))
            je[block] = 1000 * math.exp(drift + rng.gauss(0, sigma))
            if block + 1 < 3:
                continue
            (r,) = stats.blocked_ratios(
                base, {"je": je}, variance_blocks=3 if stein else None
            ).values()
            if r.high - r.low <= target or block + 1 >= 20:
                break
        covered += r.low <= 1.0 <= r.high
    return covered / runs


def test_stein_stopping_keeps_coverage_where_naive_stopping_loses_it() -> None:
    runs = 1500
    stein = _stopping_coverage(True, runs, random.Random(7))
    naive = _stopping_coverage(False, runs, random.Random(7))
    # 1500 runs: a binomial standard error of 0.6 points around 95%.
    assert stein >= 0.935
    assert naive < stein - 0.01


def _cells(setup: str, values: list[float]) -> list[Cell]:
    return [
        Cell(setup, "innodb", "point-query range=100", 8, k, qps=v) for k, v in enumerate(values)
    ]


def test_wide_cells_judge_the_width_from_the_first_stage_once_it_is_recorded() -> None:
    # Three noisy blocks, then five that agree to 0.1%: the later ones narrow the
    # interval only through their number, never through their small spread.
    base: list[float] = [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000]
    je: list[float] = [1100, 950, 1020, 1010, 1010, 1010, 1010, 1010]
    run = RunResult(
        "r", "t", "glibc", setups=[SetupInfo("glibc", "glibc"), SetupInfo("je", "jemalloc")]
    )
    run.cells = _cells("glibc", base) + _cells("je", je)
    assert not wide_cells(run, 10.0)  # all blocks' spread: narrow enough
    run.metadata.adaptive = AdaptiveRecord(stage1_blocks=3)
    (wide,) = wide_cells(run, 10.0)
    assert wide.setup == "je" and wide.width_pct > 20.0
