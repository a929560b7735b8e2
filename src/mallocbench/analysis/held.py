"""Whether a prediction held on the server: a watched stretch against the recorded window.

Both sides are per-second samples of one process (RSS) or one counter's rate (QPS),
which follow each other closely from one second to the next: taken one by one they
would give an interval far too narrow. Each side is cut into batches of consecutive
samples and the ratio of means is taken over the batch means (batch means, a standard
remedy for serial correlation), with stats.ratio_ci's log-scale interval.

A prediction held when the whole interval lies within the prediction's tolerance, and
did not hold when the whole interval lies outside it; otherwise the watch was too short
or too noisy to say (never a finding).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from mallocbench.analysis.stats import ratio_ci

BATCHES = 8
MIN_PER_BATCH = 2
DEFAULT_TOLERANCE = 0.10


class Held(enum.Enum):
    HELD = enum.auto()
    NOT_HELD = enum.auto()
    UNDECIDED = enum.auto()  # the interval reaches both in and out of the tolerance
    NO_INTERVAL = enum.auto()  # too few samples on a side


@dataclass(frozen=True)
class WindowRatio:
    """mean(watched) / mean(recorded), its 95% interval and the samples behind it."""

    point: float
    low: float
    high: float
    watched: int
    recorded: int

    @property
    def known(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


def batch_means(values: Sequence[float], batches: int = BATCHES) -> list[float]:
    """Means of up to `batches` runs of consecutive values, each of at least
    MIN_PER_BATCH (the last takes the remainder)."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    count = min(batches, len(xs) // MIN_PER_BATCH)
    if count < 1:
        return []
    size = len(xs) // count
    out = []
    for i in range(count):
        part = xs[i * size : (i + 1) * size] if i < count - 1 else xs[i * size :]
        out.append(sum(part) / len(part))
    return out


def window_ratio(watched: Sequence[float], recorded: Sequence[float]) -> WindowRatio:
    ratio, low, high = ratio_ci(batch_means(watched), batch_means(recorded))
    return WindowRatio(ratio, low, high, len(watched), len(recorded))


def rates(samples: Sequence[tuple[float, int | None]], own_per_sample: int = 1) -> list[float]:
    """Per-second rates of a counter from (seconds, value) samples, less the statements
    the sampler itself sent between two samples; a gap in the counter ends nothing, it
    is skipped."""
    out = []
    for (t0, v0), (t1, v1) in zip(samples, samples[1:], strict=False):
        if v0 is None or v1 is None or t1 <= t0 or v1 < v0:
            continue
        out.append(max(0.0, (v1 - v0 - own_per_sample) / (t1 - t0)))
    return out


def band(predicted: tuple[float, float, float], tolerance: float) -> tuple[float, float]:
    """What counts as the prediction: its interval, and at least `tolerance` either side
    of its point (a server's load moves more than a replay's)."""
    point, low, high = predicted
    low = point if math.isnan(low) else low
    high = point if math.isnan(high) else high
    return min(low, point * (1 - tolerance)), max(high, point * (1 + tolerance))


def held(ratio: WindowRatio, within: tuple[float, float]) -> Held:
    """Whether the watched ratio shows the prediction: its interval inside `within`."""
    if not ratio.known:
        return Held.NO_INTERVAL
    low, high = within
    if low <= ratio.low and ratio.high <= high:
        return Held.HELD
    if ratio.high < low or ratio.low > high:
        return Held.NOT_HELD
    return Held.UNDECIDED


@dataclass(frozen=True)
class Against:
    """A watch of the server against its recorded window: RSS and QPS ratios, the
    predicted RSS ratio and whether it held, and whether the load was the recorded
    one (QPS within the tolerance of 1)."""

    rss: WindowRatio
    predicted: tuple[float, float, float]  # point, low, high
    within: tuple[float, float]  # what counts as the prediction (band)
    tolerance: float
    rss_held: Held
    qps: WindowRatio | None
    same_load: Held | None
    watched_s: float


def against(
    watched_rss: Sequence[float],
    recorded_rss: Sequence[float],
    watched_qps: Sequence[float] | None,
    recorded_qps: Sequence[float] | None,
    predicted: tuple[float, float, float],
    tolerance: float,
    watched_s: float,
) -> Against:
    rss = window_ratio(watched_rss, recorded_rss)
    qps = None
    if watched_qps and recorded_qps:
        qps = window_ratio(watched_qps, recorded_qps)
    within = band(predicted, tolerance)
    return Against(
        rss=rss,
        predicted=predicted,
        within=within,
        tolerance=tolerance,
        rss_held=held(rss, within),
        qps=qps,
        same_load=held(qps, band((1.0, 1.0, 1.0), tolerance)) if qps is not None else None,
        watched_s=watched_s,
    )
