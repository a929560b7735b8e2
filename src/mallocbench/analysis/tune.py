"""The statistics of a tune's re-measured front: each point's estimates, its ratio to
another point with the project's verdict, and the blocked design's pooled error term.

A tune compares many noisy points at once, so every interval here is taken at a family
level (Bonferroni) that the caller gives; a ratio measured in blocks (servers up at
once) pairs the blocks, as `run` pairs its setups (stats.blocked_ratios), so what a
block shares cancels out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mallocbench.analysis import stats
from mallocbench.analysis.replay import Estimate


@dataclass
class Versus:
    """One point against another on one metric: ratio (this / other), interval, verdict."""

    ratio: float
    low: float
    high: float
    verdict: str
    better: bool  # a finding in the metric's good direction
    worse: bool  # a finding in its bad direction

    @property
    def same(self) -> bool:
        """Shown the same: the whole interval within min_effect."""
        return self.verdict == stats.SAME


def estimate(samples: Sequence[float]) -> Estimate:
    """The mean with its 95% interval."""
    return Estimate(*stats.mean_ci(samples))


def family_confidence(comparisons: int, confidence: float = 0.95) -> float:
    """Bonferroni: each of `comparisons` intervals at this level keeps the chance of any
    false finding among them within 1 - confidence. Without it, the best of eight noisy
    settings beats the default by luck more often than not."""
    return 1 - (1 - confidence) / max(1, comparisons)


def verdict(
    ratio: float, low: float, high: float, lower_is_better: bool, min_effect: float
) -> Versus:
    word = stats.classify(ratio, low, high, min_effect)
    finding = word in stats.FINDINGS
    good = ratio < 1 if lower_is_better else ratio > 1
    return Versus(ratio, low, high, word, finding and good, finding and not good)


def versus(
    a: Sequence[float],
    b: Sequence[float],
    lower_is_better: bool,
    min_effect: float,
    confidence: float = 0.95,
    blocks: tuple[Sequence[int], Sequence[int]] | None = None,
) -> Versus:
    """a against b; with `blocks` (the block of each of a's and b's samples), paired
    by block as `run` pairs its setups: what a block shares (the host's load then, the
    page cache) cancels out of the ratio's interval."""
    if blocks is not None and len(set(blocks[0]) & set(blocks[1])) >= 2:
        paired = stats.blocked_ratios(
            dict(zip(blocks[1], b, strict=True)),
            {"a": dict(zip(blocks[0], a, strict=True))},
            confidence,
        )["a"]
        ratio, low, high = paired.ratio, paired.low, paired.high
    else:
        ratio, low, high = stats.ratio_ci(a, b, confidence)
    return verdict(ratio, low, high, lower_is_better, min_effect)


@dataclass(frozen=True)
class Pool:
    """The point x block residual of log values over the blocks every point measured:
    the blocked design's error term, pooled over the points as `run` pools its setups
    (stats.blocked_ratios), so a pair's interval has (points - 1) x (blocks - 1) degrees
    of freedom rather than blocks - 1 (2 at 3 repeats: t would be 4.3, or 12 at the
    Bonferroni level of a few comparisons)."""

    mse: float
    df: int
    blocks: tuple[int, ...]


def pool(measured: Sequence[Mapping[int, float]]) -> Pool | None:
    """The pool of points measured block by block (block -> value, one map a point).
    None: fewer than two points or two blocks in common, or a value not positive."""
    if len(measured) < 2 or not all(measured):
        return None
    common = sorted(set.intersection(*(set(m) for m in measured)))
    if len(common) < 2 or any(m[b] <= 0 for m in measured for b in common):
        return None
    mse, df = stats.block_residual([[math.log(m[b]) for b in common] for m in measured])
    return Pool(mse, df, tuple(common)) if df >= 1 and math.isfinite(mse) else None


def pooled_versus(
    a: Mapping[int, float],
    b: Mapping[int, float],
    pooled: Pool,
    lower_is_better: bool,
    min_effect: float,
    confidence: float,
) -> Versus:
    """a against b (block -> value each) on the blocks of their `pooled` error term."""
    d = math.log(sum(a[k] for k in pooled.blocks) / sum(b[k] for k in pooled.blocks))
    half = stats.t_quantile(confidence, pooled.df) * math.sqrt(2 * pooled.mse / len(pooled.blocks))
    return verdict(math.exp(d), math.exp(d - half), math.exp(d + half), lower_is_better, min_effect)
