"""Experiment files: TOML -> validated model -> plan of cells in interleaved order.

Every validation error names the key and how to fix it, in one line; a file's problems
are collected and reported together, each at its line (mallocbench.inputs.validation). The keys
each table takes are listed once, in mallocbench.run.dialect, with the [[setup]] checks that
`patterns` files share.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import os
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

from mallocbench.allocators.base import Allocator
from mallocbench.analysis.recommend import parse_max_loss, parse_priorities
from mallocbench.analysis.steady import DEFAULT_MAX_WARMUP_S
from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.files import cache_root
from mallocbench.inputs.tomlpos import KeyPath
from mallocbench.inputs.validation import Problems, read_toml
from mallocbench.run.dataset import Dataset
from mallocbench.run.dialect import (
    MAX_PLANNED,
    MAX_REPEATS,
    RUN_DATASET,
    RUN_DECISION,
    RUN_DURATIONS,
    RUN_SERVER,
    RUN_TOP,
    CommonSetup,
    SetupTable,
    common_setups,
    setup_names,
    setup_tables,
    string_map,
)
from mallocbench.run.soak_events import SoakEvent, parse_events
from mallocbench.servers import engines
from mallocbench.servers.cgroup import capping_problem, cpu_capping_problem
from mallocbench.servers.engines import Engine
from mallocbench.servers.options import check_config
from mallocbench.units import (
    gb,
    parse_count,
    parse_duration,
    parse_fraction,
    parse_min_effect,
    parse_size,
)
from mallocbench.workloads.catalogue import Step, parse_steps

THP_MODES = ("always", "madvise", "never")

# Bounds on what one experiment may ask for. Beyond them a value is a typo or a unit
# mix-up (rows given in bytes, seconds in milliseconds), not a plan.
MAX_TABLES = 1024
MAX_ROWS = 10**9  # per table
MAX_DURATION_S = 24 * 3600  # warmup or measured seconds of one cell
MAX_CELLS = MAX_PLANNED
MAX_TITLE = 200  # characters of the experiment's name

# Disk a loaded sysbench table takes per row: id INT + k INT + c CHAR(120) + pad CHAR(60)
# are 188 bytes, plus InnoDB's 18 bytes of row header and transaction fields, page fill
# and the secondary index on k. Measured on MariaDB 10.11 with 200,000 rows: 272 bytes
# (InnoDB), 208 (MyRocks).
BYTES_PER_ROW = 280
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


def _threads_for(experiment: Experiment, step: Step) -> list[int]:
    # Insert-benchmark steps fix their own client count (1 loader; 1 query + 2 background
    # writers), so they run once with that count.
    return [step.definition.threads] if step.definition.threads else experiment.threads


_Item = TypeVar("_Item")


def in_block_order(items: list[_Item], repeat: int) -> list[_Item]:
    """The order block `repeat` starts, warms and measures its setups in: as listed on
    even repeats, reversed on odd ones, so drift and any advantage of a place in the
    order reach every setup alike (calibrate's copies take the same places)."""
    return list(items) if repeat % 2 == 0 else items[::-1]


def _round(
    experiment: Experiment,
    repeat: int,
    wanted: set[tuple[str, str, str, int]] | None = None,
) -> list[PlannedSession]:
    """One repeat of every setup, in the direction the repeat's parity gives.

    `wanted` (setup, engine, step label, threads) limits the round to those cells.
    """
    order = in_block_order(experiment.setups, repeat)
    sessions = []
    for engine in experiment.engines:
        for setup in order:
            cells = tuple(
                PlannedCell(setup.name, engine.name, step, threads, repeat)
                for step in experiment.steps
                for threads in _threads_for(experiment, step)
                if wanted is None or (setup.name, engine.name, step.label, threads) in wanted
            )
            if cells:
                sessions.append(PlannedSession(setup.name, engine.name, repeat, cells))
    return sessions


def plan(experiment: Experiment) -> list[PlannedSession]:
    """Sessions in interleaved order: setups A B C, then C B A, ... so drift cancels."""
    return [s for repeat in range(experiment.repeats) for s in _round(experiment, repeat)]


def blocks(sessions: list[PlannedSession]) -> list[list[PlannedSession]]:
    """Sessions grouped into blocks: one engine in one repeat, every setup's server.

    In the interleaved design a block's servers are up at once and their cells' slices
    alternate; a block is the unit relative values pair (analysis.stats.blocked_ratios).
    """
    grouped: dict[tuple[str, int], list[PlannedSession]] = {}
    for session in sessions:
        grouped.setdefault((session.engine, session.repeat), []).append(session)
    return list(grouped.values())


def slices_per_cell(experiment: Experiment) -> int:
    """How many slices a cell's measured seconds are cut into (design interleaved)."""
    return max(1, round(experiment.duration_s / experiment.slice_s))


def concurrency_problem(experiment: Experiment) -> str | None:
    """Why the setups' servers cannot be up at once, or None when they can."""
    if experiment.design != INTERLEAVED or len(experiment.setups) < 2:
        return None
    system_thp = sorted({s.thp for s in experiment.setups if s.thp in ("always", "madvise")})
    if system_thp:
        return (
            f"THP {system_thp[0]} is a system-wide mode, so setups asking for it cannot "
            "share the machine with others"
        )
    per_server = experiment.dataset.cache_bytes + SERVER_BASE_BYTES
    needed = sum(min(s.memory_limit_bytes or per_server, per_server) for s in experiment.setups)
    available = psutil.virtual_memory().available
    if needed > available * CONCURRENT_MEMORY_SHARE:
        return (
            f"{len(experiment.setups)} servers with a {gb(experiment.dataset.cache_bytes)} GiB "
            f"cache need about {gb(needed)} GiB, more than half of the {gb(available)} GiB "
            "available"
        )
    return None


def plan_extra_round(
    experiment: Experiment, repeat: int, cells: set[tuple[str, str, str, int]] | None
) -> list[PlannedSession]:
    """One more interleaved repeat of just these (setup, engine, step, threads) cells.

    Adaptive repetition asks for it (None: every cell); the caller includes the base
    setup's cells, since every relative value needs both sides.
    """
    return _round(experiment, repeat, cells)


# --- loading and validation -----------------------------------------------------------------


def _expect(value: object, kind: type | tuple[type, ...], key: str, hint: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise MallocbenchError(f"{key} = {value!r} is invalid: {hint}")
    return value


def _cpu_list(value: object, key: str) -> str | None:
    """A taskset CPU list; a whole number N means the first N CPUs (a vCPU-count sweep)."""
    if value is None:
        return None
    available = sorted(os.sched_getaffinity(0))
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= len(available):
            raise MallocbenchError(
                f"{key} = {value} CPUs, but {len(available)} are available here: "
                f'use 1-{len(available)}, or a CPU list such as "0-3"'
            )
        return ",".join(str(c) for c in available[:value])
    text = str(value).strip()
    if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", text):
        raise MallocbenchError(
            f'{key} = {value!r} is not a CPU list: write e.g. "0-3" or "0,2", or a count such as 4'
        )
    wanted = _expand_cpus(text)
    missing = sorted(wanted - set(available))
    if missing or not wanted:
        raise MallocbenchError(
            f"{key} = {value!r} names CPU {missing[0] if missing else '?'}, which this machine "
            f"does not offer: available are {_ranges(available)}"
        )
    return text


def _expand_cpus(text: str) -> set[int]:
    """ "0-2,5" -> {0, 1, 2, 5}."""
    wanted: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        wanted.update(range(int(first), int(last or first) + 1))
    return wanted


def _ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5", as taskset and lscpu write CPU lists."""
    parts = []
    for _, run in itertools.groupby(enumerate(cpus), key=lambda pair: pair[1] - pair[0]):
        members = [cpu for _, cpu in run]
        parts.append(str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}")
    return ",".join(parts)


def _bounded_int(value: object, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise MallocbenchError(f"{key} = {value!r} is invalid: give a whole number {low}-{high:,}")
    return value


def _seconds(value: object, key: str, low: float) -> float:
    """Seconds from a number or a duration as on the command line ("90s", "2m")."""
    given = value
    if isinstance(value, str):
        value = parse_duration(value, key, allow_zero=True)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MallocbenchError(f'{key} = {value!r} is invalid: give seconds, e.g. 60 or "1m"')
    # Compared before float(): an int too large for a float would raise, and NaN fails
    # every comparison, so it lands here too.
    if not low <= value <= MAX_DURATION_S:
        raise MallocbenchError(
            f"{key} = {given!r} is out of range: give {low:g} to {MAX_DURATION_S} seconds (24 h)"
        )
    return float(value)


def _slice(value: object, duration: float, alternate: str) -> float:
    """Seconds per slice: given, or the default of `alternate` (at most the whole step).

    A run's default is 5 s, and the whole step when that is shorter than 2 slices.
    """
    if value is None:
        if alternate == TURNS:
            return min(duration, DEFAULT_TURN_S)
        return duration if duration < 2 * DEFAULT_SLICE_S else DEFAULT_SLICE_S
    low = MIN_TURN_S if alternate == TURNS else MIN_RUN_SLICE_S
    slice_s = _seconds(value, "durations.slice", low)
    if slice_s > duration:
        raise MallocbenchError(
            f"durations.slice = {value!r} is longer than durations.step = {duration:g}: a "
            "cell's measured seconds are cut into slices; give a slice of at most the step"
        )
    return slice_s


def _check_memory(dataset: Dataset) -> None:
    """A cache the machine cannot hold would only measure swapping or the OOM killer."""
    ram = psutil.virtual_memory().total
    if dataset.cache_bytes > ram:
        raise MallocbenchError(
            f"dataset.cache = {gb(dataset.cache_bytes)} GiB is more than this machine's "
            f"{gb(ram)} GiB of RAM: give a smaller cache"
        )


def _memory_limit(value: object, key: str) -> int | None:
    """A setup's memory cap in bytes; None when not given."""
    if value is None:
        return None
    limit = parse_size(value, key)
    if limit < MIN_MEMORY_LIMIT:
        raise MallocbenchError(
            f"{key} = {value!r} is below {MIN_MEMORY_LIMIT >> 20} MiB, the smallest cap: the "
            f"server needs about 110 MiB just to start; give at least {MIN_MEMORY_LIMIT >> 20}M"
        )
    ram = psutil.virtual_memory().total
    if limit > ram:
        raise MallocbenchError(
            f"{key} = {value!r} is more than this machine's {gb(ram)} GiB of RAM, so it could "
            f"never act: give at most {ram >> 20}M, or no memory_limit"
        )
    return limit


def _cpu_quota(value: object, label: str, cpus: str | None) -> float | None:
    """CPUs of time per second from "95%": a share of the setup's CPUs (all, if unset).

    A quota of every CPU but a little is the smallest handicap that can be given a server
    on purpose: benchmarks use it as a known effect.
    """
    if value is None:
        return None
    key = f"{label}.cpu_quota"
    share = parse_fraction(value, key, upper=1e6)
    if share <= 0:
        raise MallocbenchError(f"{key} = {value!r} would stop the server: give e.g. 95%")
    if share > 1:
        raise MallocbenchError(
            f"{key} = {value!r} is more than all of the setup's CPUs: give at most 100%, e.g. 95%"
        )
    problem = cpu_capping_problem()
    if problem is not None:
        raise MallocbenchError(f"{key} needs a writable cpu cgroup, but {problem}")
    count = len(_expand_cpus(cpus)) if cpus else (os.cpu_count() or 1)
    return share * count


def _check_capping(name: str) -> None:
    """A cap is only real in a memory cgroup of its own: say now if none can be made."""
    problem = capping_problem()
    if problem is not None:
        raise MallocbenchError(
            f"setup {name} has a memory_limit, which needs a writable memory cgroup, but {problem}"
        )


def dataset_disk_bytes(dataset: Dataset) -> int:
    """About what one engine's loaded copy of `dataset` takes on disk."""
    return dataset.tables * dataset.rows * BYTES_PER_ROW + DATADIR_OVERHEAD_BYTES


def _existing_ancestor(path: Path) -> Path:
    # The cache directory is created on first use; its file system is what counts.
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_disk(dataset: Dataset, engine_list: list[Engine]) -> None:
    """Refuse a dataset the dataset cache cannot hold, before hours of loading fail."""
    cache = cache_root()
    needed = dataset_disk_bytes(dataset) * len(engine_list)
    try:
        free = shutil.disk_usage(_existing_ancestor(cache)).free
    except OSError:
        return  # the loader reports an unusable cache directory with its own message
    if needed > free:
        raise MallocbenchError(
            f"dataset of {dataset.tables} x {dataset.rows:,} rows needs about "
            f"{gb(needed)} GiB on disk ({BYTES_PER_ROW} bytes a row, one copy per engine) "
            f"but the dataset cache {cache} has {gb(free)} GiB free: use fewer rows or "
            "tables, or point MALLOCBENCH_CACHE at a larger disk"
        )


def apply_overrides(
    data: dict[str, Any], overrides: list[str], overridden: dict[KeyPath, str] | None = None
) -> list[str]:
    """Apply `--set KEY=VALUE` overrides to parsed TOML; returns them as TOML comment lines.

    KEY is dotted (durations.step, dataset.rows, server.config.sort_buffer_size); a setup
    is addressed by name (setup.je.knobs.MALLOC_CONF). VALUE is read as a TOML value
    (10, [1, 8], "2%") and otherwise taken as a string (512M, point-query), so the shell
    needs no TOML quoting. The result is validated like the file itself. `overridden`,
    when given, receives the data path each set with its `--set`, so that a problem in an
    overridden value is reported at the option rather than at a line of the file.
    """
    recorded = []
    overridden = {} if overridden is None else overridden
    for item in overrides:
        key, sep, raw = item.partition("=")
        path = [part.strip() for part in key.split(".")]
        if not sep or not all(path):
            raise MallocbenchError(
                f"--set {item!r} is not KEY=VALUE: write e.g. --set durations.step=10"
            )
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        shown = _shown_set(f"{key.strip()}={raw.strip()}")
        overridden[_set_path(data, path, value, item)] = shown
        recorded.append(f"# {shown}")
    return recorded


def _shown_set(item: str) -> str:
    """`--set KEY=VALUE` as messages and the stored text show it: a line break or
    another control character escaped, as repr writes it, so a value can neither add a
    line to the terminal nor a TOML line after the comment that records it."""
    return f"--set {item}" if item.isprintable() else f"--set {item!r}"


def recorded_set(shown: str) -> str:
    """The KEY=VALUE a stored `# --set ...` line records (the inverse of _shown_set)."""
    if shown[:1] in ("'", '"') and shown[-1:] == shown[:1]:
        with contextlib.suppress(ValueError, SyntaxError):
            item = ast.literal_eval(shown)
            if isinstance(item, str):
                return item
    return shown


def _set_path(data: dict[str, Any], path: list[str], value: object, item: str) -> KeyPath:
    """Set `value` at `path`; returns the data path it set (a setup by its index)."""
    node: Any = data
    for depth, part in enumerate(path[:-1]):
        if part == "setup" and depth == 0:
            setups = node.get("setup") or []
            name = path[1] if len(path) > 2 else None
            match = [
                i for i, s in enumerate(setups) if isinstance(s, dict) and s.get("name") == name
            ]
            if not match:
                names = ", ".join(str(s.get("name")) for s in setups if isinstance(s, dict))
                raise MallocbenchError(
                    f"--set {item!r}: no setup named {name!r}; setups: {names or 'none'} "
                    "(address one as setup.NAME.KEY=VALUE)"
                )
            node = setups[match[0]]
            rest = path[2:]
            for inner in rest[:-1]:
                node = _child_table(node, inner, item)
            node[rest[-1]] = value
            return ("setup", match[0], *rest)
        node = _child_table(node, part, item)
    node[path[-1]] = value
    return tuple(path)


def _child_table(node: dict[str, Any], key: str, item: str) -> dict[str, Any]:
    child = node.setdefault(key, {})
    if not isinstance(child, dict):
        raise MallocbenchError(f"--set {item!r}: {key} is a value, not a table")
    return child


def load(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """An experiment file, validated whole: every problem in it is reported at once."""
    path = Path(path)
    text, data = read_toml(path)
    overridden: dict[KeyPath, str] = {}
    if overrides:
        recorded = apply_overrides(data, overrides, overridden)
        # The stored text says what ran: the file, then what the command line changed.
        text = text.rstrip("\n") + "\n\n" + "\n".join(recorded) + "\n"
    experiment = from_dict(data, text, path.stem, source=str(path), overridden=overridden)
    experiment.source = str(path)
    return experiment


def from_dict(
    data: dict[str, Any],
    text: str = "",
    default_name: str = "experiment",
    source: str | None = None,
    overridden: dict[KeyPath, str] | None = None,
) -> Experiment:
    """The validated experiment, or one error listing every problem of `data`.

    With `source` (the file `text` was read from) each problem carries its line.
    """
    problems = Problems()
    problems.unknown_keys((), data, RUN_TOP, "the experiment")
    server = _server(problems, data)
    tables = setup_tables(problems, data, older=False)
    setups = _setups(problems, tables, server)
    base = _base(problems, data, tables, setups)
    engine_list = _engines(problems, data)
    steps, step_specs = _steps(problems, data)
    threads = _threads(problems, data)
    repeats = problems.check(("repeats",), _repeats, data.get("repeats", 1))
    min_effect = problems.check(("min_effect",), parse_min_effect, data.get("min_effect", 0))
    dataset = _dataset(problems, data, engine_list)
    alternate = problems.check(("alternate",), _alternate, data.get("alternate", RUNS))
    timing = _durations(problems, data, alternate or RUNS)
    design = problems.check(("design",), _design, data.get("design", INTERLEAVED))
    budget = None
    if "budget" in data:
        budget = problems.check(("budget",), _budget, data["budget"], design)
    events = parse_events(problems, data)
    name = problems.check(("name",), _name, data.get("name", default_name))
    decision = _decision(problems, data)
    problems.raise_if_any(source, text, overridden)
    experiment = Experiment(
        name=str(name),
        text=text,
        setups=setups,
        base=base,
        engines=engine_list,
        steps=steps,
        step_specs=step_specs,
        threads=sorted(set(threads)),
        dataset=dataset,
        warmup_s=timing.warmup,
        max_warmup_s=timing.max_warmup,
        duration_s=timing.step,
        slice_s=timing.slice,
        design=str(design),
        alternate=str(alternate),
        repeats=int(repeats or 1),
        budget_s=budget,
        min_effect=float(min_effect or 0),
        server_config=server.config,
        basedir=server.basedir,
        port=server.port,
        events=events,
        decision=decision,
    )
    # Checked once the parts are right: a count of broken parts would mislead.
    problems.check(("repeats",) if "repeats" in data else (), _check_cells, experiment)
    problems.raise_if_any(source, text, overridden)
    return experiment


def _decision(problems: Problems, data: dict[str, Any]) -> Decision | None:
    """The [decision] table, each key checked: the names `recommend --priority` and
    --max-loss take, a size for the memory budget."""
    if "decision" not in data:
        return None
    hint = 'write a [decision] table, e.g. max_loss = { rss = "10%" }'
    raw = problems.check(("decision",), _expect, data["decision"], dict, "decision", hint)
    if raw is None:
        return None
    problems.unknown_keys(("decision",), raw, RUN_DECISION, "[decision]")
    priorities = None
    if "priority" in raw:
        priorities = problems.check(("decision", "priority"), _priorities, raw["priority"])
    budget = None
    if "memory_budget" in raw:
        budget = problems.check(
            ("decision", "memory_budget"),
            parse_size,
            raw["memory_budget"],
            "decision.memory_budget",
        )
    losses = problems.check(("decision", "max_loss"), _max_loss, raw.get("max_loss", {}))
    return Decision(priorities, budget, losses or {})


def _priorities(value: object) -> tuple[str, ...]:
    names = value if isinstance(value, list) else [value]
    return parse_priorities(",".join(str(n) for n in names), "decision.priority")


def _max_loss(value: object) -> dict[str, float]:
    _expect(value, dict, "decision.max_loss", 'write e.g. max_loss = { rss = "10%" }')
    items = [f"{k}={v}" for k, v in value.items()]  # type: ignore[attr-defined]
    return parse_max_loss(items, "decision.max_loss")


@dataclass
class _Server:
    """The [server] table: what every setup's server shares."""

    basedir: str | None = None
    port: int | None = None
    config: dict[str, str] = field(default_factory=dict)
    memory_limit: int | None = None
    record: bool = False  # the experiment's `record`: every setup's default


def _record(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise MallocbenchError(
            f"{key} = {value!r} is not true or false: write {key.rsplit('.', 1)[-1]} = true "
            "to record the server's allocation calls in each measured cell"
        )
    return value


def _server(problems: Problems, data: dict[str, Any]) -> _Server:
    raw = problems.check(
        ("server",), _expect, data.get("server", {}), dict, "server", "write a [server] table"
    )
    record = problems.check(("record",), _record, data.get("record", False), "record")
    if raw is None:
        return _Server(record=bool(record))
    problems.unknown_keys(("server",), raw, RUN_SERVER, "[server]")
    return _Server(
        record=bool(record),
        basedir=raw.get("basedir") or None,
        port=problems.check(("server", "port"), _port, raw.get("port")),
        config=_config(problems, ("server", "config"), raw.get("config", {}), "[server]"),
        memory_limit=problems.check(
            ("server", "memory_limit"),
            _memory_limit,
            raw.get("memory_limit"),
            "server.memory_limit",
        ),
    )


def _port(port: object) -> int | None:
    if port is None:
        return None
    _expect(port, int, "server.port", "give a TCP port number, e.g. 33060")
    if not 1024 <= port <= 65535:  # type: ignore[operator]
        raise MallocbenchError(f"server.port = {port} is out of range: use 1024-65535")
    return port  # type: ignore[return-value]


def _config(problems: Problems, path: KeyPath, value: object, label: str) -> dict[str, str]:
    """my.cnf overrides, each checked; `label` names their owner ("[server]", "setup je")."""
    key = "server.config" if label == "[server]" else f"{label}.config"
    config = problems.check(path, string_map, value, key) or {}
    for name, text in config.items():
        problems.check(path + (name,), check_config, name, text, label)
    return config


def _setups(problems: Problems, tables: list[SetupTable], server: _Server) -> list[Setup]:
    """The setups whose tables are right; the others' problems are recorded."""
    common = common_setups(problems, tables)
    setups = []
    for index, table in enumerate(tables):
        setup = _server_setup(problems, table, common.get(index), server)
        if setup is not None:
            setups.append(setup)
    if len(setups) < len(tables):
        return setups  # the cgroup check is for a plan whose setups are all right
    capped = [(t, s) for t, s in zip(tables, setups, strict=True) if s.memory_limit_bytes]
    if capped:
        table, setup = capped[0]
        own = "memory_limit" in table.raw
        where = table.path + ("memory_limit",) if own else ("server", "memory_limit")
        problems.check(where, _check_capping, setup.name)
    return setups


def _server_setup(
    problems: Problems, table: SetupTable, common: CommonSetup | None, server: _Server
) -> Setup | None:
    """What a setup means to a server: config, CPUs, THP, caps; None if anything is wrong."""
    raw, path = table.raw, table.path
    if not isinstance(raw, dict):
        return None
    label = f"setup {common.name}" if common else table.label
    config = _config(problems, path + ("config",), raw.get("config", {}), label)
    cpus = problems.check(path + ("cpus",), _cpu_list, raw.get("cpus"), f"{label}.cpus")
    thp = raw.get("thp")
    if thp is not None and str(thp) not in THP_MODES:
        problems.add(
            path + ("thp",),
            f"{label}.thp = {thp!r} is not a THP mode: use "
            + ", ".join(f'"{m}"' for m in THP_MODES),
        )
    limit = server.memory_limit
    if "memory_limit" in raw:
        limit = problems.check(
            path + ("memory_limit",), _memory_limit, raw["memory_limit"], f"{label}.memory_limit"
        )
    quota = None
    if not problems.failed(*path, "cpus"):
        quota = problems.check(path + ("cpu_quota",), _cpu_quota, raw.get("cpu_quota"), label, cpus)
    record = problems.check(
        path + ("record",), _record, raw.get("record", server.record), f"{label}.record"
    )
    if common is None or problems.failed(*path):
        return None
    return Setup(
        name=common.name,
        allocator=common.allocator,
        allocator_spec=common.spec,
        knobs=common.knobs,
        config=config,
        basedir=raw.get("basedir") or server.basedir,
        cpus=cpus,
        thp=str(thp) if thp is not None else None,
        memory_limit_bytes=limit,
        cpu_quota=quota,
        description=common.description,
        record=bool(record),
    )


def _base(
    problems: Problems, data: dict[str, Any], tables: list[SetupTable], setups: list[Setup]
) -> str:
    # Names of broken setups count too, so a typo in one is not also reported as a base.
    names = list(dict.fromkeys([s.name for s in setups] + setup_names(tables)))
    base = str(data.get("base", setups[0].name if setups else ""))
    if "base" in data and base not in names:
        problems.add(
            ("base",),
            f"base = {base!r} is not a setup{did_you_mean(base, names)}: "
            f"use one of {', '.join(s.name for s in setups)}",
        )
    return base


def _as_list(value: object, types: type | tuple[type, ...]) -> Any:
    """One value of `types` stands for a list of one (engines = "innodb", threads = 8)."""
    return [value] if isinstance(value, types) and not isinstance(value, bool) else value


def _engines(problems: Problems, data: dict[str, Any]) -> list[Engine]:
    names = _as_list(data.get("engines", ["innodb"]), str)
    hint = 'write a list, e.g. ["innodb", "myrocks"]'
    if problems.check(("engines",), _expect, names, list, "engines", hint) is None:
        return []
    if not names:
        problems.add(("engines",), 'engines is empty: write e.g. engines = ["innodb"]')
    found = [problems.check(("engines", i), engines.get, str(n)) for i, n in enumerate(names)]
    seen: set[str] = set()
    for index, engine in enumerate(found):
        if engine is not None and engine.name in seen:
            # Its sessions would share their names, and so their server directories.
            problems.add(("engines", index), f"engines names {engine.name} twice: list it once")
        seen.add(engine.name if engine is not None else "")
    return [engine for engine in found if engine is not None]


def _steps(problems: Problems, data: dict[str, Any]) -> tuple[list[Step], list[str]]:
    """The steps in run order, and the specs as written (names and groups)."""
    specs = _as_list(data.get("steps", ["point-query"]), str)
    hint = 'write a list of steps or groups, e.g. ["point", "scan"]'
    if problems.check(("steps",), _expect, specs, list, "steps", hint) is None:
        return [], []
    written = [str(spec) for spec in specs]
    if not written:
        problems.add(("steps",), "steps is empty: name at least one step or group")
    for index, spec in enumerate(written):
        problems.check(("steps", index), parse_steps, [spec])  # each, to locate each typo
    if problems.failed("steps"):
        return [], written
    return parse_steps(written), written


def _threads(problems: Problems, data: dict[str, Any]) -> list[int]:
    threads = _as_list(data.get("threads", [1]), int)
    hint = "write a list of client counts, e.g. [1, 8]"
    if problems.check(("threads",), _expect, threads, list, "threads", hint) is None:
        return []
    good = []
    for index, count in enumerate(threads):
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 4096:
            problems.add(
                ("threads", index), f"threads contains {count!r}: use whole numbers from 1 to 4096"
            )
        else:
            good.append(count)
    return good


def _name(value: object) -> str:
    """The experiment's name heads its report and the plan: one line of text."""
    if not isinstance(value, str) or not value.isprintable() or len(value) > MAX_TITLE:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise MallocbenchError(
            f"name = {shown} is invalid: give one line of at most {MAX_TITLE} printable characters"
        )
    return value


def _repeats(value: object) -> int:
    _expect(value, int, "repeats", "give a whole number of repeats, e.g. 3")
    return _bounded_int(value, "repeats", 1, MAX_REPEATS)


def planned_cells(experiment: Experiment) -> int:
    """How many cells `plan` gives, counted without building them."""
    per_repeat = sum(len(_threads_for(experiment, step)) for step in experiment.steps)
    return per_repeat * len(experiment.setups) * len(experiment.engines) * experiment.repeats


def _check_cells(experiment: Experiment) -> None:
    cells = planned_cells(experiment)
    if cells > MAX_CELLS:
        raise MallocbenchError(
            f"the experiment plans {cells:,} cells ({len(experiment.setups)} setups x "
            f"{len(experiment.engines)} engines x steps and threads x {experiment.repeats} "
            f"repeats), more than the {MAX_CELLS:,} one run may hold: use fewer repeats, "
            "steps, threads or setups, or split it into several runs"
        )


def _budget(value: object, design: object) -> float:
    if design != AUTO:
        raise MallocbenchError(
            'budget is the wall time design = "auto" compares the designs in: add '
            'design = "auto", or remove budget and set repeats'
        )
    return _seconds(value, "budget", 60)


def _design(value: object) -> str:
    design = str(value)
    if design not in DESIGNS:
        raise MallocbenchError(
            f"design = {design!r} is unknown: use {DESIGNS[0]!r} (setups' servers up at once, "
            f"their slices alternating), {DESIGNS[1]!r} (one server at a time) or "
            f"{DESIGNS[2]!r} (chosen from a calibration at the start of the run)"
        )
    return design


def _dataset(problems: Problems, data: dict[str, Any], engine_list: list[Engine]) -> Dataset:
    dataset = Dataset()
    hint = "write a [dataset] table"
    raw = problems.check(("dataset",), _expect, data.get("dataset", {}), dict, "dataset", hint)
    if raw is None:
        return dataset
    problems.unknown_keys(("dataset",), raw, RUN_DATASET, "[dataset]")
    checks: dict[str, tuple[Any, ...]] = {
        "tables": (_bounded_int, "dataset.tables", 1, MAX_TABLES),
        "rows": (parse_count, "dataset.rows", 1, MAX_ROWS),
        "cache": (parse_size, "dataset.cache"),
    }
    for key, (check, *args) in checks.items():
        if key in raw:
            value = problems.check(("dataset", key), check, raw[key], *args)
            if value is not None:
                setattr(dataset, "cache_bytes" if key == "cache" else key, value)
    if any(problems.failed("dataset", key) for key in checks):
        return dataset  # a machine check of a wrong shape would only repeat the problem
    problems.check(("dataset", "cache"), _check_memory, dataset)
    if engine_list:
        problems.check(("dataset",), _check_disk, dataset, engine_list)
    return dataset


@dataclass
class _Timing:
    warmup: float = 2.0
    max_warmup: float = DEFAULT_MAX_WARMUP_S
    step: float = 10.0
    slice: float = DEFAULT_SLICE_S


def _alternate(value: object) -> str:
    alternate = str(value)
    if alternate not in ALTERNATIONS:
        raise MallocbenchError(
            f"alternate = {alternate!r} is unknown: use {RUNS!r} (each slice a sysbench run "
            f"of its own) or {TURNS!r} (clients stay connected and take turns)"
        )
    return alternate


def _durations(problems: Problems, data: dict[str, Any], alternate: str) -> _Timing:
    timing = _Timing(slice=DEFAULT_TURN_S if alternate == TURNS else DEFAULT_SLICE_S)
    hint = "write a [durations] table"
    raw = problems.check(
        ("durations",), _expect, data.get("durations", {}), dict, "durations", hint
    )
    if raw is None:
        return timing
    problems.unknown_keys(("durations",), raw, RUN_DURATIONS, "[durations]")
    at = ("durations",)
    warmup = problems.check(at + ("warmup",), _seconds, raw.get("warmup", 2), "durations.warmup", 0)
    if warmup is not None:
        timing.warmup = warmup
        # A long minimum without a maximum is a fixed warmup, as before max_warmup existed.
        timing.max_warmup = max(DEFAULT_MAX_WARMUP_S, warmup)
        if "max_warmup" in raw:
            found = problems.check(at + ("max_warmup",), _max_warmup, raw["max_warmup"], warmup)
            timing.max_warmup = found if found is not None else timing.max_warmup
    step = problems.check(at + ("step",), _seconds, raw.get("step", 10), "durations.step", 1)
    if step is not None:
        timing.step = step
        slice_s = problems.check(at + ("slice",), _slice, raw.get("slice"), step, alternate)
        timing.slice = slice_s if slice_s is not None else timing.slice
    return timing


def _max_warmup(value: object, warmup: float) -> float:
    if warmup == 0:
        raise MallocbenchError(
            "durations.max_warmup is set but warmup = 0 turns warming off: "
            "remove max_warmup, or give warmup the minimum seconds to warm"
        )
    max_warmup = _seconds(value, "durations.max_warmup", 0)
    if max_warmup < warmup:
        raise MallocbenchError(
            f"durations.max_warmup = {value!r} is below durations.warmup "
            f"= {warmup:g}: warmup is the minimum, max_warmup the maximum"
        )
    return max_warmup
