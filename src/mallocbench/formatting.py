"""Number formatting shared by every report format."""

from __future__ import annotations

import math
from collections.abc import Iterable

from mallocbench.metadata import Durations

GB = 1024**3
MB = 1024**2


def gb(value: int | float | None) -> str:
    """GiB with two decimals; negative values (an unaccounted remainder) keep their sign."""
    return f"{value / GB:,.2f}" if value is not None else "-"


def memory_unit(values: Iterable[int | float | None]) -> str:
    """GiB once any value reaches 1 GiB, else MiB: 0.05 GiB says less than 51 MiB."""
    return "GiB" if any(v is not None and abs(v) >= GB for v in values) else "MiB"


def size(value: int | float | None, unit: str) -> str:
    """A byte count in `unit` (from memory_unit); negative values keep their sign."""
    if value is None:
        return "-"
    return gb(value) if unit == "GiB" else f"{value / MB:,.0f}"


def percent(fraction: float) -> str:
    """A fraction as a percentage: 0.02 is "2%"."""
    return f"{fraction * 100:g}%"


def slug(text: str) -> str:
    """`text` as an HTML id: lower case, runs of other characters as dashes."""
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


def bound(x: float) -> str:
    """An interval's end: two decimals, or two digits where that would print 0.00."""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    # A bound of 0.0017 printed as 0.00 would read as zero; log-scale bounds never are.
    return f"{x:.2g}" if 0 < x < 0.01 else f"{x:.2f}"


def interval(low: float, high: float) -> str:
    """A 95% interval as every report brackets it."""
    return f"[{bound(low)}, {bound(high)}]"


def ratio(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def qps(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def mib(value: int | float | None) -> str:
    return f"{value / (1 << 20):,.0f} MiB" if value else "-"


def mib_or_text(value: object) -> str:
    """A byte count in MiB; anything else (a word such as "none") as it is."""
    return mib(value) if isinstance(value, int | float) else str(value or "-")


def seconds(value: object) -> str:
    return f"{value:g} s" if isinstance(value, int | float) else str(value)


def knobs(values: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items()) or "-"


def durations(recorded: Durations) -> str:
    """A run's durations as every report words them (runs before max_warmup included)."""
    warmup, step, most = recorded.warmup_s or 0, recorded.step_s or 0, recorded.max_warmup_s
    if not warmup:
        lead = "no warmup"
    elif most is None:
        lead = f"{warmup:g} s warmup"
    else:
        lead = f"warmup until steady ({warmup:g}-{most:g} s)"
    return f"{lead} + {step:g} s measured per cell"
