"""The private memory of the backend each soak event ran in, per setup and event label.

A family whose servers run a process per connection (PostgreSQL:
servers/postgresql/events.py) reads each backend that ran an event's work before the
work, at its highest while the work ran, right after it and after a settle interval
with the connection still open. The measure is its private anonymous memory (Pss_Anon:
the heap its allocator holds), not its USS: pages of the shared segment that only one
process maps count as private in USS, so a backend's USS rose by 50 MiB while it sat
idle after a hash join, when the other backend that had mapped those pages exited.
Per backend:

- rise: highest minus before (what the work asked for at once);
- step: right after minus before (what the allocator kept when the work freed it);
- stayed: after the settle minus before (what it still kept then).

Each backend of each event is one reading. One reading is given as it is; several (the
event repeated, or several sessions at once) by their median and range. The backends
of one event share its moment and its load, so their spread is no interval over
independent repeats: nothing here is tested, and a setup's readings are set beside
another's, never ranked.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mallocbench.model.results import RunResult

MEASURE = "anon"


@dataclass(frozen=True)
class Spread:
    """Readings of one quantity: their median and range (bytes)."""

    median: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class BackendSteps:
    """One setup's readings of one event label's backends."""

    engine: str
    setup: str
    label: str
    events: int  # events of the label that gave readings
    rise: Spread
    step: Spread
    stayed: Spread
    settle_s: float  # the median seconds between `after` and `settled`


def spread(values: Sequence[float]) -> Spread:
    return Spread(statistics.median(values), min(values), max(values), len(values))


def _differences(backend: dict[str, Any]) -> tuple[float, float, float, float] | None:
    """(rise, step, stayed, settle seconds) of one backend; None when a reading is missing
    (it exited, or the event was cut before the settle)."""
    values = [(backend.get(k) or {}).get(MEASURE) for k in ("before", "peak", "after", "settled")]
    if any(v is None for v in values) or backend.get("settle_s") is None:
        return None
    before, peak, after, settled = (float(str(v)) for v in values)
    return peak - before, after - before, settled - before, float(backend["settle_s"])


def backend_steps(result: RunResult) -> tuple[BackendSteps, ...]:
    """Every setup's backend readings per event label, in the order they first came; ()
    when no event read a backend (MariaDB's events, a run without events)."""
    found: dict[tuple[str, str, str], list[tuple[float, float, float, float]]] = {}
    events: dict[tuple[str, str, str], int] = {}
    for session in result.sessions:
        for event in session.events:
            key = (session.engine, session.setup, str(event.get("label", event.get("action"))))
            readings = [d for b in event.get("backends") or [] if (d := _differences(b))]
            if readings:
                found.setdefault(key, []).extend(readings)
                events[key] = events.get(key, 0) + 1
    return tuple(
        BackendSteps(
            engine=engine,
            setup=setup,
            label=label,
            events=events[(engine, setup, label)],
            rise=spread([r[0] for r in readings]),
            step=spread([r[1] for r in readings]),
            stayed=spread([r[2] for r in readings]),
            settle_s=statistics.median(r[3] for r in readings),
        )
        for (engine, setup, label), readings in found.items()
    )


__all__ = ["MEASURE", "BackendSteps", "Spread", "backend_steps", "spread"]
