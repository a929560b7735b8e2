"""The growth reading of a replay in words: the base setup's RSS and live bytes per hour
of the trace, what they say together, and each other setup's RSS under the same calls.

Only a reading the analysis classified (analysis/growth.py: an interval that excludes
zero and a change beyond min_effect) is worded as a finding; a slope it could not tell
from flat is said to be so, with its interval.
"""

from __future__ import annotations

import math
from typing import Any

from mallocbench.analysis.growth import Growth, Line, Reading, SetupGrowth
from mallocbench.analysis.replay import ReplayAnalysis
from mallocbench.analysis.soak import Slope

NOT_ON_THE_TRACES_CLOCK = (
    "Growth over the trace's time is read at --timing recorded only: flat out, the "
    "replay's clock is not the program's."
)


def rate_text(slope: Slope | None) -> str:
    """`+12.3 MiB/h [+10.1, +14.0]`, per hour of the trace."""
    if slope is None:
        return "(too short to fit)"
    mean, low, high = slope.mib_per_hour()
    bounds = f"[{low:+,.1f}, {high:+,.1f}]" if slope.bounded else "[unbounded]"
    return f"{mean:+,.1f} MiB/h {bounds}"


def span_text(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.1f} s"


def _move(line: Line) -> str:
    """A verb for a slope whose sign the interval may not settle."""
    return "grow" if line.slope is not None and line.slope.per_s >= 0 else "change by"


def headline(g: SetupGrowth) -> str:
    """What the base setup's RSS and live bytes say together."""
    rss, live, kept = rate_text(g.rss.slope), rate_text(g.live.slope), rate_text(g.retained.slope)
    if g.reading is Reading.RETAINS:
        return (
            f"Under {g.setup}, RSS grows {rss} while live bytes {_move(g.live)} {live}: "
            f"the allocator retains (fragmentation or caching); RSS minus live grows {kept}."
        )
    if g.reading is Reading.HOLDS_MORE:
        return (
            f"Under {g.setup}, live bytes grow {live} as RSS does ({rss}; RSS minus live "
            f"{kept}): the program holds more (a leak or a growing cache), no allocator "
            "fixes it."
        )
    if g.reading is Reading.GROWS:
        return (
            f"Under {g.setup}, RSS grows {rss}; whether the program or the allocator holds "
            f"the growth the intervals do not tell: live bytes {live}, RSS minus live {kept}."
        )
    if g.reading is Reading.FLAT:
        return f"Under {g.setup}, RSS is flat: {rss}, live bytes {live}."
    if g.reading is Reading.SHRINKS:
        return f"Under {g.setup}, RSS falls {rss}; live bytes {live}."
    return (
        f"Under {g.setup}, RSS's slope {rss} is not distinguishable from flat; live bytes {live}."
    )


def _what(g: SetupGrowth) -> str:
    if g.reading is Reading.RETAINS:
        return f"the allocator retains (RSS minus live {rate_text(g.retained.slope)})"
    if g.reading is Reading.HOLDS_MORE:
        return "they grow with the live bytes"
    if g.reading is Reading.GROWS:
        return "they grow, with neither the live bytes' share nor the allocator's told from flat"
    if g.reading is Reading.FLAT:
        return "flat"
    if g.reading is Reading.SHRINKS:
        return "falling"
    return "not distinguishable from flat"


def other_line(g: SetupGrowth) -> str:
    return f"Under {g.setup} the same calls hold {rate_text(g.rss.slope)}: {_what(g)}."


def rule_line(growth: Growth) -> str:
    effect = (
        f" and the slope adds at least {growth.min_effect:.0%} of the setup's mean RSS over "
        "the span (flat: its whole interval adds less)"
        if growth.min_effect
        else ""
    )
    return (
        f"Slopes per hour of the trace's time over its {span_text(growth.span_s)}, with 95% "
        "intervals (the soak's fit, which allows for samples that follow each other), from "
        f"each setup's first replay; growth is read only where the interval excludes zero{effect}."
    )


def growth_lines(replay: ReplayAnalysis | None) -> list[str]:
    """The reading, one sentence a line: the base's headline, the other setups, the rule."""
    if replay is None:
        return []
    growth = replay.growth
    if growth is None:
        return [NOT_ON_THE_TRACES_CLOCK] if replay.record.timing == "none" else []
    first, *others = growth.setups
    return [headline(first), *(other_line(g) for g in others), rule_line(growth)]


def _line_numbers(name: str, line: Line | None) -> dict[str, Any]:
    """The same keys whatever is known: a CSV's columns do not depend on its rows."""
    mean = low = high = None
    if line is not None and line.slope is not None:
        mean, low, high = line.slope.mib_per_hour()
    return {
        f"{name}_mib_per_h": mean,
        f"{name}_mib_per_h_low": low if low is not None and math.isfinite(low) else None,
        f"{name}_mib_per_h_high": high if high is not None and math.isfinite(high) else None,
        f"{name}_trend": line.trend.value if line is not None else None,
    }


def growth_numbers(growth: Growth | None, setup: str) -> dict[str, Any]:
    """A setup's slopes, trends and reading, for CSV and JSON (None where not read)."""
    g = growth.setup(setup) if growth else None
    return {
        **_line_numbers("rss", g.rss if g else None),
        **_line_numbers("live", g.live if g else None),
        **_line_numbers("retained", g.retained if g else None),
        "growth_reading": g.reading.value if g else None,
    }
