"""Whether two runs measured the same thing, and what differs between them if not.

A ratio between two runs says something about the builds only when the rest was held
fixed. The dataset and the cache size are part of the workload itself: twice the cache
changes throughput and RSS on its own, so such runs are refused unless the user insists.
Durations, the design, the host class and the server or allocator versions move the
numbers too, but a new server version is often the very point of a comparison and CI
runners vary a little, so those only warn.
"""

from __future__ import annotations

import contextlib
import enum
import tomllib
from dataclasses import dataclass
from typing import Any

from mallocbench import units
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import DatasetRecord, Durations, HostFacts
from mallocbench.model.results import RunResult
from mallocbench.units import parse_size

REFUSE = "refuse"
WARN = "warn"

# /proc/meminfo's MemTotal of two machines of one class differs by what each kernel
# reserves; a few percent is the same class.
MEMORY_TOLERANCE = 0.05


class Reading(enum.StrEnum):
    """How a fact's value reads (`units.fact` words it): the analysis keeps the value."""

    PLAIN = "plain"
    SIZE = "size"  # MiB, or a word as it is
    LIMIT = "limit"  # a memory cap in MiB, "none" without one
    SECONDS = "seconds"
    GIB = "gib"  # a machine's memory, one decimal
    KNOBS = "knobs"
    SIZES = "sizes"  # several caches, each in MiB
    WORDS = "words"  # names side by side (an allocator and its version)
    DESIGN = "design"  # (design, whether its slices ran as turns)


@dataclass(frozen=True)
class Fact:
    """One thing a run held fixed: its value, how it reads, and how much a change matters.

    `missing` is what a setup's fact reads when its value reads as nothing."""

    value: Any
    reading: Reading
    severity: str
    tolerance: float = 0.0  # relative; numbers closer than this count as equal
    missing: bool = False

    def same_as(self, other: Fact) -> bool:
        x, y = self.value, other.value
        if self.tolerance and isinstance(x, int | float) and isinstance(y, int | float):
            return abs(x - y) <= self.tolerance * max(abs(x), abs(y))
        return bool(x == y)


@dataclass(frozen=True)
class Difference:
    """A fact that differs between run A and run B: the two facts, to be worded."""

    field: str
    a: Fact
    b: Fact
    severity: str


def _dataset(result: RunResult) -> DatasetRecord:
    """tables, rows and cache_bytes: from the metadata, else from the experiment text."""
    recorded = result.metadata.dataset
    if recorded is not None and recorded.to_dict():
        return recorded
    try:
        table = tomllib.loads(result.experiment_text or "").get("dataset")
    except tomllib.TOMLDecodeError:
        return DatasetRecord()
    if not isinstance(table, dict):
        return DatasetRecord()
    out = DatasetRecord(tables=table.get("tables"), rows=table.get("rows"))
    if "cache" in table:
        # An unreadable size is left unknown: compared, it could only be a false alarm.
        with contextlib.suppress(MallocbenchError):
            out.cache_bytes = parse_size(table["cache"], "dataset.cache")
    return out


def _run_facts(result: RunResult) -> dict[str, Fact]:
    """Dataset, durations, design and host: the run-wide facts."""
    meta = result.metadata
    facts: dict[str, Fact] = {}
    value: Any  # the dataset's numbers, then the host's numbers and names
    dataset = _dataset(result)
    for name, value, reading in (
        ("dataset.tables", dataset.tables, Reading.PLAIN),
        ("dataset.rows", dataset.rows, Reading.PLAIN),
        ("dataset.cache", dataset.cache_bytes, Reading.SIZE),
    ):
        if value is not None:
            facts[name] = Fact(value, reading, REFUSE)
    durations = meta.durations or Durations()
    design = meta.design
    for name, seconds in (
        ("warmup", durations.warmup_s),
        ("max_warmup", durations.max_warmup_s),
        ("step", durations.step_s),
        ("slice", design.slice_s if design is not None else None),
    ):
        if seconds is not None:
            facts[f"durations.{name}"] = Fact(seconds, Reading.SECONDS, WARN)
    used = design.used if design is not None else None
    if used:
        # Interleaved slices were runs of their own unless the run says turns.
        turns = design is not None and design.alternate == "turns"
        facts["design"] = Fact((used, turns), Reading.DESIGN, WARN)
    host = meta.host or HostFacts()
    for name, value in (
        ("cpu_model", host.cpu_model),
        ("cpus", host.cpus),
        ("memory", host.memory_bytes),
        ("kernel", host.kernel),
        ("glibc", host.glibc),
        ("thp", host.thp),
    ):
        if value not in (None, ""):
            memory = name == "memory" and isinstance(value, int | float)
            reading = Reading.GIB if memory else Reading.PLAIN
            facts[f"host.{name}"] = Fact(value, reading, WARN, MEMORY_TOLERANCE if memory else 0.0)
    return facts


def _setup_facts(result: RunResult) -> dict[str, Fact]:
    """Per setup (matched by name): its server, allocator, knobs and cap; per setup and
    engine: the cache its cells ran with."""
    facts: dict[str, Fact] = {}
    for setup in result.setups:
        allocator = tuple(x for x in (setup.allocator, setup.allocator_version) if x)
        for name, value, reading in (
            ("server_version", setup.server_version, Reading.PLAIN),
            ("allocator", allocator, Reading.WORDS),
            ("knobs", setup.knobs, Reading.KNOBS),
            ("config", setup.config, Reading.KNOBS),
            ("memory_limit", setup.memory_limit_bytes, Reading.LIMIT),
        ):
            facts[f"{name}[{setup.name}]"] = Fact(value, reading, WARN, missing=True)
    caches: dict[tuple[str, str], set[int]] = {}
    for cell in result.cells:
        if cell.cache_bytes:
            caches.setdefault((cell.setup, cell.engine), set()).add(cell.cache_bytes)
    for (name, engine), values in caches.items():
        facts[f"cache[{name}/{engine}]"] = Fact(sorted(values), Reading.SIZES, REFUSE)
    return facts


def facts(result: RunResult) -> dict[str, Fact]:
    """Everything a comparison needs to match, by field name; what a run did not record
    is left out, so older runs compare on what they have."""
    return {**_run_facts(result), **_setup_facts(result)}


def differences(a: RunResult, b: RunResult) -> list[Difference]:
    """The facts that differ between runs A and B, refusing ones first.

    Only facts both runs recorded are compared. A per-cell cache difference that merely
    repeats the dataset's cache difference is left out: it says the same thing again.
    """
    fa, fb = facts(a), facts(b)
    out = [
        Difference(name, fa[name], fb[name], fa[name].severity)
        for name in fa
        if name in fb and not fa[name].same_as(fb[name])
    ]
    cache = next((d for d in out if d.field == "dataset.cache"), None)
    if cache is not None:
        same = ([cache.a.value], [cache.b.value])
        out = [
            d for d in out if not (d.field.startswith("cache[") and (d.a.value, d.b.value) == same)
        ]
    return [d for d in out if d.severity == REFUSE] + [d for d in out if d.severity != REFUSE]


def refusals(found: list[Difference]) -> list[Difference]:
    return [d for d in found if d.severity == REFUSE]


class DifferentWorkloads(MallocbenchError):
    """Runs that did not measure the same workload; its one line says what differs, why
    that matters, and the flag that compares anyway."""

    def __init__(self, found: list[Difference], flag: str = "--allow-different") -> None:
        self.found = found
        listed = ", ".join(
            f"{d.field} A {self.shown(d.a)} vs B {self.shown(d.b)}" for d in refusals(found)
        )
        super().__init__(
            f"the runs did not measure the same workload: {listed}; their ratios would mix "
            f"that with the change between the builds: rerun one to match, or give {flag} "
            "to compare anyway"
        )

    @staticmethod
    def shown(fact: Fact) -> str:
        return units.fact(fact.value, fact.reading, fact.missing)
