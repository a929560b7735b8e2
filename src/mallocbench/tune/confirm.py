"""A confirmation experiment derived from what a recorded server said about its load.

`record --pid` keeps beside the trace the server's variables, engines, tables, status
counter deltas and connection samples over the window (replay/workload.py). Here that
becomes an experiment on the step catalogue: the statement mix mapped to steps (point
and range reads, updates, inserts, deletes) with their weights, the clients from the
connections, the dataset from the tables, the cache and engines from the variables, and
durations and repeats chosen so the plan fits a stated time. What the counters cannot
say, or the time cannot hold, is approximated, and every approximation is said: in the
TOML's comments and in the list `approximations` (which advise and tune print).

A trace without that description keeps tune's generic confirmation (tune/workload.py).
"""

from __future__ import annotations

import functools
import json
import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mallocbench.errors import MallocbenchError
from mallocbench.replay.workload import CONFIG_VARIABLES, ServerLoad, sidecar
from mallocbench.replay.workload import load as load_workload
from mallocbench.units import gb

DEFAULT_BUDGET_S = 15 * 60
DERIVED = "# The workload: derived"  # how a derived confirmation's text begins its part
# The rate a private server's dataset is assumed to load at (sysbench prepare on a small
# host), and the share of the time the load may take: the rest is for measuring.
LOAD_ROWS_PER_S = 20_000
LOAD_SHARE = 1 / 3
SESSION_START_S = 15.0  # a server start, its readiness and the copy of its datadir
MIN_WEIGHT = 0.03  # a kind of statement rarer than this gets no step of its own
RANGE_ROWS = 100  # the rows a range read is taken to read when the counters cannot say
MAX_THREADS = 64
MAX_TABLES = 16
MIN_ROWS = 1000
MIN_CACHE = 32 << 20
# What the derived plan may take of the machine with every setup's server up at once
# (run's own bound, experiment.CONCURRENT_MEMORY_SHARE), and each server's base.
MEMORY_SHARE = 0.5
SERVER_BASE_BYTES = 400 << 20
REPEATS = (5, 4, 3)
STEP_S = (30, 20, 15, 10, 5)
KINDS = ("point", "range", "update", "insert", "delete")
KIND_WORDS = {
    "point": "point reads",
    "range": "range reads",
    "update": "updates",
    "insert": "inserts",
    "delete": "deletes",
    "ddl": "DDL",
}
_COUNTERS = {
    "update": ("Com_update", "Com_update_multi"),
    "insert": ("Com_insert", "Com_insert_select", "Com_replace", "Com_replace_select"),
    "delete": ("Com_delete", "Com_delete_multi"),
    "ddl": (
        "Com_create_table", "Com_alter_table", "Com_drop_table", "Com_rename_table",
        "Com_create_index", "Com_drop_index", "Com_truncate", "Com_create_db", "Com_drop_db",
    ),
}  # fmt: skip


@dataclass
class Mix:
    """The window's statements by kind (counts), and the rows a range read reads."""

    counts: dict[str, float]
    range_rows: int = RANGE_ROWS

    @property
    def total(self) -> float:
        return sum(self.counts.values())

    def weight(self, kind: str) -> float:
        return self.counts.get(kind, 0) / self.total if self.total else 0.0


def mix_of(load: ServerLoad) -> tuple[Mix, list[str]]:
    """The statement mix from the counters, and the approximations it took.

    A SELECT is a point read or a range read; the counters say how many rows index
    scans read on (Handler_read_next/prev) but not which statements read them, so range
    reads are taken to read RANGE_ROWS rows each (more when there are fewer SELECTs
    than that allows)."""
    said = []
    selects = load.count("Com_select")
    scanned = load.count("Handler_read_next", "Handler_read_prev")
    ranges = min(float(selects), scanned / RANGE_ROWS)
    rows = RANGE_ROWS
    if selects and ranges >= selects:
        rows = max(RANGE_ROWS, round(scanned / selects))
    counts = {"point": selects - ranges, "range": ranges}
    counts.update({kind: float(load.count(*names)) for kind, names in _COUNTERS.items()})
    if ranges:
        said.append(
            f"point and range reads are told apart by the rows index scans read on "
            f"({scanned:,}), taking a range read as {rows} rows (the counters do not "
            "say which SELECT read them)"
        )
    if counts["update"]:
        said.append(
            "updates run as update-nonindex: the counters do not say whether an update "
            "changes an indexed column"
        )
    mix = Mix(counts, rows)
    if mix.weight("point") >= MIN_WEIGHT:
        said.append(_points_said(load, counts))
    return mix, said


def _points_said(load: ServerLoad, counts: dict[str, float]) -> str:
    """How point reads are mapped: one key each (point-query), though a SELECT may look
    up many (an IN list, as random-points; a join), which the counters only hint at."""
    # Key lookups not of point reads: a range read starts with one, an update or a
    # delete by key finds its row with one.
    others = counts["range"] + counts["update"] + counts["delete"]
    per_read = max(0.0, load.count("Handler_read_key") - others) / counts["point"]
    mapped = "point reads run as point-query, one row by its primary key each"
    if per_read >= 1.5:
        return (
            f"{mapped}, though the recorded SELECTs looked up about {per_read:,.0f} keys each "
            "(Handler_read_key): an IN list of ids (random-points) or a join reads more "
            "per statement than the confirmation does"
        )
    return f"{mapped}: the counters do not say how many keys a SELECT looked up"


def step_label(kind: str, mix: Mix) -> str:
    return {
        "point": "point-query",
        "range": f"range-notcovered-pk range={mix.range_rows}",
        "update": "update-nonindex",
        "insert": "insert",
        "delete": "delete",
    }[kind]


def step_kind(label: str) -> str | None:
    """The kind of statement a derived step stands for (step_label's inverse)."""
    name = label.split()[0]
    return next((k for k in KINDS if step_label(k, Mix({})).split()[0] == name), None)


@dataclass
class Derived:
    """The confirmation's workload: what the experiment file says, and why."""

    source: str
    engines: list[str]
    steps: list[tuple[str, float]]  # label, weight (share of the window's statements)
    mix: dict[str, float]  # kind -> share of the window's statements
    threads: int
    tables: int
    rows: int
    cache_bytes: int
    config: dict[str, str] = field(default_factory=dict)
    warmup_s: float = 5.0
    step_s: float = 10.0
    repeats: int = 3
    budget_s: float = DEFAULT_BUDGET_S
    setups: int = 2
    planned_s: float | None = None
    approximations: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The experiment's top-level keys and tables, each approximation a comment."""
        shares = ", ".join(
            f"{KIND_WORDS[k]} {w:.0%}" for k, w in self.mix.items() if round(w * 100)
        )
        lines = [
            f"{DERIVED} from what the recorded server said over the window ({self.source}).",
            f"# Its statements: {shares or 'none the catalogue maps'}.",
            "# Each step below stands for this share of them (its weight); every step runs",
            "# for durations.step, so read each step's result with its weight:",
            *(f"#   {label}: {weight:.2f}" for label, weight in self.steps),
        ]
        if self.planned_s is not None:
            lines.append(
                f"# Planned: about {self.planned_s / 60:.0f} min for {self.setups_text()}, "
                f"within the {self.budget_s / 60:g} min asked."
            )
        lines += ["# Approximations:", *(f"#   - {a}" for a in self.approximations)]
        lines += [
            f"engines = {json.dumps(self.engines)}",
            f"steps = {json.dumps([label for label, _ in self.steps])}",
            f"threads = [{self.threads}]",
            f"repeats = {self.repeats}",
            "",
            "[dataset]",
            f"tables = {self.tables}",
            f"rows = {self.rows}",
            f"cache = {self.cache_bytes}",
            "",
            "[durations]",
            f"warmup = {self.warmup_s:g}",
            f"step = {self.step_s:g}",
        ]
        if self.config:
            config = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in self.config.items())
            lines += ["", "[server]", f"config = {{ {config} }}"]
        return lines

    def describe(self) -> str:
        steps = ", ".join(f"{label} {w:.0%}" for label, w in self.steps)
        return (
            f"{'/'.join(self.engines)} {steps} at {self.threads} client(s), "
            f"{self.tables}x{self.rows} rows, cache {self.cache_bytes >> 20} MiB"
        )

    def setups_text(self) -> str:
        return f"{self.setups} setups x {len(self.steps)} steps x {self.repeats} repeats"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "engines": self.engines,
            "steps": [
                {"step": label, "weight": w, "kind": step_kind(label) if w else None}
                for label, w in self.steps
            ],
            "mix": self.mix,
            "threads": self.threads,
            "dataset": {"tables": self.tables, "rows": self.rows, "cache_bytes": self.cache_bytes},
            "config": self.config,
            "durations": {"warmup_s": self.warmup_s, "step_s": self.step_s},
            "repeats": self.repeats,
            "budget_s": self.budget_s,
            "planned_s": self.planned_s,
            "approximations": self.approximations,
        }


def _steps(mix: Mix, said: list[str]) -> list[tuple[str, float]]:
    steps = [(step_label(k, mix), mix.weight(k)) for k in KINDS if mix.weight(k) >= MIN_WEIGHT]
    rare = [
        f"{KIND_WORDS[k]} ({mix.weight(k):.1%})" for k in KINDS if 0 < mix.weight(k) < MIN_WEIGHT
    ]
    if rare:
        said.append(f"{', '.join(rare)} of the statements get no step (below {MIN_WEIGHT:.0%})")
    if mix.counts.get("ddl"):
        said.append(
            f"{mix.counts['ddl']:.0f} DDL statements (CREATE, ALTER, DROP, TRUNCATE) have no "
            "step in the catalogue: left out"
        )
    if not steps:
        said.append("the window saw no reads or writes the catalogue maps: the step is point-query")
        steps = [("point-query", 0.0)]
    return steps


def _threads(load: ServerLoad, said: list[str]) -> int:
    connected = [s.connected for s in load.samples if s.connected is not None]
    running = [s.running for s in load.samples if s.running is not None]
    if connected:
        threads = round(statistics.median(connected))
        said.append(
            f"clients: the median of {len(connected)} samples of connected clients "
            f"({min(connected)} to {max(connected)}; running "
            f"{statistics.median(running):g} at the median); each client of the "
            "confirmation runs without pause, as connected clients do not"
        )
    elif load.max_used_connections:
        threads = load.max_used_connections
        said.append("clients: the server's max_used_connections (no samples were taken)")
    else:
        threads = 8
        said.append("clients: 8, a guess (the server gave no connection counts)")
    if threads > MAX_THREADS:
        said.append(f"{threads} clients are capped at {MAX_THREADS}")
    return max(1, min(threads, MAX_THREADS))


def _engines(load: ServerLoad, said: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The catalogue's engines that hold the server's tables, largest first, and those
    tables."""
    from mallocbench.servers.engines import all_engines

    known = {e.sql_engine.lower(): e.name for e in all_engines()}
    size: dict[str, int] = {}
    kept, others = [], []
    for t in load.tables:
        name = known.get(str(t.get("engine", "")).lower())
        if name is None:
            others.append(t)
            continue
        kept.append(t)
        size[name] = size.get(name, 0) + int(t.get("data_bytes", 0)) + int(t.get("index_bytes", 0))
    if others:
        engines_named = sorted({str(t.get("engine") or "?") for t in others})
        said.append(
            f"{len(others)} table(s) in {', '.join(engines_named)} are not loaded: the "
            f"catalogue's engines are {', '.join(sorted(known.values()))}"
        )
    engines = sorted(size, key=lambda n: -size[n])
    if not engines:
        default = load.variables.get("default_storage_engine", "").lower()
        engines = [known.get(default, "innodb")]
        said.append(f"the server named no tables in those engines: the engine is {engines[0]}")
    if len(engines) > 1:
        said.append(
            f"the server ran {' and '.join(engines)} together; the confirmation runs each "
            "on its own, with the same dataset"
        )
    return engines, kept


def _dataset(
    load: ServerLoad,
    tables: list[dict[str, Any]],
    engines: list[str],
    budget_s: float,
    said: list[str],
) -> tuple[int, int, float]:
    """(tables, rows per table, the factor the data was scaled by)."""
    if not tables:
        said.append("no tables to copy: 4 tables of 10,000 rows")
        return 4, 10_000, 1.0
    total = sum(int(t.get("rows", 0)) for t in tables)
    count = min(len(tables), MAX_TABLES)
    if count < len(tables):
        said.append(
            f"the server's {len(tables)} tables are loaded as {count}, holding as many rows in all"
        )
    rows = max(MIN_ROWS, round(total / count))
    said.append(
        "rows per table: the tables' mean (information_schema's TABLE_ROWS, an estimate "
        "for InnoDB); every table gets sysbench's columns, not the server's"
    )
    most = budget_s * LOAD_SHARE * LOAD_ROWS_PER_S / len(engines)
    factor = 1.0
    if count * rows > most:
        scaled = max(MIN_ROWS, int(most // count))
        factor = scaled / rows
        said.append(
            f"SCALED DOWN: {count} x {rows:,} rows would not load in {LOAD_SHARE:.0%} of "
            f"the time (at an assumed {LOAD_ROWS_PER_S:,} rows/s): {count} x {scaled:,} "
            f"rows ({factor:.2g} of the data)"
        )
        rows = scaled
    return count, rows, factor


def _cache(
    load: ServerLoad, engines: list[str], factor: float, setups: int, said: list[str]
) -> int:
    from mallocbench.servers.engines import get

    variable = get(engines[0]).cache_variable
    try:
        recorded = int(load.variables[variable])
    except (KeyError, ValueError):
        said.append(f"the server gave no {variable}: the cache is 512 MiB")
        recorded = 512 << 20
    cache = recorded
    if factor < 1:
        cache = max(MIN_CACHE, int(recorded * factor))
        said.append(
            f"{variable} {gb(recorded)} GiB scaled with the data to {cache >> 20} MiB, so "
            "the cache holds the same share of it"
        )
    room = int(psutil.virtual_memory().available * MEMORY_SHARE / setups) - SERVER_BASE_BYTES
    if cache > room:
        cache = max(MIN_CACHE, room)
        said.append(
            f"the cache is capped at {cache >> 20} MiB so {setups} servers fit this "
            "machine's memory at once"
        )
    return cache


def derive(
    load: ServerLoad, setups: int, budget_s: float = DEFAULT_BUDGET_S, source: str = ""
) -> Derived:
    """The confirmation of `setups` setups on the recorded load, within `budget_s`."""
    said: list[str] = []
    mix, mix_said = mix_of(load)
    steps = _steps(mix, said)
    said[:0] = mix_said
    engines, tables = _engines(load, said)
    count, rows, factor = _dataset(load, tables, engines, budget_s, said)
    derived = Derived(
        source=source,
        engines=engines,
        steps=steps,
        mix={k: mix.weight(k) for k in (*KINDS, "ddl") if mix.weight(k)},
        threads=_threads(load, said),
        tables=count,
        rows=rows,
        cache_bytes=_cache(load, engines, factor, setups, said),
        config={k: load.variables[k] for k in CONFIG_VARIABLES if k in load.variables},
        budget_s=budget_s,
        setups=setups,
        approximations=said,
    )
    _fit(derived, setups, count * rows * len(engines) / LOAD_ROWS_PER_S)
    return derived


def planned_seconds(text: str, load_s: float = 0.0) -> float:
    """About how long `mallocbench run` takes for the experiment `text`: the dataset's
    load, a server start per session and run's own estimate per cell."""
    from mallocbench.run.loading import from_dict
    from mallocbench.run.planning import plan, planned_cells
    from mallocbench.run.runner import cell_estimate

    experiment = from_dict(tomllib.loads(text), text)
    sessions = len(plan(experiment))
    cells = planned_cells(experiment)
    return load_s + sessions * SESSION_START_S + cells * cell_estimate(experiment)


def _fit(derived: Derived, setups: int, load_s: float) -> None:
    """The longest steps, then the most repeats, that fit the budget; the shortest plan
    with a note when none does."""
    names = [f"s{i}" for i in range(setups)]
    tried: tuple[int, float, float] | None = None
    for step_s in STEP_S:
        for repeats in REPEATS:
            derived.repeats, derived.step_s = repeats, step_s
            derived.warmup_s = 5.0 if step_s >= 10 else 2.0
            planned = planned_seconds(_probe_text(derived, names), load_s)
            tried = (repeats, step_s, planned)
            if planned <= derived.budget_s:
                derived.planned_s = planned
                return
    assert tried is not None
    derived.planned_s = tried[2]
    derived.approximations.append(
        f"even {tried[0]} repeats of {tried[1]:g} s steps take about {tried[2] / 60:.0f} "
        f"min, over the {derived.budget_s / 60:g} min asked: give a larger time"
    )


def _probe_text(derived: Derived, names: list[str]) -> str:
    setups = [f'\n[[setup]]\nname = "{n}"\nallocator = "glibc"' for n in names]
    return "\n".join(derived.lines()) + "\n" + "\n".join(setups) + "\n"


@functools.lru_cache(maxsize=8)
def for_trace(
    trace: str | Path, setups: int, budget_s: float = DEFAULT_BUDGET_S
) -> tuple[Derived | None, str | None]:
    """The confirmation derived for `trace`'s recorded load, or why there is none (None,
    None: the trace has no description, as one recorded from a command or of a server
    that would not answer; the generic confirmation is for those)."""
    path = Path(trace)
    load = load_workload(path)
    if load is None or not load.described:
        return None, None
    try:
        return derive(load, setups, budget_s, sidecar(path).name), None
    except MallocbenchError as exc:
        # This machine cannot run it (disk, memory): the generic one says what to set.
        return None, f"the recorded load gives no experiment this machine can run: {exc}"


def workload_notes(
    trace: str | Path, toml: str, path: Path, budget_s: float = DEFAULT_BUDGET_S
) -> list[str]:
    """What a confirmation file's reader must know of its derived workload: where it
    came from and each approximation; or why it could not be derived ([]: the trace has
    no description)."""
    setups = len(tomllib.loads(toml).get("setup", []))
    derived, problem = for_trace(trace, setups, budget_s)
    if derived is None:
        return [problem] if problem else []
    planned = f"about {derived.planned_s / 60:.0f} min" if derived.planned_s else "its time"
    return [
        f"{path} runs the recorded load as the server described it ({derived.source}): "
        f"{derived.describe()}; {planned} of the {derived.budget_s / 60:g} min asked",
        *(f"approximation: {a}" for a in derived.approximations),
    ]
