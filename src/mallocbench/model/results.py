"""The result model shared by the store, the analysis and every report.

`results.json` is `RunResult.to_dict()`; reports read it back with `RunResult.from_dict()`,
so a report can be made again from the file alone, without the store.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

from mallocbench.model.metadata import RunMetadata


def json_safe(value: Any) -> Any:
    """`value` with every NaN or infinity (no mean, a cap never reached) as None, through
    dicts and lists: JSON has neither."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


SCHEMA_VERSION = 1

STATUS_OK = "ok"
STATUS_CRASHED = "crashed"
STATUS_OOM = "oom"
STATUS_FAILED = "failed"
STATUSES = (STATUS_OK, STATUS_CRASHED, STATUS_OOM, STATUS_FAILED)


@dataclass
class Sample:
    """One probe sample, taken every second while a cell runs (t: seconds since the epoch)."""

    t: float
    rss_bytes: int | None = None
    vsz_bytes: int | None = None
    qps: float | None = None
    tps: float | None = None
    latency_ms: float | None = None  # the per-interval percentile sysbench reports (p99)
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class Cell:
    """setup x engine x step x threads x repeat: one measured result."""

    setup: str
    engine: str
    step: str
    threads: int
    repeat: int
    group: str = ""
    status: str = STATUS_OK
    qps: float | None = None
    tps: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    avg_ms: float | None = None
    errors: int = 0
    peak_rss_bytes: int | None = None
    peak_vsz_bytes: int | None = None
    allocator_path: str | None = None
    cache_bytes: int | None = None
    session: str = ""
    started_at: float | None = None
    duration_s: float | None = None
    error: str | None = None
    exit_signal: str | None = None
    log_tail: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    # Seconds warmed before measuring (None: not warmed), and whether warming ended on a
    # steady state (False: it stopped at durations.max_warmup still trending).
    warmup_s: float | None = None
    warmup_steady: bool | None = None
    # The measured seconds' verdict, analysis.steady.Stability.to_dict() with its reason
    # worded by run.measure.stability_reason; empty when not
    # judged (results from before it existed, failed cells, steps that end by themselves).
    stability: dict[str, Any] = field(default_factory=dict)
    # The measured slices, in the order they ran: each a dict with its start time "t",
    # throughput "qps" over its counted "seconds", and the interference the machine saw
    # meanwhile (probes.system.interference). One slice in the sequential design.
    slices: list[dict[str, float]] = field(default_factory=list)
    # The allocation trace recorded while measured (a setup with `record = true`), as a
    # path relative to the run directory: traces/<cell>.mbt.
    trace: str | None = None

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return (self.setup, self.engine, self.step, self.threads, self.repeat)

    @property
    def unstable(self) -> bool:
        """The measured seconds trended or shifted level: the mean hides a change."""
        return self.stability.get("stable") is False

    @property
    def stability_note(self) -> str:
        """One line on warmup and stability for reports; empty when there is nothing to say."""
        parts = []
        if self.warmup_s is not None:
            how = "steady" if self.warmup_steady else "not steady at the maximum"
            parts.append(f"warmed {self.warmup_s:.0f} s ({how})")
        if self.stability:
            if self.unstable:
                verdict = "unstable"
            else:
                verdict = "stable" if self.stability.get("judged", True) else "not judged"
            parts.append(f"{verdict}: {self.stability.get('reason', '')}".rstrip(": "))
        return "; ".join(parts)

    def to_dict(self, with_samples: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not with_samples:
            data.pop("samples")
        if data["trace"] is None:
            data.pop("trace")  # written only by a recording setup: older files stay as they were
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["samples"] = [Sample(**s) for s in data.get("samples") or []]
        return cls(**values)


@dataclass
class SetupInfo:
    """A setup as it actually ran: the allocator resolved to a file and version."""

    name: str
    allocator: str
    allocator_version: str | None = None
    allocator_library: str | None = None
    knobs: dict[str, str] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    server: str | None = None
    server_version: str | None = None
    cpus: str | None = None
    thp: str | None = None  # the THP mode the setup asked for (None: the system's)
    description: str = ""
    memory_limit_bytes: int | None = None  # the cap the setup asked for (None: uncapped)


@dataclass
class SessionInfo:
    """One server lifetime: its peak memory covers every cell it ran."""

    id: str
    setup: str
    engine: str
    repeat: int
    started_at: float | None = None
    ended_at: float | None = None
    peak_rss_bytes: int | None = None
    peak_vsz_bytes: int | None = None
    status: str = STATUS_OK
    pid: int | None = None
    thp: str | None = None  # the THP mode the server ran under
    # What was read into the engine's cache after the start, before the first cell (or
    # why nothing was): a cold cache is a ramp no warmup of a few seconds removes.
    cache_warm: str | None = None
    # A capped server's memory cgroup: its limit as the kernel took it, and the highest
    # charge (RSS plus page cache and kernel memory charged to the group) it reached.
    memory_limit_bytes: int | None = None
    peak_cgroup_bytes: int | None = None
    # RSS once the server answered, before any cell: its fixed base (code, buffers it
    # allocates up front). At small scale it dwarfs what the cache and the load add.
    idle_rss_bytes: int | None = None
    # The benchmark host that ran it (a cluster worker's name; None: a local run), and
    # that worker process's CPU seconds per second while the session's cells measured.
    host: str | None = None
    worker_cpu_share: float | None = None
    # What may set this start's level apart from another's (probes.start): start-up
    # time, page-cache share of the datadir, THP, the busiest threads' CPUs.
    start: dict[str, float | str] | None = None
    # A soak's events on this server (soak.events.EventRunner.records): each with its
    # action, label, start and end (epoch seconds, as the samples) and status.
    events: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if not data["events"]:
            data.pop("events")  # runs without events read exactly as before
        return data


@dataclass
class RunResult:
    run_id: str
    experiment: str
    base_setup: str
    metadata: RunMetadata = field(default_factory=RunMetadata)
    setups: list[SetupInfo] = field(default_factory=list)
    sessions: list[SessionInfo] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list)
    experiment_text: str = ""
    schema: int = SCHEMA_VERSION

    def to_dict(self, with_samples: bool = True) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "run_id": self.run_id,
            "experiment": self.experiment,
            "base_setup": self.base_setup,
            "metadata": self.metadata.to_dict(),
            "setups": [asdict(s) for s in self.setups],
            "sessions": [s.to_dict() for s in self.sessions],
            "cells": [c.to_dict(with_samples) for c in self.cells],
            "experiment_text": self.experiment_text,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        return cls(
            run_id=data["run_id"],
            experiment=data.get("experiment", ""),
            base_setup=data["base_setup"],
            metadata=RunMetadata.from_dict(data.get("metadata") or {}),
            setups=[SetupInfo(**s) for s in data.get("setups") or []],
            sessions=[SessionInfo(**s) for s in data.get("sessions") or []],
            cells=[Cell.from_dict(c) for c in data.get("cells") or []],
            experiment_text=data.get("experiment_text", ""),
            schema=data.get("schema", SCHEMA_VERSION),
        )


# --- a results.json read back: every value of the type its field declares -------------

_SCALARS: dict[Any, tuple[str, Any]] = {
    # JSON has one number type: a whole number is a float too, true is neither.
    int: ("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
    bool: ("true or false", lambda v: isinstance(v, bool)),
}
# Read by its own tolerant decoder (an unreadable key is kept aside, not refused).
_SELF_DECODED = frozenset({"metadata"})


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _words(hint: Any) -> str:
    """What a field of type `hint` holds, in the words of a JSON file."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _words(a) for a in typing.get_args(hint))
    if origin is dict or is_dataclass(hint):
        return "an object"
    if origin is list:
        return "a list"
    return _SCALARS[hint][0] if hint in _SCALARS else "anything"


def _misfit(hint: Any, value: Any, where: str) -> tuple[str, Any, Any] | None:
    """The first value under `where` that is not of `hint`: (its field, the hint it
    breaks, the value); None when everything fits."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        found = [_misfit(a, value, where) for a in typing.get_args(hint) if a is not type(None)]
        if any(f is None for f in found):
            return None
        deeper = next((f for f in found if f is not None and f[0] != where), None)
        return deeper or (where, hint, value)
    if is_dataclass(hint):
        return (
            misfit_fields(hint, value, where) if isinstance(value, dict) else (where, hint, value)
        )
    if origin is dict:
        if not isinstance(value, dict):
            return (where, hint, value)
        inner = typing.get_args(hint)[1]
        return next(
            (f for k, v in value.items() if (f := _misfit(inner, v, f"{where}.{k}"))),
            None,
        )
    if origin is list:
        if not isinstance(value, list):
            return (where, hint, value)
        inner = typing.get_args(hint)[0]
        return next(
            (f for i, v in enumerate(value) if (f := _misfit(inner, v, f"{where}[{i}]"))),
            None,
        )
    check = _SCALARS.get(hint)
    return None if check is None or check[1](value) else (where, hint, value)


def misfit_fields(cls: Any, data: dict[str, Any], where: str = "") -> tuple[str, Any, Any] | None:
    """`data`'s first value of another type than `cls` declares for it, checked
    through nested lists, objects and records (a cell's samples); keys `cls` does not
    have are left to its reader."""
    hints = _hints(cls)
    for key, value in data.items():
        if key in hints and key not in _SELF_DECODED:
            found = _misfit(hints[key], value, f"{where}.{key}" if where else key)
            if found is not None:
                return found
    return None


def type_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a results.json's values, in one phrase naming the field, the
    value and what it should be; None when each has its declared type."""
    found = misfit_fields(RunResult, data)
    if found is None:
        return None
    where, hint, value = found
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return f"{where} is {shown}, not {_words(hint)}"
