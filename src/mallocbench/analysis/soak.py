"""Soak arithmetic: how fast a server's RSS grows, where it levels off, when it meets its cap.

Pure functions on recorded series, each a list of (t seconds, RSS bytes) from one server
lifetime, t counted from the server's start. A restart (a resumed soak, a server replaced
after a crash) begins a new heap, so lifetimes are never joined: every lifetime is fitted
on its own, and a setup's headline figures come from its longest lifetime, the one that
says most about growth over time (`SetupSoak.main`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mallocbench.model.results import STATUS_CRASHED, STATUS_OOM, Cell, RunResult, SessionInfo

Series = Sequence[tuple[float, float]]

# Widths (seconds) of the bins whose means the interval is computed from; see fit_slope.
SCALES_S = (10.0, 60.0, 180.0, 600.0, 1800.0)
MIN_BINS = 6  # a scale needs this many bins to say anything about persistence at that scale
FALLBACK_MIN_BINS = 3  # a series too short for any scale still gets its finest one
LEVEL_WINDOW_S = 60.0  # "RSS now": the mean over the series' last minute
# The two-segment fit's break is searched from 1% to 2/3 of the way into a lifetime, in
# this many steps; a lifetime shorter than MIN_PLATEAU_SPAN_S is too short to tell.
BREAK_FROM, BREAK_TO = 0.01, 2 / 3
BREAK_GRID_POINTS = 67
BREAK_FINE_POINTS = 41
BREAK_MAX_POINTS = 3600  # points the broken line is fitted on at most (bin means beyond)
MIN_PLATEAU_SPAN_S = 120.0
# A plateau's 95% upper bound of growth may add at most this share of RSS over as long
# as the lifetime has run.
PLATEAU_MAX_RISE = 0.05
HOUR = 3600.0
MiB = float(1 << 20)


@dataclass(frozen=True)
class Slope:
    """A least-squares slope in bytes per second with its 95% interval.

    `low` may be -inf and `high` inf: the series wandered too slowly, for its length, to
    bound the slope at all.
    """

    per_s: float
    low: float
    high: float
    start_s: float  # the window fitted
    end_s: float
    samples: int

    def mib_per_hour(self) -> tuple[float, float, float]:
        scale = HOUR / MiB
        return self.per_s * scale, self.low * scale, self.high * scale

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def growing(self) -> bool:
        """The whole interval is above zero: growth beyond what noise explains."""
        return self.low > 0


@dataclass(frozen=True)
class Projection:
    """Seconds until RSS reaches the cap at the fitted slope, with the slope's interval.

    `high` is inf when the slope's interval reaches zero (at that end RSS never gets
    there); `seconds` is inf when the slope itself is not positive.
    """

    seconds: float
    low: float
    high: float


def _arrays(series: Series) -> tuple[np.ndarray, np.ndarray]:
    points = sorted((float(t), float(v)) for t, v in series if v is not None)
    if not points:
        return np.empty(0), np.empty(0)
    data = np.asarray(points, dtype=float)
    return data[:, 0], data[:, 1]


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Slope and residuals of the least-squares line."""
    xc = x - x.mean()
    sxx = float(xc @ xc)
    slope = float(xc @ (y - y.mean())) / sxx
    return slope, y - y.mean() - slope * xc


def bin_means(t: np.ndarray, y: np.ndarray, width: float) -> tuple[np.ndarray, np.ndarray]:
    """Means of time and value over consecutive `width`-second bins; empty bins (the gaps
    between segments) are left out."""
    index = np.floor((t - t[0]) / width).astype(int)
    counts = np.bincount(index)
    kept = counts > 0
    return (
        np.bincount(index, weights=t)[kept] / counts[kept],
        np.bincount(index, weights=y)[kept] / counts[kept],
    )


def _effective(resid: np.ndarray) -> float | None:
    """The effective count of autocorrelated residuals under an AR(1) model; None when
    they are all zero (a perfect fit).

    The lag-1 autocorrelation r is raised by (1 + 4r)/n first: on short series it comes
    out biased low (a fitted line or mean takes up part of a slow wander), which is what
    makes such intervals too narrow.
    """
    n = len(resid)
    ssr = float(resid @ resid)
    if ssr == 0:
        return None
    r1 = float(resid[:-1] @ resid[1:]) / ssr
    r1 = min(max(r1 + (1 + 4 * r1) / n, 0.0), 1.0)
    return n * (1 - r1) / (1 + r1)


def _t_half(se: float, df: float) -> float:
    # Imported here (scipy takes a second to load and `run --dry-run` never needs it),
    # from scipy.special, which loads in a fraction of scipy.stats' time.
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.975)) * se


def _scale_interval(t: np.ndarray, y: np.ndarray, width: float) -> tuple[float, float] | None:
    """The slope's 95% interval from `width`-second bin means; None when this scale cannot
    say (under 3 bins, or too few effective steps for either model).

    Trend plus stationary noise first: an ordinary t interval with the bin count cut to
    its effective value. When that leaves 3 or fewer (the residuals wander like a random
    walk: RSS that steps up and never comes back), the trend model does not hold, and the
    interval is that of a random walk's drift instead: the t interval of the mean step
    between consecutive bins, again with its count cut for autocorrelation.
    """
    tt, yy = bin_means(t, y, width)
    n = len(tt)
    if n < FALLBACK_MIN_BINS:
        return None
    slope, resid = _ols(tt, yy)
    effective = _effective(resid)
    if effective is None:
        return slope, slope
    if effective > 3:
        xc = tt - tt.mean()
        half = _t_half(math.sqrt(float(resid @ resid) / (effective - 2) / float(xc @ xc)),
                       effective - 2)  # fmt: skip
        return slope - half, slope + half
    dt = np.diff(tt)
    rates = np.diff(yy) / dt
    drift = float(yy[-1] - yy[0]) / float(tt[-1] - tt[0])
    steps = rates - rates.mean()
    effective = _effective(steps) if len(steps) >= FALLBACK_MIN_BINS else 0.0
    if effective is None:
        return drift, drift
    if effective <= 2:
        return None
    half = _t_half(math.sqrt(float(steps @ steps) / (len(steps) - 1) / effective), effective - 1)
    return drift - half, drift + half


def fit_slope(series: Series, scales: Sequence[float] = SCALES_S) -> Slope | None:
    """The RSS slope with a 95% interval that holds up under autocorrelated samples.

    Per-second RSS is strongly autocorrelated (arenas grow in steps, caches fill and
    evict in waves), so the ordinary least-squares interval, which counts every second as
    an independent point, is far too narrow: on a trend plus AR(1) noise with a 100 s
    memory it covers the true slope about one time in ten. Fitting per-minute means alone
    is not enough either when the noise has a slower component than a minute.

    So the point estimate is the least-squares slope over every sample, and the interval
    spans those computed at several time scales (bins of 10 s to 30 min, each scale with
    at least 6 bins; the finest with 3 when the series is short), each an interval on the
    bin means whose sample size is cut to the effective one an AR(1) model of the
    residuals gives (Santer et al., 2000), or a random walk's drift interval where the
    residuals wander too much for a trend model (`_scale_interval`). Whatever persists at
    a scale widens the interval there, and no scale's persistence is ignored; a scale
    with too few effective bins for either model says nothing and is left out.

    On synthetic series (tests/test_soak.py) it covers the true slope about 95% of the
    time under AR(1) noise with memories of 10-500 s over 10 min to 2 h, and 85-95% under
    a mixture of a fast and a slow memory or random level shifts, where per-second OLS
    covers 2-35%. Short series with slow noise are its weak spot (a mixture over 10
    minutes: about 80%). The interval is unbounded (-inf, inf) when no scale can say.

    `scales` are the bin widths, finest first: a soak's per-second samples use SCALES_S; a
    series sampled faster and shorter (a replay's) gives widths in proportion to its span.

    None for fewer than three distinct instants or too short a series for 3 bins of the
    finest width.
    """
    t, y = _arrays(series)
    if len(t) < 3 or float(np.ptp(t)) < (FALLBACK_MIN_BINS - 1) * scales[0]:
        return None
    slope, _ = _ols(t, y)
    fits = [(_scale_interval(t, y, w), len(bin_means(t, y, w)[0])) for w in scales]
    usable = [iv for iv, n in fits if iv is not None and n >= MIN_BINS]
    if not usable:
        usable = [iv for iv, _ in fits if iv is not None][:1]
    if not usable:
        return Slope(slope, -math.inf, math.inf, float(t[0]), float(t[-1]), len(t))
    low = min(slope, *(iv[0] for iv in usable))
    high = max(slope, *(iv[1] for iv in usable))
    return Slope(slope, low, high, float(t[0]), float(t[-1]), len(t))


def window(series: Series, start_s: float) -> list[tuple[float, float]]:
    return [(t, v) for t, v in series if t >= start_s and v is not None]


def _broken_line_sse(t: np.ndarray, y: np.ndarray, at: float) -> float:
    """Squared error of the continuous line that bends at `at`, fitted by least squares."""
    design = np.column_stack([np.ones_like(t), t - t[0], np.maximum(0.0, t - at)])
    coefficients, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coefficients
    return float(resid @ resid)


def bend_point(series: Series) -> float | None:
    """Where the best two-segment fit bends: the break of the continuous broken line
    (least squares) that fits the series best, searched from 1% to 2/3 of the way in (so
    the part after it is long enough to fit a slope on), on a grid of 1% steps and then
    in 20ths of a step around the grid's best. None for too short a series."""
    t, y = _arrays(series)
    if len(t) < 3 or float(np.ptp(t)) < MIN_PLATEAU_SPAN_S:
        return None
    first, span = float(t[0]), float(t[-1] - t[0])
    # Long series are fitted on bin means: a day of seconds would cost minutes here.
    tt, yy = bin_means(t, y, max(1.0, span / BREAK_MAX_POINTS))
    grid = first + np.linspace(BREAK_FROM, BREAK_TO, BREAK_GRID_POINTS) * span
    best = min(grid, key=lambda at: _broken_line_sse(tt, yy, at))
    step = float(grid[1] - grid[0])
    fine = np.linspace(max(grid[0], best - step), min(grid[-1], best + step), BREAK_FINE_POINTS)
    return float(min(fine, key=lambda at: _broken_line_sse(tt, yy, at)))


def until(series: Series, end_s: float) -> list[tuple[float, float]]:
    return [(t, v) for t, v in series if t <= end_s and v is not None]


def levels_off(part: Series, slope: Slope | None, horizon_s: float) -> bool:
    """The part rules out all but a small growth: the upper end of its slope's 95%
    interval, held for `horizon_s` (as long again as the lifetime ran), would add at most
    PLATEAU_MAX_RISE of the part's mean RSS.

    An equivalence test, as min_effect is for throughput: a rise that is certain but tiny
    (RSS stepping up 1 MiB in minutes, nearly noise-free) still levels off, while a part
    too short or too noisy for a narrow interval shows nothing either way.
    """
    if slope is None or not part:
        return False
    mean = sum(v for _, v in part) / len(part)
    return slope.high * horizon_s <= PLATEAU_MAX_RISE * mean


def find_plateau(series: Series) -> float | None:
    """The time growth levelled off: the series' start or the break of a two-segment fit.

    RSS levelled off from its first sample when the whole series `levels_off` (at its
    slope's upper end, RSS would grow at most 5% in as long again); else at the fit's
    break (`bend_point`) when the part after it levels off. Otherwise RSS still grows,
    or the series is too short or too noisy to tell: None, as for one under 2 minutes.
    """
    t, _ = _arrays(series)
    at = bend_point(series)
    if at is None:
        return None
    span = float(t[-1] - t[0])
    if levels_off(series, fit_slope(series), span):
        return float(t[0])
    tail = window(series, at)
    return at if levels_off(tail, fit_slope(tail), span) else None


def time_to_cap(level_bytes: float, slope: Slope, cap_bytes: float) -> Projection:
    """When RSS, now at `level_bytes`, would reach the cap at the fitted slope."""
    gap = cap_bytes - level_bytes
    if gap <= 0:
        return Projection(0.0, 0.0, 0.0)

    def at(rate: float) -> float:
        return gap / rate if rate > 0 else math.inf

    return Projection(at(slope.per_s), at(slope.high), at(slope.low))


def first_reaching(series: Series, level: float) -> float | None:
    """The first time the series is at or above `level`."""
    return next((t for t, v in sorted(series) if v is not None and v >= level), None)


def level_at_end(series: Series) -> float | None:
    """Mean over the series' last minute: RSS now, without one sample's noise."""
    t, y = _arrays(series)
    if not len(t):
        return None
    return float(y[t >= t[-1] - LEVEL_WINDOW_S].mean())


@dataclass(frozen=True)
class SeriesFit:
    """One lifetime's RSS figures.

    `slope` is fitted after the plateau when there is one, else after the break of the
    two-segment fit (the latest change of rate; the whole series when too short for
    one): the first part holds the caches filling up, growth that ends by itself, and
    what runs a server out of memory is the rate it keeps up later.
    """

    start_s: float  # the first sample's time
    span_s: float
    peak_bytes: float
    level_bytes: float  # RSS now (the last minute's mean)
    slope: Slope | None
    plateau_s: float | None
    plateau_level_bytes: float | None  # mean RSS from the plateau on
    reached_cap_s: float | None  # first second RSS was at or above the cap
    projection: Projection | None  # time to the cap from the end, when not reached

    @property
    def flat_from_start(self) -> bool:
        """The plateau is the first start tried: RSS showed no growth at all."""
        return self.plateau_s is not None and self.plateau_s <= self.start_s


def analyze(series: Series, cap_bytes: float | None = None, ended: bool = False) -> SeriesFit:
    """Every figure of one lifetime's series; `ended`: it ended by a kill or a crash, so
    nothing is projected past its end."""
    t, y = _arrays(series)
    if not len(t):
        return SeriesFit(0.0, 0.0, 0.0, 0.0, None, None, None, None, None)
    points = list(zip(t.tolist(), y.tolist(), strict=True))
    plateau = find_plateau(points)
    start = plateau if plateau is not None else bend_point(points)
    start = float(t[0]) if start is None else start
    tail = window(points, start)
    slope = fit_slope(tail)
    level = level_at_end(points) or 0.0
    reached = first_reaching(points, cap_bytes) if cap_bytes else None
    projection = None
    if cap_bytes and reached is None and not ended and slope is not None:
        projection = time_to_cap(level, slope, cap_bytes)
    return SeriesFit(
        start_s=float(t[0]),
        span_s=float(t[-1] - t[0]),
        peak_bytes=float(y.max()),
        level_bytes=level,
        slope=slope,
        plateau_s=plateau,
        plateau_level_bytes=float(np.mean([v for _, v in tail])) if plateau is not None else None,
        reached_cap_s=reached,
        projection=projection,
    )


# --- a soak run's lifetimes ---------------------------------------------------------------------


@dataclass
class Lifetime:
    """One server lifetime of a soak: its RSS series and what ended it."""

    session: str
    started_at: float  # epoch seconds: the server's start, t = 0 of the series
    series: list[tuple[float, float]]
    status: str  # ok, or oom / crashed when the server died
    segments: int
    # The server's own account at the end of each segment: (t, bytes).
    accounted: list[tuple[float, float]] = field(default_factory=list)
    unaccounted: list[tuple[float, float]] = field(default_factory=list)
    # What the server says it holds, per second (Memory_used), when it says it: (t, bytes).
    reported: list[tuple[float, float]] = field(default_factory=list)
    fit: SeriesFit | None = None
    # The highest RSS the kernel saw (VmHWM when the server was stopped) or the cells'
    # peak sampler caught between two samples, such as the last rise before a kill: the
    # peak every other report shows.
    peak_rss_bytes: int | None = None

    @property
    def ended_by_death(self) -> bool:
        return self.status in (STATUS_OOM, STATUS_CRASHED)

    @property
    def end_s(self) -> float:
        return self.series[-1][0] if self.series else 0.0


@dataclass
class SetupSoak:
    """One setup on one engine through its soak: every lifetime, and the headline one."""

    setup: str
    engine: str
    cap_bytes: int | None
    cache_bytes: int | None
    lifetimes: list[Lifetime]

    @property
    def main(self) -> Lifetime | None:
        """The longest lifetime: its figures are the setup's."""
        return max(self.lifetimes, key=lambda life: life.end_s, default=None)

    @property
    def peak_bytes(self) -> float | None:
        """The highest RSS of any lifetime: its per-second samples' or its cells' peak."""
        peaks = [life.fit.peak_bytes for life in self.lifetimes if life.fit and life.series]
        peaks += [float(life.peak_rss_bytes) for life in self.lifetimes if life.peak_rss_bytes]
        return max(peaks, default=None)

    @property
    def killed(self) -> Lifetime | None:
        """The first lifetime the OOM killer ended, if any."""
        return next((life for life in self.lifetimes if life.status == STATUS_OOM), None)

    @property
    def crashed(self) -> Lifetime | None:
        return next((life for life in self.lifetimes if life.status == STATUS_CRASHED), None)


def _lifetime(session: SessionInfo | None, session_id: str, cells: list[Cell]) -> Lifetime:
    cells = sorted(cells, key=lambda c: (c.repeat, c.started_at or 0))
    first_sample = min((s.t for c in cells for s in c.samples), default=0.0)
    start = session.started_at if session and session.started_at else first_sample
    series, reported = [], []
    accounted, unaccounted = [], []
    for cell in cells:
        for sample in cell.samples:
            if sample.rss_bytes:
                series.append((sample.t - start, float(sample.rss_bytes)))
            used = (sample.extra or {}).get("server_memory_used_bytes")
            if used is not None:
                reported.append((sample.t - start, float(used)))
        end = cell.samples[-1].t - start if cell.samples else None
        metrics = cell.metrics or {}
        if end is not None and "rss_unaccounted_bytes" in metrics:
            unaccounted.append((end, float(metrics["rss_unaccounted_bytes"])))
            accounted.append((end, float(metrics.get("rss_accounted_bytes", math.nan))))
    died = [c.status for c in cells if c.status in (STATUS_OOM, STATUS_CRASHED)]
    status = died[0] if died else (session.status if session else "ok")
    series.sort()
    life = Lifetime(session_id, start, series, status, len(cells), accounted, unaccounted, reported)
    peaks = [c.peak_rss_bytes for c in cells if c.peak_rss_bytes]
    peaks += [session.peak_rss_bytes] if session and session.peak_rss_bytes else []
    life.peak_rss_bytes = max(peaks, default=None)
    return life


def soak_setups(result: RunResult) -> list[SetupSoak]:
    """Every setup's lifetimes in a soak run, fitted, in the run's setup order."""
    sessions = {s.id: s for s in result.sessions}
    caps = {s.name: s.memory_limit_bytes for s in result.setups}
    grouped: dict[tuple[str, str], dict[str, list[Cell]]] = {}
    for cell in result.cells:
        by_session = grouped.setdefault((cell.setup, cell.engine), {})
        by_session.setdefault(cell.session, []).append(cell)
    order = {s.name: i for i, s in enumerate(result.setups)}
    out = []
    for (setup, engine), by_session in grouped.items():
        cap = caps.get(setup)
        lifetimes = [
            _lifetime(sessions.get(session_id), session_id, cells)
            for session_id, cells in by_session.items()
        ]
        lifetimes.sort(key=lambda life: life.started_at)
        for life in lifetimes:
            life.fit = analyze(life.series, cap, life.ended_by_death)
        cache = next((c.cache_bytes for c in result.cells if c.setup == setup), None)
        out.append(SetupSoak(setup, engine, cap, cache, lifetimes))
    out.sort(key=lambda s: (s.engine, order.get(s.setup, len(order))))
    return out


def is_soak(result: RunResult) -> bool:
    return result.metadata.soak is not None


__all__ = [
    "Lifetime",
    "Projection",
    "SeriesFit",
    "SetupSoak",
    "Slope",
    "analyze",
    "find_plateau",
    "first_reaching",
    "fit_slope",
    "is_soak",
    "level_at_end",
    "soak_setups",
    "time_to_cap",
]
