"""Recording a setup's server while its cells are measured (`record = true`).

A cell's window opens after its warmup and closes before the server's memory account is
taken (those queries allocate for the harness, not for the workload). In the interleaved
design the window also spans the other setups' slices, while this server idles: the
recorded timing keeps those gaps as they were. A recording that cannot start or finish
costs the cell its trace, never its measurement, and the run's notes say why.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.model.results import Cell
from mallocbench.replay import control
from mallocbench.run.experiment import PlannedCell
from mallocbench.run.session import LiveSession

TRACES_DIR = "traces"


def trace_path(planned: PlannedCell) -> Path:
    """Where a cell's trace goes, relative to the run directory."""
    raw = (
        f"{planned.setup}-{planned.engine}-{planned.step.label}-{planned.threads}t"
        f"-r{planned.repeat + 1}"
    )
    return Path(TRACES_DIR) / (re.sub(r"[^A-Za-z0-9._-]+", "_", raw) + ".mbt")


def _label(planned: PlannedCell) -> str:
    return (
        f"{planned.setup}/{planned.engine}/{planned.step.label}/{planned.threads}t, "
        f"repeat {planned.repeat + 1}"
    )


def arm(live: LiveSession, planned: PlannedCell) -> control.Window | None:
    """Start recording `live`'s server for this cell; None when its setup does not record
    or the shim would not start (then the run's notes say so)."""
    if not live.setup.record or not live.alive():
        return None
    server_file = str(live.server.statedir / trace_path(planned).name)
    try:
        return control.start(live.pid, server_file)
    except (MallocbenchError, OSError) as exc:
        live.notes.append(f"{_label(planned)}: not recorded, the shim did not start ({exc})")
        return None


def disarm(
    window: control.Window, live: LiveSession, planned: PlannedCell, cell: Cell, out_dir: Path
) -> None:
    """Stop recording and move the trace to the run directory, tied to `cell`."""
    relative = trace_path(planned)
    try:
        closing = control.stop(window, out_dir / relative)
    except (MallocbenchError, OSError) as exc:
        live.notes.append(f"{_label(planned)}: measured, but its trace was lost ({exc})")
        return
    cell.trace = str(relative)
    if not closing.startswith("complete"):
        live.notes.append(f"{_label(planned)}: its trace is partial ({closing})")


def abandon(window: control.Window) -> None:
    """Disarm without waiting (an interrupted cell is dropped with its trace)."""
    try:
        with contextlib.suppress(OSError):
            control.disarm(window)
    finally:
        window.close()
