"""The executor of real runs: private servers under their allocators, sysbench, probes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.files import cache_root
from mallocbench.model.results import Cell
from mallocbench.probes.system import system_thp_mode
from mallocbench.replay import cells as cells_record
from mallocbench.run.builds import resolve_builds
from mallocbench.run.cellends import record_charge, restart_peak
from mallocbench.run.executor import CellProgress, RunContext, Session
from mallocbench.run.experiment import (
    MIN_RUN_SLICE_S,
    TURNS,
    Experiment,
    PlannedCell,
    PlannedSession,
    Setup,
)
from mallocbench.run.measure import CellMeasurement, finish_cell, measure_slice, new_cell, warm_up
from mallocbench.run.planning import slices_per_cell
from mallocbench.run.session import LiveSession, start_session, stop_session
from mallocbench.run.turns import measure_turns, takes_turns
from mallocbench.servers import families
from mallocbench.servers.family import Build, ServerFamily
from mallocbench.servers.orphans import stop_orphans
from mallocbench.servers.outcome import ServerStartError
from mallocbench.servers.runtime import RuntimeDir


def _live(session: Session) -> LiveSession:
    # Only sessions this executor started come back to it.
    assert isinstance(session, LiveSession), type(session)
    return session


class RealExecutor:
    """Starts real servers (golden datadir copies) and measures with sysbench."""

    def __init__(self) -> None:
        self._runtime: RuntimeDir | None = None
        # The experiment's, once its builds are resolved (before any server state).
        self._family: ServerFamily = families.get(families.DEFAULT)

    @contextlib.contextmanager
    def server_state(self, label: str) -> Iterator[str | None]:
        user = self._family.server_user()
        if user is None:
            yield None
            return
        with RuntimeDir.create(label, user.uid, user.gid) as runtime:
            self._runtime = runtime
            try:
                yield str(runtime.path)
            finally:
                self._runtime = None

    def resolve_builds(self, experiment: Experiment) -> dict[str | None, Build]:
        self._family = families.get(experiment.family)
        return resolve_builds(experiment)

    def stop_leftovers(self, out_dir: Path) -> list[int]:
        return [orphan.pid for orphan in stop_orphans(out_dir / "servers")]

    def now(self) -> float:
        return time.monotonic()

    def host_prepared_for(self, setup: Setup) -> AbstractContextManager[None]:
        # "never" is set on the server alone (PR_SET_THP_DISABLE); the other modes can
        # only be had system-wide, for the session's duration.
        return system_thp_mode(setup.thp if setup.thp in ("always", "madvise") else None)

    def start_session(
        self, run: RunContext, planned: PlannedSession, session_id: str, build: Build
    ) -> LiveSession:
        """Start a server for the session's setup on a golden datadir's copy, warm its cache."""
        experiment, progress = run.experiment, run.progress
        setup = experiment.setup(planned.setup)
        family = families.get(experiment.family)
        engine = family.engine(planned.engine)
        try:
            golden = family.golden_datadir(
                build, planned.engine, experiment.dataset, cache_root(), progress.status
            )
            progress.status(f"starting {setup.name} on {engine.name} ({session_id})")
            live = start_session(
                experiment,
                planned,
                session_id,
                run.out_dir / "servers" / session_id,
                build,
                golden,
                self._runtime,
            )
        except ServerStartError:
            raise
        except MallocbenchError as exc:
            raise ServerStartError(f"setup {setup.name}: {exc}") from exc
        progress.status(f"warming the {engine.name} cache ({session_id})")
        live.info.cache_warm = family.warm_cache(live.server, experiment.dataset)
        return live

    def stop_session(self, run: RunContext, session: Session) -> None:
        stop_session(_live(session), run.keep_datadirs)

    def measure(
        self, run: RunContext, pairs: Sequence[tuple[Session, PlannedCell]], interleave: bool
    ) -> list[Cell]:
        """One cell per (session, planned cell): warmed in turn, then their slices rotated.

        Rotating the order each round gives every setup every position after every
        other, so what one setup's slice leaves behind (a busy CPU cache, a flush
        still running) reaches all setups alike.
        """
        experiment, progress, stop_requested = run.experiment, run.progress, run.stop_requested
        cells: list[Cell | None] = []
        active: list[tuple[int, LiveSession, CellMeasurement, bool]] = []
        for index, (session, planned) in enumerate(pairs):
            live = _live(session)
            cell = new_cell(planned, live, experiment)
            exact_peak = restart_peak(live)
            until_done = planned.step.definition.until_done
            failed = None
            if experiment.warmup_s > 0 and not until_done:
                progress.cell_started(planned, "warmup")
                failed = warm_up(live, planned, cell, experiment, stop_requested)
            if failed is not None:
                record_charge(failed, live, exact_peak)
                cells.append(failed)
                continue
            cells.append(None)
            drop_first = interleave and not until_done
            active.append((index, live, CellMeasurement(cell, planned, drop_first), exact_peak))
        windows = {index: cells_record.arm(live, m.planned) for index, live, m, _ in active}
        try:
            self._measure_active(experiment, active, interleave, progress, stop_requested)
        except BaseException:
            for window in windows.values():
                if window is not None:
                    cells_record.abandon(window)
            raise
        for index, live, measurement, exact_peak in active:
            window = windows[index]
            if window is not None:
                cells_record.disarm(
                    window, live, measurement.planned, measurement.cell, run.out_dir
                )
            cell = finish_cell(measurement, live, run.takes_account(measurement.planned))
            record_charge(cell, live, exact_peak)
            cells[index] = cell
        return [c for c in cells if c is not None]

    def _measure_active(
        self,
        experiment: Experiment,
        active: list[tuple[int, LiveSession, CellMeasurement, bool]],
        interleave: bool,
        progress: CellProgress,
        stop_requested: Callable[[], bool],
    ) -> None:
        """The warmed cells' measured seconds: turns, slices, or one run each."""
        sliced = interleave and all(
            not m.planned.step.definition.until_done for _, _, m, _ in active
        )
        rounds = slices_per_cell(experiment) if sliced else 1
        seconds = experiment.slice_s if sliced else experiment.duration_s
        steps = [m.planned.step for _, _, m, _ in active]
        if sliced and active and experiment.alternate == TURNS and takes_turns(steps):
            for _, _, measurement, _ in active:
                progress.cell_started(measurement.planned, f"{rounds} turns of {seconds:g} s")
            measure_turns(
                [(live, m) for _, live, m, _ in active],
                rounds,
                seconds,
                progress.interval,
                stop_requested,
                experiment.settle_rounds,
            )
        else:
            if sliced and seconds < MIN_RUN_SLICE_S:
                # Turns asked of steps that cannot take them: runs drop a second, so
                # keep them long enough.
                seconds = min(MIN_RUN_SLICE_S, experiment.duration_s)
                rounds = max(1, round(experiment.duration_s / seconds))
            self._measure_slices(active, rounds, seconds, progress, stop_requested)

    @staticmethod
    def _measure_slices(
        active: list[tuple[int, LiveSession, CellMeasurement, bool]],
        rounds: int,
        seconds: float,
        progress: CellProgress,
        stop_requested: Callable[[], bool],
    ) -> None:
        """Each slice its own sysbench run, the setups' slices in rotating order."""
        dead: set[int] = set()
        for round_index in range(rounds):
            turn = round_index % len(active) if active else 0
            for index, live, measurement, _ in active[turn:] + active[:turn]:
                if index in dead:
                    continue
                phase = f"measure {round_index + 1}/{rounds}" if rounds > 1 else "measure"
                progress.cell_started(measurement.planned, phase)
                if not measure_slice(live, measurement, seconds, progress.interval, stop_requested):
                    dead.add(index)
                if stop_requested():
                    raise KeyboardInterrupt


__all__ = ["RealExecutor"]
