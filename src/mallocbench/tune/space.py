"""The search space of one allocator: which knobs, over which range, on which scale.

Ranges come from the knob catalogue (its types and bounds) narrowed to where a knob
trades memory against time; the user may replace them (`--space glibc:arena_max=1..8`),
and a range the allocator does not accept is refused by the catalogue's own check. Sizes
and delays span orders of magnitude, so they are searched on a log scale; a log scale
cannot hold 0 (jemalloc's "purge at once"), so such a parameter is the knob's value
plus an offset, which its name shows ("dirty_decay_ms+1").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mallocbench.allocators import knobs as catalogue
from mallocbench.allocators.base import Allocator
from mallocbench.allocators.knobs import Knob
from mallocbench.errors import MallocbenchError, did_you_mean

if TYPE_CHECKING:
    import optuna

# Per knob family: the knobs searched by default and their (low, high) in the knob's
# own unit. Booleans and enums are searched over all their values. Where the catalogue
# has no upper bound, the one here is where the trade-off has long flattened out.
DEFAULT_RANGES: dict[str, dict[str, tuple[float, float] | None]] = {
    "glibc": {
        "arena_max": (1, 64),
        "trim_threshold": (4096, 256 << 20),
        "mmap_threshold": (4096, 32 << 20),
        "top_pad": (4096, 64 << 20),
        "tcache_count": (0, 64),
    },
    "jemalloc": {
        "dirty_decay_ms": (0, 60000),
        "muzzy_decay_ms": (0, 60000),
        "narenas": (1, 64),
        "background_thread": None,
        "tcache_max": (4096, 8 << 20),
    },
    "gperftools": {
        "release_rate": (0, 10),
        "max_total_thread_cache_bytes": (512 << 10, 1 << 30),
        "aggressive_decommit": None,
    },
    "mimalloc": {
        "purge_delay": (0, 10000),
        "purge_decommits": None,
        "arena_eager_commit": None,
        "reset_delay": (0, 10000),
        "allow_decommit": None,
        "segment_decommit_delay": (0, 10000),
        "eager_commit": None,
    },
}

_RANGE = re.compile(r"^\s*(-?[\w.]+)\s*\.\.\s*(-?[\w.]+)\s*$")


@dataclass(frozen=True)
class Dimension:
    """One searched knob: a numeric range (int or float) or a set of values."""

    knob: Knob
    kind: Literal["int", "float", "choice"]
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    offset: float = 0.0  # the parameter is the knob's value + offset (log scales need > 0)
    choices: tuple[str, ...] = ()

    @property
    def param(self) -> str:
        return f"{self.knob.name}+{_num(self.offset)}" if self.offset else self.knob.name

    def suggest(self, trial: optuna.Trial) -> str:
        """The knob's value for this trial, as the allocator reads it."""
        if self.kind == "choice":
            return str(trial.suggest_categorical(self.param, list(self.choices)))
        low, high = self.low + self.offset, self.high + self.offset
        if self.kind == "int":
            value: float = trial.suggest_int(self.param, int(low), int(high), log=self.log)
        else:
            value = trial.suggest_float(self.param, low, high, log=self.log)
        return self.knob.normalise(_num(value - self.offset))

    def value(self, params: Mapping[str, Any]) -> str | None:
        """The knob's value in a finished trial's parameters (None: not searched there)."""
        if self.param not in params:
            return None
        raw = params[self.param]
        if self.kind == "choice":
            return str(raw)
        return self.knob.normalise(_num(float(raw) - self.offset))

    def describe(self) -> str:
        if self.kind == "choice":
            return f"{self.knob.name} in {'/'.join(self.choices)}"
        scale = " (log)" if self.log else ""
        return f"{self.knob.name} in {_num(self.low)}..{_num(self.high)}{scale}"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _bool_values(knob: Knob) -> tuple[str, ...]:
    return (knob.normalise("false"), knob.normalise("true"))


def _numeric(knob: Knob, low: float, high: float) -> Dimension:
    if low > high:
        raise MallocbenchError(
            f"knob {knob.name}: the range {_num(low)}..{_num(high)} is empty: "
            "give the lower bound first"
        )
    kind: Literal["int", "float"] = "float" if knob.kind == "float" else "int"
    # Counts from 1 (arenas) matter by factors; counts from 0 (cache slots) by steps.
    log = knob.kind in ("size", "duration") or (kind == "int" and low >= 1 and high >= 32 * low)
    log = log and high > max(low, 0) + 1
    offset = 1 - low if log and low <= 0 else 0.0
    return Dimension(knob, kind, low, high, log, offset)


def dimension(knob: Knob, spec: tuple[float, float] | Sequence[str] | None) -> Dimension:
    """A dimension for `knob`: over `spec` (a range or values), or all a bool's or enum's
    values when None."""
    if spec is None:
        values = _bool_values(knob) if knob.kind == "bool" else knob.choices
        if not values:
            raise MallocbenchError(f"knob {knob.name} needs a range: give {knob.name}=LOW..HIGH")
        return Dimension(knob, "choice", choices=tuple(values))
    if isinstance(spec, tuple) and all(isinstance(v, float | int) for v in spec):
        low, high = spec
        return _numeric(knob, float(low), float(high))
    return Dimension(knob, "choice", choices=tuple(str(v) for v in spec))


def _checked_number(knob: Knob, text: str) -> float:
    """`text` as a number the allocator accepts (the catalogue refuses the rest)."""
    return float(knob.normalise(text))


def parse_spec(knob: Knob, text: str) -> Dimension:
    """`1..8`, `4K..64M`, `true/false`, `0/1/2` or one value, each checked against what
    the allocator accepts."""
    match = _RANGE.match(text)
    if match and knob.kind not in ("bool", "enum"):
        low, high = (_checked_number(knob, v) for v in match.groups())
        return dimension(knob, (low, high))
    values = [v.strip() for v in text.split("/") if v.strip()]
    if not values:
        raise MallocbenchError(
            f"--space {knob.name}= has no values: give LOW..HIGH or values a/b/c"
        )
    return dimension(knob, [knob.normalise(v) for v in values])


def default_space(allocator: Allocator) -> list[Dimension]:
    """The knobs searched when the user names none: those of DEFAULT_RANGES the
    installed library reads."""
    ranges = DEFAULT_RANGES.get(allocator.knob_family, {})
    out = []
    for knob in allocator.knobs:
        if knob.name in ranges and catalogue.is_available(allocator, knob):
            out.append(dimension(knob, ranges[knob.name]))
    if not out:
        raise MallocbenchError(
            f"{allocator.name} has no knob mallocbench knows how to search: "
            f"name some with --space {allocator.name}:KNOB=LOW..HIGH"
        )
    return out


def parse_space_options(
    specs: Iterable[str], allocator_names: Sequence[str]
) -> dict[str, list[tuple[str, str]]]:
    """--space [ALLOCATOR:]KNOB=RANGE options -> {allocator: [(knob, range text)]}; the
    allocator may be left out when only one is tuned."""
    out: dict[str, list[tuple[str, str]]] = {}
    for spec in specs:
        head, sep, text = spec.partition("=")
        if not sep:
            raise MallocbenchError(
                f"--space {spec!r} has no '=': write ALLOCATOR:KNOB=LOW..HIGH or KNOB=a/b"
            )
        allocator, colon, knob = head.strip().rpartition(":")
        if not colon:
            if len(allocator_names) != 1:
                raise MallocbenchError(
                    f"--space {spec!r} does not say which allocator: "
                    f"write e.g. {allocator_names[0]}:{knob}={text}"
                )
            allocator = allocator_names[0]
        if allocator not in allocator_names:
            raise MallocbenchError(
                f"--space {spec!r} names {allocator!r}, which is not tuned"
                f"{did_you_mean(allocator, allocator_names)}: tune it with --allocators"
            )
        out.setdefault(allocator, []).append((knob.strip(), text))
    return out


def build_space(allocator: Allocator, specs: Sequence[tuple[str, str]]) -> list[Dimension]:
    """The allocator's space: the user's knobs when given (only those are searched),
    else the default space. Every knob is checked against the installed library."""
    if not specs:
        return default_space(allocator)
    out: dict[str, Dimension] = {}
    for name, text in specs:
        knob = catalogue.find(allocator, name)
        if not catalogue.is_available(allocator, knob):
            raise MallocbenchError(
                f"knob {knob.name} ({knob.key}) is not read by the installed "
                f"{allocator.name}: leave it out of --space"
            )
        if knob.name in out:
            raise MallocbenchError(f"--space gives {allocator.name}:{knob.name} twice: once")
        out[knob.name] = parse_spec(knob, text)
    return list(out.values())


def setting_of(space: Sequence[Dimension], params: Mapping[str, Any]) -> dict[str, str]:
    """{knob: value} of a finished trial's parameters."""
    return {d.knob.name: v for d in space if (v := d.value(params)) is not None}


def signature(space: Sequence[Dimension]) -> list[str]:
    return [d.describe() for d in space]
