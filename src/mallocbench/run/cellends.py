"""How a measured cell ended beyond its numbers: a stall in its throughput, a client that
failed, a server that died meanwhile, and the memory peak charged to it.
"""

from __future__ import annotations

import statistics
import time

from mallocbench import units as fmt
from mallocbench.model.results import STATUS_OOM, Cell
from mallocbench.probes import process as proc_probe
from mallocbench.probes.server import CGROUP_METRIC
from mallocbench.run.session import LiveSession
from mallocbench.workloads.sysbench import RunOutput


def note_peaks(cell: Cell, sampler: proc_probe.PeakSampler) -> None:
    if sampler.peak_rss:
        cell.peak_rss_bytes = max(cell.peak_rss_bytes or 0, sampler.peak_rss)
    if sampler.peak_vsz:
        cell.peak_vsz_bytes = max(cell.peak_vsz_bytes or 0, sampler.peak_vsz)


# Seconds in a row without a query, while measured, that make a stall: a server stopped
# (SIGSTOP, a frozen VM, swap) or a client stuck. Shorter gaps are a flush's pause.
STALL_S = 3


# Only where seconds usually complete this many queries is an empty second a stall, not
# one long query (a step whose statements take seconds each).
STALL_MIN_QPS = 10.0


def longest_stall(cell: Cell) -> int:
    """The most consecutive per-second samples in which no query completed."""
    if any(piece.get("turn") for piece in cell.slices):
        return 0  # turns: one sample per turn, and idle between a client's turns
    busy = [s.qps for s in cell.samples if s.qps]
    if not busy or statistics.median(busy) < STALL_MIN_QPS:
        return 0
    longest = run = 0
    for sample in cell.samples:
        if sample.qps is None:
            continue  # a reading of memory alone (a dead server's last), not a second
        run = run + 1 if not sample.qps else 0
        longest = max(longest, run)
    return longest


def note_stall(cell: Cell, report_gap_s: float = 0.0) -> None:
    """A cell that stalled keeps its numbers but not a clean bill: its stability says
    why (so no report counts it as a steady measurement) and its error holds the note.

    `report_gap_s`, the longest wait between two of the client's per-second reports,
    counts too: a second without a report is a second without progress seen.
    """
    stalled = max(longest_stall(cell), int(report_gap_s - 1.0))
    if stalled < STALL_S:
        return
    note = (
        f"no query completed for {stalled} s in a row while measured: the server or its "
        "client stalled (stopped, swapping, or stuck)"
    )
    cell.metrics["stalled_s"] = float(stalled)
    cell.stability = {**cell.stability, "stable": False, "judged": True, "reason": note}
    cell.error = note


def client_failure(output: RunOutput, failed: str, when: str) -> str:
    """Why sysbench failed: the signal that killed it, when something else killed it,
    else its last line (a signal's tail is only whatever it printed before)."""
    signum = output.killed_by
    if signum is not None:
        return f"sysbench was killed by {signum.name} (signal {signum.value}) {when}"
    return f"{failed}: " + (output.output_tail.splitlines() or ["no output"])[-1]


# A server the kernel kills (a cgroup OOM kill, above all) is seen dead a moment after
# its clients lost their connections: sysbench can fail first. Waiting this long before
# calling a failed step a failure keeps a death from being recorded as "failed".
DEATH_GRACE_S = 3.0


def died_meanwhile(live: LiveSession, grace_s: float = DEATH_GRACE_S) -> bool:
    """Whether the server is dead, or dies within `grace_s` of its client failing."""
    deadline = time.monotonic() + grace_s
    while live.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def dead_server_cell(cell: Cell, live: LiveSession, when: str) -> Cell:
    exit_info = live.server.exit_info()
    assert exit_info is not None
    cell.status = exit_info.status
    cell.exit_signal = exit_info.signal
    cell.log_tail = exit_info.log_tail
    cell.error = f"{exit_info.describe()} {when}"
    return cell


def restart_peak(live: LiveSession) -> bool:
    """Start a cell's peak charge afresh, keeping the session's; False if it cannot be."""
    if live.memory_group is None:
        return False
    live.note_peak(live.memory_group.peak_bytes())
    return live.memory_group.reset_peak()


def record_charge(cell: Cell, live: LiveSession, exact_peak: bool) -> None:
    """The cell's peak cgroup charge, to set beside its peak RSS.

    The kernel's peak covers the whole cell (its warmup too) and is exact, even when the
    server was killed between two samples; where it could not be restarted for the cell,
    the samples' highest charge stands in, a lower bound.
    """
    group, info = live.memory_group, live.info
    if group is None:
        return
    peak = group.peak_bytes()
    live.note_peak(peak)
    if not exact_peak:
        sampled = [s.extra[CGROUP_METRIC] for s in cell.samples if CGROUP_METRIC in s.extra]
        peak = int(max(sampled)) if sampled else None
    if peak is not None:
        cell.metrics["cgroup_peak_bytes"] = float(peak)
    if info.memory_limit_bytes is not None:
        cell.metrics["cgroup_limit_bytes"] = float(info.memory_limit_bytes)
    if cell.status == STATUS_OOM and peak is not None:
        # Which of the two reached the cap is the first question about a kill.
        cell.error = (
            f"{cell.error}; cgroup charge peaked at {fmt.mib(peak)} of a "
            f"{fmt.mib(info.memory_limit_bytes)} cap, RSS at {fmt.mib(cell.peak_rss_bytes)}"
        )


__all__ = ["record_charge", "restart_peak"]
