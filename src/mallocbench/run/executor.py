"""What the run pipeline asks of whatever starts servers and measures cells.

The pipeline (runner.py) is the scheduler: it plans sessions and blocks, decides when a
dead server is replaced, when adaptive repetition stops and what a resume skips, and
writes every session and cell to the store. An executor does the work it schedules:
start a session's server, stop it, measure cells on live sessions. RealExecutor
(real.py) runs real servers and sysbench; RecordedExecutor (recorded.py) replays a
recorded run, so the scheduler can be tested in seconds on numbers real runs gave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mallocbench.model.results import Cell, SessionInfo
from mallocbench.run.experiment import Experiment, PlannedCell, PlannedSession, Setup
from mallocbench.servers.family import Build
from mallocbench.workloads.sysbench import Interval


class CellProgress(Protocol):
    """The part of the pipeline's progress display an executor reports to."""

    def status(self, text: str) -> None: ...
    def cell_started(self, cell: PlannedCell, phase: str) -> None: ...
    def interval(self, cell: PlannedCell, interval: Interval, rss_bytes: int | None) -> None: ...


class Session(Protocol):
    """A started session as the scheduler sees it (session.LiveSession is one).

    `info` is the record the scheduler stores; `notes` what the reader must be told.
    """

    info: SessionInfo
    notes: list[str]

    def alive(self) -> bool: ...


@dataclass(frozen=True)
class RunContext:
    """What an executor needs of the run it works for."""

    experiment: Experiment
    out_dir: Path
    keep_datadirs: bool
    progress: CellProgress
    stop_requested: Callable[[], bool]
    # Whether a cell ends with the server's full account of its RSS (a soak: its last).
    takes_account: Callable[[PlannedCell], bool]


class Executor(Protocol):
    def resolve_builds(self, experiment: Experiment) -> dict[str | None, Build]:
        """The server build of every setup's basedir (None: the packaged server)."""
        ...

    def server_state(self, label: str) -> AbstractContextManager[str | None]:
        """Held while a run's servers may run: the directory they keep their own state in
        (a runtime directory when run as root), removed on the way out; None: their
        session directories under --out."""
        ...

    def stop_leftovers(self, out_dir: Path) -> list[int]:
        """Stop the servers a dead harness left running under `out_dir` (the caller holds
        the directory's lock, so none of them is anyone's); their PIDs."""
        ...

    def now(self) -> float:
        """Seconds on a monotonic clock: what adaptive repetition's budget is spent on."""
        ...

    def host_prepared_for(self, setup: Setup) -> AbstractContextManager[None]:
        """Held while a setup's sessions run one at a time (a system-wide THP mode)."""
        ...

    def start_session(
        self, run: RunContext, planned: PlannedSession, session_id: str, build: Build
    ) -> Session:
        """A started, cache-warmed server for the session; raises ServerStartError."""
        ...

    def stop_session(self, run: RunContext, session: Session) -> None:
        """Stop the server and fill in its peaks; cleanup problems become its notes."""
        ...

    def measure(
        self, run: RunContext, pairs: Sequence[tuple[Session, PlannedCell]], interleave: bool
    ) -> list[Cell]:
        """One cell per (session, planned cell), in order; interleaved: slices alternate.

        A server that dies gives its cell the death's status; the scheduler sees it
        through the session's alive().
        """
        ...


__all__ = ["CellProgress", "Executor", "RunContext", "Session"]
