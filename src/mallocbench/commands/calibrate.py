"""`mallocbench calibrate`: how noisy is this machine right now, and what does it cost?

A pilot in the sense of Kalibera & Jones ("Rigorous Benchmarking in Reasonable Time",
ISMM 2013): a few server starts of one setup, several short slices in each, give the
variance at each level (seconds, slices of one start, starts) and the cost of each
level; analysis.noise turns them into the number of slices per start and of starts that
reach an interval width in the least time. Nothing is stored in the run store.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mallocbench import dataset
from mallocbench import experiment as experiment_mod
from mallocbench.analysis import noise
from mallocbench.commands.options import out_dir_option, percent_option
from mallocbench.console import make_console
from mallocbench.errors import MallocbenchError
from mallocbench.experiment import (
    DEFAULT_TURN_S,
    MIN_RUN_SLICE_S,
    MIN_TURN_S,
    Experiment,
    PlannedCell,
    PlannedSession,
    Setup,
)
from mallocbench.measure import (
    CellMeasurement,
    measure_turns,
    new_cell,
    warm_up,
)
from mallocbench.measure import measure_slice as measure_cell_slice
from mallocbench.probes.system import cpu_snapshot, system_thp_mode
from mallocbench.servers.engines import Engine
from mallocbench.servers.mariadb import ServerBuild, find_build
from mallocbench.servers.orphans import stop_orphans
from mallocbench.session import LiveSession, start_session, stop_session, warm_cache
from mallocbench.store import locks
from mallocbench.units import parse_duration
from mallocbench.workloads.catalogue import Step
from mallocbench.workloads.sysbench import RunOutput

# Above this median share of the CPU used by other processes, the numbers measure the
# interference as much as the machine: said in words beside them.
BUSY_SHARE = 0.10


@dataclass(frozen=True)
class Target:
    """The one cell calibrated: a setup on an engine, a step at a thread count."""

    setup: Setup
    engine: Engine
    step: Step
    threads: int

    def describe(self) -> str:
        return f"{self.setup.name} on {self.engine.name}, {self.step.label} at {self.threads}t"


@dataclass
class SliceResult:
    qps: float  # queries / seconds over the kept seconds
    seconds: list[float]  # per-second QPS, the first (connection start-up) dropped
    wall_s: float  # the whole sysbench run, dropped second and start-up included
    interference: dict[str, float]


@dataclass
class StartResult:
    start_s: float  # copy the datadir, start the server, warm its cache
    warmup_s: float  # the step's warmup until steady
    steady: bool
    slices: list[SliceResult] = field(default_factory=list)

    @property
    def seconds(self) -> list[float]:
        return [qps for s in self.slices for qps in s.seconds]


@dataclass
class PairResult:
    """Two copies of the setup up at once, compared with themselves: the ratio of copy a
    to copy b per round, with slices as separate sysbench runs (design runs) and then
    with their clients taking turns (design turns). No change at all, so every spread
    of these ratios is noise as the blocked designs see it."""

    start_s: float  # both servers started, caches warmed
    run_ratios: list[float] = field(default_factory=list)
    turn_ratios: list[float] = field(default_factory=list)
    turns_wall_s: float = 0.0  # the turns phase, lead and settle turns included


def _pick(choices: list[Any], wanted: str | None, name: Callable[[Any], str], what: str) -> Any:
    if wanted is None:
        return choices[0]
    for choice in choices:
        if name(choice) == wanted:
            return choice
    known = ", ".join(name(c) for c in choices)
    raise MallocbenchError(f"no {what} {wanted!r} in the experiment: use one of {known}")


def pick_target(
    experiment: Experiment,
    setup: str | None,
    engine: str | None,
    step: str | None,
    threads: int | None,
) -> Target:
    """The experiment's base setup, first engine, step and thread count, unless named."""
    chosen_setup = _pick(experiment.setups, setup or experiment.base, lambda s: s.name, "setup")
    chosen_engine = _pick(experiment.engines, engine, lambda e: e.name, "engine")
    # A step by its label ("point-query range=100") or by its name (the first with it).
    by_label = step is None or any(s.label == step for s in experiment.steps)
    chosen_step = _pick(
        experiment.steps, step, (lambda s: s.label) if by_label else (lambda s: s.name), "step"
    )
    if chosen_step.definition.until_done:
        raise MallocbenchError(
            f"step {chosen_step.label} does a fixed amount of work and has no steady "
            "throughput to calibrate: choose another with --step"
        )
    wanted_threads = None if threads is None else str(threads)
    chosen_threads = _pick(
        [str(t) for t in experiment.threads], wanted_threads, str, "thread count"
    )
    return Target(chosen_setup, chosen_engine, chosen_step, int(chosen_threads))


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
    where: tuple[ServerBuild, Path, Path],
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
        warm_cache(live.server, experiment)
        start_s = time.monotonic() - began
        status(f"warming {target.step.label} ({rundir.name})")
        measurement = _warm_step(live, experiment, target, index)
        cell = measurement.cell
        result = StartResult(start_s, cell.warmup_s or 0.0, bool(cell.warmup_steady))
        for n in range(options["slices"]):
            status(f"slice {n + 1}/{options['slices']} of {rundir.name}")
            result.slices.append(measure_slice(live, measurement, target, options["slice_s"]))
        return result, live.notes
    finally:
        stop_session(live, keep_datadir=False)


def _turn_ratios(target: Target, first: CellMeasurement, second: CellMeasurement) -> list[float]:
    """Copy a's turn over copy b's, round by round (a round is one turn of each)."""
    for measurement in (first, second):
        output = measurement.outputs[-1] if measurement.outputs else None
        if output is None or not output.ok:
            tail = _last_line(output) if output else "no output"
            raise MallocbenchError(f"the turns of {target.describe()} failed: {tail}")
    pairs = zip(first.cell.slices, second.cell.slices, strict=False)
    return [float(a["qps"]) / float(b["qps"]) for a, b in pairs if a["qps"] > 0 < b["qps"]]


def _start_copies(
    experiment: Experiment,
    target: Target,
    where: tuple[ServerBuild, Path, Path],
    index: int,
    lives: list[LiveSession],
    status: Callable[[str], None],
) -> list[float]:
    """Start copies a and b (appended to `lives` as they come up, for the caller to
    stop), each on its own copy of the datadir with its cache warmed; their start times."""
    build, rundir, golden = where
    took = []
    for copy in ("a", "b"):
        began = time.monotonic()
        planned = PlannedSession(target.setup.name, target.engine.name, index, ())
        status(f"starting copy {copy} of {target.setup.name} ({rundir.name})")
        session_id = f"calibrate.start{index + 1}{copy}"
        lives.append(start_session(experiment, planned, session_id, rundir / copy, build, golden))
        warm_cache(lives[-1].server, experiment)
        took.append(time.monotonic() - began)
    return took


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
    )
    return turning, time.monotonic() - began


def measure_pair(
    experiment: Experiment,
    target: Target,
    where: tuple[ServerBuild, Path, Path],
    index: int,
    options: dict[str, Any],
    status: Callable[[str], None],
) -> tuple[StartResult, PairResult, list[str]]:
    """Two copies of the setup up at once, as a block of a run has them: their slices
    alternate as runs (the order rotating each round), then their clients take turns.

    Copy a's slices are also the start a one-setup calibration measures (copy b idles
    meanwhile, as the other servers of a block do). Both servers are stopped, their
    datadirs removed, on every way out.
    """
    lives: list[LiveSession] = []
    rundir = where[1]
    try:
        took = _start_copies(experiment, target, where, index, lives, status)
        pair = PairResult(sum(took))
        status(f"warming {target.step.label} on both copies ({rundir.name})")
        warmed = [_warm_step(live, experiment, target, index) for live in lives]
        first = warmed[0].cell
        start = StartResult(took[0], first.warmup_s or 0.0, bool(first.warmup_steady))
        for n in range(options["slices"]):
            status(f"runs: round {n + 1}/{options['slices']} of {rundir.name}")
            got = {}
            for i in [0, 1] if n % 2 == 0 else [1, 0]:
                got[i] = measure_slice(lives[i], warmed[i], target, options["slice_s"])
            start.slices.append(got[0])
            pair.run_ratios.append(got[0].qps / got[1].qps)
        status(f"turns: {options['turns']} rounds of {options['turn_s']:g} s ({rundir.name})")
        turning, pair.turns_wall_s = _take_turns(lives, warmed, experiment, options)
        pair.turn_ratios = _turn_ratios(target, *turning)
    finally:
        for live in lives:
            stop_session(live, keep_datadir=False)
    return start, pair, [n for live in lives for n in live.notes]


def _median(values: list[float]) -> float:
    # Never empty: at least 2 starts of at least 2 slices each are measured.
    return float(statistics.median(values))


@dataclass
class Costs:
    """What each level of a run costs, in seconds (medians over the starts and slices)."""

    start_s: float  # copy the datadir, start the server, warm its cache
    warmup_s: float  # the step's warmup until steady
    slice_wall_s: float  # a slice's sysbench run, dropped second and start-up included
    turn_s: float = 0.0  # a turn of one setup, its share of the lead and settle turns included


@dataclass
class InterferenceSummary:
    """Median and maximum over the slices of each interference measure (None: never
    measured). Shares are of the machine's CPU time, from 0 to 1."""

    median_other_cpu_share: float | None
    max_other_cpu_share: float | None
    median_harness_cpu_share: float | None
    max_harness_cpu_share: float | None
    median_steal_share: float | None
    max_steal_share: float | None
    median_load_avg_1m: float | None
    max_load_avg_1m: float | None


def _interference_summary(starts: list[StartResult]) -> InterferenceSummary:
    per_slice = [s.interference for start in starts for s in start.slices]

    def spread(key: str) -> tuple[float | None, float | None]:
        found = [i[key] for i in per_slice if key in i]
        return (_median(found), max(found)) if found else (None, None)

    other, harness, steal, load = (
        spread(key)
        for key in ("other_cpu_share", "harness_cpu_share", "steal_share", "load_avg_1m")
    )
    return InterferenceSummary(
        median_other_cpu_share=other[0],
        max_other_cpu_share=other[1],
        median_harness_cpu_share=harness[0],
        max_harness_cpu_share=harness[1],
        median_steal_share=steal[0],
        max_steal_share=steal[1],
        median_load_avg_1m=load[0],
        max_load_avg_1m=load[1],
    )


# How a run's setups share the machine (experiment.design and experiment.alternate).
RUNS_DESIGN = "runs"  # interleaved, each slice a sysbench run of its own
TURNS_DESIGN = "turns"  # interleaved, clients taking turns
SEQUENTIAL_DESIGN = "sequential"  # one server at a time


@dataclass(frozen=True)
class Plan:
    """What to ask of a run, from the measured noise and costs."""

    setups: int  # in the comparison (at least 2: a setup and its base)
    slices_per_start: int
    budget_s: float
    budget_starts: int
    budget_width_pct: float | None  # None: the budget does not fit 2 starts
    target_width_pct: float
    target_starts: int | None  # None: out of reach (more than noise.starts_for_width looks at)
    target_s: float | None
    design: str = RUNS_DESIGN
    # The components are of the paired log-ratio (two copies measured together), so the
    # ratio's variance is theirs; otherwise twice one setup's (independent starts).
    paired: bool = False


def block_costs(design: str, costs: Costs, setups: int) -> tuple[float, float]:
    """A block's fixed seconds and its seconds per slice (or turn) of every setup.

    Interleaved, the setups' servers start together (one start's time) and each warms
    its step; sequential, each setup has its own start and warmup, and its slices are
    one continuous sysbench run (a second of start-up, nothing dropped between them).
    """
    if design == SEQUENTIAL_DESIGN:
        fixed = setups * (costs.start_s + costs.warmup_s + 1.0)
        return fixed, setups * max(costs.slice_wall_s - 1.0, 1.0)
    fixed = costs.start_s + setups * costs.warmup_s
    if design == TURNS_DESIGN:
        return fixed + setups * costs.turn_s, setups * costs.turn_s  # a settle turn each
    return fixed, setups * costs.slice_wall_s


def plan_run(
    components: noise.VarianceComponents,
    costs: Costs,
    setups: int,
    budget_s: float,
    target_width_pct: float,
    design: str = RUNS_DESIGN,
    paired: bool = False,
) -> Plan:
    """Kalibera & Jones' slices (or turns) per start, then the width a budget buys and
    the time a width costs, for one design (block_costs)."""
    fixed_s, per_slice_s = block_costs(design, costs, setups)
    slices = noise.optimal_slices_per_start(
        components.within_var, components.between_var or 0.0, per_slice_s, fixed_s
    )
    block_s = fixed_s + slices * per_slice_s
    budget_starts = int(budget_s // block_s) if block_s > 0 else 0
    budget_width = (
        noise.resolvable_effect_pct(components, setups, slices, budget_starts, paired=paired)
        if budget_starts >= 2
        else None
    )
    needed = noise.starts_for_width(components, setups, slices, target_width_pct, paired=paired)
    return Plan(
        setups=setups,
        slices_per_start=slices,
        budget_s=budget_s,
        budget_starts=budget_starts,
        budget_width_pct=budget_width,
        target_width_pct=target_width_pct,
        target_starts=needed,
        target_s=needed * block_s if needed else None,
        design=design,
        paired=paired,
    )


def best_design(plans: list[Plan]) -> Plan | None:
    """The design with the narrowest interval in the budget (None: none fits 2 starts)."""
    fitting = [p for p in plans if p.budget_width_pct is not None]
    return min(fitting, key=lambda p: p.budget_width_pct or math.inf, default=None)


@dataclass
class CalibrationSummary:
    """Everything the terminal table and --json show: what was calibrated, the noise at
    each level, what each level costs, the interference met and the plan that follows."""

    experiment: str
    setup: str
    engine: str
    step: str  # its label
    threads: int
    slice_s: float
    second_cv_pct: float | None  # None: no series long enough
    aggregation_curve: list[tuple[int, float]]  # (k seconds, CV % of their means)
    components: noise.VarianceComponents
    costs: Costs
    interference: InterferenceSummary
    plan: Plan
    starts: list[StartResult]
    notes: list[str] = field(default_factory=list)
    pairs: list[PairResult] = field(default_factory=list)
    # Of the log-ratio copy a / copy b, per slice (or turn) and per start of the pair;
    # None without pairs.
    runs_ratio: noise.VarianceComponents | None = None
    turns_ratio: noise.VarianceComponents | None = None
    turn_s: float | None = None
    designs: list[Plan] = field(default_factory=list)  # one per design, for `setups`
    best: str | None = None  # the design with the narrowest interval in the budget

    def to_dict(self) -> dict[str, Any]:
        # The components' CVs are properties, which asdict leaves out.
        return {
            **asdict(self),
            "components": self.components.to_dict(),
            "runs_ratio": self.runs_ratio.to_dict() if self.runs_ratio else None,
            "turns_ratio": self.turns_ratio.to_dict() if self.turns_ratio else None,
        }


def _ratio_components(ratios: list[list[float]]) -> noise.VarianceComponents | None:
    if len(ratios) < 2 or not any(len(r) >= 2 for r in ratios):
        return None
    return noise.variance_components(ratios)


def design_plans(
    summary: CalibrationSummary, budget_s: float, target_width_pct: float
) -> list[Plan]:
    """A plan per design: sequential from one setup's components (its starts are
    independent), runs and turns from the paired ratio components when measured."""
    setups, costs = summary.plan.setups, summary.costs
    plans = [
        plan_run(summary.components, costs, setups, budget_s, target_width_pct, SEQUENTIAL_DESIGN)
    ]
    for design, ratio in ((RUNS_DESIGN, summary.runs_ratio), (TURNS_DESIGN, summary.turns_ratio)):
        if ratio is not None:
            plans.append(
                plan_run(ratio, costs, setups, budget_s, target_width_pct, design, paired=True)
            )
    return plans


def summarize(
    experiment: Experiment,
    target: Target,
    starts: list[StartResult],
    options: dict[str, Any],
    pairs: list[PairResult] | None = None,
) -> CalibrationSummary:
    """Everything the terminal table and --json show."""
    components = noise.variance_components([[s.qps for s in start.slices] for start in starts])
    pairs = pairs or []
    turns = 2 * (options.get("turns", 0) + 1)  # a settle turn each, then the rounds
    costs = Costs(
        start_s=_median([s.start_s for s in starts]),
        warmup_s=_median([s.warmup_s for s in starts]),
        slice_wall_s=_median([sl.wall_s for s in starts for sl in s.slices]),
        turn_s=_median([p.turns_wall_s / turns for p in pairs]) if pairs else 0.0,
    )
    runs_ratio = _ratio_components([p.run_ratios for p in pairs])
    summary = _summary(experiment, target, starts, options, components, costs, runs_ratio)
    summary.pairs = pairs
    summary.runs_ratio = runs_ratio
    summary.turns_ratio = _ratio_components([p.turn_ratios for p in pairs])
    summary.turn_s = options.get("turn_s") if pairs else None
    summary.designs = design_plans(summary, options["budget_s"], options["target_ci_pct"])
    best = best_design(summary.designs)
    summary.best = best.design if best is not None and len(summary.designs) > 1 else None
    return summary


def _summary(
    experiment: Experiment,
    target: Target,
    starts: list[StartResult],
    options: dict[str, Any],
    components: noise.VarianceComponents,
    costs: Costs,
    runs_ratio: noise.VarianceComponents | None,
) -> CalibrationSummary:
    series = [start.seconds for start in starts]
    setups = max(2, len(experiment.setups))
    interference = _interference_summary(starts)
    # With the runs design's own paired components, the plan needs no guess of how much
    # of the noise a block shares.
    plan_components = runs_ratio or components
    return CalibrationSummary(
        experiment=experiment.name,
        setup=target.setup.name,
        engine=target.engine.name,
        step=target.step.label,
        threads=target.threads,
        slice_s=options["slice_s"],
        second_cv_pct=next(iter(noise.pooled_aggregation_curve(series, (1,))), (1, None))[1],
        aggregation_curve=noise.pooled_aggregation_curve(series),
        components=components,
        costs=costs,
        interference=interference,
        plan=plan_run(
            plan_components,
            costs,
            setups,
            options["budget_s"],
            options["target_ci_pct"],
            paired=runs_ratio is not None,
        ),
        starts=starts,
        notes=_notes(experiment, starts, interference, components),
    )


def _notes(
    experiment: Experiment,
    starts: list[StartResult],
    interference: InterferenceSummary,
    components: noise.VarianceComponents,
) -> list[str]:
    notes = []
    busy = interference.median_other_cpu_share
    if busy is not None and busy > BUSY_SHARE:
        notes.append(
            f"other processes used {100 * busy:.0f}% of the machine's CPU time (median per "
            "slice) while measuring: these numbers include that interference; calibrate "
            "again on a quiet machine to see its own noise"
        )
    if components.between_var == 0:
        notes.append(
            "the starts differed no more than their slices predict: the between-start "
            "variance is estimated as 0, and more starts would refine that"
        )
    if len(experiment.setups) < 2:
        notes.append("the experiment has one setup: the plan assumes two (a setup and its base)")
    unsteady = sum(1 for s in starts if not s.steady)
    if unsteady and experiment.warmup_s > 0:
        notes.append(
            f"{unsteady} of {len(starts)} warmups reached max_warmup without a steady state: "
            "the slices may still include the ramp"
        )
    return notes


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}%"


def _levels_table(summary: CalibrationSummary) -> Table:
    components, costs = summary.components, summary.costs
    table = Table(title="Noise by level (coefficient of variation of throughput)")
    table.add_column("level")
    table.add_column("CV", justify="right")
    table.add_column("from")
    table.add_row("one second", _pct(summary.second_cv_pct), "seconds within each start")
    table.add_row(
        f"one slice ({summary.slice_s:g} s)",
        _pct(components.slice_cv_pct),
        f"{components.slices} slices, {components.within_df} df within starts",
    )
    table.add_row(
        "one server start",
        _pct(components.start_cv_pct),
        f"{components.starts} starts (variance component, clamped at 0)",
    )
    table.add_section()
    table.add_row("cost of a start", f"{costs.start_s:.1f} s", "copy datadir, start, warm cache")
    table.add_row("step warmup", f"{costs.warmup_s:.1f} s", "until steady")
    table.add_row("cost of a slice", f"{costs.slice_wall_s:.1f} s", "wall, start-up included")
    return table


def _curve_table(summary: CalibrationSummary) -> Table:
    """Measured CV of k-second means beside what white noise would give (CV_1 / sqrt(k))."""
    table = Table(title="Averaging seconds: CV of the mean of k consecutive seconds")
    for column in ("k (s)", "measured", "white noise"):
        table.add_column(column, justify="right")
    first = summary.second_cv_pct
    for k, cv in summary.aggregation_curve:
        white = first / math.sqrt(k) if first is not None else None
        table.add_row(str(k), _pct(cv, 2), _pct(white, 2))
    return table


def _interference_table(summary: CalibrationSummary) -> Table:
    found = summary.interference
    table = Table(title="Interference per slice")
    for column in ("", "median", "max"):
        table.add_column(column, justify="right" if column else "left")
    for label, median, top in (
        ("other processes' CPU", found.median_other_cpu_share, found.max_other_cpu_share),
        ("  of which mallocbench's", found.median_harness_cpu_share, found.max_harness_cpu_share),
        ("steal", found.median_steal_share, found.max_steal_share),
    ):
        table.add_row(
            label,
            _pct(None if median is None else 100 * median),
            _pct(None if top is None else 100 * top),
        )
    median, top = found.median_load_avg_1m, found.max_load_avg_1m
    table.add_row(
        "load average (1 min)",
        "-" if median is None else f"{median:.2f}",
        "-" if top is None else f"{top:.2f}",
    )
    return table


def _designs_table(summary: CalibrationSummary) -> Table:
    """Per design: the noise its ratio is made of, and what the budget buys with it."""
    budget = f"width in {summary.plan.budget_s / 60:g} min"
    target = f"time for {summary.plan.target_width_pct:g} points"
    table = Table(
        title=f"Designs for {summary.plan.setups} setups: the noise of a ratio setup / base"
    )
    for column in (
        "design",
        "per slice/turn",
        "per start",
        "from",
        "slices or turns per start",
        budget,
        target,
    ):
        table.add_column(column, justify="left" if column in ("design", "from") else "right")
    sources = {
        SEQUENTIAL_DESIGN: (summary.components, "2 x one setup's, starts independent"),
        RUNS_DESIGN: (summary.runs_ratio, "copy a / copy b, runs"),
        TURNS_DESIGN: (summary.turns_ratio, "copy a / copy b, turns"),
    }
    for plan in summary.designs:
        components, origin = sources[plan.design]
        if components is None:
            continue
        scale = 1.0 if plan.paired else 2.0  # the ratio's variance, not one setup's
        start = components.between_var
        name = plan.design + (" (best)" if plan.design == summary.best else "")
        table.add_row(
            name,
            _pct(noise.cv_pct_from_log_var(scale * components.within_var)),
            _pct(None if start is None else noise.cv_pct_from_log_var(scale * start)),
            origin,
            f"{plan.slices_per_start}",
            _pct(plan.budget_width_pct, 1).rstrip("%") + " pts"
            if plan.budget_width_pct is not None
            else "does not fit",
            _wall(plan.target_s) if plan.target_s is not None else "out of reach",
        )
    return table


def design_lines(summary: CalibrationSummary) -> list[str]:
    """The design to choose, in words; nothing without pairs."""
    if summary.best is None:
        return []
    best = next(p for p in summary.designs if p.design == summary.best)
    turns = summary.turns_ratio is not None and summary.plan.setups > 2
    lines = [
        f"Best design here for {summary.plan.setups} setups in {summary.plan.budget_s / 60:g} "
        f"min: {summary.best} (about {best.budget_width_pct:.1f} points): "
        + {
            SEQUENTIAL_DESIGN: 'design = "sequential".',
            RUNS_DESIGN: 'alternate = "runs" (the default).',
            TURNS_DESIGN: 'alternate = "turns".',
        }[summary.best]
    ]
    if turns:
        lines.append(
            "Pairs measure two setups; with more, a setup's turn is further from its base's, "
            "so drift the pair shared may not all be shared: the turns width is a lower bound."
        )
    return lines


def plan_lines(summary: CalibrationSummary) -> list[str]:
    """The verdict in words: slices per start, what the budget buys, what the target costs."""
    plan = summary.plan
    lines = [
        f"Kalibera-Jones: {plan.slices_per_start} slices of {summary.slice_s:g} s per "
        "server start spend the time best for this noise and these costs."
    ]
    budget = f"{plan.budget_s / 60:g} min"
    if plan.budget_width_pct is None:
        lines.append(
            f"With {plan.setups} setups, a budget of {budget} does not fit the 2 starts an "
            "interval needs (per cell)."
        )
    else:
        lines.append(
            f"With {plan.setups} setups, a budget of {budget} ({plan.budget_starts} starts) "
            f"resolves an interval width of about {plan.budget_width_pct:.1f} points (per cell)."
        )
    if plan.target_starts is None or plan.target_s is None:
        lines.append(
            f"A width of {plan.target_width_pct:g} points is out of reach at this noise: "
            "quiet the machine or accept a wider interval."
        )
    else:
        lines.append(
            f"A width of {plan.target_width_pct:g} points needs about {plan.target_starts} "
            f"starts and {_wall(plan.target_s)}"
            + (": quiet the machine or accept a wider interval." if plan.target_s > 3600 else ".")
        )
    start_cv = summary.components.start_cv_pct
    if start_cv is not None and start_cv > 0:
        lines.append(
            f"Two starts of one setup typically differ by {start_cv * math.sqrt(2):.1f}% with no "
            "change at all: a comparison needs several server starts per setup, which is "
            "why a run's repeats restart the servers."
        )
    return lines


def _wall(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.1f} minutes"


def print_calibration(summary: CalibrationSummary, console: Console) -> None:
    console.print(
        f"[bold]{summary.experiment}[/]: {summary.setup} on {summary.engine}, "
        f"{summary.step} at {summary.threads} threads"
    )
    console.print(_levels_table(summary))
    console.print(_curve_table(summary))
    console.print(_interference_table(summary))
    if summary.pairs:
        console.print(_designs_table(summary))
    for line in plan_lines(summary) + design_lines(summary):
        console.print(line)
    for note in summary.notes:
        console.print(f"[yellow]note[/]: {note}")


def write_json(summary: CalibrationSummary, path: Path) -> None:
    try:
        path.write_text(json.dumps(summary.to_dict(), indent=1) + "\n")
    except OSError as exc:
        raise MallocbenchError(f"cannot write {path}: {exc.strerror}; give another --json") from exc


def calibrate(
    experiment: Experiment, target: Target, out_dir: Path, options: dict[str, Any], console: Console
) -> CalibrationSummary:
    """Measure `options["starts"]` starts under the output directory's lock; summarize."""
    build = find_build(target.setup.basedir)
    calibrate_dir = out_dir / "calibrate"
    session_notes: list[str] = []
    with console.status("calibrating") as spinner:
        golden = dataset.golden_datadir(
            build, target.engine, experiment.dataset, on_status=spinner.update
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
    summary.notes.extend(session_notes)
    return summary


def _measure_starts(
    experiment: Experiment,
    target: Target,
    where: tuple[ServerBuild, Path, Path],
    options: dict[str, Any],
    say: tuple[Callable[[str], None], Callable[[str], None]],
) -> list[tuple[StartResult, PairResult | None, list[str]]]:
    """options["starts"] starts (calibrate_dir/start-N), of two copies each when
    options["pairs"]; `say` is the spinner's status and the line printed per start."""
    build, calibrate_dir, golden = where
    status, line = say
    found: list[tuple[StartResult, PairResult | None, list[str]]] = []
    for index in range(options["starts"]):
        at = (build, calibrate_dir / f"start-{index + 1}", golden)
        pair: PairResult | None = None
        if options.get("pairs"):
            start, pair, notes = measure_pair(experiment, target, at, index, options, status)
        else:
            start, notes = measure_start(experiment, target, at, index, options, status)
        found.append((start, pair, notes))
        qps = ", ".join(f"{s.qps:,.0f}" for s in start.slices)
        text = (
            f"  start {index + 1}: ready in {start.start_s:.1f} s, warmed "
            f"{start.warmup_s:.0f} s; slice QPS {qps}"
        )
        if pair is not None:
            runs = ", ".join(f"{r:.3f}" for r in pair.run_ratios)
            turns = statistics.geometric_mean(pair.turn_ratios) if pair.turn_ratios else math.nan
            text += f"; copy a / copy b per run {runs}, geometric mean per turn {turns:.3f}"
        line(text)
    return found


# The host's noise changes with what else runs on it: an older calibration is redone.
STORED_MAX_AGE_S = 24 * 3600


def calibration_key(experiment: Experiment, target: Target) -> str:
    """This host and the shape the noise depends on: setup, engine, step, clients, data."""
    data = experiment.dataset
    shape = [
        socket.gethostname(),
        target.setup.name,
        target.setup.allocator_spec,
        target.engine.name,
        target.step.label,
        target.threads,
        data.tables,
        data.rows,
        data.cache_bytes,
    ]
    return hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()[:16]


def _path(key: str) -> Path:
    return dataset.cache_root() / "calibrations" / f"{key}.json"


def store_calibration(summary: CalibrationSummary, key: str) -> Path | None:
    """Keep a calibration with pairs for later auto runs; None when it has none."""
    if summary.runs_ratio is None or summary.turns_ratio is None:
        return None
    record = {
        "saved_at": time.time(),
        "slice_s": summary.slice_s,
        "turn_s": summary.turn_s,
        "sequential": asdict(summary.components),
        "runs": asdict(summary.runs_ratio),
        "turns": asdict(summary.turns_ratio),
    }
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record) + "\n")
    except OSError:
        return None  # a cache that cannot be written costs a calibration next time only
    return path


def load_calibration(key: str, now: float | None = None) -> dict[str, Any] | None:
    """A stored calibration for this key, young enough; None otherwise."""
    try:
        record = json.loads(_path(key).read_text())
        record["components"] = {
            name: noise.VarianceComponents(**record[name])
            for name in ("sequential", "runs", "turns")
        }
    except (OSError, ValueError, TypeError, KeyError):
        return None
    age = (now or time.time()) - float(record.get("saved_at", 0))
    return record if 0 <= age <= STORED_MAX_AGE_S else None


@click.command("calibrate")
@click.argument("experiment_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--setup", help="Setup to calibrate (default: the experiment's base).")
@click.option("--engine", help="Engine (default: the experiment's first).")
@click.option("--step", help="Step, by name or label (default: the experiment's first).")
@click.option("--threads", type=click.IntRange(1), help="Client threads (default: the first).")
@click.option(
    "--starts",
    type=click.IntRange(2, 100),
    default=3,
    show_default=True,
    help="Server starts; at least 2, or the between-start variance is unknown.",
)
@click.option(
    "--slices",
    type=click.IntRange(2, 1000),
    default=6,
    show_default=True,
    help="Measured slices per start; at least 2, or the within-start variance is unknown.",
)
@click.option(
    "--slice",
    "slice_s",
    type=click.IntRange(int(MIN_RUN_SLICE_S), 3600),
    default=5,
    show_default=True,
    metavar="SECONDS",
    help="Seconds per slice, as durations.slice in an experiment; the first is dropped.",
)
@click.option(
    "--budget",
    metavar="DURATION",
    default="5m",
    show_default=True,
    help="Run time to plan for (e.g. 90s, 30m, 2h): the width it would resolve.",
)
@percent_option(
    "--target-ci",
    "Interval width to plan for (e.g. 3%): the starts and time it needs.",
    default="3%",
)
@click.option(
    "--pairs/--no-pairs",
    default=True,
    show_default=True,
    help="Start two copies of the setup each time and compare them as runs and as turns "
    "(every design); --no-pairs: one copy (the sequential design only).",
)
@click.option(
    "--turns",
    type=click.IntRange(2, 1000),
    default=10,
    show_default=True,
    help="Rounds of turns per pair (a turn of each copy).",
)
@click.option(
    "--turn",
    "turn_s",
    type=click.IntRange(int(MIN_TURN_S), 60),
    default=int(DEFAULT_TURN_S),
    show_default=True,
    metavar="SECONDS",
    help='Seconds per turn, as durations.slice with alternate = "turns".',
)
@out_dir_option("Directory for the servers' logs (OUT/calibrate); nothing is stored.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write everything measured and derived to this JSON file.",
)
def calibrate_cmd(
    experiment_file: Path,
    setup: str | None,
    engine: str | None,
    step: str | None,
    threads: int | None,
    starts: int,
    slices: int,
    slice_s: int,
    pairs: bool,
    turns: int,
    turn_s: int,
    budget: str,
    target_ci_pct: float,
    out_dir: Path,
    json_path: Path | None,
) -> None:
    """Measure this machine's noise now, and plan a run's repeats from it.

    \b
    Starts the experiment's base setup (or --setup) --starts times on a fresh copy of
    the dataset; after each start the cache and the step are warmed as a run warms
    them, then --slices slices of --slice seconds are measured (each its own sysbench
    run, its first second dropped) while the CPU time of every other process is
    recorded. From the variance between seconds, between slices of one start and
    between starts, and what each costs, it says how many slices per start spend the
    time best (Kalibera & Jones, ISMM 2013), what interval width --budget buys and how
    long a width of --target-ci takes. Each start is of two copies of the setup, up
    together as a run's block has them, compared with each other: their slices as
    separate runs (design runs), then --turns rounds of turns (design turns). The
    spread of their ratio, per slice or turn and per start, is what each design's
    interval is made of, so the width each design reaches in --budget is predicted for
    the experiment's number of setups, and the narrowest named. Nothing goes into the
    run store; the calibration is kept for runs with design = "auto" (a day).

    \b
    Examples:
      mallocbench calibrate examples/quick.toml
      mallocbench calibrate examples/quick.toml --starts 5 --budget 2h --target-ci 2%
    """
    experiment = experiment_mod.load(experiment_file)
    target = pick_target(experiment, setup, engine, step, threads)
    options = {
        "starts": starts,
        "slices": slices,
        "slice_s": slice_s,
        "pairs": pairs,
        "turns": turns,
        "turn_s": float(turn_s),
        "budget_s": parse_duration(budget, "--budget"),
        "target_ci_pct": target_ci_pct,
    }
    console = make_console(stderr=True)
    console.print(
        f"calibrating {target.describe()}: {starts} starts x {slices} slices of {slice_s} s"
        + (
            f", of two copies each (compared as runs, then as {turns} turns of {turn_s} s)"
            if pairs
            else ""
        )
    )
    summary = calibrate(experiment, target, out_dir, options, console)
    stored = store_calibration(summary, calibration_key(experiment, target))
    print_calibration(summary, make_console())
    if stored is not None:
        console.print(f'kept for design = "auto" runs of this shape: {stored}')
    if json_path is not None:
        write_json(summary, json_path)
        console.print(f"wrote {json_path}")


commands = [calibrate_cmd]
