"""The shared statistics: checked against values computed by hand and against identities."""

from __future__ import annotations

import math
import random

import pytest

from mallocbench.analysis import stats
from mallocbench.report.words import relative_mark, relative_text


def test_mean_ci_matches_hand_computation() -> None:
    # mean 2, sd 1, se 1/sqrt(3), t(0.975, 2) = 4.302653; positive values: log scale,
    # where the symmetric interval would have reached -0.48.
    m, low, high = stats.mean_ci([1, 2, 3])
    spread = math.exp(4.302653 * (1 / math.sqrt(3)) / 2)
    assert m == pytest.approx(2.0)
    assert low == pytest.approx(2 / spread, rel=1e-5)
    assert high == pytest.approx(2 * spread, rel=1e-5)
    # Values that are not all positive keep the symmetric interval.
    m, low, high = stats.mean_ci([-1, 2, 5])
    half = 4.302653 * 3 / math.sqrt(3)
    assert low == pytest.approx(2 - half, rel=1e-5) and high == pytest.approx(2 + half, rel=1e-5)


def test_mean_ci_degenerate_inputs() -> None:
    assert all(math.isnan(x) for x in stats.mean_ci([]))
    m, low, high = stats.mean_ci([5.0])
    assert m == 5.0 and math.isnan(low) and math.isnan(high)
    assert stats.mean_ci([1, None, 3])[0] == pytest.approx(2.0)
    assert stats.mean_ci([4, 4, 4]) == (4.0, 4.0, 4.0)


def test_wider_confidence_gives_wider_interval() -> None:
    values = [10, 12, 11, 13]
    _, l95, h95 = stats.mean_ci(values, 0.95)
    _, l99, h99 = stats.mean_ci(values, 0.99)
    assert l99 < l95 and h99 > h95


def test_ratio_ci_with_constant_denominator_is_scaled_mean_ci() -> None:
    a = [9.0, 10.0, 11.5, 10.5]
    r, low, high = stats.ratio_ci(a, [5.0, 5.0, 5.0])
    m, ml, mh = stats.mean_ci(a)
    assert r == pytest.approx(m / 5)
    assert low == pytest.approx(ml / 5)
    assert high == pytest.approx(mh / 5)


def test_ratio_ci_inverts_exactly() -> None:
    a, b = [100, 104, 98, 101], [80, 85, 79, 83]
    r, low, high = stats.ratio_ci(a, b)
    ri, lowi, highi = stats.ratio_ci(b, a)
    assert r == pytest.approx(1 / ri)
    assert low == pytest.approx(1 / highi)
    assert high == pytest.approx(1 / lowi)
    assert low < r < high


def test_ratio_significance() -> None:
    clear = stats.relative([100, 101, 99], [80, 81, 79])
    assert clear.significant and relative_mark(clear) == "+"
    slower = stats.relative([80, 81, 79], [100, 101, 99])
    assert slower.significant and relative_mark(slower) == "-"
    noisy = stats.relative([100, 60, 140], [90, 120, 95])
    assert not noisy.significant and relative_mark(noisy) == ""
    assert "*" in relative_text(clear) and "*" not in relative_text(noisy)


def test_ratio_ci_stays_positive_and_finite_with_two_noisy_repeats() -> None:
    # Fieller's interval gave [-inf, inf] here; on the log scale it is wide but bounded.
    r, low, high = stats.ratio_ci([10, 30], [5, 50])
    assert 0 < low < r < high < math.inf
    assert not stats.significant(low, high)
    m, mlow, mhigh = stats.mean_ci([10, 1000])
    assert 0 < mlow < m < mhigh < math.inf  # a throughput interval never goes below zero
    assert math.isnan(stats.ratio_ci([1.0, 2.0], [0.0, 0.0])[1])


def test_ratio_ci_single_values_and_missing() -> None:
    r, low, high = stats.ratio_ci([2.0], [1.0])
    assert r == 2.0 and math.isnan(low) and math.isnan(high)
    assert not stats.relative([2.0], [1.0]).significant
    assert math.isnan(stats.ratio_ci([], [1.0])[0])
    assert math.isnan(stats.ratio_ci([1.0], [0.0])[0])


def test_ratio_ci_coverage_is_close_to_nominal() -> None:
    # Normal samples with true ratio 1.25: the 95% interval should cover it ~95% of the time.
    rng = random.Random(12345)
    trials, covered = 2000, 0
    for _ in range(trials):
        a = [rng.gauss(125, 10) for _ in range(5)]
        b = [rng.gauss(100, 15) for _ in range(5)]
        _, low, high = stats.ratio_ci(a, b)
        covered += low <= 1.25 <= high
    assert 0.92 < covered / trials < 0.98


def test_geomean() -> None:
    assert stats.geomean([1, 4, 16]) == pytest.approx(4.0)
    assert math.isnan(stats.geomean([]))
    with pytest.raises(ValueError):
        stats.geomean([1, 0])


def test_t_quantile_rejects_bad_confidence() -> None:
    with pytest.raises(ValueError):
        stats.t_quantile(1.5, 3)


def test_classify_words() -> None:
    nan = math.nan
    assert stats.classify(1.10, 1.05, 1.15) == stats.FASTER
    assert stats.classify(0.90, 0.85, 0.95) == stats.SLOWER
    assert stats.classify(1.02, 0.97, 1.07) == stats.NOT_SIGNIFICANT
    assert stats.classify(1.10, nan, nan) == stats.NO_INTERVAL
    assert stats.classify(None, nan, nan) == stats.NO_INTERVAL
    # "same" only when the whole interval lies within the minimum effect ...
    assert stats.classify(1.01, 1.005, 1.015, min_effect=0.02) == stats.SAME
    # ... never without an interval, however close the ratio is to 1.0 ...
    assert stats.classify(0.99, nan, nan, min_effect=0.02) == stats.NO_INTERVAL
    # ... and not when it reaches past it: the jemalloc 1.03 [0.96, 1.10] at 3%.
    assert stats.classify(1.03, 0.96, 1.10, min_effect=0.03) == stats.NOT_SIGNIFICANT
    # Real (excludes 1.0) but perhaps below the minimum effect: inconclusive, no finding.
    assert stats.classify(1.01, 1.002, 1.03, min_effect=0.02) == stats.INCONCLUSIVE
    # At or beyond min_effect, significance decides.
    assert stats.classify(1.03, 1.01, 1.05, min_effect=0.02) == stats.FASTER
    assert stats.classify(1.03, 0.98, 1.08, min_effect=0.02) == stats.NOT_SIGNIFICANT
    assert stats.classify(0.9, 0.85, 0.95, 0.2) == stats.SAME
    assert stats.interval_width(0.97, 1.02) == pytest.approx(0.05)
    assert stats.interval_width(nan, 1.0) == math.inf


def test_unchanged_setup_is_rarely_called_different() -> None:
    # Two setups drawn from the same distribution, 3 interleaved repeats each, as a run
    # gives them: the 95% interval may exclude 1.0 about 1 time in 20, not more, and a
    # min_effect can only turn such calls into "same".
    rng = random.Random(20261123)
    trials = 2000
    called = same_called = 0
    for _ in range(trials):
        a = [rng.gauss(10000, 400) for _ in range(3)]
        b = [rng.gauss(10000, 400) for _ in range(3)]
        rel = stats.relative(a, b)
        called += stats.classify(rel.ratio, rel.low, rel.high) in (stats.FASTER, stats.SLOWER)
        verdict = stats.classify(rel.ratio, rel.low, rel.high, 0.03)
        same_called += verdict in (stats.FASTER, stats.SLOWER)
    assert 0.02 < called / trials < 0.08
    assert same_called < called
