"""How many blocks an unclear interval needs to decide, predicted from the run's variance.

A paired interval's half-width on the log scale is t(df) x sqrt(2 s2 / n)
(stats.blocked_ratios: n blocks, s2 the residual mean square pooled over k setups, df =
(k - 1)(n - 1)). The interval at hand gives s2 = n (h / t)^2 / 2; the prediction is the
least n whose half-width is within the one needed, with s2 as estimated and at the two
ends of its 95% range (s2 df / chi2 quantiles), which a run's few degrees of freedom
leave wide. The estimate is centred: about half of the continuations reach the width by
then (tests/test_continuation.py simulates them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from mallocbench.analysis import stats
from mallocbench.model.results import RunResult

CONFIDENCE = 0.95
MAX_BLOCKS = 1000  # beyond this a prediction says "more than" rather than a number


@dataclass(frozen=True)
class BlocksPrediction:
    """Blocks in all (the run's and more) for an interval to reach a half-width."""

    blocks_now: int
    blocks: int | None  # None: more than MAX_BLOCKS
    fewest: int | None  # with the variance at the low end of its 95% range
    most: int | None  # at its high end; None: more than MAX_BLOCKS
    # Where `run --target-ci` stops: under Stein's rule its widths keep this variance and
    # these degrees of freedom, so the count is fixed now (None: more than MAX_BLOCKS).
    stein: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def half_width(low: float, high: float) -> float:
    """An interval's half-width on the log scale (blocked intervals are symmetric there)."""
    return math.log(high / low) / 2


def residual_variance(half: float, df: float, blocks: int) -> float:
    """The pooled residual mean square an interval of this half-width implies."""
    t = stats.t_quantile(CONFIDENCE, df)
    return blocks * (half / t) ** 2 / 2


def _half_width_at(blocks: int, s2: float, df_per_block: float, fixed_df: float) -> float:
    df = fixed_df if fixed_df > 0 else df_per_block * (blocks - 1)
    return stats.t_quantile(CONFIDENCE, df) * math.sqrt(2 * s2 / blocks)


def blocks_for(
    needed: float, s2: float, df_per_block: float, blocks_now: int, fixed_df: float = 0
) -> int | None:
    """The least blocks (at least blocks_now) whose half-width is within `needed`; None
    beyond MAX_BLOCKS. `fixed_df` > 0: the degrees of freedom stay (Stein's rule). The
    half-width only narrows with blocks: a bisection finds it."""

    def enough(n: int) -> bool:
        return _half_width_at(n, s2, df_per_block, fixed_df) <= needed

    if enough(blocks_now):
        return blocks_now
    if not enough(MAX_BLOCKS):
        return None
    low, high = blocks_now, MAX_BLOCKS  # too few at low, enough at high
    while high - low > 1:
        middle = (low + high) // 2
        if enough(middle):
            high = middle
        else:
            low = middle
    return high


def predict(
    low: float, high: float, df: float, blocks: int, needed: float
) -> BlocksPrediction | None:
    """The blocks a paired interval [low, high] of `blocks` blocks and `df` degrees of
    freedom needs to reach the log half-width `needed`; None without a paired interval."""
    if blocks < 2 or not df > 0 or not (0 < low < high < math.inf) or not needed > 0:
        return None
    from scipy.special import chdtri  # imported here, as stats does (load time)

    s2 = residual_variance(half_width(low, high), df, blocks)
    per_block = df / (blocks - 1)
    # The variance's 95% range from its chi-square: small s2 needs fewest blocks.
    small = s2 * df / float(chdtri(df, (1 - CONFIDENCE) / 2))
    large = s2 * df / float(chdtri(df, 1 - (1 - CONFIDENCE) / 2))
    return BlocksPrediction(
        blocks,
        blocks_for(needed, s2, per_block, blocks),
        blocks_for(needed, small, per_block, blocks),
        blocks_for(needed, large, per_block, blocks),
        blocks_for(needed, s2, per_block, blocks, fixed_df=df),
    )


def seconds_per_block(result: RunResult) -> float | None:
    """The wall time one block took: per block and engine, its first server's start to
    its last one's end (its cells' when the sessions have no times), summed over the
    engines, averaged over the blocks; None when nothing recorded a time."""
    spans: dict[tuple[int, str], list[float]] = {}

    def stretch(block: int, engine: str, start: float, end: float) -> None:
        span = spans.setdefault((block, engine), [math.inf, -math.inf])
        span[0], span[1] = min(span[0], start), max(span[1], end)

    for session in result.sessions:
        if session.started_at is not None and session.ended_at is not None:
            stretch(session.repeat, session.engine, session.started_at, session.ended_at)
    if not spans:
        for c in result.cells:
            if c.started_at is not None and c.duration_s is not None:
                stretch(c.repeat, c.engine, c.started_at, c.started_at + c.duration_s)
    per_block: dict[int, float] = {}
    for (block, _), (start, end) in spans.items():
        per_block[block] = per_block.get(block, 0.0) + end - start
    return sum(per_block.values()) / len(per_block) if per_block else None
