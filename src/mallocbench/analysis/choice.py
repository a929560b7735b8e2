"""One rule for choosing among measured settings, whichever command measured them.

`tune` chooses per allocator from its re-measured front; a decision command over
several allocators chooses the same way from the same records. Both hand this module
numbers only (ratios to a baseline with their intervals, or single observations) and
get indices back.

Why a rule beyond "the lowest": a front's lowest-RSS end is where RSS stops paying for
CPU, so its last fraction of a percent of RSS (inside the noise) can cost several times
the CPU. Among the options whose interval on the priority's objective overlaps the
best's, none is shown better there, so the cheapest on the cost objective wins; a
memory-at-any-cost choice, or a hard limit on the cost, are the caller's explicit
options.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    point: float
    low: float
    high: float

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def inverse(self) -> Interval:
        """The same ratio turned so that lower is better (for a higher-is-better metric)."""
        return Interval(1 / self.point, 1 / self.high, 1 / self.low)


@dataclass(frozen=True)
class Option:
    """One setting against the baseline, each ratio oriented so that lower is better:
    `goal` on the priority's objective (RSS for memory first), `cost` on the objective it
    is traded against (CPU for memory first)."""

    goal: Interval
    cost: Interval


def noise_aware_pick(
    options: Sequence[Option], max_cost: float | None = None, at_any_cost: bool = False
) -> int | None:
    """The index of the option to choose, None when none is allowed.

    Options costing more than `max_cost` (a ratio, on the point estimate) are out. Of
    the rest, those whose goal interval overlaps the lowest goal's are within its noise,
    and the cheapest of them wins (the lower goal breaks a tie). `at_any_cost`: the
    lowest goal whatever it costs."""
    allowed = [
        i
        for i, o in enumerate(options)
        if max_cost is None or (math.isfinite(o.cost.point) and o.cost.point <= max_cost)
    ]
    if not allowed:
        return None
    lowest = min(allowed, key=lambda i: options[i].goal.point)
    if at_any_cost:
        return lowest
    near = [i for i in allowed if options[i].goal.overlaps(options[lowest].goal)]
    return min(near, key=lambda i: (options[i].cost.point, options[i].goal.point))


def span(values: Sequence[Sequence[float]], limit: int) -> list[int]:
    """Indices of at most `limit` points (never fewer than its ends and knee) that span
    a front of single observations, each point a vector oriented so that lower is better.

    Always kept: the best point on each objective (the front's ends) and the knee, the
    point nearest the ideal (every objective at its best) once each objective is scaled
    to [0, 1] over the front; a budget for fewer re-measurements would otherwise keep one
    end only, and the choice could only be that end. The rest of `limit` is spread evenly
    along the first objective."""
    if not values:
        return []
    dims = range(len(values[0]))
    lows = [min(v[d] for v in values) for d in dims]
    widths = [max(v[d] for v in values) - lows[d] or 1.0 for d in dims]
    ends = [min(range(len(values)), key=[v[d] for v in values].__getitem__) for d in dims]
    knee = min(
        range(len(values)),
        key=lambda i: sum(((values[i][d] - lows[d]) / widths[d]) ** 2 for d in dims),
    )
    kept = list(dict.fromkeys([*ends, knee]))
    rest = sorted((i for i in range(len(values)) if i not in kept), key=lambda i: values[i][0])
    room = min(len(rest), limit - len(kept))
    if room > 0:
        step = len(rest) / room
        kept += [rest[int(j * step + step / 2)] for j in range(room)]
    return sorted(kept, key=lambda i: values[i][0])
