"""The words of the progress displays of `run` and `replay` (commands/progress.py draws
them): the cell under way and its phase, a finished cell, a block adaptive repetition
adds, a resumed run; the trace read, the replay under way, a finished replay."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from mallocbench.model.metadata import ReplayRun
from mallocbench.model.results import STATUS_OK, Cell
from mallocbench.run.experiment import PlannedCell


def print_line(markup: str, console: Console) -> None:
    """A line already worded in report/ with its markup (a run's or a soak's banner)."""
    console.print(markup)


def resuming_text(counts: tuple[int, int]) -> str:
    skipped, total = counts
    return f"resuming: {skipped} of {total} cells already measured"


def print_resuming(counts: tuple[int, int], console: Console) -> None:
    console.print(resuming_text(counts))


def cell_name(cell: PlannedCell) -> str:
    return f"{cell.setup}/{cell.engine} {cell.step.label} {cell.threads}t r{cell.repeat}"


def phase_text(cell: PlannedCell, phase: str) -> str:
    return f"{cell_name(cell)} [dim]{phase}[/]"


def interval_text(cell: PlannedCell, qps: float, rss_bytes: int | None) -> str:
    rss = f"RSS {rss_bytes / (1 << 20):,.0f} MiB" if rss_bytes else ""
    return f"{cell_name(cell)} {qps:,.0f} qps {rss}"


@dataclass(frozen=True)
class CellDone:
    """A finished cell; off a terminal (`live` False) with its count, since no bar is
    drawn there."""

    cell: Cell
    done: int
    total: int
    live: bool


def print_cell_done(d: CellDone, console: Console) -> None:
    cell = d.cell
    count = "" if d.live else f"{d.done}/{d.total} "
    name = (
        f"{count}  {escape(cell.setup):>12} {escape(cell.engine):<8} "
        f"{escape(cell.step):<28} {cell.threads:>3}t "
    )
    if cell.status == STATUS_OK:
        text = (
            f"{cell.qps or 0:>10,.0f} qps  p99 {cell.p99_ms or 0:7.2f} ms  "
            f"peak RSS {(cell.peak_rss_bytes or 0) / (1 << 20):,.0f} MiB"
        )
    else:
        text = f"[red]{cell.status}[/]: {escape(cell.error or '')}"
    # soft_wrap: a log line is never broken inside a number; the viewer wraps it.
    console.print(name + text, soft_wrap=not d.live)


@dataclass(frozen=True)
class Block:
    """A block adaptive repetition adds: its number (from 0), its cells, and why."""

    repeat: int
    cells: int
    reason: str


def print_block(b: Block, console: Console) -> None:
    console.print(f"[bold]block {b.repeat + 1}[/]: {b.cells} more cells, because {b.reason}")


def replaying_text(what: str) -> str:
    return f"replaying {escape(what)}"


@dataclass(frozen=True)
class TraceRead:
    """The trace read, in how long, with its calls and recorded span; the replays to run."""

    path: Path
    took_s: float
    events: int
    duration_s: float
    replays: int


def print_trace_read(r: TraceRead, console: Console) -> None:
    console.print(
        f"read {r.path} in {r.took_s:.0f} s: {r.events:,} calls, {r.duration_s:.1f} s "
        f"recorded; {r.replays} replays to run",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@dataclass(frozen=True)
class ReplayDone:
    """A finished replay: its count of all, the time so far and the ETA."""

    run: ReplayRun
    done: int
    total: int
    elapsed_s: float
    eta_s: float


def print_replay_done(d: ReplayDone, console: Console) -> None:
    run = d.run
    if run.status == "ok":
        what = (
            f"peak RSS {(run.value('peak_heap_rss') or 0) / (1 << 20):,.1f} MiB, "
            f"CPU {run.value('cpu_s') or 0:.2f} s"
        )
    else:
        what = f"{run.status}: {run.error or ''}"
    console.print(
        f"{d.done}/{d.total} {run.setup} repeat {run.repeat + 1}: {what}; "
        f"{d.elapsed_s:.0f} s elapsed, ETA {d.eta_s:.0f} s",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
