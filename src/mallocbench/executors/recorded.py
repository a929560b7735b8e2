"""An executor that replays a recorded run: no server, no sysbench, no waiting.

Each planned cell gets the recorded cell of the same setup, engine, step, threads and
repeat, renumbered to the session it is measured in. A plan with more repeats than the
recording (adaptive repetition, a soak's segments) draws recorded repeats, as a
bootstrap would: one draw per engine and repeat, shared by every setup of that block,
so the setups stay paired as they were measured; seeded, so a replay is repeatable.
Timestamps move onto a virtual clock that advances by the recorded seconds, so budgets
are spent as the real run spent them, in no time.

Scripted deaths (ScriptedDeath) kill a session's server while it measures a given cell,
for tests of what the scheduler does then; a recorded death replays as one too.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.model.results import STATUS_CRASHED, STATUS_OOM, Cell, RunResult, SessionInfo
from mallocbench.run.executor import RunContext, Session
from mallocbench.run.experiment import Experiment, PlannedCell, PlannedSession, Setup
from mallocbench.run.planning import slices_per_cell
from mallocbench.servers.family import Build
from mallocbench.servers.mariadb import ServerBuild
from mallocbench.store.loading import load_result

CellKey = tuple[str, str, str, int, int]  # setup, engine, step label, threads, repeat
_DEATH_SIGNALS = {STATUS_OOM: "SIGKILL", STATUS_CRASHED: "SIGSEGV"}
_DEATH_WORDS = {STATUS_OOM: "killed by the OOM killer", STATUS_CRASHED: "crashed"}


@dataclass(frozen=True)
class ScriptedDeath:
    """The server dies while measuring this cell (its first slice), with this status."""

    setup: str
    engine: str
    step: str  # the step's label, as cells carry it
    threads: int
    repeat: int
    status: str = STATUS_OOM

    def __post_init__(self) -> None:
        if self.status not in _DEATH_SIGNALS:
            raise ValueError(f"a scripted death is {STATUS_OOM} or {STATUS_CRASHED}")

    @property
    def key(self) -> CellKey:
        return (self.setup, self.engine, self.step, self.threads, self.repeat)


@dataclass
class RecordedSession:
    """A replayed server lifetime: its record, and whether its server still lives."""

    info: SessionInfo
    notes: list[str] = field(default_factory=list)
    running: bool = True
    cells: list[Cell] = field(default_factory=list)

    def alive(self) -> bool:
        return self.running


@dataclass(frozen=True)
class MeasureCall:
    """One measure() as the executor saw it: what tests of the scheduler look at."""

    cells: tuple[PlannedCell, ...]  # in the order the scheduler paired them
    sessions: tuple[str, ...]
    interleave: bool
    # The setups' slices in the order they ran, round after round.
    slice_order: tuple[str, ...]


class RecordedExecutor:
    """Replays `recording` for whatever the pipeline plans (see the module)."""

    def __init__(
        self,
        recording: RunResult,
        seed: int = 0,
        deaths: Iterable[ScriptedDeath] = (),
        start_s: float = 0.0,
    ) -> None:
        self.recording = recording
        self.seed = seed
        self.start_s = start_s  # virtual seconds a server takes to start and warm
        self._cells: dict[CellKey, Cell] = {c.key: c for c in recording.cells}
        self._repeats: dict[tuple[str, str, str, int], list[int]] = {}
        for setup, engine, step, threads, repeat in sorted(self._cells):
            self._repeats.setdefault((setup, engine, step, threads), []).append(repeat)
        self._deaths = {d.key: d for d in deaths}
        starts = [c.started_at for c in recording.cells if c.started_at is not None]
        self._clock = min(starts, default=0.0)
        self.calls: list[MeasureCall] = []
        self.sessions: list[RecordedSession] = []  # every session started, in order

    @classmethod
    def from_source(
        cls,
        source: str | Path,
        run_id: str | None = None,
        seed: int = 0,
        deaths: Iterable[ScriptedDeath] = (),
    ) -> RecordedExecutor:
        """Replay a results.json, a store's run (the latest, or run_id) or a directory."""
        return cls(load_result(source, run_id), seed, deaths)

    # --- the Executor protocol -------------------------------------------------------------

    def stop_leftovers(self, out_dir: Path) -> list[int]:
        return []  # a recording starts no processes, so none can be left over

    def server_state(self, label: str) -> AbstractContextManager[str | None]:
        return nullcontext(None)  # no server, no state

    def resolve_builds(self, experiment: Experiment) -> dict[str | None, Build]:
        """The builds the recording names; nothing is looked for on this machine."""
        recorded = {s.name: s for s in self.recording.setups}
        labels = self.recording.metadata.server_versions or ["mariadb"]
        flavor = str(labels[0]).split()[0]
        builds: dict[str | None, Build] = {}
        for setup in experiment.setups:
            info = recorded.get(setup.name)
            builds.setdefault(
                setup.basedir,
                ServerBuild(
                    mysqld=(info.server if info else None) or "mysqld (recorded)",
                    install_db=None,
                    version=(info.server_version if info else None) or "recorded",
                    flavor=flavor,
                    basedir=setup.basedir,
                ),
            )
        return builds

    def now(self) -> float:
        return self._clock

    def host_prepared_for(self, setup: Setup) -> AbstractContextManager[None]:
        # A replay changes nothing on the host (a system-wide THP mode least of all).
        return nullcontext()

    def start_session(
        self, run: RunContext, planned: PlannedSession, session_id: str, build: Build
    ) -> RecordedSession:
        run.progress.status(f"replaying {planned.setup} on {planned.engine} ({session_id})")
        self._clock += self.start_s
        info = SessionInfo(
            id=session_id,
            setup=planned.setup,
            engine=planned.engine,
            repeat=planned.repeat,
            started_at=self._clock,
            cache_warm=f"replayed from run {self.recording.run_id}",
        )
        recorded = self._recorded_session(planned)
        if recorded is not None:
            info.thp = recorded.thp
            info.idle_rss_bytes = recorded.idle_rss_bytes
            info.memory_limit_bytes = recorded.memory_limit_bytes
        session = RecordedSession(info)
        self.sessions.append(session)
        return session

    def stop_session(self, run: RunContext, session: Session) -> None:
        replayed = _recorded(session)
        replayed.running = False
        info = replayed.info
        info.ended_at = self._clock
        rss = [c.peak_rss_bytes for c in replayed.cells if c.peak_rss_bytes is not None]
        vsz = [c.peak_vsz_bytes for c in replayed.cells if c.peak_vsz_bytes is not None]
        info.peak_rss_bytes = max(rss, default=None)
        info.peak_vsz_bytes = max(vsz, default=None)

    def measure(
        self, run: RunContext, pairs: Sequence[tuple[Session, PlannedCell]], interleave: bool
    ) -> list[Cell]:
        """The recorded cells, after walking the slices in the order a real run would."""
        experiment = run.experiment
        sessions = [_recorded(session) for session, _ in pairs]
        sliced = interleave and not any(p.step.definition.until_done for _, p in pairs)
        rounds = slices_per_cell(experiment) if sliced else 1
        dying = {i for i, (_, p) in enumerate(pairs) if p.key in self._deaths}
        order: list[str] = []
        if experiment.warmup_s > 0:
            for _, planned in pairs:
                if not planned.step.definition.until_done:
                    run.progress.cell_started(planned, "warmup")
        for round_index in range(rounds):
            turn = round_index % len(pairs) if pairs else 0
            for index in list(range(turn, len(pairs))) + list(range(turn)):
                if round_index > 0 and index in dying:
                    continue
                planned = pairs[index][1]
                phase = f"measure {round_index + 1}/{rounds}" if rounds > 1 else "measure"
                run.progress.cell_started(planned, phase)
                order.append(planned.setup)
                if run.stop_requested():
                    raise KeyboardInterrupt
        self.calls.append(
            MeasureCall(
                tuple(p for _, p in pairs),
                tuple(s.info.id for s in sessions),
                interleave,
                tuple(order),
            )
        )
        return [self._replay(s, p) for s, (_, p) in zip(sessions, pairs, strict=True)]

    # --- replaying ---------------------------------------------------------------------------

    def recorded_cell(self, planned: PlannedCell) -> Cell:
        """The recorded cell a planned cell replays: its own repeat, or a drawn one."""
        group = planned.key[:4]
        repeats = self._repeats.get(group)
        if not repeats:
            setup, engine, step, threads = group
            raise MallocbenchError(
                f"run {self.recording.run_id} recorded no cell {setup}/{engine}/{step}/"
                f"{threads}t to replay: record a run of the same experiment"
            )
        if planned.key in self._cells:
            return self._cells[planned.key]
        drawn = self._drawn_repeat(planned.engine, planned.repeat)
        if drawn not in repeats:
            # This cell lacks the block's draw (an adaptive round of some cells only).
            drawn = random.Random(f"{self.seed}/{planned.key}").choice(repeats)
        return self._cells[(*group, drawn)]

    def _drawn_repeat(self, engine: str, repeat: int) -> int:
        # Seeded by the block alone: the draw does not hang on the order cells come in.
        recorded = sorted({key[4] for key in self._cells if key[1] == engine})
        return random.Random(f"{self.seed}/{engine}/{repeat}").choice(recorded)

    def _replay(self, session: RecordedSession, planned: PlannedCell) -> Cell:
        recorded = self.recorded_cell(planned)
        cell = _moved_to(recorded, self._clock)
        cell.repeat, cell.session = planned.repeat, session.info.id
        self._clock += (recorded.warmup_s or 0.0) + (recorded.duration_s or 0.0)
        death = self._deaths.get(planned.key)
        if death is not None:
            _die(cell, death.status, "(scripted) while measuring")
        if cell.status in _DEATH_SIGNALS:
            session.running = False
            session.info.status = cell.status
        session.cells.append(cell)
        return cell

    def _recorded_session(self, planned: PlannedSession) -> SessionInfo | None:
        same = [
            s
            for s in self.recording.sessions
            if (s.setup, s.engine) == (planned.setup, planned.engine)
        ]
        return next((s for s in same if s.repeat == planned.repeat), same[0] if same else None)


def _recorded(session: Session) -> RecordedSession:
    # Only sessions this executor started come back to it.
    assert isinstance(session, RecordedSession), type(session)
    return session


def _moved_to(recorded: Cell, start: float) -> Cell:
    """A copy of the cell with its timeline moved to start at `start`."""
    shift = start - recorded.started_at if recorded.started_at is not None else 0.0
    cell = Cell.from_dict(recorded.to_dict())
    cell.started_at = start
    cell.samples = [dataclasses.replace(s, t=s.t + shift) for s in recorded.samples]
    cell.slices = [{**piece, "t": piece.get("t", start) + shift} for piece in recorded.slices]
    return cell


def _die(cell: Cell, status: str, when: str) -> None:
    """What measure.dead_server_cell records of a server that died under the cell."""
    cell.status = status
    cell.exit_signal = _DEATH_SIGNALS[status]
    cell.error = f"the server was {_DEATH_WORDS[status]} {when}"
    cell.log_tail = None
    cell.qps = cell.tps = cell.p95_ms = cell.p99_ms = cell.avg_ms = None
    cell.errors = 0
    cell.metrics = {}
    cell.stability = {}


__all__ = ["MeasureCall", "RecordedExecutor", "RecordedSession", "ScriptedDeath"]
