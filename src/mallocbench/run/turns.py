"""Turns (`alternate = "turns"`): every setup's client stays connected and they take turns
on the wall clock, a second each by default, so drift faster than a slice is shared by
neighbouring turns too; each turn's operations and CPU are charged to the setup whose
turn it was.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mallocbench.analysis.designs import DEFAULT_SETTLE_ROUNDS
from mallocbench.probes import process as proc_probe
from mallocbench.probes.system import CpuSnapshot, cpu_snapshot, interference
from mallocbench.run.cellends import note_peaks
from mallocbench.run.experiment import PlannedCell
from mallocbench.run.measure import CellMeasurement, IntervalCallback, TurnTaken
from mallocbench.run.session import LiveSession
from mallocbench.workloads.catalogue import Step
from mallocbench.workloads.sysbench import TURN_DIGITS, Interval, RunOutput, Turn, TurnPlan


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


def turn_order(clients: int, rounds: int, settle: int = DEFAULT_SETTLE_ROUNDS) -> str:
    """`settle` rounds that settle every client, then `rounds` measured rounds, one turn each.

    The order rotates by one every round, as slices do, so every client follows every
    other: what one leaves behind (a flush still running, a cold CPU cache) reaches all.
    The measured rounds rotate from the first client whatever the settle, so a longer
    settle only adds turns before them.
    """
    order: list[int] = []
    for round_index in list(range(settle)) + list(range(rounds)):
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


def _sampler(live: LiveSession) -> proc_probe.PeakSampler:
    return proc_probe.PeakSampler(live.pid, reader=live.family.read_memory)


def measure_turns(
    active: list[tuple[LiveSession, CellMeasurement]],
    rounds: int,
    width_s: float,
    on_interval: IntervalCallback,
    should_stop: Callable[[], bool],
    settle: int = DEFAULT_SETTLE_ROUNDS,
) -> None:
    """Measure several setups' cells at once, their clients taking turns (mb_common.lua).

    Each setup's sysbench runs for the whole of it, connected, working only in its own
    turns. The harness reads every server's and client's counters at each turn's end,
    so each turn has its own per-op costs and record of what else ran. The first
    `settle` rounds are not measured. A dead server leaves its turns empty.
    """
    plan = TurnPlan(
        turn_order(len(active), rounds, settle),
        time.time() + TURN_LEAD_S + TURN_LEAD_PER_CLIENT_S * len(active),
        width_s,
    )
    outputs: list[RunOutput | None] = [None] * len(active)
    failures: list[BaseException] = []  # raised in a client's thread, raised again here
    pids: dict[int, int] = {}
    latest_rss: dict[int, int | None] = {}
    # Set when the harness stops early: each client then ends itself at its next report.
    abandoned = threading.Event()
    settling = settle * len(active)  # the turns before the first measured one

    def client(index: int, live: LiveSession, planned: PlannedCell) -> None:
        def turn_done(turn: Turn) -> None:
            if turn.index >= settling:
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
            peaks = [stack.enter_context(_sampler(live)) for live, _ in active]
            _sleep_until(plan.start)
            before = _boundary(active, pids)
            for turn in range(len(plan.order)):
                _sleep_until(plan.bounds(turn)[1] + TURN_GRACE_S)
                after = _boundary(active, pids)
                owner = plan.owner(turn)
                if turn >= settling:
                    taken[turn] = _taken(active[owner][0], owner, before, after)
                    latest_rss[owner] = m.rss_bytes if (m := taken[turn].memory) else None
                before = after
                if should_stop():
                    raise KeyboardInterrupt
            for index, sampler in enumerate(peaks):
                note_peaks(active[index][1].cell, sampler)
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
        servers=[live.family.read_counters(live.pid) for live, _ in active],
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
    memory = live.family.read_memory(live.pid)
    if live.probe is None:
        live.probe = live.family.memory_probe(live.server)
    return TurnTaken(
        server=(before.servers[owner], after.servers[owner]),
        system_cs=(before.system_cs, after.system_cs),
        client_cpu_s=clients[owner],
        noise=interference(before.cpu, after.cpu, own + sum(clients)),
        memory=memory,
        reported=live.probe.read() if live.alive() else {},
    )


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


__all__ = ["measure_turns", "takes_turns"]
