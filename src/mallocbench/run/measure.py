"""Measuring cells on live sessions: warm until steady, then measured slices.

A cell's measured seconds come in one or more *slices*. In the interleaved design the
slices of several setups' cells alternate on servers that are up at once, so drift of
the machine reaches every setup alike. A slice is a separate sysbench run
(measure_slice), whose first second (clients connecting, statements prepared) is
dropped; or, with `alternate = "turns"`, a *turn* (measure_turns): every setup's client
stays connected and they take turns on the wall clock, a second each by default, so
faster drift is shared by neighbouring turns too. Per-operation costs, latency
percentiles and errors cover whole slices.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mallocbench import units as fmt
from mallocbench.analysis.steady import WarmupDetector, check_stability
from mallocbench.memory.account import account
from mallocbench.model.results import STATUS_FAILED, STATUS_OOM, Cell, Sample
from mallocbench.probes import process as proc_probe
from mallocbench.probes.server import CGROUP_METRIC, ServerMemoryProbe
from mallocbench.probes.system import CpuSnapshot, cpu_snapshot, interference
from mallocbench.report.words import stability_reason
from mallocbench.run.experiment import Experiment, PlannedCell
from mallocbench.run.session import LiveSession
from mallocbench.workloads.catalogue import Step
from mallocbench.workloads.sysbench import (
    TURN_DIGITS,
    Interval,
    RunOutput,
    Sysbench,
    Turn,
    TurnPlan,
    merge_outputs,
)

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
        memory = proc_probe.read_memory(server_pid) if probes else None
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
    with proc_probe.PeakSampler(server_pid, charge=charge) as peaks:
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


@dataclass
class _Boundary:
    """The counters read where one turn ends and the next begins."""

    cpu: CpuSnapshot
    servers: list[proc_probe.Counters | None]
    clients: list[proc_probe.Counters | None]
    system_cs: int | None


# Turns begin this long after their clients are launched (sysbench starts and connects
# every worker first), plus a little per client. A client still connecting then loses
# part of its first turn, which settles it and is never measured.
TURN_LEAD_S = 1.0
TURN_LEAD_PER_CLIENT_S = 0.25
# The harness reads the counters this long after a turn's end: its last events end then.
TURN_GRACE_S = 0.02
# A client whose turns are over ends by itself; past this it is taken for stuck.
TURN_EXIT_S = 30.0


def takes_turns(steps: list[Step]) -> bool:
    """Whether these cells' clients can take turns: every step can, and few enough."""
    return len(steps) <= len(TURN_DIGITS) and all(s.definition.takes_turns for s in steps)


def turn_order(clients: int, rounds: int) -> str:
    """A settle turn for every client, then `rounds` rounds of one turn each.

    The order rotates by one every round, as slices do, so every client follows every
    other: what one leaves behind (a flush still running, a cold CPU cache) reaches all.
    """
    order = list(range(clients))
    for round_index in range(rounds):
        first = round_index % clients
        order += list(range(first, clients)) + list(range(first))
    return "".join(TURN_DIGITS[i] for i in order)


def _sleep_until(moment: float) -> None:
    delay = moment - time.time()
    if delay > 0:
        time.sleep(delay)


def _cpu_delta(before: proc_probe.Counters | None, after: proc_probe.Counters | None) -> float:
    """CPU seconds between two readings; 0 when either is missing (a client ending)."""
    if before is None or after is None:
        return 0.0
    return after.user_s + after.system_s - before.user_s - before.system_s


def measure_turns(
    active: list[tuple[LiveSession, CellMeasurement]],
    rounds: int,
    width_s: float,
    on_interval: IntervalCallback,
    should_stop: Callable[[], bool],
) -> None:
    """Measure several setups' cells at once, their clients taking turns (mb_common.lua).

    Each setup's sysbench runs for the whole of it, connected, working only in its own
    turns. The harness reads every server's and client's counters at each turn's end,
    so each turn has its own per-op costs and its own record of what else ran; the
    clients report what they did in each turn. A client's first turn settles it (its
    statements get prepared) and is not measured. A server that dies leaves its turns
    empty; the other setups' turns go on.
    """
    plan = TurnPlan(
        turn_order(len(active), rounds),
        time.time() + TURN_LEAD_S + TURN_LEAD_PER_CLIENT_S * len(active),
        width_s,
    )
    outputs: list[RunOutput | None] = [None] * len(active)
    failures: list[BaseException] = []  # raised in a client's thread, raised again here
    pids: dict[int, int] = {}
    latest_rss: dict[int, int | None] = {}
    # Set when the harness stops early: each client then ends itself at its next report.
    abandoned = threading.Event()

    def client(index: int, live: LiveSession, planned: PlannedCell) -> None:
        def turn_done(turn: Turn) -> None:
            if turn.index >= len(active):
                progress = Interval(turn.ended, turn.seconds, turn.events, turn.queries, 0, 0.0)
                on_interval(planned, progress, latest_rss.get(index))

        try:
            outputs[index] = live.sysbench.run(
                planned.step,
                planned.threads,
                plan.end - time.time() + TURN_EXIT_S,
                should_stop=abandoned.is_set,
                turns=(plan, index),
                on_start=lambda pid: pids.__setitem__(index, pid),
                on_turn=turn_done,
            )
        except BaseException as exc:  # a thread's traceback would reach the user raw
            failures.append(exc)

    workers = [
        threading.Thread(target=client, args=(i, live, m.planned), daemon=True)
        for i, (live, m) in enumerate(active)
    ]
    for worker in workers:
        worker.start()
    taken: dict[int, TurnTaken] = {}
    try:
        with contextlib.ExitStack() as stack:
            peaks = [stack.enter_context(proc_probe.PeakSampler(live.pid)) for live, _ in active]
            _sleep_until(plan.start)
            before = _boundary(active, pids)
            for turn in range(len(plan.order)):
                _sleep_until(plan.bounds(turn)[1] + TURN_GRACE_S)
                after = _boundary(active, pids)
                owner = plan.owner(turn)
                if turn >= len(active):
                    taken[turn] = _taken(active[owner][0], owner, before, after)
                    latest_rss[owner] = m.rss_bytes if (m := taken[turn].memory) else None
                before = after
                if should_stop():
                    raise KeyboardInterrupt
            for index, sampler in enumerate(peaks):
                _note_peaks(active[index][1].cell, sampler)
    except BaseException:
        abandoned.set()  # Ctrl-C, or the harness failed: no client outlives the cell
        raise
    finally:
        for worker in workers:
            worker.join(TURN_EXIT_S)
    if failures:
        raise failures[0]
    _add_turns(active, outputs, plan, taken)


def _add_turns(
    active: list[tuple[LiveSession, CellMeasurement]],
    outputs: list[RunOutput | None],
    plan: TurnPlan,
    taken: dict[int, TurnTaken],
) -> None:
    """Each cell's measured turns, from its client's reports and the harness's readings."""
    for index, (_, measurement) in enumerate(active):
        output = outputs[index] or RunOutput(returncode=-1, output_tail="the client did not end")
        own = sorted(t for t in taken if plan.owner(t) == index)
        measurement.outputs.append(_turns_output(output, own, taken))
        for turn in own:
            if turn in output.turns:
                measurement.add_turn(output.turns[turn], taken[turn])


def _boundary(active: list[tuple[LiveSession, CellMeasurement]], pids: dict[int, int]) -> _Boundary:
    return _Boundary(
        cpu=cpu_snapshot(),
        servers=[proc_probe.read_counters(live.pid) for live, _ in active],
        clients=[
            proc_probe.read_counters(pids[i]) if i in pids else None for i in range(len(active))
        ],
        system_cs=proc_probe.system_context_switches(),
    )


def _taken(live: LiveSession, owner: int, before: _Boundary, after: _Boundary) -> TurnTaken:
    """The owner's share of a turn's counters; everything else that ran is interference.

    Every setup's server and client count as the run's own CPU: the others idle then,
    and what they still do (a flush, a purge) is the run's doing, not the machine's.
    """
    own = sum(_cpu_delta(b, a) for b, a in zip(before.servers, after.servers, strict=True))
    clients = [_cpu_delta(b, a) for b, a in zip(before.clients, after.clients, strict=True)]
    memory = proc_probe.read_memory(live.pid)
    if live.probe is None:
        live.probe = ServerMemoryProbe(live.server)
    return TurnTaken(
        server=(before.servers[owner], after.servers[owner]),
        system_cs=(before.system_cs, after.system_cs),
        client_cpu_s=clients[owner],
        noise=interference(before.cpu, after.cpu, own + sum(clients)),
        memory=memory,
        reported=live.probe.read() if live.alive() else {},
    )


def _note_peaks(cell: Cell, sampler: proc_probe.PeakSampler) -> None:
    if sampler.peak_rss:
        cell.peak_rss_bytes = max(cell.peak_rss_bytes or 0, sampler.peak_rss)
    if sampler.peak_vsz:
        cell.peak_vsz_bytes = max(cell.peak_vsz_bytes or 0, sampler.peak_vsz)


def _turns_output(output: RunOutput, own: list[int], taken: dict[int, TurnTaken]) -> RunOutput:
    """The client's run as the cell's output: totals of its measured turns alone."""
    turns = [output.turns[t] for t in own if t in output.turns]
    return RunOutput(
        returncode=output.returncode,
        seconds=sum(t.seconds for t in turns),
        events=sum(t.events for t in turns),
        queries=sum(t.queries for t in turns),
        errors=sum(t.errors for t in turns),
        reconnects=output.reconnects,
        p95_ms=output.p95_ms,
        p99_ms=output.p99_ms,
        avg_ms=output.avg_ms,
        client_cpu_s=sum(taken[t].client_cpu_s for t in own),
        threads=output.threads,
        output_tail=output.output_tail,
        metrics=output.metrics,
        histogram=output.histogram,
    )


def new_cell(planned: PlannedCell, live: LiveSession, experiment: Experiment) -> Cell:
    return Cell(
        setup=planned.setup,
        engine=planned.engine,
        step=planned.step.label,
        threads=planned.threads,
        repeat=planned.repeat,
        group=planned.step.group,
        session=live.info.id,
        allocator_path=live.server.allocator_path,
        cache_bytes=experiment.dataset.cache_bytes,
        started_at=time.time(),
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
        live.probe = ServerMemoryProbe(live.server)
    before = proc_probe.read_counters(live.pid)
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
    )
    after = proc_probe.read_counters(live.pid)
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
        cell.metrics.update(account(live.server, live.setup.allocator.name))
    # A load's throughput changes as its tables grow: no level to hold, nothing to judge.
    if not measurement.planned.step.definition.until_done:
        stability = check_stability([s.qps for s in cell.samples])
        cell.stability = stability.to_dict(stability_reason(stability))
        note_stall(cell, measurement.report_gap_s)
    return cell


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


__all__ = [
    "CellMeasurement",
    "Measured",
    "finish_cell",
    "measure",
    "measure_slice",
    "measure_turns",
    "takes_turns",
    "new_cell",
    "per_op_metrics",
    "record_charge",
    "restart_peak",
    "warm_up",
]
