"""Where and in what order a run's planned sessions are measured: on this host, one server
at a time or a block's servers up at once (a cluster's is cluster.driver.ClusterSchedule).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

from mallocbench.model.results import Cell
from mallocbench.run.executor import Executor, Session
from mallocbench.run.experiment import Experiment, PlannedCell, PlannedSession
from mallocbench.run.options import Progress, RunOptions, RunOutcome
from mallocbench.run.planning import blocks
from mallocbench.run.source import RunSessions
from mallocbench.servers.family import Build
from mallocbench.servers.outcome import SettingNotTaken
from mallocbench.store import ResultsStore


class ScheduledRun(Protocol):
    """The run a schedule works for (runner.Pipeline is one): it starts and ends sessions,
    measures and saves cells; the schedule only decides where and in what order."""

    experiment: Experiment
    options: RunOptions
    progress: Progress
    executor: Executor
    sessions: RunSessions
    interleaved: bool
    stop_requested: Callable[[], bool]

    def begin_session(
        self,
        store: ResultsStore,
        run_id: str,
        planned: PlannedSession,
        attempt: int,
        builds: dict[str | None, Build],
    ) -> Session: ...

    def end_session(
        self, store: ResultsStore, run_id: str, live: Session, outcome: RunOutcome
    ) -> None: ...

    def save_cell(
        self, store: ResultsStore, run_id: str, cell: Cell, outcome: RunOutcome
    ) -> None: ...

    def measure_together(
        self, pairs: list[tuple[Session, PlannedCell]], interleave: bool
    ) -> list[Cell]: ...

    def setup_not_taken(
        self,
        store: ResultsStore,
        run_id: str,
        cells: list[PlannedCell],
        exc: SettingNotTaken,
        outcome: RunOutcome,
    ) -> None: ...


class Schedule(Protocol):
    """Where and in what order a run's planned sessions are measured."""

    def connected(self) -> contextlib.AbstractContextManager[None]:
        """Held while the run executes (a cluster's client)."""
        ...

    def run(
        self,
        pipeline: ScheduledRun,
        store: ResultsStore,
        run_id: str,
        sessions: list[PlannedSession],
        done: set[tuple[str, str, str, int, int]],
        builds: dict[str | None, Build],
        outcome: RunOutcome,
    ) -> None:
        """Measure the sessions' cells not in `done`, each saved through the pipeline."""
        ...


class LocalSchedule:
    """Sessions on this host: one server at a time (sequential), or every setup's
    server of a block up at once (interleaved). A cluster's schedule
    (cluster.driver.ClusterSchedule) sends blocks to other hosts instead."""

    def connected(self) -> contextlib.AbstractContextManager[None]:
        """Held while the run executes: nothing to connect to here."""
        return contextlib.nullcontext()

    def run(
        self,
        pipeline: ScheduledRun,
        store: ResultsStore,
        run_id: str,
        sessions: list[PlannedSession],
        done: set[tuple[str, str, str, int, int]],
        builds: dict[str | None, Build],
        outcome: RunOutcome,
    ) -> None:
        if pipeline.interleaved:
            for block in blocks(sessions):
                if all(c.key in done for s in block for c in s.cells):
                    continue
                if pipeline.stop_requested():
                    raise KeyboardInterrupt
                self._run_block(pipeline, store, run_id, block, done, builds, outcome)
            return
        for session in sessions:
            pending = [c for c in session.cells if c.key not in done]
            if not pending:
                continue
            if pipeline.stop_requested():
                raise KeyboardInterrupt
            self._run_session(pipeline, store, run_id, session, pending, builds, outcome)

    def _run_session(
        self,
        pipeline: ScheduledRun,
        store: ResultsStore,
        run_id: str,
        planned: PlannedSession,
        pending: list[PlannedCell],
        builds: dict[str | None, Build],
        outcome: RunOutcome,
    ) -> None:
        """Sequential design: the pending cells on one server; a dead one is replaced."""
        setup = pipeline.experiment.setup(planned.setup)
        attempt = 0
        with pipeline.executor.host_prepared_for(setup):
            while pending:
                try:
                    live = pipeline.begin_session(store, run_id, planned, attempt, builds)
                except SettingNotTaken as exc:
                    pipeline.setup_not_taken(store, run_id, pending, exc, outcome)
                    return
                attempt += 1
                try:
                    while pending:
                        (cell,) = pipeline.measure_together([(live, pending[0])], interleave=False)
                        pipeline.save_cell(store, run_id, cell, outcome)
                        pending.pop(0)
                        if not live.alive():
                            live.info.status = cell.status
                            if not pipeline.sessions.restart_after_death:
                                pending.clear()
                            break
                        if pipeline.stop_requested():
                            raise KeyboardInterrupt
                finally:
                    pipeline.end_session(store, run_id, live, outcome)

    def _run_block(
        self,
        pipeline: ScheduledRun,
        store: ResultsStore,
        run_id: str,
        sessions: list[PlannedSession],
        done: set[tuple[str, str, str, int, int]],
        builds: dict[str | None, Build],
        outcome: RunOutcome,
    ) -> None:
        """Interleaved design: every setup's server up at once, each cell's slices alternating.

        A server that dies is replaced for the block's next cell; the others stay up.
        """
        pending = {s.setup: [c for c in s.cells if c.key not in done] for s in sessions}
        keys = list(
            dict.fromkeys((c.step.label, c.threads) for s in sessions for c in pending[s.setup])
        )
        lives: dict[str, Session] = {}
        attempts: dict[str, int] = {}
        try:
            for key in keys:
                pairs = []
                for session in sessions:
                    cell = next(
                        (c for c in pending[session.setup] if (c.step.label, c.threads) == key),
                        None,
                    )
                    if cell is None:
                        continue
                    live = lives.get(session.setup)
                    if live is None or not live.alive():
                        if live is not None:
                            pipeline.end_session(store, run_id, lives.pop(session.setup), outcome)
                        attempt = attempts.get(session.setup, 0)
                        attempts[session.setup] = attempt + 1
                        try:
                            live = pipeline.begin_session(store, run_id, session, attempt, builds)
                        except SettingNotTaken as exc:
                            # The block goes on without it: its cells are failed ones.
                            failed, pending[session.setup] = pending[session.setup], []
                            pipeline.setup_not_taken(store, run_id, failed, exc, outcome)
                            continue
                        lives[session.setup] = live
                    pairs.append((live, cell))
                if not pairs:
                    continue
                measured = pipeline.measure_together(pairs, interleave=True)
                for (live, _), finished in zip(pairs, measured, strict=True):
                    pipeline.save_cell(store, run_id, finished, outcome)
                    if not live.alive():
                        live.info.status = finished.status
                if pipeline.stop_requested():
                    raise KeyboardInterrupt
        finally:
            for live in lives.values():
                pipeline.end_session(store, run_id, live, outcome)


__all__ = ["LocalSchedule", "Schedule", "ScheduledRun"]
