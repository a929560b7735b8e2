"""A run's metadata: its host, versions, dataset, design and how it ended, typed.

It is stored as one JSON object (the store's runs.metadata, results.json's "metadata")
whose shape must not change: old stores keep loading and a report made from a file is the
report made from the store. So every record here reads its object into typed fields and
writes back the same object, key for key, in the same order, nulls included. A key this
version does not know (a newer version wrote it, or RunOptions.extra_metadata carried it),
or a known key whose value has a shape this version cannot read, is kept as it came in
`extra`, where it survives the round trip; readers then see the typed field as None. An
option stored as the user wrote it ("3%") is read into its typed value once, here, and
written back as it came while that value stands.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from functools import cache
from typing import Any, ClassVar, Self

from mallocbench.errors import MallocbenchError
from mallocbench.units import parse_min_effect

# Field metadata: the JSON key when it differs from the field's name; the Record class a
# JSON object is read into; or the Record class of each value of a name -> object map.
_KEY = "json_key"
_RECORD = "record"
_MAPPING = "mapping"
# A record whose keys sit in its parent's object itself (the host facts, kept flat since
# the first version): its field name marks where in the parent its keys go.
_FLAT = "flat"
# A reader of the JSON value into the field's type, raising MallocbenchError when it cannot.
_PARSE = "parse"


def _record(cls: type[Record]) -> Any:
    return field(default=None, metadata={_RECORD: cls})


def _mapping(cls: type[Record]) -> Any:
    return field(default=None, metadata={_MAPPING: cls})


def _flat(cls: type[Record]) -> Any:
    return field(default=None, metadata={_RECORD: cls, _FLAT: True})


# Callers pass a class, which is hashable; mypy takes the dataclass's instance __hash__ = None
# for the class's own, hence the arg-type ignores where it is called with a Record class.
@cache
def _slots(cls: type[Record]) -> dict[str, Field[Any]]:
    """Each JSON key the record reads -> its field (a flat record's keys -> the flat field)."""
    out: dict[str, Field[Any]] = {}
    for f in fields(cls):
        if f.name == "extra":
            continue
        if f.metadata.get(_FLAT):
            out.update(dict.fromkeys(_slots(f.metadata[_RECORD]), f))
        out.setdefault(_marker(f), f)
    return out


def _marker(f: Field[Any]) -> str:
    """The key that holds the field's place in the record's key order."""
    return f.name if f.metadata.get(_FLAT) else f.metadata.get(_KEY, f.name)


def _parsed(parse: Any) -> Any:
    return field(default=None, metadata={_PARSE: parse})


def _decode(f: Field[Any], value: Any) -> tuple[bool, Any]:
    """(whether this version reads the value, the typed value)."""
    if value is not None and _PARSE in f.metadata:
        try:
            return True, f.metadata[_PARSE](value)
        except MallocbenchError:
            return False, None
    if value is None or not (_RECORD in f.metadata or _MAPPING in f.metadata):
        return True, value
    if _RECORD in f.metadata:
        if isinstance(value, dict):
            return True, f.metadata[_RECORD].from_dict(value)
        return False, None
    if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
        return True, {k: f.metadata[_MAPPING].from_dict(v) for k, v in value.items()}
    return False, None


def _encode(f: Field[Any], value: Any) -> Any:
    if value is None:
        return None
    if _RECORD in f.metadata:
        return value.to_dict()
    if _MAPPING in f.metadata:
        return {k: v.to_dict() for k, v in value.items()}
    return value


@dataclass
class Record:
    """A JSON object read into typed fields that writes back the object it was read from.

    It remembers its keys in order, as a dict does: those read, then those assigned, in
    the order they were first assigned, None included. A new record holds the fields given
    as not None, and those of WRITTEN_WHEN_NONE: what its writer always writes, as null
    when unknown (None: every field).
    """

    WRITTEN_WHEN_NONE: ClassVar[frozenset[str] | None] = frozenset()

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)

    def __post_init__(self) -> None:
        always = self.WRITTEN_WHEN_NONE
        held = [
            _marker(f)
            for f in fields(self)
            if f.name != "extra"
            and (getattr(self, f.name) is not None or always is None or f.name in always)
        ]
        # Not a field: the order is how the record is written, not what it holds.
        self.__dict__["_keys"] = held + [k for k in self.extra if k not in held]
        # Parsed values as read: key -> (typed, the JSON value it was read from).
        self.__dict__["_as_read"] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        keys: list[str] | None = self.__dict__.get("_keys")
        if keys is None or name == "extra":
            return  # being constructed: __post_init__ takes the keys
        slot = next((f for f in fields(self) if f.name == name), None)
        if slot is not None:
            self.extra.pop(_marker(slot), None)
            if _marker(slot) not in keys:
                keys.append(_marker(slot))

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        """The JSON keys this version reads into fields (the rest go to `extra`)."""
        return frozenset(_slots(cls))  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        record = cls()
        record._keys.clear()
        record.update_from_dict(data)
        return record

    def update_from_dict(self, data: dict[str, Any]) -> None:
        """Read these keys over the record's, as dict.update would."""
        slots = _slots(type(self))  # type: ignore[arg-type]
        for key, value in data.items():
            slot = slots.get(key)
            if slot is not None and slot.metadata.get(_FLAT):
                self._read_flat(slot, key, value)
                continue
            readable, typed = _decode(slot, value) if slot is not None else (False, None)
            if readable and slot is not None:
                setattr(self, slot.name, typed)
                if _PARSE in slot.metadata:
                    self.__dict__["_as_read"][key] = (typed, value)
                continue
            if slot is not None:
                object.__setattr__(self, slot.name, None)
            self.extra[key] = value
            if key not in self._keys:
                self._keys.append(key)

    def _read_flat(self, slot: Field[Any], key: str, value: Any) -> None:
        inner = getattr(self, slot.name)
        if inner is None:
            inner = slot.metadata[_RECORD].from_dict({})
            setattr(self, slot.name, inner)
        inner.update_from_dict({key: value})

    def to_dict(self) -> dict[str, Any]:
        slots = _slots(type(self))  # type: ignore[arg-type]
        out: dict[str, Any] = {}
        for key in [*self._keys, *(k for k in self.extra if k not in self._keys)]:
            if key in self.extra:
                out[key] = self.extra[key]
                continue
            slot = slots[key]
            value = getattr(self, slot.name)
            if slot.metadata.get(_FLAT):
                out.update(value.to_dict() if value is not None else {})
            elif key in self.__dict__["_as_read"] and self.__dict__["_as_read"][key][0] == value:
                out[key] = self.__dict__["_as_read"][key][1]
            else:
                out[key] = _encode(slot, value)
        return out

    @property
    def _keys(self) -> list[str]:
        keys: list[str] = self.__dict__["_keys"]
        return keys


@dataclass
class HostFacts(Record):
    """The benchmark host as probes.system.host_facts reads it."""

    WRITTEN_WHEN_NONE = None

    name: str | None = field(default=None, metadata={_KEY: "host"})
    cpus: int | None = None
    cpu_model: str | None = None
    memory_bytes: int | None = None
    kernel: str | None = None
    os: str | None = None
    glibc: str | None = None
    thp: str | None = None  # the system's transparent huge pages mode
    thp_defrag: str | None = None
    python: str | None = None
    sysbench: str | None = None
    mallocbench: str | None = None


@dataclass
class HostRecord(Record):
    """One cluster host as its units report it (cluster.HOST_FACTS compares them)."""

    WRITTEN_WHEN_NONE = None

    host: HostFacts | None = _flat(HostFacts)
    server_versions: list[str] | None = None
    allocators: dict[str, str | None] | None = None  # setup -> its allocator's version


@dataclass
class AllocatorRecord(Record):
    WRITTEN_WHEN_NONE = None

    version: str | None = None
    library: str | None = None


@dataclass
class DatasetRecord(Record):
    WRITTEN_WHEN_NONE = None

    tables: int | None = None
    rows: int | None = None
    cache_bytes: int | None = None


@dataclass
class Durations(Record):
    """Seconds of warmup (at least; at most max_warmup_s until steady) and per cell."""

    WRITTEN_WHEN_NONE = None

    warmup_s: float | None = None
    max_warmup_s: float | None = None  # absent from runs before warmup-until-steady
    step_s: float | None = None


@dataclass
class DesignRecord(Record):
    """The design the experiment asked for, the one used, and why they differ."""

    WRITTEN_WHEN_NONE = frozenset({"asked", "used"})

    asked: str | None = None
    used: str | None = None
    slice_s: float | None = None
    slices_per_cell: int | None = None
    why: str | None = None
    alternate: str | None = None  # "turns"; absent: each slice a sysbench run of its own
    # Turns' unmeasured rounds before the measured; absent: 1, as before it was an option.
    settle_rounds: int | None = None
    # design "auto": the wall time the designs were compared in and each one's expected
    # interval width there, in points (None: it did not fit 2 starts).
    budget_s: float | None = None
    widths: dict[str, float | None] | None = None
    # The designs the calibration could not rank against the chosen one (their widths
    # are not reliably wider): the choice among them is a guess, not a finding.
    unranked: list[str] | None = None


@dataclass
class SoakRecord(Record):
    """What marks a run as a soak for every report (soak.soak_record writes it)."""

    WRITTEN_WHEN_NONE = None

    duration_s: float | None = None
    segment_s: float | None = None
    segments: int | None = None
    step: str | None = None
    threads: int | None = None
    design: str | None = None
    after_death: str | None = None
    lifetimes: str | None = None
    account: str | None = None


@dataclass
class WorkerCpuShare(Record):
    """The Dask worker's CPU seconds per second while its host measured, over units."""

    WRITTEN_WHEN_NONE = None

    median: float | None = None
    max: float | None = None
    units: int | None = None


@dataclass
class ClusterRecord(Record):
    WRITTEN_WHEN_NONE = frozenset({"scheduler", "resource"})

    scheduler: str | None = None
    resource: str | None = None
    worker_cpu_share: WorkerCpuShare | None = _record(WorkerCpuShare)


@dataclass
class AdaptiveRecord(Record):
    """How adaptive repetition (--target-ci) went. Old or hand-made records may hold
    anything here, so readers check what they use."""

    WRITTEN_WHEN_NONE = frozenset(
        {"target_ci_pct", "budget_s", "max_repeats", "rounds", "stopped", "not_converged"}
    )

    target_ci_pct: float | None = None
    budget_s: float | None = None
    max_repeats: int | None = None
    rounds: int | None = None
    stopped: str | None = None
    # analysis.convergence.WideCell.to_dict() of each cell still too wide
    not_converged: list[dict[str, Any]] | None = None
    stage1_blocks: int | None = None  # Stein's first stage, once it ran


@dataclass
class ReplayRun:
    """One replay of a trace under one setup: the replayer's JSON, or why there is none."""

    setup: str
    repeat: int
    status: str  # ok, crashed, failed
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def value(self, key: str) -> float | None:
        v = self.data.get(key)
        return float(v) if isinstance(v, (int, float)) and self.status == "ok" else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "setup": self.setup,
            "repeat": self.repeat,
            "status": self.status,
            "data": self.data,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplayRun:
        return cls(
            setup=str(data.get("setup", "")),
            repeat=int(data.get("repeat") or 0),
            status=str(data.get("status", "failed")),
            data=dict(data.get("data") or {}),
            error=data.get("error"),
        )


@dataclass
class ReplayRecord(Record):
    """A recorded trace replayed under each setup (`mallocbench replay`): the trace's
    account as the replayer checked it, how it was replayed, and every replay as the
    replayer reported it, appended as each one ends."""

    trace_path: str | None = None
    trace: dict[str, Any] | None = None  # mbreplay --check's account, without the curve
    ideal_curve: list[list[float]] | None = None  # [seconds, live requested bytes]
    timing: str | None = None  # recorded or none
    speed: float | None = None
    repeats: int | None = None
    setups: list[dict[str, Any]] | None = None  # name, allocator, knobs; the first is the base
    runs: list[dict[str, Any]] | None = None  # ReplayRun.to_dict() of each replay
    warnings: list[str] | None = None  # what a reader must know about the trace
    order: str | None = None  # recorded (one call at a time, as recorded) or threads

    @property
    def replay_runs(self) -> list[ReplayRun]:
        return [ReplayRun.from_dict(r) for r in self.runs or []]


@dataclass
class DecisionRecord(Record):
    """The experiment's [decision] table: what the run's recommendation weighs (the
    priorities, None for the default; the budgets)."""

    priorities: list[str] | None = None
    memory_budget_bytes: int | None = None
    max_loss: dict[str, float] | None = None  # criterion -> fraction


@dataclass
class RunMetadata(Record):
    """What a run records beside its cells: see the module's docstring for the shape."""

    host: HostFacts | None = _flat(HostFacts)
    experiment_file: str | None = None
    server_versions: list[str] | None = None
    allocators: dict[str, AllocatorRecord] | None = _mapping(AllocatorRecord)  # by setup
    dataset: DatasetRecord | None = _record(DatasetRecord)
    durations: Durations | None = _record(Durations)
    threads: list[int] | None = None
    engines: list[str] | None = None
    steps: list[str] | None = None
    repeats: int | None = None
    design: DesignRecord | None = _record(DesignRecord)
    # Old stores and hand-edited files may hold "3%": read as 0.03. One that is no fraction
    # stays in `extra`, and the analysis refuses it (analysis.summary.min_effect_of).
    min_effect: float | None = _parsed(parse_min_effect)
    soak: SoakRecord | None = _record(SoakRecord)
    hosts: dict[str, HostRecord] | None = _mapping(HostRecord)  # a cluster run's hosts
    cluster: ClusterRecord | None = _record(ClusterRecord)
    adaptive: AdaptiveRecord | None = _record(AdaptiveRecord)
    notes: list[str] | None = None
    # Where the servers kept their own state while the run ran, when run as root (a
    # runtime directory of the server's user, removed at the end); None: under the
    # run's directory.
    runtime_dir: str | None = None
    # A replay of a recorded trace: a run of its own, whose results are these, not cells.
    replay: ReplayRecord | None = _record(ReplayRecord)
    decision: DecisionRecord | None = _record(DecisionRecord)


__all__ = [
    "AdaptiveRecord",
    "AllocatorRecord",
    "ClusterRecord",
    "DatasetRecord",
    "DecisionRecord",
    "DesignRecord",
    "Durations",
    "HostFacts",
    "HostRecord",
    "Record",
    "ReplayRecord",
    "ReplayRun",
    "RunMetadata",
    "SoakRecord",
    "WorkerCpuShare",
]
