"""Progress for `mallocbench run` (current cell, phase, QPS and RSS, elapsed, ETA) and
`mallocbench replay` (the trace's reading, each replay, ETA).

On a terminal a live bar redraws in place; anywhere else (a pipe, a CI log) each finished
cell is one plain line with its count, and nothing is redrawn: cursor codes and a bar
squeezed to an assumed width are noise in a log.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from mallocbench.commands.output import say
from mallocbench.console import LiveBar
from mallocbench.model.metadata import ReplayRun
from mallocbench.model.results import Cell
from mallocbench.report import formats
from mallocbench.report import progress as words
from mallocbench.run.experiment import PlannedCell
from mallocbench.workloads.sysbench import Interval

if TYPE_CHECKING:
    from mallocbench.replay.trace import TraceInfo


class RichProgress:
    """Shown from the pipeline's start() on: a run refused before it (another run holds
    the directory) prints its one error line and nothing else."""

    def __init__(self, console: Console, seconds_per_cell: float, banner: str = "") -> None:
        self.console = console
        self.seconds_per_cell = seconds_per_cell
        self.banner = banner
        self.started = False
        self.live = console.is_terminal
        # Time-based progress: the bar advances with seconds of work so the ETA is honest
        # even though cells take the same time whatever their QPS.
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("cells"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task = self.progress.add_task("starting", total=1)
        self.cells_done = 0
        self.total_cells = 0

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.progress.stop()

    def start(self, total_cells: int, skipped: int) -> None:
        if self.banner:
            say(formats.PROGRESS_LINE, self.banner, console=self.console)
        if self.live:
            self.progress.start()
            self.started = True
        self.progress.update(self.task, total=total_cells, completed=skipped)
        self.cells_done, self.total_cells = skipped, total_cells
        if skipped:
            say(formats.RESUMING, (skipped, total_cells), console=self.console)

    def status(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def cell_started(self, cell: PlannedCell, phase: str) -> None:
        self.progress.update(self.task, description=words.phase_text(cell, phase))

    def interval(self, cell: PlannedCell, interval: Interval, rss_bytes: int | None) -> None:
        text = words.interval_text(cell, interval.qps, rss_bytes)
        self.progress.update(self.task, description=text)

    def cell_finished(self, cell: Cell) -> None:
        self.progress.advance(self.task)
        self.cells_done += 1
        done = words.CellDone(cell, self.cells_done, self.total_cells, self.live)
        say(formats.CELL_DONE, done, console=self.console)

    def round_started(self, repeat: int, cells: int, reason: str) -> None:
        task = self.progress.tasks[self.task]
        self.progress.update(self.task, total=(task.total or 0) + cells)
        self.total_cells += cells
        say(formats.BLOCK, words.Block(repeat, cells, reason), console=self.console)


class ReplayProgress(LiveBar):
    """`replay`'s progress: on a terminal a bar over its replays (setups x repeats) with
    the elapsed time and an ETA, the trace's reading first; anywhere else one plain line
    per replay with its count, what it measured and the ETA, since a replay of a long
    trace runs for minutes and a log that stays silent looks hung."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = total
        self.done = 0
        self.live = console.is_terminal
        self.began = time.monotonic()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("replays"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=True,  # the tables follow; an error stays the one line it is
        )
        self.task = self.progress.add_task("starting", total=total)

    def status(self, text: str) -> None:
        self.progress.update(self.task, description=escape(text))

    def read(self, info: TraceInfo) -> None:
        """The trace is read: in a log, a line once it is (a trace refused stays the one
        line of its error)."""
        if self.live:
            return
        d = info.data
        read = words.TraceRead(
            info.path,
            time.monotonic() - self.began,
            int(d.get("events") or 0),
            float(d.get("duration_s") or 0),
            self.total,
        )
        say(formats.TRACE_READ, read, console=self.console)

    def started(self, text: str) -> None:
        if self.done == 0:
            self.began = time.monotonic()  # the ETA counts replays, not the trace's reading
        self.progress.update(self.task, description=words.replaying_text(text))

    def finished(self, run: ReplayRun) -> None:
        self.done += 1
        self.progress.advance(self.task)
        if self.live:
            return
        elapsed = time.monotonic() - self.began
        eta = elapsed / self.done * (self.total - self.done)
        done = words.ReplayDone(run, self.done, self.total, elapsed, eta)
        say(formats.REPLAY_DONE, done, console=self.console)
