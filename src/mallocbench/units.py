"""Sizes and fractions as people write them in experiment files and on command lines."""

from __future__ import annotations

import math
import re

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


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr)?\s*$", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600}


def parse_duration(value: object, key: str) -> float:
    """Seconds from 90, "90s", "30m" or "1.5h"."""
    match = _DURATION.match(str(value))
    seconds = float(match.group(1)) * _SECONDS[(match.group(2) or "").lower()] if match else 0.0
    if not 0 < seconds < math.inf:
        raise MallocbenchError(f"{key} = {value!r} is not a duration: write e.g. 90s, 30m or 2h")
    return seconds
