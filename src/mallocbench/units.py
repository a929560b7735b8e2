"""Sizes, fractions and durations: parsed as people write them in experiment files and on
command lines, and printed as every report format prints them."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Protocol

from mallocbench.errors import MallocbenchError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_FRACTION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


def parse_size(value: object, key: str) -> int:
    """Bytes from 268435456, "256M", "2G" or "1.5GiB" (binary units)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _SIZE.match(str(value))
    # A digit string too long for a float parses as inf; "0.1" would round to 0 bytes.
    size = float(match.group(1)) * _UNITS[match.group(2).lower()] if match else 0.0
    if not 1 <= size < math.inf:
        raise MallocbenchError(f"{key} = {value!r} is not a size: write e.g. 256M, 2G or bytes")
    return int(size)


# A "same" band wider than ±50% would hide everything: min_effect stays below it.
MIN_EFFECT_UPPER = 0.5


def parse_fraction(value: object, key: str, upper: float = 1.0) -> float:
    """A fraction from 0.02 or "2%"; at least 0 and below `upper`."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int | float):
        fraction = float(value)
    else:
        match = _FRACTION.match(str(value))
        if match is None:
            raise MallocbenchError(f"{key} = {value!r} is not a fraction: write e.g. 0.02 or 2%")
        fraction = float(match.group(1)) / (100 if match.group(2) else 1)
    if not 0 <= fraction < upper:
        raise MallocbenchError(
            f"{key} = {value!r} is out of range: give a value from 0 to below {upper:g} "
            f"(e.g. 0.02 or 2%)"
        )
    return fraction


def parse_min_effect(value: object, key: str = "min_effect") -> float:
    """The smallest relative change that counts, from 0.02 or "2%", read once where it
    enters (an experiment file, --min-effect, a stored run's metadata)."""
    return parse_fraction(value, key, upper=MIN_EFFECT_UPPER)


_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmb]?)\s*$", re.IGNORECASE)
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}


def parse_count(value: object, key: str, low: int, high: int) -> int:
    """A whole number from 50000, "50k", "1.5M" or "2B" (decimal units: rows, not bytes)."""
    count: float = 0.5  # not whole: refused below
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, str):
        match = _COUNT.match(value.replace(",", "").replace("_", ""))
        if match:
            count = float(match.group(1)) * _COUNT_UNITS[match.group(2).lower()]
    if count != int(count) or not low <= count <= high:
        raise MallocbenchError(
            f"{key} = {value!r} is invalid: give a whole number from {low:,} to {high:,} "
            "(e.g. 50000 or 50k)"
        )
    return int(count)


def parse_percent(value: object, key: str, upper: float = 1.0) -> float:
    """A percentage written "5%" or as the fraction 0.05, as a fraction: one meaning for a
    bare number everywhere (min_effect, cpu_quota, --target-ci). A bare number of 1 or more
    would be 100% or more, which is never meant, so it is refused with the two spellings."""
    text = str(value).strip()
    if not text.endswith("%") and _FRACTION.match(text) and float(text) >= 1:
        raise MallocbenchError(
            f"{key} = {value!r} is ambiguous: write {text}% for {text} percent, or a fraction "
            f"(e.g. {float(text) / 100:g})"
        )
    return parse_fraction(value, key, upper)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr)?\s*$", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600}


def parse_duration(value: object, key: str, allow_zero: bool = False) -> float:
    """Seconds from 90, "90s", "30m" or "1.5h" (0 too when `allow_zero`)."""
    match = None if isinstance(value, bool) else _DURATION.match(str(value))
    seconds = float(match.group(1)) * _SECONDS[(match.group(2) or "").lower()] if match else -1.0
    smallest_ok = seconds >= 0 if allow_zero else seconds > 0
    if not smallest_ok or seconds == math.inf:
        raise MallocbenchError(f"{key} = {value!r} is not a duration: write e.g. 90s, 30m or 2h")
    return seconds


# Printing: one formatter for every report format.

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


# How a measured quantity prints, by its unit: scale, format and the unit's name.
QUANTITIES: dict[str, tuple[float, str, str]] = {
    "bytes": (MB, ",.1f", " MiB"),
    "1/s": (1, ",.0f", "/s"),
    "s": (1, ".3f", " s"),
    "ms": (1, ".2f", " ms"),
    "us": (1, ".1f", " µs"),
}


def quantity(value: float | None, unit: str, named: bool = True) -> str:
    """A measured value in its unit ("-": not measured); `named` adds the unit's name,
    which a column whose header names it leaves out."""
    if value is None or math.isnan(value):
        return "-"
    scale, spec, name = QUANTITIES.get(unit, (1, ".2f", ""))
    text = format(value / scale, spec)
    return text + name if named else text


def mib(value: int | float | None) -> str:
    return f"{value / (1 << 20):,.0f} MiB" if value else "-"


def mib_or_text(value: object) -> str:
    """A byte count in MiB; anything else (a word such as "none") as it is."""
    return mib(value) if isinstance(value, int | float) else str(value or "-")


def seconds(value: object) -> str:
    return f"{value:g} s" if isinstance(value, int | float) else str(value)


def knobs(values: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items()) or "-"


class Durations(Protocol):
    """A run's recorded durations (model.metadata.Durations): read here, not imported, as
    the model reads its options with this module's parsers."""

    @property
    def warmup_s(self) -> float | None: ...
    @property
    def max_warmup_s(self) -> float | None: ...
    @property
    def step_s(self) -> float | None: ...


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


def fact(value: object, reading: str, missing: bool = False) -> str:
    """A fact a run held fixed (`analysis.comparability.Fact`) as a comparison shows it;
    `reading` is its Reading, `missing` whether an empty value reads "-"."""
    if value is None and reading != "limit":
        text = ""
    elif reading == "size":
        text = mib_or_text(value)
    elif reading == "limit":
        text = mib_or_text(value or "none")
    elif reading == "seconds":
        text = seconds(value)
    elif reading == "gib" and isinstance(value, int | float):
        text = f"{value / GB:.1f} GiB"
    elif reading == "knobs" and isinstance(value, dict):
        text = knobs(value)
    elif reading == "sizes" and isinstance(value, list):
        text = " / ".join(mib(v) for v in value)
    elif reading == "words" and isinstance(value, tuple):
        text = " ".join(str(v) for v in value)
    elif reading == "design" and isinstance(value, tuple):
        text = f"{value[0]}, turns" if value[1] else str(value[0])
    else:
        text = str(value)
    return (text or "-") if missing else text
