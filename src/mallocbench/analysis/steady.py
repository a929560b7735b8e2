"""Steady state from per-second throughput: when to stop warming, and whether it held.

Every server start re-creates a warmup ramp (point-query at 8 clients: ~55k to ~100k QPS
over ~4 s), so a fixed warmup is a guess (Barrett et al., "Virtual Machine Warmup Blows
Hot and Cold", OOPSLA 2017). Three questions, answered from per-second QPS alone:

- `WarmupDetector`, fed one second at a time while warming: has the series stopped
  trending? Over the last `window` seconds the least-squares slope must be both
  statistically indistinguishable from zero (two-sided t-test, `alpha`) *and* small in
  practice (below `max_slope` of the window's mean per second). The t-test alone would
  call any ramp steady once the host is noisy enough to hide it, the practical bound
  alone would never be met on a noisy host; together they stop when what is left of
  the ramp is lost in the per-second noise, which is what the acceptance criterion
  below asks. A slope test on a short window was preferred over a changepoint search
  (PELT, as Barrett et al.) because it runs in constant time per second, needs no
  penalty tuning, and its one assumption (a ramp is monotone near its end) holds for
  the ramps measured here. What no window of past seconds can see is a step up after
  a flat stretch (MyRocks filling its block cache under a noisy host did that): the
  offline check below reports it on the measured part.
- `check_stability`, on a measured series after the fact: does it still trend, or does
  its level shift (the 115k-for-6-s-then-85k pattern seen in read-only steps)? Both
  tests need significance *and* an effect of at least `effect` (5%): a shift of 5%
  over 40% of a cell moves the cell's mean by the 2% that experiments typically call
  "same", and seconds on these hosts are autocorrelated (interference comes in
  episodes; lag-1 autocorrelation 0.3-0.7 in the recorded series), which makes a
  t-test alone too eager on long series.
- `first_second_check`: the issue's acceptance criterion, is the first measured second
  within the noise of the last ones?

Seconds are assumed equally spaced (sysbench reports once a second), so the time axis
is the sample index.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

# Online detector defaults, checked against recorded ramps (tests/fixtures/ramps.json):
# windows of 4-8 s and bounds of 1-3%/s ended warming before the same ramps, longer
# windows only cost every warmup more seconds. 5 s spans the end of a ~4 s ramp and
# leaves the slope's t-test 3 degrees of freedom (with 1 or 2 its critical value, 12.7
# or 4.3, rejects almost nothing).
WINDOW_S = 5
WARMUP_ALPHA = 0.05
# 2%/s is 8% across a 5 s window, about three times the 2-3% CV of a warm second: a
# flat series passes most windows, a ramp of 10%/s (55k -> 100k in 4 s) never does.
MAX_SLOPE_PER_S = 0.02
DEFAULT_MAX_WARMUP_S = 30.0

# Offline check defaults.
STABILITY_ALPHA = 0.01
STABILITY_EFFECT = 0.05
MIN_SEGMENT_S = 3  # a level shift must last this long: a one-second dip is noise
MIN_JUDGED_S = 2 * MIN_SEGMENT_S


@functools.lru_cache(maxsize=64)
def _t_critical(alpha: float, df: int) -> float:
    # Imported here, from scipy.special (what scipy.stats.t calls; scipy.stats takes over
    # a second more to load): only some callers need it.
    from scipy.special import stdtrit

    return float(stdtrit(df, 1 - alpha / 2))


def _t_two_sided_p(t: float, df: float) -> float:
    from scipy.special import stdtr

    return float(2 * stdtr(df, -abs(t)))


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _variance(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def _t_statistic(estimate: float, se: float) -> float:
    # Without noise (identical seconds, a perfect line) any difference is certain and no
    # difference is nothing: infinite or zero, never a division by zero.
    if se > 0:
        return estimate / se
    return 0.0 if estimate == 0 else math.copysign(math.inf, estimate)


@dataclass(frozen=True)
class Trend:
    """The least-squares line through equally spaced values."""

    n: int
    mean: float
    slope: float  # per second
    se: float  # standard error of the slope
    t: float
    sse: float  # squared residuals around the line
    p_value: float  # two-sided, of the slope's t-test

    @property
    def relative_slope(self) -> float:
        """Slope as a fraction of the mean per second (0 when the mean is 0)."""
        return self.slope / self.mean if self.mean else 0.0


def trend(values: Sequence[float]) -> Trend:
    """Slope t-test on `values` (at least 3), x being 0, 1, 2, ..."""
    n = len(values)
    if n < 3:
        raise ValueError(f"a trend needs at least 3 values, not {n}")
    x_mean = (n - 1) / 2
    y_mean = _mean(values)
    sxx = sum((i - x_mean) ** 2 for i in range(n))
    slope = sum((i - x_mean) * (y - y_mean) for i, y in enumerate(values)) / sxx
    sse = sum((y - (y_mean + slope * (i - x_mean))) ** 2 for i, y in enumerate(values))
    se = math.sqrt(max(sse, 0.0) / (n - 2) / sxx)
    t = _t_statistic(slope, se)
    p_value = _t_two_sided_p(t, n - 2) if math.isfinite(t) else 0.0
    return Trend(n=n, mean=y_mean, slope=slope, se=se, t=t, sse=sse, p_value=p_value)


class WarmupDetector:
    """Says, one second at a time, when warming may stop.

    `min_s` seconds are always warmed; at `max_s` warming stops whether steady or not
    (`steady` then stays False, and the cell records that the maximum was hit).
    """

    def __init__(
        self,
        min_s: float,
        max_s: float = DEFAULT_MAX_WARMUP_S,
        window: int = WINDOW_S,
        alpha: float = WARMUP_ALPHA,
        max_slope: float = MAX_SLOPE_PER_S,
    ) -> None:
        if window < 3:
            raise ValueError(f"window must be at least 3 seconds, not {window}")
        if max_s < min_s:
            raise ValueError(f"max_s ({max_s}) must not be below min_s ({min_s})")
        self.min_s = min_s
        self.max_s = max_s
        self.window = window
        self.alpha = alpha
        self.max_slope = max_slope
        # Looked up now, before the load starts: the first lookup imports scipy, which
        # would otherwise hold up the reading of sysbench's seconds for a second or two.
        self.critical_t = _t_critical(alpha, window - 2)
        self.values: list[float] = []
        self.elapsed_s = 0.0
        self.steady = False
        self.done = False
        self.last_trend: Trend | None = None

    def add(self, qps: float, seconds: float = 1.0) -> bool:
        """Feed one interval; True once warming should stop (steady or at the maximum)."""
        if self.done:
            return True
        self.values.append(qps)
        self.elapsed_s += seconds
        if len(self.values) >= self.window and self.elapsed_s >= self.min_s:
            self.last_trend = trend(self.values[-self.window :])
            if self._flat(self.last_trend):
                self.steady = True
                self.done = True
        if self.elapsed_s >= self.max_s:
            self.done = True
        return self.done

    def _flat(self, window: Trend) -> bool:
        if window.mean <= 0:
            return False  # no throughput yet is not a steady state
        significant = abs(window.t) >= self.critical_t
        return not significant and abs(window.relative_slope) < self.max_slope


class Held(enum.Enum):
    """What a measured series did, as `check_stability` found it."""

    TOO_SHORT = "too short"  # too few seconds to judge
    IDLE = "idle"  # no throughput to judge
    SHIFT = "level shift"
    TREND = "trend"
    LEVEL = "level"  # no trend or level shift


@dataclass(frozen=True)
class Stability:
    """Verdict on a measured series: did the level hold while it was measured?"""

    stable: bool
    held: Held
    n: int
    judged: bool = True  # False: too few seconds to tell (then stable is True)
    slope_pct_per_s: float | None = None  # least-squares slope, % of the mean per second
    drift_pct: float | None = None  # the line's change from first to last second, % of mean
    shift_pct: float | None = None  # the strongest level shift, % of the level before it
    shift_at_s: int | None = None  # seconds measured before that shift

    def to_dict(self, reason: str) -> dict[str, Any]:
        """As a cell stores it, with `reason` (run.measure.stability_reason) in its place."""
        record = asdict(self)
        del record["held"]
        return {"stable": record.pop("stable"), "reason": reason, **record}


def _welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(t, degrees of freedom) of Welch's test of mean(b) - mean(a)."""
    va, vb = _variance(a) / len(a), _variance(b) / len(b)
    t = _t_statistic(_mean(b) - _mean(a), math.sqrt(va + vb))
    if va + vb == 0:
        return t, float(len(a) + len(b) - 2)
    return t, (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))


@dataclass(frozen=True)
class _Shift:
    at: int  # seconds before the shift
    relative: float  # (after - before) / before
    sse: float  # squared residuals around the two levels


def _squares(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs)


def _level_shift(
    values: Sequence[float], alpha: float, effect: float, min_segment: int
) -> _Shift | None:
    """The strongest split of `values` into two levels that differ beyond noise and `effect`.

    Every split leaving `min_segment` seconds on each side is tried; Bonferroni's
    correction over the number of splits keeps the scan's false-alarm rate at `alpha`
    (conservative, since neighbouring splits are strongly correlated).
    """
    n = len(values)
    splits = range(min_segment, n - min_segment + 1)
    best: tuple[float, _Shift] | None = None
    for k in splits:
        before, after = values[:k], values[k:]
        level = _mean(before)
        if level <= 0:
            continue
        shift = (_mean(after) - level) / level
        if abs(shift) < effect:
            continue
        t, df = _welch(before, after)
        p = _t_two_sided_p(t, df) if math.isfinite(t) else 0.0
        if p * len(splits) < alpha and (best is None or abs(t) > best[0]):
            best = (abs(t), _Shift(k, shift, _squares(before) + _squares(after)))
    return best[1] if best else None


def check_stability(
    qps: Sequence[float | None],
    alpha: float = STABILITY_ALPHA,
    effect: float = STABILITY_EFFECT,
    min_segment: int = MIN_SEGMENT_S,
) -> Stability:
    """Does a measured per-second series still trend, or shift its level?

    Unstable needs a significant trend whose drift over the series is at least `effect`
    of the mean, or a level shift of at least `effect` between two stretches of at least
    `min_segment` seconds (significant after correction for the splits tried).
    """
    values = [float(v) for v in qps if v is not None and math.isfinite(v)]
    n = len(values)
    if n < max(MIN_JUDGED_S, 2 * min_segment):
        return Stability(True, Held.TOO_SHORT, n, judged=False)
    line = trend(values)
    if line.mean <= 0:
        return Stability(True, Held.IDLE, n, judged=False)
    slope_pct = 100 * line.relative_slope
    drift = line.relative_slope * (n - 1)
    trending = abs(drift) >= effect and line.p_value < alpha
    shift = _level_shift(values, alpha, effect, min_segment)
    # A step also tilts the line and a trend also splits into two levels: the model that
    # leaves the smaller residuals names the problem.
    if shift is not None and (not trending or shift.sse <= line.sse):
        held = Held.SHIFT
    else:
        held = Held.TREND if trending else Held.LEVEL
    return Stability(
        stable=shift is None and not trending,
        held=held,
        n=n,
        slope_pct_per_s=slope_pct,
        drift_pct=100 * drift,
        shift_pct=100 * shift.relative if shift else None,
        shift_at_s=shift.at if shift else None,
    )


@dataclass(frozen=True)
class FirstSecond:
    first: float
    reference: float  # mean of the last seconds
    sd: float  # standard deviation of the warm seconds (every second but the first)
    z: float  # the tolerance in standard deviations

    @property
    def deviation(self) -> float:
        """How many standard deviations the first second lies from the reference."""
        if self.sd > 0:
            return abs(self.first - self.reference) / self.sd
        return 0.0 if self.first == self.reference else math.inf

    @property
    def within(self) -> bool:
        return self.deviation <= self.z


def first_second_check(qps: Sequence[float], last: int = 5, z: float = 3.0) -> FirstSecond:
    """Is the first measured second within `z` sd of the mean of the `last` seconds?

    The sd is that of every second after the first (the warm seconds), so a ramp in the
    first second does not widen its own tolerance.
    """
    values = [float(v) for v in qps]
    if len(values) < last + 1 or len(values) < 3:
        raise ValueError(f"need at least {max(last + 1, 3)} seconds, got {len(values)}")
    warm = values[1:]
    return FirstSecond(
        first=values[0],
        reference=_mean(values[-last:]),
        sd=math.sqrt(_variance(warm)),
        z=z,
    )
