"""What a run is asked to do (RunOptions), what it reports as it goes (Progress) and what
it gives back (RunOutcome).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mallocbench.analysis.convergence import WideCell
from mallocbench.analysis.steady import WINDOW_S
from mallocbench.model.metadata import RunMetadata
from mallocbench.model.results import Cell, RunResult
from mallocbench.run.experiment import INTERLEAVED, TURNS, Experiment, PlannedCell
from mallocbench.run.planning import slices_per_cell
from mallocbench.store import store_label
from mallocbench.store.base import STORE_NAME
from mallocbench.workloads.sysbench import Interval


class Progress(Protocol):
    """What the pipeline tells whoever watches it (the CLI draws it with rich)."""

    def start(self, total_cells: int, skipped: int) -> None: ...
    def status(self, text: str) -> None: ...
    def cell_started(self, cell: PlannedCell, phase: str) -> None: ...
    def interval(self, cell: PlannedCell, interval: Interval, rss_bytes: int | None) -> None: ...
    def cell_finished(self, cell: Cell) -> None: ...
    def round_started(self, repeat: int, cells: int, reason: str) -> None: ...


class SilentProgress:
    def start(self, total_cells: int, skipped: int) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def cell_started(self, cell: PlannedCell, phase: str) -> None:
        pass

    def interval(self, cell: PlannedCell, interval: Interval, rss_bytes: int | None) -> None:
        pass

    def cell_finished(self, cell: Cell) -> None:
        pass

    def round_started(self, repeat: int, cells: int, reason: str) -> None:
        pass


@dataclass
class RunOptions:
    out_dir: Path
    store_path: str | Path | None = None  # an SQLite file or a postgresql:// URL
    resume: bool = False
    keep_datadirs: bool = False
    # Adaptive repetition: add repeats until every relative QPS interval is narrower than
    # this many percentage points, the budget (seconds from the start) is spent, or
    # max_repeats is reached.
    target_ci_pct: float | None = None
    budget_s: float = 3600.0
    max_repeats: int = 20
    min_effect: float | None = None  # overrides the experiment's min_effect
    # Recorded in the run's metadata beside what the pipeline records (a soak's soak).
    extra_metadata: RunMetadata = field(default_factory=RunMetadata)

    @property
    def store_target(self) -> str | Path:
        return self.store_path or self.out_dir / STORE_NAME

    @property
    def store_label(self) -> str:
        """The store for messages: never a URL's password."""
        return store_label(self.store_target)


@dataclass
class RunOutcome:
    result: RunResult
    aborted: str | None = None  # why the run stopped early, if it did
    skipped: int = 0
    measured: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # things the reader must know
    not_converged: list[WideCell] = field(default_factory=list)
    adaptive_stop: str | None = None  # why adaptive repetition stopped, when it ran
    repeats_done: int | None = None  # repeats per cell so far, as adaptive repetition saw


def cell_estimate(experiment: Experiment) -> float:
    """Seconds per cell before any was measured: warmup + measured + a second a run.

    Interleaved cells run slices of durations.slice seconds, each a sysbench start, or
    take turns of that length after settle rounds of turns.
    """
    # Warming cannot end before the detector has a full window of seconds to judge.
    warmup = min(max(experiment.warmup_s, WINDOW_S), experiment.max_warmup_s)
    warmup = warmup + 1.0 if experiment.warmup_s > 0 else 0.0
    if experiment.design == INTERLEAVED:
        slices = slices_per_cell(experiment)
        if experiment.alternate == TURNS:
            return warmup + (slices + experiment.settle_rounds) * experiment.slice_s + 1.0
        return warmup + slices * (experiment.slice_s + 0.5)
    return warmup + experiment.duration_s + 1.0


__all__ = ["Progress", "RunOptions", "RunOutcome", "SilentProgress", "cell_estimate"]
