"""Small statistics shared by every report: means with intervals, ratios, geometric means.

Repeats are few (3-10) and machines are noisy, so intervals use Student's t rather than
the normal approximation. A relative value ("setup B runs at 0.82x of base A") comes with
Fieller's interval for the ratio of two independent means: unlike the delta method it
stays correct when the denominator is noisy, and it is asymmetric where it should be.
A ratio is *significant* when its interval excludes 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def _clean(values: Sequence[float | int | None]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def t_quantile(confidence: float, df: float) -> float:
    """Two-sided Student's t critical value (e.g. 4.30 for 95% and 2 degrees of freedom)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    # Imported here: scipy takes a second to load and most commands never need it.
    from scipy import stats as scipy_stats

    return float(scipy_stats.t.ppf(0.5 + confidence / 2, df))


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


def mean_ci(
    values: Sequence[float | int | None], confidence: float = 0.95
) -> tuple[float, float, float]:
    """(mean, low, high): the mean with its Student's t confidence interval.

    With one value the bounds are nan (no spread is known); with none, all are nan.
    """
    xs = _clean(values)
    if not xs:
        return (math.nan, math.nan, math.nan)
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return (m, math.nan, math.nan)
    half = t_quantile(confidence, len(xs) - 1) * stdev(xs) / math.sqrt(len(xs))
    return (m, m - half, m + half)


def ratio_ci(
    a_values: Sequence[float | int | None],
    b_values: Sequence[float | int | None],
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """(ratio, low, high) for mean(a) / mean(b), with Fieller's interval.

    The samples are treated as independent with unequal variances; the degrees of
    freedom are Welch-Satterthwaite's for mean(a) - ratio * mean(b). When the
    denominator's own interval reaches zero the ratio is unbounded and the bounds are
    -inf/inf (not significant). Fewer than two values on either side gives nan bounds.
    """
    a, b = _clean(a_values), _clean(b_values)
    if not a or not b:
        return (math.nan, math.nan, math.nan)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    if mb == 0:
        return (math.nan, math.nan, math.nan)
    r = ma / mb
    if len(a) < 2 or len(b) < 2:
        return (r, math.nan, math.nan)
    va = stdev(a) ** 2 / len(a)  # variance of each mean
    vb = stdev(b) ** 2 / len(b)
    if va == 0 and vb == 0:
        return (r, r, r)
    pooled = va + r * r * vb
    df_terms = va * va / (len(a) - 1) + (r * r * vb) ** 2 / (len(b) - 1)
    df = pooled * pooled / df_terms if df_terms > 0 else float(len(a) + len(b) - 2)
    t = t_quantile(confidence, df)
    # Solve (ma - x*mb)^2 = t^2 (va + x^2 vb) for x.
    qa = mb * mb - t * t * vb
    if qa <= 0:
        return (r, -math.inf, math.inf)
    qb = -2 * ma * mb
    qc = ma * ma - t * t * va
    disc = qb * qb - 4 * qa * qc
    root = math.sqrt(max(disc, 0.0))
    return (r, (-qb - root) / (2 * qa), (-qb + root) / (2 * qa))


def significant(low: float, high: float, null: float = 1.0) -> bool:
    """True when an interval lies entirely on one side of `null` (1.0 for ratios)."""
    if math.isnan(low) or math.isnan(high):
        return False
    return high < null or low > null


# What a relative value says, in the words every report uses.
FASTER = "faster"
SLOWER = "slower"
SAME = "same"
NOT_SIGNIFICANT = "not significant"
NO_INTERVAL = "no interval"


def classify(ratio: float | None, low: float, high: float, min_effect: float = 0.0) -> str:
    """One word for a ratio against 1.0: faster, slower, same, not significant, no interval.

    `min_effect` is the smallest change worth reporting (0.02 = 2%). A ratio closer to 1.0
    than that is "same" even when its interval excludes 1.0: with enough repeats every
    tiny drift becomes significant, and a DBA does not switch allocators for 0.5%.
    Otherwise a ratio is faster or slower only when its interval excludes 1.0.
    """
    if ratio is None or math.isnan(ratio):
        return NO_INTERVAL
    if min_effect > 0 and abs(ratio - 1.0) < min_effect:
        return SAME
    if math.isnan(low) or math.isnan(high):
        return NO_INTERVAL
    if significant(low, high):
        return FASTER if ratio > 1.0 else SLOWER
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

    @property
    def significant(self) -> bool:
        return significant(self.low, self.high)

    def verdict(self, min_effect: float = 0.0) -> str:
        return classify(self.ratio, self.low, self.high, min_effect)

    @property
    def width(self) -> float:
        return interval_width(self.low, self.high)

    def mark(self) -> str:
        """'+' significantly above 1, '-' significantly below, '' otherwise."""
        if not self.significant:
            return ""
        return "+" if self.low > 1.0 else "-"

    def text(self, digits: int = 2) -> str:
        if math.isnan(self.ratio):
            return "-"
        body = f"{self.ratio:.{digits}f}x"
        if not math.isnan(self.low):
            body += f" [{_bound(self.low, digits)}, {_bound(self.high, digits)}]"
        return body + ("*" if self.significant else "")


def _bound(x: float, digits: int) -> str:
    return "inf" if math.isinf(x) and x > 0 else "-inf" if math.isinf(x) else f"{x:.{digits}f}"


def relative(
    a_values: Sequence[float | int | None],
    b_values: Sequence[float | int | None],
    confidence: float = 0.95,
) -> Relative:
    return Relative(*ratio_ci(a_values, b_values, confidence))


__all__ = [
    "FASTER",
    "NOT_SIGNIFICANT",
    "NO_INTERVAL",
    "SAME",
    "SLOWER",
    "Relative",
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
