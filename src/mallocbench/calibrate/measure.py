"""Measuring a calibration: server starts of the target's setup, one copy or several, each
warmed as a run warms a cell, then slices (and turns) measured as a run measures them.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from mallocbench.calibrate.summary import (
    CalibrationSummary,
    PairResult,
    SliceResult,
    StartResult,
    compared_setups,
    copy_name,
    summarize,
)
from mallocbench.calibrate.target import Target
from mallocbench.errors import MallocbenchError
from mallocbench.files import cache_root
from mallocbench.probes.system import cpu_snapshot, system_thp_mode
from mallocbench.run.builds import check_config_keys
from mallocbench.run.experiment import Experiment, PlannedCell, PlannedSession
from mallocbench.run.measure import CellMeasurement, new_cell, warm_up
from mallocbench.run.measure import measure_slice as measure_cell_slice
from mallocbench.run.planning import in_block_order
from mallocbench.run.session import LiveSession, start_session, stop_session
from mallocbench.run.turns import measure_turns
from mallocbench.servers import families
from mallocbench.servers.family import Build
from mallocbench.servers.orphans import stop_orphans
from mallocbench.store import locks
from mallocbench.workloads.sysbench import RunOutput


def _harness_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _last_line(output: RunOutput) -> str:
    return (output.output_tail.splitlines() or ["no output"])[-1]


def measure_slice(
    live: LiveSession, measurement: CellMeasurement, target: Target, slice_s: float
) -> SliceResult:
    """One slice measured exactly as a run measures one (measure.measure_slice).

    A new sysbench process whose first second, clients connecting and preparing their
    statements, is dropped; anything but the server and sysbench busy meanwhile is
    interference, and the harness's own share of it is told apart here, so a busy
    harness is not blamed on the machine.
    """
    harness_before = _harness_cpu_s()
    cpu_before = cpu_snapshot()
    seen = len(measurement.cell.samples)
    started = time.monotonic()
    alive = measure_cell_slice(
        live, measurement, slice_s, lambda *_: None, should_stop=lambda: False
    )
    wall_s = time.monotonic() - started
    capacity_s = (cpu_snapshot().total - cpu_before.total) / os.sysconf("SC_CLK_TCK")
    harness_s = _harness_cpu_s() - harness_before
    if not alive:
        info = live.server.exit_info()
        how = info.describe() if info else "server stopped"
        raise MallocbenchError(f"the server of {target.describe()}: {how}")
    output = measurement.outputs[-1]
    if not output.ok:
        raise MallocbenchError(f"a slice of {target.describe()} failed: {_last_line(output)}")
    piece = measurement.cell.slices[-1]
    found = {k: float(v) for k, v in piece.items() if k not in ("t", "qps", "tps", "seconds")}
    found["harness_cpu_share"] = harness_s / capacity_s if capacity_s > 0 else 0.0
    return SliceResult(
        qps=float(piece["qps"]),
        seconds=[x.qps for x in measurement.cell.samples[seen:] if x.qps is not None],
        wall_s=wall_s,
        interference=found,
    )


def _warm_step(
    live: LiveSession, experiment: Experiment, target: Target, index: int
) -> CellMeasurement:
    """Warm the step until steady exactly as a run warms a cell; its cell says how long."""
    planned = PlannedCell(target.setup.name, target.engine.name, target.step, target.threads, index)
    cell = new_cell(planned, live, experiment)
    if experiment.warmup_s > 0:
        failed = warm_up(live, planned, cell, experiment, should_stop=lambda: False)
        if failed is not None:
            raise MallocbenchError(f"{target.describe()}: {failed.error}")
    return CellMeasurement(cell, planned, drop_first_second=True)


def measure_start(
    experiment: Experiment,
    target: Target,
    where: tuple[Build, Path, Path],
    index: int,
    options: dict[str, Any],
    status: Callable[[str], None],
) -> tuple[StartResult, list[str]]:
    """One server start: copy, start, warm cache and step, measure the slices, stop.

    `where` is the build, the run directory and the golden datadir. The server is
    started and stopped as a run's session is (session.py: the setup's cgroups too), and
    stopped with its datadir removed on every way out (an error, Ctrl-C). Returns the
    start and the notes its session left.
    """
    build, rundir, golden = where
    planned = PlannedSession(target.setup.name, target.engine.name, index, ())
    status(f"starting {target.setup.name} on {target.engine.name} ({rundir.name})")
    began = time.monotonic()
    live = start_session(experiment, planned, f"calibrate.{planned.id}", rundir, build, golden)
    try:
        live.family.warm_cache(live.server, experiment.dataset)
        start_s = time.monotonic() - began
        status(f"warming {target.step.label} ({rundir.name})")
        measurement = _warm_step(live, experiment, target, index)
        cell = measurement.cell
        result = StartResult(start_s, cell.warmup_s or 0.0, bool(cell.warmup_steady))
        for n in range(options["slices"]):
            status(f"slice {n + 1}/{options['slices']} of {rundir.name}")
            result.slices.append(measure_slice(live, measurement, target, options["slice_s"]))
    finally:
        stopping = time.monotonic()
        stop_session(live, keep_datadir=False)
    result.stop_s = time.monotonic() - stopping
    return result, live.notes


def _turn_ratios(target: Target, measured: list[CellMeasurement]) -> list[list[float]]:
    """Copy a's turn over each other copy's, round by round (a round is one turn of
    each): one series per other copy."""
    for measurement in measured:
        output = measurement.outputs[-1] if measurement.outputs else None
        if output is None or not output.ok:
            tail = _last_line(output) if output else "no output"
            raise MallocbenchError(f"the turns of {target.describe()} failed: {tail}")
    first = measured[0].cell.slices
    return [
        [float(a["qps"]) / float(b["qps"]) for a, b in zip(first, other.cell.slices, strict=False)
         if a["qps"] > 0 < b["qps"]]
        for other in measured[1:]
    ]  # fmt: skip


def copy_order(copies: int, index: int) -> list[int]:
    """The copies in the order start `index` starts, warms and turns them: a first on
    even starts, last on odd ones, as a run reverses its setups on odd repeats
    (run.planning.plan). Whatever favours one place in that order (the server started
    first idles while the others warm) then lands in the between-start variance, where
    a run's blocks meet it, not in a fixed offset of copy a that no run has."""
    return in_block_order(list(range(copies)), index)


def _start_copies(
    experiment: Experiment,
    target: Target,
    where: tuple[Build, Path, Path],
    index: int,
    lives: dict[int, LiveSession],
    status: Callable[[str], None],
    order: list[int],
) -> list[float]:
    """Start the copies in `order` (kept in `lives` by copy as they come up, for the
    caller to stop), each on its own copy of the datadir with its cache warmed; their
    start times, in copy order."""
    build, rundir, golden = where
    took: dict[int, float] = {}
    for i in order:
        copy = copy_name(i)
        began = time.monotonic()
        planned = PlannedSession(target.setup.name, target.engine.name, index, ())
        status(f"starting copy {copy} of {target.setup.name} ({rundir.name})")
        session_id = f"calibrate.start{index + 1}{copy}"
        lives[i] = start_session(experiment, planned, session_id, rundir / copy, build, golden)
        lives[i].family.warm_cache(lives[i].server, experiment.dataset)
        took[i] = time.monotonic() - began
    return [took[i] for i in sorted(took)]


def _take_turns(
    lives: list[LiveSession],
    warmed: list[CellMeasurement],
    experiment: Experiment,
    options: dict[str, Any],
) -> tuple[list[CellMeasurement], float]:
    """Both copies' clients connected, taking turns; their turns and the wall time."""
    turning = [
        CellMeasurement(new_cell(m.planned, live, experiment), m.planned, False)
        for m, live in zip(warmed, lives, strict=True)
    ]
    began = time.monotonic()
    measure_turns(
        list(zip(lives, turning, strict=True)),
        options["turns"],
        options["turn_s"],
        lambda *_: None,
        should_stop=lambda: False,
        settle=experiment.settle_rounds,
    )
    return turning, time.monotonic() - began


def measure_copies(
    experiment: Experiment,
    target: Target,
    where: tuple[Build, Path, Path],
    index: int,
    options: dict[str, Any],
    status: Callable[[str], None],
) -> tuple[StartResult, PairResult, list[str]]:
    """As many copies of the setup up at once as a block of the experiment has servers
    (summary.compared_setups): their slices alternate as runs (the order rotating each
    round), then their clients take turns. Copy a stands for the base, each other copy
    for a setup compared with it; they start, warm and turn in copy_order, reversed on
    odd starts as a run's blocks are.

    Copy a's slices are also the start a one-setup calibration measures (the other
    copies idle meanwhile, as the other servers of a block do). Every server is stopped,
    its datadir removed, on every way out.
    """
    copies = compared_setups(experiment)
    order = copy_order(copies, index)
    lives: dict[int, LiveSession] = {}
    rundir = where[1]
    try:
        took = _start_copies(experiment, target, where, index, lives, status, order)
        pair = PairResult(sum(took), run_ratios=[[] for _ in range(copies - 1)])
        status(f"warming {target.step.label} on {copies} copies ({rundir.name})")
        warmed = {i: _warm_step(lives[i], experiment, target, index) for i in order}
        pair.warmups_s = [warmed[i].cell.warmup_s or 0.0 for i in range(copies)]
        first = warmed[0].cell
        start = StartResult(took[0], first.warmup_s or 0.0, bool(first.warmup_steady))
        for n in range(options["slices"]):
            status(f"runs: round {n + 1}/{options['slices']} of {rundir.name}")
            got = {}
            for i in [order[(n + k) % copies] for k in range(copies)]:
                got[i] = measure_slice(lives[i], warmed[i], target, options["slice_s"])
            start.slices.append(got[0])
            for k in range(1, copies):
                # A slice that completed nothing (a stall) has no ratio, as a turn has none.
                if got[0].qps > 0 < got[k].qps:
                    pair.run_ratios[k - 1].append(got[0].qps / got[k].qps)
        status(f"turns: {options['turns']} rounds of {options['turn_s']:g} s ({rundir.name})")
        turning, pair.turns_wall_s = _take_turns(
            [lives[i] for i in order], [warmed[i] for i in order], experiment, options
        )
        in_copy_order = [turning[order.index(i)] for i in range(copies)]
        pair.turn_ratios = _turn_ratios(target, in_copy_order)
    finally:
        stopping = time.monotonic()
        for live in lives.values():
            stop_session(live, keep_datadir=False)
    # A block stops each of its servers in turn, as here: the cost is per server.
    start.stop_s = (time.monotonic() - stopping) / len(lives)
    return start, pair, [n for live in lives.values() for n in live.notes]


def calibrate(
    experiment: Experiment, target: Target, out_dir: Path, options: dict[str, Any], console: Console
) -> CalibrationSummary:
    """Measure `options["starts"]` starts under the output directory's lock; summarize."""
    family = families.get(experiment.family)
    build = family.find_build(target.setup.basedir)
    check_config_keys(experiment, target.setup, build)  # before the dataset is loaded
    calibrate_dir = out_dir / "calibrate"
    session_notes: list[str] = []
    with console.status("calibrating") as spinner:
        golden = family.golden_datadir(
            build, target.engine.name, experiment.dataset, cache_root(), spinner.update
        )
        with locks.lock_directory(out_dir):
            # A calibration killed before it stopped its servers left them running.
            stop_orphans(calibrate_dir)
            system_thp = target.setup.thp if target.setup.thp in ("always", "madvise") else None
            with system_thp_mode(system_thp):
                measured = _measure_starts(
                    experiment,
                    target,
                    (build, calibrate_dir, golden),
                    options,
                    (spinner.update, console.print),
                )
    starts = [start for start, _, _ in measured]
    pairs = [pair for _, pair, _ in measured if pair is not None]
    for _, _, notes in measured:
        session_notes.extend(n for n in notes if n not in session_notes)
    summary = summarize(experiment, target, starts, options, pairs)
    summary.session_notes.extend(session_notes)
    return summary


def _measure_starts(
    experiment: Experiment,
    target: Target,
    where: tuple[Build, Path, Path],
    options: dict[str, Any],
    say: tuple[Callable[[str], None], Callable[[str], None]],
) -> list[tuple[StartResult, PairResult | None, list[str]]]:
    """options["starts"] starts (calibrate_dir/start-N), of compared_setups copies each
    when options["pairs"]; `say` is the spinner's status and the line printed per start."""
    build, calibrate_dir, golden = where
    status, line = say
    found: list[tuple[StartResult, PairResult | None, list[str]]] = []
    for index in range(options["starts"]):
        at = (build, calibrate_dir / f"start-{index + 1}", golden)
        pair: PairResult | None = None
        if options.get("pairs"):
            start, pair, notes = measure_copies(experiment, target, at, index, options, status)
        else:
            start, notes = measure_start(experiment, target, at, index, options, status)
        found.append((start, pair, notes))
        qps = ", ".join(f"{s.qps:,.0f}" for s in start.slices)
        text = (
            f"  start {index + 1}: ready in {start.start_s:.1f} s, warmed "
            f"{start.warmup_s:.0f} s; slice QPS {qps}"
        )
        if pair is not None:
            text += "; " + _copies_text(pair)
        line(text)
    return found


def _copies_text(pair: PairResult) -> str:
    """Copy a over each other copy: per run with two copies, else each one's geometric
    mean over its runs; and per turn, the geometric mean."""

    def geomean(values: list[float]) -> str:
        return f"{statistics.geometric_mean(values):.3f}" if values else "nan"

    if len(pair.run_ratios) == 1:
        runs = ", ".join(f"{r:.3f}" for r in pair.run_ratios[0])
        per_turn = geomean(pair.turn_ratios[0])
        return f"copy a / copy b per run {runs}, geometric mean per turn {per_turn}"
    others = ", ".join(copy_name(k + 1) for k in range(len(pair.run_ratios)))
    runs = ", ".join(geomean(r) for r in pair.run_ratios)
    turns = ", ".join(geomean(r) for r in pair.turn_ratios)
    return f"copy a / copies {others}: geometric mean per run {runs}, per turn {turns}"


__all__ = ["calibrate", "copy_order", "measure_copies", "measure_slice", "measure_start"]
