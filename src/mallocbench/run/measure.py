"""Measuring cells on live sessions: warm until steady, then measured slices.

A cell's measured seconds come in one or more *slices*. In the interleaved design the
slices of several setups' cells alternate on servers that are up at once, so drift of
the machine reaches every setup alike. A slice is a separate sysbench run
(measure_slice), whose first second (clients connecting, statements prepared) is
dropped; or, with `alternate = "turns"`, a *turn* (run.turns): every setup's client
stays connected and they take turns on the wall clock, a second each by default, so
faster drift is shared by neighbouring turns too. Per-operation costs, latency
percentiles and errors cover whole slices.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mallocbench.analysis.steady import Held, Stability, WarmupDetector, check_stability
from mallocbench.memory.account import account
from mallocbench.model.results import STATUS_FAILED, Cell, Sample
from mallocbench.probes import process as proc_probe
from mallocbench.probes.server import ServerMemoryProbe
from mallocbench.probes.system import cpu_snapshot, interference
from mallocbench.run.cellends import client_failure, dead_server_cell, died_meanwhile, note_stall
from mallocbench.run.experiment import Experiment, PlannedCell
from mallocbench.run.session import LiveSession
from mallocbench.servers.mariadb import PrivateServer
from mallocbench.workloads.catalogue import Step
from mallocbench.workloads.sysbench import Interval, RunOutput, Sysbench, Turn, merge_outputs

IntervalCallback = Callable[[PlannedCell, Interval, int | None], None]


@dataclass
class Measured:
    output: RunOutput
    samples: list[Sample]
    peak_rss_bytes: int | None
    peak_vsz_bytes: int | None
    # The longest wait between two per-second reports: a client that stopped reporting
    # (itself stopped or stuck) shows here, where a stopped server shows as empty seconds.
    report_gap_s: float = 0.0


def sample_of(
    t: float,
    memory: proc_probe.Memory | None,
    qps: float,
    tps: float,
    reported: dict[str, float],
    latency_ms: float | None = None,
) -> Sample:
    return Sample(
        t=t,
        rss_bytes=memory.rss_bytes if memory else None,
        vsz_bytes=memory.vsz_bytes if memory else None,
        qps=qps,
        tps=tps,
        latency_ms=latency_ms,
        extra=reported,
    )


def measure(
    server_pid: int,
    sysbench: Sysbench,
    step: Step,
    threads: int,
    seconds: float,
    probes: bool = True,
    on_interval: Callable[[Interval, int | None], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    server_probe: ServerMemoryProbe | None = None,
    read_memory: Callable[[int], proc_probe.Memory | None] = proc_probe.read_memory,
) -> Measured:
    """One measured sysbench run with the memory probes around it.

    `probes=False` exists for the harness-overhead benchmark, which must run the very
    same code path with and without sampling (the server's own counters included).
    """
    samples: list[Sample] = []
    gaps: list[float] = [0.0]

    def record(interval: Interval) -> None:
        if samples:
            gaps.append(interval.t - samples[-1].t)
        memory = read_memory(server_pid) if probes else None
        reported = server_probe.read() if probes and server_probe is not None else {}
        samples.append(
            sample_of(interval.t, memory, interval.qps, interval.tps, reported, interval.latency_ms)
        )
        if on_interval is not None:
            on_interval(interval, memory.rss_bytes if memory else None)

    if not probes:
        output = sysbench.run(step, threads, seconds, on_interval=record, should_stop=should_stop)
        return Measured(output, samples, None, None, max(gaps))
    charge = server_probe.charge if server_probe is not None else None
    with proc_probe.PeakSampler(server_pid, charge=charge, reader=read_memory) as peaks:
        output = sysbench.run(step, threads, seconds, on_interval=record, should_stop=should_stop)
    last = peaks.last
    if peaks.outlived and last is not None and (not samples or last[0] > samples[-1].t):
        # The server died between two reports (a cap reached within the first second
        # leaves no report at all): its last reading, a quarter second from the death at
        # most, ends the timeline, with memory alone since no second was completed.
        t, memory, charged = last
        samples.append(Sample(t=t, rss_bytes=memory.rss_bytes, vsz_bytes=memory.vsz_bytes,
                              extra=charged))  # fmt: skip
    return Measured(output, samples, peaks.peak_rss or None, peaks.peak_vsz or None, max(gaps))


def per_op_metrics(
    operations: int,
    client_cpu_s: float,
    before: proc_probe.Counters | None,
    after: proc_probe.Counters | None,
    system_cs_before: int | None,
    system_cs_after: int | None,
) -> dict[str, float]:
    """Per-operation costs as in the seeds' cpu/o and cs/o, from /proc deltas."""
    if operations <= 0 or before is None or after is None:
        return {}
    user = after.user_s - before.user_s
    system = after.system_s - before.system_s
    metrics = {
        "server_cpu_us_per_op": (user + system) * 1e6 / operations,
        "server_user_us_per_op": user * 1e6 / operations,
        "server_sys_us_per_op": system * 1e6 / operations,
        "voluntary_cs_per_op": (after.voluntary_cs - before.voluntary_cs) / operations,
        "involuntary_cs_per_op": (after.involuntary_cs - before.involuntary_cs) / operations,
        "client_cpu_s": client_cpu_s,
        "server_cpu_s": user + system,
    }
    total_cpu = user + system + client_cpu_s
    if total_cpu > 0:
        metrics["client_cpu_share"] = client_cpu_s / total_cpu
    if before.read_bytes is not None and after.read_bytes is not None:
        metrics["read_kb_per_op"] = (after.read_bytes - before.read_bytes) / 1024 / operations
    if before.write_bytes is not None and after.write_bytes is not None:
        metrics["write_kb_per_op"] = (after.write_bytes - before.write_bytes) / 1024 / operations
    if before.read_syscalls is not None and after.read_syscalls is not None:
        metrics["reads_per_op"] = (after.read_syscalls - before.read_syscalls) / operations
    if system_cs_before is not None and system_cs_after is not None:
        metrics["system_cs_per_op"] = (system_cs_after - system_cs_before) / operations
    return metrics


def _moved(total: int | None, before: int | None, after: int | None) -> int | None:
    """`total` plus after - before; None once any reading was missing."""
    if total is None or before is None or after is None:
        return None
    return total + after - before


def _add_delta(
    total: proc_probe.Counters, before: proc_probe.Counters, after: proc_probe.Counters
) -> proc_probe.Counters:
    return proc_probe.Counters(
        user_s=total.user_s + after.user_s - before.user_s,
        system_s=total.system_s + after.system_s - before.system_s,
        voluntary_cs=total.voluntary_cs + after.voluntary_cs - before.voluntary_cs,
        involuntary_cs=total.involuntary_cs + after.involuntary_cs - before.involuntary_cs,
        read_bytes=_moved(total.read_bytes, before.read_bytes, after.read_bytes),
        write_bytes=_moved(total.write_bytes, before.write_bytes, after.write_bytes),
        read_syscalls=_moved(total.read_syscalls, before.read_syscalls, after.read_syscalls),
    )


def _zero_counters() -> proc_probe.Counters:
    return proc_probe.Counters(0.0, 0.0, 0, 0, 0, 0, 0)


@dataclass
class CellMeasurement:
    """A cell's slices so far: their outputs, kept samples and summed counters."""

    cell: Cell
    planned: PlannedCell
    drop_first_second: bool
    outputs: list[RunOutput] = field(default_factory=list)
    counters: proc_probe.Counters | None = field(default_factory=_zero_counters)
    system_cs: int | None = 0
    reported_at_end: dict[str, float] = field(default_factory=dict)
    report_gap_s: float = 0.0

    def add_slice(
        self,
        measured: Measured,
        before: proc_probe.Counters | None,
        after: proc_probe.Counters | None,
        system_cs: tuple[int | None, int | None],
        noise: dict[str, float],
    ) -> None:
        output, samples = measured.output, measured.samples
        self.outputs.append(output)
        self.report_gap_s = max(self.report_gap_s, measured.report_gap_s)
        kept = samples[1:] if self.drop_first_second and len(samples) > 2 else samples
        self.cell.samples.extend(kept)
        if measured.peak_rss_bytes is not None:
            self.cell.peak_rss_bytes = max(self.cell.peak_rss_bytes or 0, measured.peak_rss_bytes)
        if measured.peak_vsz_bytes is not None:
            self.cell.peak_vsz_bytes = max(self.cell.peak_vsz_bytes or 0, measured.peak_vsz_bytes)
        rates = [s.qps for s in kept if s.qps is not None]
        tps = [s.tps for s in kept if s.tps is not None]
        counted = self.drop_first_second and rates and tps
        self.cell.slices.append(
            {
                "t": kept[0].t if kept else time.time(),
                "qps": statistics.fmean(rates) if counted else output.qps,
                "tps": statistics.fmean(tps) if counted else output.tps,
                # Seconds with a rate: a dead server's last reading has memory alone.
                "seconds": float(len(rates)) if counted else output.seconds,
                **noise,
            }
        )
        if self.counters is not None and before is not None and after is not None:
            self.counters = _add_delta(self.counters, before, after)
        else:
            self.counters = None
        self.system_cs = _moved(self.system_cs, *system_cs)

    def add_turn(self, turn: Turn, taken: TurnTaken) -> None:
        """One measured turn: a sample and a slice, and the server's counters in it."""
        self.cell.samples.append(
            sample_of(turn.ended, taken.memory, turn.qps, turn.tps, taken.reported)
        )
        self.cell.slices.append(
            {
                "t": turn.began,
                "qps": turn.qps,
                "tps": turn.tps,
                "seconds": turn.seconds,
                "turn": 1.0,  # a turn, not a sysbench run of its own
            }
            | taken.noise
        )
        before, after = taken.server
        if self.counters is not None and before is not None and after is not None:
            self.counters = _add_delta(self.counters, before, after)
        else:
            self.counters = None
        self.system_cs = _moved(self.system_cs, *taken.system_cs)


@dataclass
class TurnTaken:
    """What the harness read around one turn, beside what the client reported of it."""

    server: tuple[proc_probe.Counters | None, proc_probe.Counters | None]
    system_cs: tuple[int | None, int | None]
    client_cpu_s: float
    noise: dict[str, float]
    memory: proc_probe.Memory | None
    reported: dict[str, float]


def planned_cell(planned: PlannedCell, experiment: Experiment, **fields: Any) -> Cell:
    """The cell `planned` names, begun now; `fields` are the rest it has so far."""
    return Cell(
        setup=planned.setup,
        engine=planned.engine,
        step=planned.step.label,
        threads=planned.threads,
        repeat=planned.repeat,
        group=planned.step.group,
        cache_bytes=experiment.dataset.cache_bytes,
        started_at=time.time(),
        **fields,
    )


def new_cell(planned: PlannedCell, live: LiveSession, experiment: Experiment) -> Cell:
    return planned_cell(
        planned, experiment, session=live.info.id, allocator_path=live.server.allocator_path
    )


def warm_up(
    live: LiveSession,
    planned: PlannedCell,
    cell: Cell,
    experiment: Experiment,
    should_stop: Callable[[], bool],
) -> Cell | None:
    """Run the step until its throughput stops trending; the cell to return if it failed.

    Between durations.warmup and durations.max_warmup seconds: every server start
    re-creates a ramp longer than a fixed warmup guessed (analysis.steady).
    """
    detector = WarmupDetector(experiment.warmup_s, experiment.max_warmup_s)
    warm = live.sysbench.run(
        planned.step,
        planned.threads,
        experiment.max_warmup_s,
        on_interval=lambda i: detector.add(i.qps, i.seconds),
        should_stop=lambda: detector.done or should_stop(),
    )
    if should_stop():
        raise KeyboardInterrupt
    if not live.alive():
        return dead_server_cell(cell, live, "during warmup")
    # Killed by us once the detector was done: no totals printed, and no failure either.
    cut_short = detector.done and warm.returncode == -signal.SIGKILL
    if not warm.ok and not cut_short:
        if died_meanwhile(live):
            return dead_server_cell(cell, live, "during warmup")
        cell.status = STATUS_FAILED
        cell.error = client_failure(warm, "warmup failed", "during warmup")
        return cell
    cell.warmup_s = round(detector.elapsed_s, 1)
    cell.warmup_steady = detector.steady
    return None


def measure_slice(
    live: LiveSession,
    measurement: CellMeasurement,
    seconds: float,
    on_interval: IntervalCallback,
    should_stop: Callable[[], bool],
) -> bool:
    """One measured slice of a cell on its server; False when the server died in it."""
    planned = measurement.planned
    if live.probe is None:
        live.probe = live.family.memory_probe(live.server)
    before = live.family.read_counters(live.pid)
    system_cs_before = proc_probe.system_context_switches()
    cpu_before = cpu_snapshot()
    measured = measure(
        live.pid,
        live.sysbench,
        planned.step,
        planned.threads,
        seconds,
        on_interval=lambda i, rss: on_interval(planned, i, rss),
        should_stop=should_stop,
        server_probe=live.probe,
        read_memory=live.family.read_memory,
    )
    after = live.family.read_counters(live.pid)
    own_cpu = measured.output.client_cpu_s
    if before is not None and after is not None:
        own_cpu += after.user_s + after.system_s - before.user_s - before.system_s
    noise = interference(cpu_before, cpu_snapshot(), own_cpu)
    measurement.add_slice(
        measured, before, after, (system_cs_before, proc_probe.system_context_switches()), noise
    )
    if live.alive():
        measurement.reported_at_end = live.probe.read()
    return live.alive()


def finish_cell(measurement: CellMeasurement, live: LiveSession, take_account: bool = True) -> Cell:
    """The cell from its slices: throughput, latency, per-op costs, stability.

    `take_account`: end with the server's full account of its RSS (probes.server.account).
    The account is not free: its queries leave memory behind in the server, a few MiB a
    time, so a soak takes it only at its end.
    """
    cell, outputs = measurement.cell, measurement.outputs
    output = merge_outputs(outputs)
    cell.duration_s = output.seconds or (time.time() - (cell.started_at or time.time()))
    if not live.alive():
        return dead_server_cell(cell, live, "while measuring")
    if not output.ok:
        if died_meanwhile(live):
            return dead_server_cell(cell, live, "while measuring")
        cell.status = STATUS_FAILED
        cell.error = client_failure(output, "sysbench failed", "while measuring")
        return cell
    cell.qps = statistics.fmean(s["qps"] for s in cell.slices)
    cell.tps = statistics.fmean(s["tps"] for s in cell.slices)
    cell.p95_ms, cell.p99_ms, cell.avg_ms = output.p95_ms, output.p99_ms, output.avg_ms
    cell.errors = output.errors
    counters = measurement.counters
    cell.metrics = per_op_metrics(
        output.queries,
        output.client_cpu_s,
        _zero_counters() if counters is not None else None,
        counters,
        0 if measurement.system_cs is not None else None,
        measurement.system_cs,
    )
    cell.metrics.update(output.metrics)
    cell.metrics.update(measurement.reported_at_end)
    if take_account:
        cell.metrics.update(_account(live))
    # A load's throughput changes as its tables grow: no level to hold, nothing to judge.
    if not measurement.planned.step.definition.until_done:
        stability = check_stability([s.qps for s in cell.samples])
        cell.stability = stability.to_dict(stability_reason(stability))
        note_stall(cell, measurement.report_gap_s)
    return cell


def _account(live: LiveSession) -> dict[str, float]:
    """The family's account of its server, or the pipeline's own (MariaDB's)."""
    own = live.family.account(live.server, live.setup.allocator.name)
    if own is not None:
        return own
    if not isinstance(live.server, PrivateServer):
        return {}
    return account(live.server, live.setup.allocator.name)


__all__ = [
    "CellMeasurement",
    "Measured",
    "finish_cell",
    "measure",
    "measure_slice",
    "new_cell",
    "per_op_metrics",
    "warm_up",
]


def stability_reason(stability: Stability) -> str:
    """Why a measured series is or is not one level, as a cell stores it (the pipeline's
    record, beside cellends' stall notes; reports show it as stored)."""
    n = stability.n
    if stability.held is Held.TOO_SHORT:
        return f"too short to judge ({n} s)"
    if stability.held is Held.IDLE:
        return "no throughput to judge"
    if stability.held is Held.SHIFT:
        return f"level shift {stability.shift_pct:+.0f}% after {stability.shift_at_s} s"
    if stability.held is Held.TREND:
        slope, drift = stability.slope_pct_per_s, stability.drift_pct
        return f"trend {slope:+.1f}%/s ({drift:+.0f}% over {n} s)"
    return "no trend or level shift"
