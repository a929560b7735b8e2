"""What a cluster run's driver and its workers share: the units (one block each, of an
experiment or of a trace's replays), the stored run they work on (the experiment rebuilt
from it, its session source) and the record of a host.
"""

from __future__ import annotations

import enum
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import HostRecord, RunMetadata
from mallocbench.model.results import RunResult
from mallocbench.probes.system import host_facts
from mallocbench.run.experiment import Experiment, PlannedSession
from mallocbench.run.loading import from_dict
from mallocbench.run.options import RunOptions, RunOutcome
from mallocbench.run.overrides import apply_overrides, recorded_set
from mallocbench.run.planning import blocks, plan_extra_round
from mallocbench.run.source import RunSessions
from mallocbench.servers.family import Build
from mallocbench.servers.outcome import ServerStartError
from mallocbench.store import ResultsStore, is_url
from mallocbench.store.sqlite import STATUS_INTERRUPTED

# The resource every benchmark host's worker advertises once: a unit asks for one, so
# a host never runs two units (and their servers) at once.
RESOURCE = "benchmark_host"


# Set by `mallocbench cluster worker` in its own process: where units keep their files.
WORK_DIR_ENV = "MALLOCBENCH_WORK_DIR"


# The scheduler's event topic where a unit's worker announces its host's facts as soon
# as they are known: a host killed mid-unit returns no result, yet measured cells.
HOSTS_TOPIC = "mallocbench-hosts"


# How often the driver and the unit tasks look around (store, stop event, hosts). Every
# look is a message to the scheduler: rare enough to keep a measuring host quiet.
POLL_S = 2.0


# With units waiting and no benchmark host left for this long, they are recorded as lost.
NO_HOST_GRACE_S = 60.0


# Host facts that must agree for blocks measured on different hosts to be combined.
HOST_FACTS = (
    "cpu_model",
    "cpus",
    "memory_bytes",
    "kernel",
    "glibc",
    "thp",
    "sysbench",
    "server_versions",
    "allocators",
)


# A lost unit's note while the run is incomplete, and once a resume measured the rest.
LOST_NOTE = "lost unit {}; its finished cells are kept, --resume measures the rest"


LOST_NOTE_DONE = "lost unit {}; its finished cells were kept, and a --resume measured the rest"


class Event(enum.Enum):
    STARTED = "started"
    FINISHED = "finished"
    LOST = "lost"


@dataclass(frozen=True)
class News:
    """What the driver tells of a unit, or of one replay, as it goes; the caller words it
    (report/cluster.py news_text)."""

    event: Event
    label: str  # the unit's, or the replay's (replay_label)
    host: str = ""
    why: str = ""  # LOST: the reason the scheduler gave
    replay: bool = False  # of one replay, not of a whole unit
    cells: int | None = None  # FINISHED, a run's unit: the cells it measured
    seconds: float = 0.0  # FINISHED, a run's unit: how long it took


Tell = Callable[[News], None]


def tell_nothing(_news: News) -> None:
    return None


class UnitsLost(ServerStartError):
    """Units whose hosts died past the retries: their finished cells are kept, --resume."""

    run_status = STATUS_INTERRUPTED


class UnitFailed(Exception):
    """A unit's subprocess ended without a result (raised in the worker, shown one line)."""


_SET_LINE = re.compile(r"^# --set (.+)$")


def experiment_from_run(stored: RunResult) -> Experiment:
    """The experiment a run ran, from its stored text alone (no file needed).

    The text is the file as it was, then one `# --set KEY=VALUE` comment line per
    command-line override (run.loading.load writes them): those trailing lines are
    applied again, so the rebuilt experiment is the one that ran and its text is the
    stored text, byte for byte, as --resume checks.
    """
    text = stored.experiment_text
    if not text.strip():
        raise MallocbenchError(
            f"run {stored.run_id} has no stored experiment text (an older store): resume it "
            "with its experiment file: mallocbench run FILE --resume --store ..."
        )
    lines = text.rstrip("\n").splitlines()
    overrides: list[str] = []
    while lines and (match := _SET_LINE.match(lines[-1])):
        overrides.insert(0, recorded_set(match.group(1)))
        lines.pop()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MallocbenchError(f"run {stored.run_id}: its stored experiment text: {exc}") from exc
    apply_overrides(data, overrides)
    experiment = from_dict(data, text, default_name=stored.experiment)
    experiment.source = str(stored.metadata.experiment_file or "")
    return experiment


def store_target(options: RunOptions) -> str:
    """The store as every host reaches it: a URL as given, a file by its absolute path."""
    target = options.store_target
    if is_url(target):
        return str(target)
    return str(Path(target).resolve())


@dataclass(frozen=True)
class Unit:
    """One block to measure on one host: its engine, repeat and cells."""

    engine: str
    repeat: int
    cells: tuple[tuple[str, str, int], ...]  # (setup, step label, threads)

    @property
    def label(self) -> str:
        return f"{self.engine} r{self.repeat}"

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "repeat": self.repeat, "cells": list(self.cells)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Unit:
        cells = tuple((str(s), str(st), int(t)) for s, st, t in data["cells"])
        return cls(str(data["engine"]), int(data["repeat"]), cells)

    def sessions(self, experiment: Experiment) -> list[PlannedSession]:
        """The block's planned sessions again, in the order the repeat's parity gives."""
        wanted = {(setup, self.engine, step, threads) for setup, step, threads in self.cells}
        round_ = plan_extra_round(experiment, self.repeat, wanted)
        return [s for s in round_ if s.engine == self.engine]


@dataclass(frozen=True)
class ReplayUnit:
    """One repeat of every setup still to replay (a block), to run on one host in the
    order a local replay of that repeat uses: the setups are compared on the same host.

    The trace travels by path: `trace_bytes` lets a host tell that the file it sees at
    that path is the driver's trace, not another one of the same name.
    """

    setups: list[dict[str, Any]]  # name, allocator, knobs: a replay record's setups
    repeat: int
    trace: str  # absolute: the same path on every host
    trace_bytes: int
    timing: str
    speed: float
    order: str
    duration_s: float

    @property
    def label(self) -> str:
        return f"repeat {self.repeat + 1}"

    def replay_labels(self) -> list[str]:
        return [replay_label(str(s["name"]), self.repeat) for s in self.setups]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplayUnit:
        return cls(**data)


def replay_label(setup: str, repeat: int) -> str:
    return f"{setup} repeat {repeat + 1}"


def replays_topic(run_id: str) -> str:
    """The scheduler's event topic where a replay unit's worker relays each replay as it
    ends: a host killed mid-block returns no result, yet its finished replays count."""
    return f"mallocbench-replays-{run_id}"


def unit_names(spec: dict[str, Any]) -> tuple[str, str]:
    """A unit's label in messages, and the stem of its files on its host."""
    if "replay" in spec:
        replay = ReplayUnit.from_dict(spec["replay"])
        return replay.label, f"replay-r{replay.repeat}"
    unit = Unit.from_dict(spec["unit"])
    return unit.label, f"unit-{unit.engine}-r{unit.repeat}"


def units_of(
    sessions: list[PlannedSession], done: set[tuple[str, str, str, int, int]]
) -> list[Unit]:
    """The blocks with something left to measure, each a unit for one host."""
    units = []
    for block in blocks(sessions):
        cells = [c for s in block for c in s.cells]
        if all(c.key in done for c in cells):
            continue
        units.append(
            Unit(
                block[0].engine,
                block[0].repeat,
                tuple((c.setup, c.step.label, c.threads) for c in cells),
            )
        )
    return units


def stop_event_name(run_id: str) -> str:
    return f"mallocbench-stop-{run_id}"


class StoredRunSessions(RunSessions):
    """A run's session source when the run is resumed by id (`--resume RUN_ID`) or
    measured on several hosts: session ids unique across hosts and attempts, the hosts
    recorded, and lost units' notes closed once a resume measured them."""

    def __init__(
        self,
        run_id: str | None = None,
        taken: set[str] | None = None,
        joins_hosts: bool = True,
    ) -> None:
        self.pinned_run_id = run_id
        # Session ids already in the store: a resume or a retry never reuses one, which
        # would replace that session's record (its host, its peak memory) with its own.
        self.taken = taken
        # A local resume of a run measured on several hosts is one more host of it; a
        # unit's host and the cluster's driver leave the hosts to the driver's record.
        self.joins_hosts = joins_hosts

    def resume_run_id(
        self, store: ResultsStore, experiment: Experiment, carried: RunMetadata
    ) -> str:
        run_id = self.pinned_run_id or super().resume_run_id(store, experiment, carried)
        # The resumed run's metadata is written anew: keep what its hosts recorded so far.
        previous = store.load_run_header(run_id).metadata
        if carried.hosts is None and previous.hosts is not None:
            carried.hosts = previous.hosts
        if carried.cluster is None and previous.cluster is not None:
            carried.cluster = previous.cluster
        return run_id

    def session_id(
        self, store: ResultsStore, run_id: str, planned: PlannedSession, attempt: int, host: str
    ) -> str:
        if self.taken is None:
            self.taken = store.session_ids(run_id)
        base = super().session_id(store, run_id, planned, attempt, host)
        session_id, n = base, 1
        while session_id in self.taken:
            n += 1
            session_id = f"{base}.{host}.{n}"
        self.taken.add(session_id)
        return session_id

    def completed_notes(self, notes: list[str]) -> list[str]:
        done = []
        for note in notes:
            unit = lost_unit(note)
            done.append(note if unit is None else LOST_NOTE_DONE.format(unit))
        return done

    def sessions_ran(
        self,
        store: ResultsStore,
        run_id: str,
        experiment: Experiment,
        outcome: RunOutcome,
        builds: dict[str | None, Build],
        measured_on: str | None,
    ) -> None:
        hosts = outcome.result.metadata.hosts
        if self.joins_hosts and measured_on and hosts is not None and measured_on not in hosts:
            hosts[measured_on] = host_record(experiment, builds)
            store.update_metadata(run_id, outcome.result.metadata)


def lost_unit(note: str) -> str | None:
    """The unit a LOST_NOTE names, or None for any other note."""
    head, tail = LOST_NOTE.split("{}")
    if note.startswith(head) and note.endswith(tail):
        return note[len(head) : len(note) - len(tail)]
    return None


def host_record(experiment: Experiment, builds: dict[str | None, Build]) -> HostRecord:
    return HostRecord(
        host=host_facts(),
        server_versions=sorted({b.label for b in builds.values()}),
        allocators={s.name: s.allocator.version for s in experiment.setups},
    )


__all__ = [
    "RESOURCE",
    "ReplayUnit",
    "StoredRunSessions",
    "Unit",
    "experiment_from_run",
    "replay_label",
    "replays_topic",
    "unit_names",
    "units_of",
]
