"""A plan of an experiment: its sessions and cells in interleaved order (setups A B C, then
C B A, ...), grouped in blocks, and whether a block's servers can be up at once.
"""

from __future__ import annotations

from typing import TypeVar

import psutil

from mallocbench.run.experiment import (
    CONCURRENT_MEMORY_SHARE,
    INTERLEAVED,
    SERVER_BASE_BYTES,
    Experiment,
    PlannedCell,
    PlannedSession,
)
from mallocbench.units import gb
from mallocbench.workloads.catalogue import Step


def _threads_for(experiment: Experiment, step: Step) -> list[int]:
    # Insert-benchmark steps fix their own client count (1 loader; 1 query + 2 background
    # writers), so they run once with that count.
    return [step.definition.threads] if step.definition.threads else experiment.threads


_Item = TypeVar("_Item")


def in_block_order(items: list[_Item], repeat: int) -> list[_Item]:
    """The order block `repeat` starts, warms and measures its setups in: as listed on
    even repeats, reversed on odd ones, so drift and any advantage of a place in the
    order reach every setup alike (calibrate's copies take the same places)."""
    return list(items) if repeat % 2 == 0 else items[::-1]


def _round(
    experiment: Experiment,
    repeat: int,
    wanted: set[tuple[str, str, str, int]] | None = None,
) -> list[PlannedSession]:
    """One repeat of every setup, in the direction the repeat's parity gives.

    `wanted` (setup, engine, step label, threads) limits the round to those cells.
    """
    order = in_block_order(experiment.setups, repeat)
    sessions = []
    for engine in experiment.engines:
        for setup in order:
            cells = tuple(
                PlannedCell(setup.name, engine.name, step, threads, repeat)
                for step in experiment.steps
                for threads in _threads_for(experiment, step)
                if wanted is None or (setup.name, engine.name, step.label, threads) in wanted
            )
            if cells:
                sessions.append(PlannedSession(setup.name, engine.name, repeat, cells))
    return sessions


def plan(experiment: Experiment) -> list[PlannedSession]:
    """Sessions in interleaved order: setups A B C, then C B A, ... so drift cancels."""
    return [s for repeat in range(experiment.repeats) for s in _round(experiment, repeat)]


def blocks(sessions: list[PlannedSession]) -> list[list[PlannedSession]]:
    """Sessions grouped into blocks: one engine in one repeat, every setup's server.

    In the interleaved design a block's servers are up at once and their cells' slices
    alternate; a block is the unit relative values pair (analysis.stats.blocked_ratios).
    """
    grouped: dict[tuple[str, int], list[PlannedSession]] = {}
    for session in sessions:
        grouped.setdefault((session.engine, session.repeat), []).append(session)
    return list(grouped.values())


def slices_per_cell(experiment: Experiment) -> int:
    """How many slices a cell's measured seconds are cut into (design interleaved)."""
    return max(1, round(experiment.duration_s / experiment.slice_s))


def concurrency_problem(experiment: Experiment) -> str | None:
    """Why the setups' servers cannot be up at once, or None when they can."""
    if experiment.design != INTERLEAVED or len(experiment.setups) < 2:
        return None
    system_thp = sorted({s.thp for s in experiment.setups if s.thp in ("always", "madvise")})
    if system_thp:
        return (
            f"THP {system_thp[0]} is a system-wide mode, so setups asking for it cannot "
            "share the machine with others"
        )
    per_server = experiment.dataset.cache_bytes + SERVER_BASE_BYTES
    needed = sum(min(s.memory_limit_bytes or per_server, per_server) for s in experiment.setups)
    available = psutil.virtual_memory().available
    if needed > available * CONCURRENT_MEMORY_SHARE:
        return (
            f"{len(experiment.setups)} servers with a {gb(experiment.dataset.cache_bytes)} GiB "
            f"cache need about {gb(needed)} GiB, more than half of the {gb(available)} GiB "
            "available"
        )
    return None


def plan_extra_round(
    experiment: Experiment, repeat: int, cells: set[tuple[str, str, str, int]] | None
) -> list[PlannedSession]:
    """One more interleaved repeat of just these (setup, engine, step, threads) cells.

    Adaptive repetition asks for it (None: every cell); the caller includes the base
    setup's cells, since every relative value needs both sides.
    """
    return _round(experiment, repeat, cells)


def planned_cells(experiment: Experiment) -> int:
    """How many cells `plan` gives, counted without building them."""
    per_repeat = sum(len(_threads_for(experiment, step)) for step in experiment.steps)
    return per_repeat * len(experiment.setups) * len(experiment.engines) * experiment.repeats
