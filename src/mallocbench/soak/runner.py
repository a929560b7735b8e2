"""Soak runs: one step under continuous load for hours per setup, cut into segments.

A soak is an ordinary run (same store, same reports) whose plan holds one session per
setup and engine, and in it the same cell over and over: segment i is the cell with
repeat = i. Each segment is committed the moment it ends, so an interruption loses at
most the segment under way, and `--resume` continues with the segments left, on a new
server: a new lifetime, which the analysis (analysis.soak) fits on its own. Each segment
is a sysbench run of its own, so the clients reconnect at every boundary: a second's
pause in the load that left a jemalloc MyRocks server's RSS flat (190 MiB over six 30 s
segments).

Why repeat carries the segment: the cell key (setup, engine, step, threads, repeat) must
differ per segment for the store to keep them apart and for resume to skip the finished
ones; the repeat is the one part of it with no name of its own. The step label stays the
catalogue's, so every report, `compare` and `recommend` read a soak's cells as cells of
that step, with the soak's mean QPS over segments; a step label with a segment suffix
would instead give every segment a row of its own, in no defined order.

Setups run back to back (design sequential): each needs hours of continuous load, which
rules out interleaving their slices. A server killed or crashed ends its setup's soak,
the death being what the soak measures, and no warmup precedes a soak: its timeline
starts at the server's start.

The server's full account of its RSS (what it can name, and the unaccounted rest) is
taken after a setup's last segment only. Its queries leave memory behind in the server:
taken after every 30 s segment, it moved a jemalloc MyRocks server from 190 to 206 MiB
over six segments, in steps at each account, where the same soak without it stayed at
190 MiB; a soak would read that as growth. The per-second probe (RSS, the server's
status counters, the cgroup charge) is cheap and runs throughout.
"""

from __future__ import annotations

import dataclasses
import math
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass

from mallocbench.errors import MallocbenchError
from mallocbench.executors.real import RealExecutor
from mallocbench.model.metadata import DesignRecord, RunMetadata, SoakRecord
from mallocbench.model.results import STATUS_CRASHED, STATUS_OOM
from mallocbench.run.executor import Executor, Session
from mallocbench.run.experiment import (
    MAX_DURATION_S,
    SEQUENTIAL,
    Experiment,
    PlannedCell,
    PlannedSession,
)
from mallocbench.run.options import Progress, RunOptions
from mallocbench.run.runner import Pipeline
from mallocbench.run.source import RunSessions
from mallocbench.servers import families
from mallocbench.soak.events import EventRunner, check_tools
from mallocbench.store import ResultsStore
from mallocbench.units import parse_duration

MIN_SEGMENT_S = 10.0
DEFAULT_DURATION = "2h"
DEFAULT_SEGMENT = "10m"
# Cells a soak plans per setup at most: a week of one-minute segments.
MAX_SEGMENTS = 7 * 24 * 60
SOAK_MARK = "# mallocbench soak:"
SEQUENTIAL_WHY = (
    "a soak needs hours of continuous load per setup, so setups cannot be interleaved: "
    "they run back to back"
)


@dataclass(frozen=True)
class SoakSpec:
    duration_s: float  # per setup (and engine)
    segment_s: float

    @property
    def segments(self) -> int:
        return max(1, math.ceil(self.duration_s / self.segment_s - 1e-9))

    def check(self) -> None:
        if self.segment_s < MIN_SEGMENT_S:
            raise MallocbenchError(
                f"--segment {self.segment_s:g} s is too short: give at least "
                f"{MIN_SEGMENT_S:g} s, e.g. 10m (each segment is a sysbench run and a commit)"
            )
        if self.segment_s > MAX_DURATION_S:
            raise MallocbenchError(
                f"--segment {self.segment_s:g} s is longer than a cell may be "
                f"({MAX_DURATION_S} s): give e.g. 10m"
            )
        if self.segment_s > self.duration_s:
            raise MallocbenchError(
                f"--segment ({self.segment_s:g} s) is longer than --duration "
                f"({self.duration_s:g} s): give a segment of at most the duration"
            )
        if self.segments > MAX_SEGMENTS:
            raise MallocbenchError(
                f"--duration {self.duration_s:g} s in segments of {self.segment_s:g} s makes "
                f"{self.segments} segments, more than {MAX_SEGMENTS}: give longer segments"
            )

    def comment(self) -> str:
        """The line recorded in the run's experiment text: a resume must soak alike."""
        return f"{SOAK_MARK} duration={self.duration_s:g}s segment={self.segment_s:g}s"


def soak_spec(
    experiment: Experiment,
    duration: str | None,
    segment: str | None,
    overrides: tuple[str, ...] | list[str] = (),
) -> SoakSpec:
    """How long to soak each setup and how long a segment is.

    --duration and --segment when given; else the experiment's own durations.step (the
    time under load per setup) and durations.slice (a segment), when its file or a --set
    gives them; else 2 hours in segments of 10 minutes. An example file can then carry
    the soak it was sized for.
    """
    try:
        written = tomllib.loads(experiment.text).get("durations") or {}
    except tomllib.TOMLDecodeError:
        written = {}
    given = set(written) | {
        key.strip().removeprefix("durations.")
        for key, _, _ in (item.partition("=") for item in overrides)
        if key.strip().startswith("durations.")
    }
    if duration is not None:
        duration_s = parse_duration(duration, "--duration")
    elif "step" in given:
        duration_s = experiment.duration_s
    else:
        duration_s = parse_duration(DEFAULT_DURATION, "--duration")
    if segment is not None:
        segment_s = parse_duration(segment, "--segment")
    elif "slice" in given:
        segment_s = experiment.slice_s
    else:
        segment_s = min(parse_duration(DEFAULT_SEGMENT, "--segment"), duration_s)
    return SoakSpec(duration_s, segment_s)


def soak_experiment(experiment: Experiment, spec: SoakSpec) -> Experiment:
    """The experiment as a soak runs it: one step, one thread count, segments as repeats.

    Refuses (one line) an experiment with several steps or thread counts, or a step that
    ends by itself (a load): a soak is one load held for hours.
    """
    spec.check()
    if len(experiment.steps) != 1:
        labels = ", ".join(s.label for s in experiment.steps[:4])
        raise MallocbenchError(
            f"a soak runs one step, but the experiment has {len(experiment.steps)} ({labels}"
            f"{', ...' if len(experiment.steps) > 4 else ''}): pick one with "
            f"--set 'steps=[\"{experiment.steps[0].label}\"]'"
        )
    step = experiment.steps[0]
    if step.definition.until_done:
        raise MallocbenchError(
            f"step {step.label} ends by itself (a load), so it cannot be held for a soak: "
            "pick a query or write step"
        )
    late = [e.label for e in experiment.events if not e.due_times(spec.duration_s)]
    if late:
        raise MallocbenchError(
            f"[[soak.event]] {late[0]} is due after the soak's {spec.duration_s:g} s end: "
            "give an earlier `at` or a shorter `every`, or a longer --duration"
        )
    if families.get(experiment.family).soak_actions is None:
        # soak/events.py's own forms: their tools are looked for here. A family of its
        # own forms runs its server's tools, which come with the server.
        check_tools(experiment.events)
    threads = [step.definition.threads] if step.definition.threads else experiment.threads
    if len(threads) != 1:
        raise MallocbenchError(
            f"a soak runs one client count, but the experiment has {len(threads)} "
            f"({', '.join(map(str, threads))}): pick one with --set threads=[{threads[-1]}]"
        )
    return dataclasses.replace(
        experiment,
        threads=threads,
        warmup_s=0.0,
        max_warmup_s=0.0,
        duration_s=spec.segment_s,
        slice_s=spec.segment_s,
        design=SEQUENTIAL,
        repeats=spec.segments,
        text=experiment.text.rstrip("\n") + "\n\n" + spec.comment() + "\n",
    )


def plan_soak(experiment: Experiment) -> list[PlannedSession]:
    """One session per engine and setup, in the file's order, holding every segment."""
    step, threads = experiment.steps[0], experiment.threads[0]
    return [
        PlannedSession(
            setup.name,
            engine.name,
            0,
            tuple(
                PlannedCell(setup.name, engine.name, step, threads, segment)
                for segment in range(experiment.repeats)
            ),
        )
        for engine in experiment.engines
        for setup in experiment.setups
    ]


def soak_metadata(experiment: Experiment, spec: SoakSpec) -> RunMetadata:
    """The run's soak record: what marks a run as a soak for every report."""
    return RunMetadata(
        soak=SoakRecord(
            duration_s=spec.duration_s,
            segment_s=spec.segment_s,
            segments=spec.segments,
            step=experiment.steps[0].label,
            threads=experiment.threads[0],
            design=SEQUENTIAL_WHY,
            after_death="a killed or crashed server ends its setup's soak",
            lifetimes="each server lifetime is fitted on its own; the longest gives a "
            "setup's figures",
            account="the server's full account of its RSS is taken after the last "
            "segment only: its queries move RSS",
        )
    )


class SoakSessions(RunSessions):
    """A soak's session source: its segments, resume and session naming, and its events
    beside the load."""

    restart_after_death = False

    def __init__(self) -> None:
        self._events: dict[str, EventRunner] = {}  # by session id, while its server runs

    def plan(self, experiment: Experiment) -> list[PlannedSession]:
        return plan_soak(experiment)

    def finished_keys(
        self, store: ResultsStore, run_id: str, experiment: Experiment
    ) -> set[tuple[str, str, str, int, int]]:
        """Finished segments, and every segment of a setup whose server died in its soak."""
        done = store.finished_cell_keys(run_id)
        ended = store.setups_with_status(run_id, (STATUS_OOM, STATUS_CRASHED))
        for session in self.plan(experiment):
            if (session.setup, session.engine) in ended:
                done.update(cell.key for cell in session.cells)
        return done

    def resume_run_id(
        self, store: ResultsStore, experiment: Experiment, carried: RunMetadata
    ) -> str:
        """The latest soak of this experiment; refused if it soaked otherwise."""
        for run in reversed(store.list_runs()):
            if run["experiment"] != experiment.name:
                continue
            existing = store.load_run(run["run_id"], with_samples=False)
            if existing.metadata.soak is None:
                continue
            if existing.experiment_text != experiment.text:
                raise MallocbenchError(
                    f"cannot resume soak {run['run_id']}: the experiment file, --set, "
                    "--duration or --segment differ from its own; give the same, or run "
                    "without --resume to start a new soak"
                )
            return str(run["run_id"])
        raise MallocbenchError(
            f"nothing to resume: {store.label} has no soak of experiment {experiment.name!r}; "
            "run without --resume"
        )

    def session_id(
        self, store: ResultsStore, run_id: str, planned: PlannedSession, attempt: int, host: str
    ) -> str:
        """The first id the run has not used: a resumed soak's server is a new lifetime,
        and must not overwrite the record of the one before."""
        used = store.session_ids(run_id)
        while True:
            candidate = super().session_id(store, run_id, planned, attempt, host)
            if candidate not in used:
                return candidate
            attempt += 1

    def session_started(self, experiment: Experiment, live: Session) -> None:
        """The session's events (soak.events) start beside the load."""
        server = getattr(live, "server", None)  # a recorded executor replays no server
        if experiment.events and server is not None:
            horizon = experiment.repeats * experiment.duration_s
            runner = EventRunner(
                experiment.events,
                server,
                live.info.started_at or time.time(),
                horizon,
                families.get(experiment.family).soak_events(server),
            )
            self._events[live.info.id] = runner
            runner.start()

    def session_ending(self, live: Session) -> None:
        """The events stop (one under way is cut) before the server does; their records go
        into the session the store keeps."""
        runner = self._events.pop(live.info.id, None)
        if runner is not None:
            live.info.events = runner.stop()

    def takes_account(self, experiment: Experiment, planned: PlannedCell) -> bool:
        """Only the last segment: the account's own queries move RSS (see the module)."""
        return planned.repeat == experiment.repeats - 1

    def design_record(self, record: DesignRecord) -> DesignRecord:
        return DesignRecord(asked=SEQUENTIAL, used=SEQUENTIAL, why=SEQUENTIAL_WHY)


def soak_pipeline(
    experiment: Experiment,
    options: RunOptions,
    progress: Progress | None = None,
    stop_requested: Callable[[], bool] | None = None,
    executor: Executor | None = None,
) -> Pipeline:
    """The run pipeline with a soak's session source."""
    return Pipeline(
        experiment,
        options,
        progress,
        stop_requested,
        executor=executor or RealExecutor(),
        sessions=SoakSessions(),
    )


__all__ = [
    "DEFAULT_DURATION",
    "DEFAULT_SEGMENT",
    "SoakSessions",
    "SoakSpec",
    "plan_soak",
    "soak_experiment",
    "soak_spec",
    "soak_metadata",
    "soak_pipeline",
]
