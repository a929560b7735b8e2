"""The ratchet: how much RSS each soak event leaves behind, apart from the drift between.

Per event (soak/events.py) on one server lifetime, from the per-second RSS series:

- before: the mean RSS over the BEFORE_S seconds before the event started (from the end
  of the event before it, when that ended later);
- peak: the highest RSS from its start to its end (and the second after, so that an
  event shorter than the sampling still has one sample);
- after: RSS once it settled. The settle rule: the first window of SETTLE_WINDOW_S
  seconds, starting after the event's end, whose samples all lie within the band of
  their mean; `after` is that window's mean. The band (settle_band) is the larger of
  SETTLE_RISE_SHARE of the event's own rise (peak minus before) and SETTLE_FLOOR of the
  window's mean: calm next to what the event did, and no calmer than a server under load
  stays. A fixed share of RSS was both too coarse for a sub-MiB step on a 200 MiB server
  (a 2 MiB band took the first window after a dump, while jemalloc with 5 s decays was
  still handing pages back) and too tight after a large event, whose churn is a share of
  its own size. When no window settles before SETTLE_TIMEOUT_S
  after the end, the next event's start or the lifetime's end, `after` is the mean of the
  last SETTLE_WINDOW_S seconds before that limit, and the event records which limit it met
  ("timeout", "next event", "end"): its step is then less sure to be what stays.
- step: after minus before.

Per setup and event label, the mean step with a 95% t interval over the soak's events
(the events are the independent repeats: each meets the allocator afresh). The slope
between events comes from the gaps from one event's settling to the next one's start,
each fitted by least squares on its own (the steps never enter it): the mean of the gaps'
slopes with a t interval over gaps. The stretch before the first event holds the caches
filling up and is left out. Time to the cap with the events included: RSS at the end,
growing by the mean step per mean spacing of events plus the slope between them.

As memory evidence for `recommend` (step_differences): a setup's mean step per event of
one label minus the base's, with a 95% Welch interval over the two setups' events (each
setup has its own server and its own events, so the samples are unpaired and their
spreads need not match). A finding only when that interval excludes 0 and the difference
is at least min_effect of the base's RSS before its events: an absolute step has no ratio
to the base, and scaling the minimum effect by the RSS it would add to keeps one rule for
every memory claim (a step of min_effect of RSS per event is what a peak-RSS ratio would
call a change after one event).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mallocbench.analysis.soak import Projection, SetupSoak, Slope, time_to_cap
from mallocbench.model.results import RunResult, SessionInfo

BEFORE_S = 10.0
SETTLE_WINDOW_S = 10.0
# The settle band's two parts (settle_band). The floor: every recorded 10 s window of
# steady load on a 200 MiB server stayed within 0.05% (0.1 MiB) of its mean.
SETTLE_RISE_SHARE = 0.05
SETTLE_FLOOR = 0.0005
SETTLE_TIMEOUT_S = 60.0
MIN_GAP_S = 15.0  # a gap between events shorter than this gives no slope
MIN_GAP_SAMPLES = 10


class Settled(enum.StrEnum):
    """How an event's RSS settled: by itself, or at the limit it met first."""

    SETTLED = "settled"
    TIMEOUT = "timeout"
    NEXT_EVENT = "next event"
    END = "end"


SETTLED, TIMEOUT, NEXT_EVENT, END = (
    Settled.SETTLED,
    Settled.TIMEOUT,
    Settled.NEXT_EVENT,
    Settled.END,
)

Series = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class EventMeasure:
    """One event on one server lifetime; times in seconds since that server's start."""

    session: str
    label: str
    action: str
    status: str
    error: str | None
    start_s: float
    end_s: float
    before_bytes: float | None
    peak_bytes: float | None
    after_bytes: float | None
    settle_s: float | None  # when `after` was taken from (the settled window's start)
    settled_by: str  # SETTLED, or the limit it met: TIMEOUT, NEXT_EVENT, END
    # The readings of the backends that ran its work, as the session stored them (a
    # PostgreSQL soak's: analysis.backends); () where none was read.
    backends: tuple[dict[str, Any], ...] = ()

    @property
    def step_bytes(self) -> float | None:
        if self.before_bytes is None or self.after_bytes is None:
            return None
        return self.after_bytes - self.before_bytes


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% t interval over `n` independent values (None: fewer than 2)."""

    mean: float
    low: float | None
    high: float | None
    n: int


class StepReading(enum.Enum):
    """What a step's interval supports (report.ratchet words it)."""

    UP = "up"  # the whole interval above 0: a ratchet
    DOWN = "down"  # the whole interval below 0: RSS falls back lower than before
    NONE_SHOWN = "none shown"  # the interval holds 0
    TOO_FEW = "too few"  # one event: no interval


def step_reading(interval: Interval | None) -> StepReading:
    if interval is None or interval.low is None or interval.high is None:
        return StepReading.TOO_FEW
    if interval.low > 0:
        return StepReading.UP
    if interval.high < 0:
        return StepReading.DOWN
    return StepReading.NONE_SHOWN


@dataclass(frozen=True)
class LabelSteps:
    """The steps of one event label on one setup: their interval and what it supports."""

    label: str
    interval: Interval  # bytes
    reading: StepReading


@dataclass(frozen=True)
class SetupRatchet:
    setup: str
    engine: str
    events: tuple[EventMeasure, ...]
    steps: tuple[LabelSteps, ...]  # per event label, in the order they first came
    between: Interval | None  # bytes per second, over the gaps between events
    peak_during_bytes: float | None  # the highest RSS during any event
    projection: Projection | None  # to the cap, events included (a capped, living server)

    def to_dict(self) -> dict[str, Any]:
        def interval(iv: Interval | None) -> dict[str, Any] | None:
            return None if iv is None else iv.__dict__.copy()

        return {
            "setup": self.setup,
            "engine": self.engine,
            # An event's backends' readings only where some were read: one without them
            # (MariaDB's) exports as before.
            "events": [
                {
                    **{k: v for k, v in e.__dict__.items() if k != "backends"},
                    "step_bytes": e.step_bytes,
                    **({"backends": list(e.backends)} if e.backends else {}),
                }
                for e in self.events
            ],
            "steps": {s.label: interval(s.interval) for s in self.steps},
            "between_bytes_per_s": interval(self.between),
            "peak_during_bytes": self.peak_during_bytes,
            "projection_s": None if self.projection is None else self.projection.__dict__,
        }


@dataclass(frozen=True)
class StepDifference:
    """A setup's step per event of one label minus the base's, in bytes (see the module)."""

    engine: str
    setup: str
    base: str
    label: str
    step: Interval  # the setup's steps
    base_step: Interval  # the base's
    difference: float
    low: float | None  # the 95% Welch interval; None with fewer than 2 events on a side
    high: float | None
    base_before_bytes: float  # the base's mean RSS before its events of this label
    min_effect: float

    @property
    def threshold_bytes(self) -> float:
        """The smallest difference that counts: min_effect of the base's RSS before."""
        return self.min_effect * self.base_before_bytes

    def as_ratio(self) -> tuple[float, float, float]:
        """(1 + difference, low, high) over the base's RSS before its events: the scale of a
        ratio to the base, on which stats.classify's rule is this module's finding rule
        (nan bounds without an interval)."""
        scale = self.base_before_bytes

        def share(x: float | None) -> float:
            return math.nan if x is None else 1.0 + x / scale

        return share(self.difference), share(self.low), share(self.high)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "base": self.base,
            "step": self.step.__dict__.copy(),
            "base_step": self.base_step.__dict__.copy(),
            "difference_bytes": self.difference,
            "low_bytes": self.low,
            "high_bytes": self.high,
            "base_before_bytes": self.base_before_bytes,
            "threshold_bytes": self.threshold_bytes,
        }


def t_interval(values: Sequence[float]) -> Interval | None:
    if not values:
        return None
    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if len(data) < 2:
        return Interval(mean, None, None, 1)
    from scipy import stats  # a second to load; only soaks with events need it

    half = float(stats.t.ppf(0.975, len(data) - 1)) * float(data.std(ddof=1)) / math.sqrt(len(data))
    return Interval(mean, mean - half, mean + half, len(data))


class _Timeline:
    """A series sorted by time, sliced by bisection: hours of seconds, hundreds of events."""

    def __init__(self, series: Series) -> None:
        points = sorted((float(t), float(v)) for t, v in series if v is not None)
        self.t = np.asarray([p[0] for p in points], dtype=float)
        self.v = np.asarray([p[1] for p in points], dtype=float)

    def values(self, start: float, end: float) -> np.ndarray:
        lo, hi = np.searchsorted(self.t, [start, end], side="left")
        return self.v[lo:hi]

    def times(self, start: float, end: float) -> np.ndarray:
        lo, hi = np.searchsorted(self.t, [start, end], side="left")
        return self.t[lo:hi]


def settle_band(mean_bytes: float, rise_bytes: float) -> float:
    """How far from a window's mean every sample may lie for RSS to count as settled after
    an event that rose `rise_bytes` above RSS before it (see the module)."""
    return max(SETTLE_RISE_SHARE * max(rise_bytes, 0.0), SETTLE_FLOOR * mean_bytes)


def settle(
    series: Series | _Timeline,
    end_s: float,
    limit_s: float,
    limit: str,
    rise_bytes: float = 0.0,
) -> tuple[float | None, float | None, str]:
    """(after, settle time, how): the settle rule (see the module) after an event that
    ended at `end_s` having risen `rise_bytes` (peak minus before; 0 when unknown), looking
    no further than `limit_s` (which met it is `limit`)."""
    line = series if isinstance(series, _Timeline) else _Timeline(series)
    limit_s = min(limit_s, end_s + SETTLE_TIMEOUT_S)
    limit = limit if limit_s < end_s + SETTLE_TIMEOUT_S else TIMEOUT
    for start in line.times(end_s, limit_s - SETTLE_WINDOW_S + 1e-9):
        window = line.values(start, start + SETTLE_WINDOW_S)
        if len(window) < SETTLE_WINDOW_S / 2:
            continue  # a gap in the samples (between segments) is no evidence of calm
        mean = float(window.mean())
        if mean > 0 and float(np.abs(window - mean).max()) <= settle_band(mean, rise_bytes):
            return mean, float(start), SETTLED
    begin = max(end_s, limit_s - SETTLE_WINDOW_S)
    tail = line.values(begin, limit_s + 1e-9)
    if not len(tail):
        return None, None, limit
    return float(tail.mean()), begin, limit


def measure_events(
    series: Series, events: Sequence[dict[str, Any]], started_at: float, session: str
) -> list[EventMeasure]:
    """Every recorded event of a lifetime measured on its RSS series (t since `started_at`)."""
    line = _Timeline(series)
    ordered = sorted(events, key=lambda e: float(e.get("start", 0.0)))
    series_end = float(line.t[-1]) if len(line.t) else 0.0
    out = []
    for i, event in enumerate(ordered):
        start = float(event["start"]) - started_at
        end = float(event.get("end", event["start"])) - started_at
        if i + 1 < len(ordered):
            limit_s, limit = float(ordered[i + 1]["start"]) - started_at, NEXT_EVENT
        else:
            limit_s, limit = series_end + 1e-9, END
        # Never into the event before: RSS still up from it is not this one's baseline.
        previous_end = float(ordered[i - 1].get("end", start)) - started_at if i else -math.inf
        before = line.values(max(start - BEFORE_S, previous_end), start)
        during = line.values(start, end + 1.0)
        before_bytes = float(before.mean()) if len(before) else None
        peak_bytes = float(during.max()) if len(during) else None
        rise = 0.0 if before_bytes is None or peak_bytes is None else peak_bytes - before_bytes
        after, settle_s, how = settle(line, end, limit_s, limit, rise)
        out.append(
            EventMeasure(
                session=session,
                label=str(event.get("label", event.get("action", "?"))),
                action=str(event.get("action", "?")),
                status=str(event.get("status", "?")),
                error=event.get("error"),
                start_s=start,
                end_s=end,
                before_bytes=before_bytes,
                peak_bytes=peak_bytes,
                after_bytes=after,
                settle_s=settle_s,
                settled_by=how,
                backends=tuple(event.get("backends") or ()),
            )
        )
    return out


def gap_slopes(series: Series, measures: Sequence[EventMeasure]) -> list[float]:
    """Least-squares RSS slopes (bytes/s) of the gaps from each event's settling to the
    next event's start: the drift between events, the steps left out."""
    line = _Timeline(series)
    slopes = []
    for here, following in zip(measures, measures[1:], strict=False):
        begin = here.settle_s if here.settle_s is not None else here.end_s
        t = line.times(begin, following.start_s)
        y = line.values(begin, following.start_s)
        if len(t) < MIN_GAP_SAMPLES or following.start_s - begin < MIN_GAP_S:
            continue
        tc = t - t.mean()
        slopes.append(float(tc @ (y - y.mean())) / float(tc @ tc))
    return slopes


def _projection(soak: SetupSoak, steps: list[float], starts: list[float],
                between: Interval | None) -> Projection | None:  # fmt: skip
    """Time to the cap with events included (see the module); None when not projected."""
    main = soak.main
    if soak.cap_bytes is None or main is None or main.ended_by_death or main.fit is None:
        return None
    step = t_interval(steps)
    if step is None or step.low is None or step.high is None or len(starts) < 2:
        return None
    spacing = (starts[-1] - starts[0]) / (len(starts) - 1)
    drift = between if between is not None and between.low is not None else None
    rate = step.mean / spacing + (drift.mean if drift else 0.0)
    low = step.low / spacing + (drift.low if drift and drift.low is not None else 0.0)
    high = step.high / spacing + (drift.high if drift and drift.high is not None else 0.0)
    slope = Slope(rate, low, high, starts[0], main.end_s, len(steps))
    return time_to_cap(main.fit.level_bytes, slope, soak.cap_bytes)


def setup_ratchet(soak: SetupSoak, sessions: dict[str, SessionInfo]) -> SetupRatchet | None:
    """One setup's ratchet over its lifetimes; None when no lifetime had events."""
    measures: list[EventMeasure] = []
    slopes: list[float] = []
    main_steps: list[float] = []
    main_starts: list[float] = []
    for life in soak.lifetimes:
        info = sessions.get(life.session)
        if info is None or not info.events:
            continue
        here = measure_events(life.series, info.events, life.started_at, life.session)
        measures += here
        slopes += gap_slopes(life.series, here)
        if life is soak.main:
            main_steps = [m.step_bytes for m in here if m.step_bytes is not None]
            main_starts = [m.start_s for m in here]
    if not measures:
        return None
    labels = dict.fromkeys(m.label for m in measures)
    steps = []
    for label in labels:
        interval = t_interval(
            [m.step_bytes for m in measures if m.label == label and m.step_bytes is not None]
        )
        if interval is not None:
            steps.append(LabelSteps(label, interval, step_reading(interval)))
    between = t_interval(slopes)
    peaks = [m.peak_bytes for m in measures if m.peak_bytes is not None]
    return SetupRatchet(
        setup=soak.setup,
        engine=soak.engine,
        events=tuple(measures),
        steps=tuple(steps),
        between=between,
        peak_during_bytes=max(peaks, default=None),
        projection=_projection(soak, main_steps, main_starts, between),
    )


def welch_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float | None, float | None]:
    """The 95% interval of mean(a) - mean(b), Welch's (unequal spreads); (None, None) with
    fewer than 2 values on a side or no spread at all."""
    if len(a) < 2 or len(b) < 2:
        return None, None
    from scipy import stats  # a second to load; only soaks with events need it

    found = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    low, high = float(found.low), float(found.high)
    return (None, None) if math.isnan(low) or math.isnan(high) else (low, high)


def _steps_of(ratchet: SetupRatchet, label: str) -> list[float]:
    return [e.step_bytes for e in ratchet.events if e.label == label and e.step_bytes is not None]


def step_differences(
    ratchets: Sequence[SetupRatchet], base: str, min_effect: float
) -> tuple[StepDifference, ...]:
    """Each setup's steps against the base's, per engine and event label both saw; () when
    the base had no events measured (then no step is claimed for anyone)."""
    out = []
    bases = {r.engine: r for r in ratchets if r.setup == base}
    for ratchet in ratchets:
        reference = bases.get(ratchet.engine)
        if ratchet.setup == base or reference is None:
            continue
        for label in dict.fromkeys(e.label for e in ratchet.events):
            mine, theirs = _steps_of(ratchet, label), _steps_of(reference, label)
            before = [
                e.before_bytes
                for e in reference.events
                if e.label == label and e.step_bytes is not None and e.before_bytes is not None
            ]
            step, base_step = t_interval(mine), t_interval(theirs)
            if step is None or base_step is None or not before or sum(before) <= 0:
                continue
            low, high = welch_interval(mine, theirs)
            out.append(
                StepDifference(
                    ratchet.engine,
                    ratchet.setup,
                    base,
                    label,
                    step,
                    base_step,
                    step.mean - base_step.mean,
                    low,
                    high,
                    sum(before) / len(before),
                    min_effect,
                )
            )
    return tuple(out)


def ratchet_setups(result: RunResult, soaks: Sequence[SetupSoak]) -> tuple[SetupRatchet, ...]:
    """Every soaked setup's ratchet, in the soaks' order; () for a soak without events."""
    sessions = {s.id: s for s in result.sessions}
    found = (setup_ratchet(soak, sessions) for soak in soaks)
    return tuple(r for r in found if r is not None)


__all__ = [
    "EventMeasure",
    "Interval",
    "LabelSteps",
    "SetupRatchet",
    "StepDifference",
    "StepReading",
    "gap_slopes",
    "measure_events",
    "ratchet_setups",
    "settle",
    "settle_band",
    "step_differences",
    "step_reading",
    "t_interval",
    "welch_interval",
]
