"""Pattern runs as records: what `mallocbench patterns` planned, where it ran, and each
run of the driver. The results store keeps them beside server runs and replays; analysis
and the reports read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RESULT_COLUMNS = (
    "ops_per_sec",
    "peak_rss_bytes",
    "final_rss_bytes",
    "live_bytes",
    "peak_live_bytes",
    "rss_per_live",
    "peak_rss_per_live",
)

# What a result keeps of the driver's numbers at its top level (the columns and two more).
METRICS = (*RESULT_COLUMNS, "baseline_rss_bytes", "peak_vsz_bytes")

# A cell of a pattern run: case, setup, threads, repeat (PatternResult.key).
PatternKey = tuple[str, str, int, int]

# A driver option's value, as the experiment checked it (see patterns/experiment._option_value).
OptionValue = str | int | float


@dataclass
class Case:
    """One pattern with its options, run under several setups and thread counts.

    The experiment plans with it and the run keeps it as planned (RunModel.cases).
    """

    name: str
    pattern: str
    options: dict[str, Any]
    threads: list[int]
    setups: list[str]
    base: str
    seconds: float | None
    ops: int | None
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pattern": self.pattern,
            "options": dict(self.options),
            "threads": list(self.threads),
            "setups": list(self.setups),
            "base": self.base,
            "seconds": self.seconds,
            "ops": self.ops,
            "seed": self.seed,
        }


# --- records ------------------------------------------------------------------------
#
# The JSON columns (pattern_runs.model, .metadata and pattern_results.data) keep the shape
# the dict-based code wrote, key for key and in the same order: every to_dict() below
# writes exactly that shape, so old stores load without a migration and re-exported
# reports stay byte-identical. from_dict() reads missing keys as None (or empty) rather
# than failing, since a report of an old run should still print.


@dataclass(frozen=True)
class ModelSetup:
    """One setup as planned: allocator, its knobs and variant options."""

    name: str
    allocator: str
    allocator_version: str | None
    allocator_library: str | None
    knobs: dict[str, str]
    options: dict[str, OptionValue]
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "allocator": self.allocator,
            "allocator_version": self.allocator_version,
            "allocator_library": self.allocator_library,
            "knobs": dict(self.knobs),
            "options": dict(self.options),
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSetup:
        return cls(
            name=data["name"],
            allocator=data["allocator"],
            allocator_version=data.get("allocator_version"),
            allocator_library=data.get("allocator_library"),
            knobs=dict(data.get("knobs") or {}),
            options=dict(data.get("options") or {}),
            description=data.get("description") or "",
        )


def _case(data: dict[str, Any]) -> Case:
    """A stored case: the experiment's own Case, read back from its to_dict()."""
    return Case(
        name=data["name"],
        pattern=data["pattern"],
        options=dict(data.get("options") or {}),
        threads=list(data["threads"]),
        setups=list(data["setups"]),
        base=data["base"],
        seconds=data.get("seconds"),
        ops=data.get("ops"),
        seed=data.get("seed", 1),
    )


@dataclass(frozen=True)
class RunModel:
    """What a run planned (PatternExperiment.to_dict() as stored): setups, cases, base."""

    name: str
    base: str
    repeats: int
    setups: list[ModelSetup]
    cases: list[Case]  # the planned cases, as the experiment defines them

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base": self.base,
            "repeats": self.repeats,
            "setups": [s.to_dict() for s in self.setups],
            "cases": [c.to_dict() for c in self.cases],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunModel:
        return cls(
            name=data["name"],
            base=data["base"],
            repeats=data["repeats"],
            setups=[ModelSetup.from_dict(s) for s in data.get("setups", [])],
            cases=[_case(c) for c in data.get("cases", [])],
        )


@dataclass(frozen=True)
class PatternRunMetadata:
    """Where and how a run ran: host, kernel, glibc, the driver and the command line."""

    host: str | None
    cpus: int | None
    kernel: str | None
    glibc: str | None
    python: str | None
    driver: str | None
    command: list[str]
    started: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "cpus": self.cpus,
            "kernel": self.kernel,
            "glibc": self.glibc,
            "python": self.python,
            "driver": self.driver,
            "command": list(self.command),
            "started": self.started,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PatternRunMetadata:
        return cls(
            host=data.get("host"),
            cpus=data.get("cpus"),
            kernel=data.get("kernel"),
            glibc=data.get("glibc"),
            python=data.get("python"),
            driver=data.get("driver"),
            command=list(data.get("command") or []),
            started=data.get("started"),
        )


@dataclass(frozen=True)
class PatternResult:
    """One run of the driver in one cell (case x setup x threads x repeat).

    The metrics are the driver's numbers lifted to the top (None where the driver gave
    none, e.g. rss_per_live when nothing stays live, or every one when it crashed);
    `driver` is the driver's whole JSON output, kept verbatim because its shape belongs
    to native/mbpatterns, not to this package.
    """

    case: str
    pattern: str
    setup: str
    threads: int
    repeat: int
    status: str  # ok, crashed (signal), failed (other error)
    error: str | None
    allocator: str
    allocator_library: str | None
    knobs: dict[str, str]
    options: dict[str, OptionValue]
    command: list[str]
    finished_at: float | None
    ops_per_sec: float | None = None
    peak_rss_bytes: int | None = None
    final_rss_bytes: int | None = None
    live_bytes: int | None = None
    peak_live_bytes: int | None = None
    rss_per_live: float | None = None
    peak_rss_per_live: float | None = None
    baseline_rss_bytes: int | None = None
    peak_vsz_bytes: int | None = None
    driver: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> PatternKey:
        """The cell, as PlannedRun.key spells it."""
        return (self.case, self.setup, self.threads, self.repeat)

    def metric(self, name: str) -> float | None:
        """One of METRICS by name (the summary picks its RSS metric at run time)."""
        if name not in METRICS:
            raise KeyError(name)
        value: float | None = getattr(self, name)
        return value

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "case": self.case,
            "pattern": self.pattern,
            "setup": self.setup,
            "threads": self.threads,
            "repeat": self.repeat,
            "status": self.status,
            "error": self.error,
            "allocator": self.allocator,
            "allocator_library": self.allocator_library,
            "knobs": dict(self.knobs),
            "options": dict(self.options),
            "command": list(self.command),
            "finished_at": self.finished_at,
        }
        record.update({m: getattr(self, m) for m in METRICS})
        record["driver"] = self.driver
        return record

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PatternResult:
        return cls(
            case=data["case"],
            pattern=data["pattern"],
            setup=data["setup"],
            threads=data["threads"],
            repeat=data["repeat"],
            status=data["status"],
            error=data.get("error"),
            allocator=data.get("allocator", ""),
            allocator_library=data.get("allocator_library"),
            knobs=dict(data.get("knobs") or {}),
            options=dict(data.get("options") or {}),
            command=list(data.get("command") or []),
            finished_at=data.get("finished_at"),
            driver=data.get("driver") or {},
            **{m: data.get(m) for m in METRICS},
        )


@dataclass(frozen=True)
class PatternRun:
    """A stored run: its row in pattern_runs and every result, in the order measured.

    `started_at` and `finished_at` (epoch seconds) are columns of their own, not part of
    to_dict(): the exported patterns.json has never carried them (metadata.started does).
    """

    run_id: str
    experiment: str
    base_setup: str
    experiment_text: str
    model: RunModel
    metadata: PatternRunMetadata
    status: str  # running, finished, interrupted, failed
    results: list[PatternResult]
    started_at: float | None = None
    finished_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The run as patterns.json has always opened (the summary is added there)."""
        return {
            "run_id": self.run_id,
            "experiment": self.experiment,
            "base_setup": self.base_setup,
            "experiment_text": self.experiment_text,
            "model": self.model.to_dict(),
            "metadata": self.metadata.to_dict(),
            "status": self.status,
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PatternRun:
        return cls(
            run_id=data["run_id"],
            experiment=data["experiment"],
            base_setup=data["base_setup"],
            experiment_text=data.get("experiment_text", ""),
            model=RunModel.from_dict(data["model"]),
            metadata=PatternRunMetadata.from_dict(data.get("metadata") or {}),
            status=data["status"],
            results=[PatternResult.from_dict(r) for r in data.get("results", [])],
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
        )
