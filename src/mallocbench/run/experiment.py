"""An experiment as a run holds it: setups, steps, engines, dataset, design and timing,
and the sessions and cells a plan of it is made of (run.loading reads it from a file,
run.planning orders its cells).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mallocbench.allocators.base import Allocator
from mallocbench.analysis.designs import DEFAULT_SETTLE_ROUNDS
from mallocbench.analysis.steady import DEFAULT_MAX_WARMUP_S
from mallocbench.run.dataset import Dataset
from mallocbench.run.dialect import (
    MAX_PLANNED,
)
from mallocbench.run.soak_events import SoakEvent
from mallocbench.servers import families
from mallocbench.servers.engines import Engine
from mallocbench.workloads.catalogue import Step

THP_MODES = ("always", "madvise", "never")


# Bounds on what one experiment may ask for. Beyond them a value is a typo or a unit
# mix-up (rows given in bytes, seconds in milliseconds), not a plan.
MAX_TABLES = 1024


MAX_ROWS = 10**9  # per table


MAX_DURATION_S = 24 * 3600  # warmup or measured seconds of one cell


MAX_CELLS = MAX_PLANNED


MAX_TITLE = 200  # characters of the experiment's name


# A datadir holds more than the tables: the 256 MiB redo log the innodb engine sets, the
# system tablespace and the mysql schema (273 MiB measured with 1,000 rows).
DATADIR_OVERHEAD_BYTES = 320 << 20


# The smallest memory cap a setup may have. MariaDB 10.11 with a 32 MiB cache peaks at
# 109 MiB while starting (InnoDB; MyRocks 76 MiB): under this the server is killed before
# the first cell, which measures nothing about the allocator.
MIN_MEMORY_LIMIT = 128 << 20


# How a run orders its measurements (see `blocks` and `concurrency_problem`).
INTERLEAVED = "interleaved"


SEQUENTIAL = "sequential"


# Chosen at the start of the run from a calibration (calibrate.auto): interleaved
# runs, interleaved turns or sequential, whichever gives the narrowest interval here.
AUTO = "auto"


DESIGNS = (INTERLEAVED, SEQUENTIAL, AUTO)


# How interleaved setups alternate (see `alternate` and measure.measure_turns): each
# slice a sysbench run of its own, or turns of clients that stay connected.
RUNS = "runs"


TURNS = "turns"


ALTERNATIONS = (RUNS, TURNS)


# A slice that is a sysbench run of its own drops its first second (clients connecting),
# so a shorter one would be mostly start-up.
MIN_RUN_SLICE_S = 3.0


DEFAULT_SLICE_S = 5.0


# A turn loses nothing to connecting: a second is enough, and short turns share the
# machine's drift best.
MIN_TURN_S = 1.0


DEFAULT_TURN_S = 1.0


MAX_SETTLE_ROUNDS = 100  # [durations] settle; the default is analysis.designs'


# What one idle private server takes beside its cache (MariaDB 10.11: 110-180 MiB at
# start, plus connection and per-thread buffers under 8-16 clients).
SERVER_BASE_BYTES = 400 << 20


# Servers that stay up at once may take this share of the memory available at plan time;
# beyond it the run measures one setup's server at a time.
CONCURRENT_MEMORY_SHARE = 0.5


@dataclass
class Setup:
    """server build + config overrides + allocator + knobs, under a short name."""

    name: str
    allocator: Allocator
    allocator_spec: str
    knobs: dict[str, str] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    basedir: str | None = None
    cpus: str | None = None
    thp: str | None = None  # transparent huge pages for this setup's server, if set
    # The cap on the memory cgroup the server runs in (None: no cgroup of its own).
    memory_limit_bytes: int | None = None
    # The server's CPU time per second of wall time, in CPUs (0.95: 95% of one CPU), through
    # a cpu cgroup of its own; None: unlimited.
    cpu_quota: float | None = None
    description: str = ""
    # Record the server's allocation calls (the replay shim) in each measured cell.
    record: bool = False


@dataclass
class Experiment:
    name: str
    text: str
    setups: list[Setup]
    base: str
    engines: list[Engine]
    steps: list[Step]
    threads: list[int]
    dataset: Dataset
    # Warming runs until the throughput is steady (analysis.steady), at least warmup_s
    # and at most max_warmup_s; warmup_s = 0 turns warming off.
    warmup_s: float = 2.0
    max_warmup_s: float = DEFAULT_MAX_WARMUP_S
    duration_s: float = 10.0
    # Measured seconds are cut into slices this long, alternated between the setups'
    # servers (design "interleaved"): sysbench runs of their own, or turns.
    slice_s: float = DEFAULT_SLICE_S
    design: str = INTERLEAVED
    alternate: str = RUNS
    settle_rounds: int = DEFAULT_SETTLE_ROUNDS  # alternate "turns": unmeasured rounds first
    # With design = "auto", once chosen: how and why (what the calibration predicted).
    design_why: str | None = None
    # design = "auto": the wall time the designs are compared in (None: the experiment's
    # own as runs), and once chosen, each design's expected width there (None: no fit).
    budget_s: float | None = None
    design_widths: dict[str, float | None] | None = None
    design_unranked: list[str] | None = None  # the designs the calibration could not rank
    design_budget_s: float | None = None
    repeats: int = 1
    min_effect: float = 0.0  # relative changes smaller than this are reported as "same"
    server_config: dict[str, str] = field(default_factory=dict)
    basedir: str | None = None
    port: int | None = None
    source: str = ""
    step_specs: list[str] = field(default_factory=list)  # as written: names, groups
    # [[soak.event]]: what a soak runs beside its load (run.soak_events); `run` refuses them.
    events: tuple[SoakEvent, ...] = ()
    decision: Decision | None = None  # [decision]: what the run's recommendation weighs
    family: str = families.DEFAULT  # [server] family: the server every setup runs

    def setup(self, name: str) -> Setup:
        return next(s for s in self.setups if s.name == name)


@dataclass(frozen=True)
class Decision:
    """The [decision] table: priorities (None: the default) and the budgets."""

    priorities: tuple[str, ...] | None = None
    memory_budget_bytes: int | None = None
    max_loss: dict[str, float] = field(default_factory=dict)  # criterion -> fraction


@dataclass(frozen=True)
class PlannedCell:
    setup: str
    engine: str
    step: Step
    threads: int
    repeat: int

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return (self.setup, self.engine, self.step.label, self.threads, self.repeat)


@dataclass(frozen=True)
class PlannedSession:
    """One server lifetime: a setup on an engine for one repeat, running its cells."""

    setup: str
    engine: str
    repeat: int
    cells: tuple[PlannedCell, ...]

    @property
    def id(self) -> str:
        return f"{self.setup}.{self.engine}.r{self.repeat}"
