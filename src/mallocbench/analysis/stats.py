"""Small statistics shared by every report: means with intervals, ratios, geometric means.

Repeats are few (3-10) and machines are noisy, so intervals use Student's t (Welch's
degrees of freedom) rather than the normal approximation. Throughput, ops/s and memory
are positive quantities, so their intervals are built on the log scale: a mean or a
ratio of means gets bounds m * exp(+-t * relative standard error), which are never
negative and never infinite, and are asymmetric where they should be (a ratio of 0.5x
is as far from 1 as 2x). A ratio is *significant* when its interval excludes 1.0.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def _clean(values: Sequence[float | int | None]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


# Stopping rules and simulations ask for the same few (confidence, df) pairs thousands of
# times, and one scipy ppf call costs about a millisecond.
@functools.lru_cache(maxsize=1024)
def t_quantile(confidence: float, df: float) -> float:
    """Two-sided Student's t critical value (e.g. 4.30 for 95% and 2 degrees of freedom)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    # Imported here, and from scipy.special (the function scipy.stats.t.ppf calls)
    # rather than scipy.stats, which takes over a second more to load in every process
    # that writes a report, and most commands never need either.
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + confidence / 2))


def mean(values: Sequence[float | int | None]) -> float:
    xs = _clean(values)
    return sum(xs) / len(xs) if xs else math.nan


def stdev(values: Sequence[float | int | None]) -> float:
    """Sample standard deviation (n-1); nan with fewer than two values."""
    xs = _clean(values)
    if len(xs) < 2:
        return math.nan
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _log_interval(
    m: float, relative_se: float, df: float, confidence: float
) -> tuple[float, float]:
    """Bounds m * exp(-+t * se) of a positive estimate whose log has standard error se."""
    t = t_quantile(confidence, df)
    return (m * math.exp(-t * relative_se), m * math.exp(t * relative_se))


def mean_ci(
    values: Sequence[float | int | None], confidence: float = 0.95
) -> tuple[float, float, float]:
    """(mean, low, high): the mean with its Student's t confidence interval.

    For positive values (every quantity mallocbench measures) the interval is taken on
    the log scale (the delta method for log of the mean), so it never reaches below zero
    however few and noisy the repeats; values that are not all positive get the plain
    symmetric interval. With one value the bounds are nan (no spread is known); with
    none, all are nan.
    """
    xs = _clean(values)
    if not xs:
        return (math.nan, math.nan, math.nan)
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return (m, math.nan, math.nan)
    se = stdev(xs) / math.sqrt(len(xs))
    if se == 0:
        return (m, m, m)
    if min(xs) > 0:
        return (m, *_log_interval(m, se / m, len(xs) - 1, confidence))
    half = t_quantile(confidence, len(xs) - 1) * se
    return (m, m - half, m + half)


def ratio_ci(
    a_values: Sequence[float | int | None],
    b_values: Sequence[float | int | None],
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """(ratio, low, high) for mean(a) / mean(b) of positive samples, on the log scale.

    log(mean a / mean b) has variance about cv_a^2/n_a + cv_b^2/n_b (the delta method;
    cv = relative standard deviation); the degrees of freedom are Welch-Satterthwaite's.
    The samples are treated as independent. Unlike Fieller's interval, which it replaces,
    the bounds stay positive and finite with two noisy repeats, where Fieller's gave
    [-inf, inf] or a negative throughput ratio. Fewer than two values on either side, or
    a mean that is not positive, gives nan bounds.
    """
    a, b = _clean(a_values), _clean(b_values)
    if not a or not b:
        return (math.nan, math.nan, math.nan)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    if mb == 0:
        return (math.nan, math.nan, math.nan)
    r = ma / mb
    if len(a) < 2 or len(b) < 2 or ma <= 0 or mb <= 0:
        return (r, math.nan, math.nan)
    ca = (stdev(a) / ma) ** 2 / len(a)  # squared relative standard error of each mean
    cb = (stdev(b) / mb) ** 2 / len(b)
    if ca == 0 and cb == 0:
        return (r, r, r)
    df = (ca + cb) ** 2 / (ca * ca / (len(a) - 1) + cb * cb / (len(b) - 1))
    return (r, *_log_interval(r, math.sqrt(ca + cb), df, confidence))


@dataclass(frozen=True)
class BlockedRatio:
    """A setup's throughput relative to the base, from the blocks that measured both."""

    ratio: float
    low: float
    high: float
    blocks: int  # blocks (repeats) the estimate pairs
    df: float  # degrees of freedom of its interval (nan: no interval)
    pooled: bool  # the interval's spread is pooled over every setup of the blocks


def _log_matrix(
    base: Mapping[int, float], setups: list[Mapping[int, float]], blocks: list[int]
) -> list[list[float]]:
    return [[math.log(values[b]) for b in blocks] for values in [base, *setups]]


def block_residual(rows: list[list[float]]) -> tuple[float, int]:
    """(mean square, df) of the setup x block residual of a complete block design.

    rows[s][k] is setup s's log throughput in block k. What is left after the setup and
    block means are taken out is each setup's own luck in each block: its server start
    and its slices. Fewer than two setups or blocks leave nothing to estimate (nan, 0).
    """
    setups, blocks = len(rows), len(rows[0]) if rows else 0
    df = (setups - 1) * (blocks - 1)
    if df < 1:
        return (math.nan, 0)
    grand = sum(map(sum, rows)) / (setups * blocks)
    setup_means = [sum(r) / blocks for r in rows]
    block_means = [sum(r[k] for r in rows) / setups for k in range(blocks)]
    residual = sum(
        (rows[s][k] - setup_means[s] - block_means[k] + grand) ** 2
        for s in range(setups)
        for k in range(blocks)
    )
    return (residual / df, df)


def _log_ratio_of_means(
    base: Mapping[int, float], values: Mapping[int, float], blocks: list[int]
) -> float:
    """log(mean of values / mean of base) over the same blocks.

    The ratio every table prints beside the two means; the mean of the blocks' log
    ratios, which the interval's spread is about, differs from it by a second-order
    term (under 0.2% at a 5% spread between blocks).
    """
    return math.log(sum(values[b] for b in blocks) / sum(base[b] for b in blocks))


def _paired(
    base: Mapping[int, float], values: Mapping[int, float], confidence: float
) -> BlockedRatio:
    """Paired on the log scale over the blocks both measured: Student's t, df = blocks - 1."""
    common = sorted(b for b in values if b in base and values[b] > 0 and base[b] > 0)
    diffs = [math.log(values[b]) - math.log(base[b]) for b in common]
    if not diffs:
        return BlockedRatio(math.nan, math.nan, math.nan, 0, math.nan, False)
    d = _log_ratio_of_means(base, values, common)
    if len(diffs) < 2:
        return BlockedRatio(math.exp(d), math.nan, math.nan, 1, math.nan, False)
    se = stdev(diffs) / math.sqrt(len(diffs))
    t = t_quantile(confidence, len(diffs) - 1)
    low, high = math.exp(d - t * se), math.exp(d + t * se)
    return BlockedRatio(math.exp(d), low, high, len(diffs), len(diffs) - 1, False)


def blocked_ratios(
    base: Mapping[int, float],
    setups: Mapping[str, Mapping[int, float]],
    confidence: float = 0.95,
    variance_blocks: int | None = None,
) -> dict[str, BlockedRatio]:
    """Each setup's throughput over the base's, with blocks (repeats) as the pairing unit.

    A block is one server start of every setup, measured together (interleaved slices,
    or back to back in one round), so machine drift and the day's noise are shared
    within it. On log throughput this is a randomized complete block design: a setup's
    ratio is its mean over the base's, and its interval is exp(+-t x se) around it, with
    se from the residual mean square of log throughput pooled over all setups and
    Student's t at df = (setups-1) x (blocks-1). The residual holds start-to-start
    differences as well as the slices' noise, so the interval covers what another set
    of server starts would give (Kalibera and Jones: the interval comes from the
    highest level repeated).

    Setups missing a block the others measured are paired with the base alone (df =
    their blocks - 1). `variance_blocks` = n bases the spread on the first n blocks only:
    Stein's two-stage rule, which keeps the interval's coverage when the number of
    blocks was chosen by looking at the first n (`run --target-ci`).
    """
    present = {name: v for name, v in setups.items() if any(x > 0 for x in v.values())}
    complete = sorted(
        b for b in base if base[b] > 0 and all(v.get(b, 0) > 0 for v in present.values())
    )
    out: dict[str, BlockedRatio] = {}
    pooled_names = [n for n, v in present.items() if set(v) & set(base) <= set(complete)]
    spread_blocks = complete[:variance_blocks] if variance_blocks else complete
    mse, df = (math.nan, 0)
    if pooled_names and len(spread_blocks) >= 2:
        rows = _log_matrix(base, [present[n] for n in pooled_names], spread_blocks)
        mse, df = block_residual(rows)
    for name, values in setups.items():
        if name not in pooled_names or df < 1:
            out[name] = _paired(base, values, confidence)
            continue
        d = _log_ratio_of_means(base, values, complete)
        se = math.sqrt(2 * mse / len(complete))
        t = t_quantile(confidence, df)
        out[name] = BlockedRatio(
            math.exp(d), math.exp(d - t * se), math.exp(d + t * se), len(complete), df, True
        )
    return out


def significant(low: float, high: float, null: float = 1.0) -> bool:
    """True when an interval lies entirely on one side of `null` (1.0 for ratios)."""
    if math.isnan(low) or math.isnan(high):
        return False
    return high < null or low > null


# What a relative value says, in the words every report uses. Only FASTER and SLOWER are
# findings: reports color, mark and list nothing else.
# A StrEnum, so each is its word wherever it is stored, compared or printed.
class Verdict(enum.StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"
    INCONCLUSIVE = "inconclusive"
    NOT_SIGNIFICANT = "not significant"
    NO_INTERVAL = "no interval"


FASTER = Verdict.FASTER
SLOWER = Verdict.SLOWER
SAME = Verdict.SAME
INCONCLUSIVE = Verdict.INCONCLUSIVE
NOT_SIGNIFICANT = Verdict.NOT_SIGNIFICANT
NO_INTERVAL = Verdict.NO_INTERVAL
FINDINGS = (FASTER, SLOWER)


def classify(ratio: float | None, low: float, high: float, min_effect: float = 0.0) -> Verdict:
    """One word for a ratio against 1.0, from its interval and the minimum effect.

    - faster / slower: the interval excludes 1.0 and the ratio is at least `min_effect`
      away from it (0.02 = 2%): a real change big enough to matter;
    - same: the whole interval lies within 1 +- min_effect, an equivalence test (two
      one-sided tests at the interval's confidence), so "same" is shown, not assumed;
    - inconclusive: the interval excludes 1.0, but the change is smaller than
      min_effect and the interval reaches past it: real, of unknown importance;
    - not significant: the interval includes 1.0 and reaches past min_effect;
    - no interval: one repeat, or nothing measured. Never a finding, whatever the ratio.
    """
    if ratio is None or math.isnan(ratio) or math.isnan(low) or math.isnan(high):
        return NO_INTERVAL
    if min_effect > 0 and 1.0 - min_effect <= low and high <= 1.0 + min_effect:
        return SAME
    if significant(low, high):
        if abs(ratio - 1.0) >= min_effect:
            return FASTER if ratio > 1.0 else SLOWER
        return INCONCLUSIVE
    return NOT_SIGNIFICANT


def interval_width(low: float, high: float) -> float:
    """Width of a ratio's interval in ratio units (0.04 = 4 percentage points); inf if unknown."""
    if math.isnan(low) or math.isnan(high):
        return math.inf
    return high - low


def geomean(values: Sequence[float | int | None]) -> float:
    """Geometric mean of positive values: the right average of ratios."""
    xs = _clean(values)
    if not xs:
        return math.nan
    if any(x <= 0 for x in xs):
        raise ValueError("geomean needs positive values")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


@dataclass(frozen=True)
class Relative:
    """A value relative to the base setup, as every report prints it."""

    ratio: float
    low: float
    high: float
    significant: bool = False  # the interval excludes 1.0 (`significant`), judged once


def relative(
    a_values: Sequence[float | int | None],
    b_values: Sequence[float | int | None],
    confidence: float = 0.95,
) -> Relative:
    ratio, low, high = ratio_ci(a_values, b_values, confidence)
    return Relative(ratio, low, high, significant(low, high))


__all__ = [
    "FASTER",
    "FINDINGS",
    "INCONCLUSIVE",
    "NOT_SIGNIFICANT",
    "NO_INTERVAL",
    "SAME",
    "SLOWER",
    "BlockedRatio",
    "Verdict",
    "Relative",
    "block_residual",
    "blocked_ratios",
    "classify",
    "interval_width",
    "geomean",
    "mean",
    "mean_ci",
    "ratio_ci",
    "relative",
    "significant",
    "stdev",
    "t_quantile",
]
