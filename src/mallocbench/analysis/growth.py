"""Growth over a replay: each setup's heap RSS and the program's live bytes over the
trace's time, each with its slope and 95% interval (the soak's fit_slope), and what they
say together: the allocator retains (RSS minus live grows), the program holds more (live
grows, the allocator's share does not), RSS grows with neither share shown to, RSS stays
flat, or nothing the intervals support. Each reading of growth needs RSS's own interval to
show it: the live bytes are the program's, the same under every allocator, so their
growth says nothing of an allocator whose RSS is not told from flat.

A trend counts as growth only when its interval excludes zero and it adds at least
min_effect of the setup's mean RSS over the trace's span; it is flat when its whole
interval adds less than that either way (an equivalence test, as the soak's plateau).
Everything else is not distinguishable from flat and is never read as a finding.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from mallocbench.analysis.soak import Slope, fit_slope

# Bin widths for the interval as fractions of the series' span, finest first: the soak's
# 10 s to 10 min over a two-hour series, in proportion, for a replay sampled every
# 10 ms and thinned to about 2000 points (the finest bin holds about 7).
SCALE_FRACTIONS = (1 / 300, 1 / 100, 1 / 30, 1 / 12)


class Trend(enum.Enum):
    GROWING = "growing"
    SHRINKING = "shrinking"
    FLAT = "flat"
    UNCLEAR = "unclear"  # neither growth nor flatness is supported


class Reading(enum.Enum):
    RETAINS = "retains"  # RSS grows and RSS minus live grows: fragmentation or caching
    HOLDS_MORE = "holds more"  # RSS grows and live grows, the allocator's share does not
    GROWS = "grows"  # RSS grows; neither live nor RSS minus live is shown to
    FLAT = "flat"  # RSS flat within min_effect over the span
    SHRINKS = "shrinks"
    UNCLEAR = "unclear"  # RSS's slope not distinguishable from flat


@dataclass(frozen=True)
class Line:
    """One series' slope (bytes per second of the trace) and what it is."""

    slope: Slope | None
    trend: Trend


@dataclass(frozen=True)
class SetupGrowth:
    setup: str
    rss: Line
    live: Line  # the live bytes of this setup's replay: the program's, on the same clock
    retained: Line  # RSS minus live: what the allocator holds beyond the program's blocks
    reading: Reading
    mean_rss: float


@dataclass(frozen=True)
class Growth:
    """Per setup (the base first) over `span_s` seconds of the trace."""

    setups: tuple[SetupGrowth, ...]
    span_s: float
    min_effect: float

    def setup(self, name: str) -> SetupGrowth | None:
        return next((s for s in self.setups if s.setup == name), None)


def trend(slope: Slope | None, span_s: float, level: float, min_effect: float) -> Trend:
    """GROWING or SHRINKING when the interval excludes zero and the change over the span
    reaches min_effect of `level`; FLAT when the whole interval stays within it."""
    if slope is None or span_s <= 0 or level <= 0:
        return Trend.UNCLEAR
    bound = min_effect * level / span_s
    if bound > 0 and -bound <= slope.low and slope.high <= bound:
        return Trend.FLAT
    if slope.low > 0 and slope.per_s >= bound:
        return Trend.GROWING
    if slope.high < 0 and -slope.per_s >= bound:
        return Trend.SHRINKING
    return Trend.UNCLEAR


def reading(rss: Trend, live: Trend, retained: Trend) -> Reading:
    if rss is Trend.GROWING:
        if retained is Trend.GROWING:
            return Reading.RETAINS
        return Reading.HOLDS_MORE if live is Trend.GROWING else Reading.GROWS
    if rss is Trend.FLAT:
        return Reading.FLAT
    return Reading.SHRINKS if rss is Trend.SHRINKING else Reading.UNCLEAR


def _line(series: list[tuple[float, float]], level: float, min_effect: float) -> Line:
    span = series[-1][0] - series[0][0] if series else 0.0
    slope = fit_slope(series, [span * f for f in SCALE_FRACTIONS]) if span > 0 else None
    return Line(slope, trend(slope, span, level, min_effect))


# A replayer's sampler starved by a loaded host catches up with samples taken back to
# back: one instant, several samples, which would weigh that instant several times. On
# the trace's clock a stretch with no call is one instant too, however long it lasted.
MIN_SAMPLE_GAP_S = 0.001


def trace_clock(
    samples: Sequence[Sequence[float]], speed: float, duration_s: float | None
) -> list[float]:
    """Each sample's time on the trace's clock. The replayer gives it as a sample's fourth
    value (the recorded time of the latest call made). A sample stored before that has
    the replay's seconds: times `speed` while the replay kept up; one that fell behind
    (its samples run past the trace's span at that speed) ran its calls later than
    recorded, and its seconds are stretched onto the span, the nearest a curve without
    the trace's times comes to its clock."""
    if samples and all(len(s) >= 4 for s in samples):
        return [float(s[3]) for s in samples]
    scale = speed
    last = float(samples[-1][0]) if samples else 0.0
    if duration_s and last * speed > duration_s:
        scale = duration_s / last
    return [float(s[0]) * scale for s in samples]


def _spaced(points: Sequence[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """The points with those within MIN_SAMPLE_GAP_S of the last one kept left out."""
    kept: list[tuple[float, float, float]] = []
    for point in points:
        if not kept or point[0] - kept[-1][0] >= MIN_SAMPLE_GAP_S:
            kept.append(point)
    return kept


def setup_growth(
    setup: str,
    samples: Sequence[Sequence[float]],
    speed: float,
    min_effect: float,
    duration_s: float | None = None,
) -> SetupGrowth | None:
    """From one replay's samples [replay s, heap RSS, live(, trace s)] at the recorded
    timing, on the trace's clock (trace_clock)."""
    if len(samples) < 3 or any(len(s) < 3 for s in samples):  # a replay stored before live
        return None
    clock = trace_clock(samples, speed, duration_s)
    points = _spaced([(t, float(s[1]), float(s[2])) for t, s in zip(clock, samples, strict=True)])
    if len(points) < 3:
        return None
    mean_rss = sum(p[1] for p in points) / len(points)
    rss = _line([(t, r) for t, r, _ in points], mean_rss, min_effect)
    live = _line([(t, v) for t, _, v in points], mean_rss, min_effect)
    retained = _line([(t, r - v) for t, r, v in points], mean_rss, min_effect)
    return SetupGrowth(
        setup, rss, live, retained, reading(rss.trend, live.trend, retained.trend), mean_rss
    )


def analyze_growth(
    curves: Sequence[tuple[str, Sequence[Sequence[float]]]],
    timing: str,
    speed: float,
    min_effect: float,
    duration_s: float | None = None,
) -> Growth | None:
    """Every setup's growth from its replay's samples; None when the replay's clock is
    not the trace's (--timing none runs flat out, so its seconds are not the program's).
    The span is the trace's recorded one (`duration_s`, its last call's time) where the
    trace says it, whatever the replays' wall time."""
    if timing != "recorded":
        return None
    found = [
        g
        for name, samples in curves
        if (g := setup_growth(name, samples, speed, min_effect, duration_s))
    ]
    if not found:
        return None
    if duration_s and duration_s > 0:
        span = duration_s
    else:
        clocks = [trace_clock(s, speed, None) for _, s in curves if s]
        span = max(c[-1] - c[0] for c in clocks)
    return Growth(tuple(found), span, min_effect)
