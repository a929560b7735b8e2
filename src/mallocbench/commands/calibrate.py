"""`mallocbench calibrate`: how noisy is this machine right now, and what does it cost?

A pilot in the sense of Kalibera & Jones ("Rigorous Benchmarking in Reasonable Time",
ISMM 2013): a few server starts of one setup, several short slices in each, give the
variance at each level (seconds, slices of one start, starts) and the cost of each
level; analysis.noise turns them into the number of slices per start and of starts that
reach an interval width in the least time. Nothing is stored in the run store.
"""

from __future__ import annotations

import json
import math
import os
import resource
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
from mallocbench.experiment import MIN_RUN_SLICE_S, Experiment, PlannedCell, PlannedSession, Setup
from mallocbench.measure import CellMeasurement, new_cell, warm_up
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


def _median(values: list[float]) -> float:
    # Never empty: at least 2 starts of at least 2 slices each are measured.
    return float(statistics.median(values))


@dataclass
class Costs:
    """What each level of a run costs, in seconds (medians over the starts and slices)."""

    start_s: float  # copy the datadir, start the server, warm its cache
    warmup_s: float  # the step's warmup until steady
    slice_wall_s: float  # a slice's sysbench run, dropped second and start-up included


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


def plan_run(
    components: noise.VarianceComponents,
    costs: Costs,
    setups: int,
    budget_s: float,
    target_width_pct: float,
) -> Plan:
    """Kalibera & Jones' slices per start, then the width a budget buys and the time a
    width costs.

    A start's cost per setup is the shared start (servers start together) spread over
    the setups, plus the setup's own step warmup; a slice costs its wall time, the
    dropped second included.
    """
    start_s, warmup_s, slice_s = costs.start_s, costs.warmup_s, costs.slice_wall_s
    slices = noise.optimal_slices_per_start(
        components.within_var, components.between_var or 0.0, slice_s, start_s / setups + warmup_s
    )
    shape = (setups, slices, slice_s, start_s, warmup_s)
    budget_starts = noise.starts_within(budget_s, *shape)
    budget_width = (
        noise.resolvable_effect_pct(components, setups, slices, budget_starts)
        if budget_starts >= 2
        else None
    )
    needed = noise.starts_for_width(components, setups, slices, target_width_pct)
    return Plan(
        setups=setups,
        slices_per_start=slices,
        budget_s=budget_s,
        budget_starts=budget_starts,
        budget_width_pct=budget_width,
        target_width_pct=target_width_pct,
        target_starts=needed,
        target_s=noise.time_for_starts(needed, *shape) if needed else None,
    )


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

    def to_dict(self) -> dict[str, Any]:
        # The components' CVs are properties, which asdict leaves out.
        return {**asdict(self), "components": self.components.to_dict()}


def summarize(
    experiment: Experiment,
    target: Target,
    starts: list[StartResult],
    options: dict[str, Any],
) -> CalibrationSummary:
    """Everything the terminal table and --json show."""
    components = noise.variance_components([[s.qps for s in start.slices] for start in starts])
    series = [start.seconds for start in starts]
    costs = Costs(
        start_s=_median([s.start_s for s in starts]),
        warmup_s=_median([s.warmup_s for s in starts]),
        slice_wall_s=_median([sl.wall_s for s in starts for sl in s.slices]),
    )
    setups = max(2, len(experiment.setups))
    interference = _interference_summary(starts)
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
        plan=plan_run(components, costs, setups, options["budget_s"], options["target_ci_pct"]),
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
    for line in plan_lines(summary):
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
            starts: list[StartResult] = []
            with system_thp_mode(system_thp):
                for index in range(options["starts"]):
                    rundir = calibrate_dir / f"start-{index + 1}"
                    start, notes = measure_start(
                        experiment, target, (build, rundir, golden), index, options, spinner.update
                    )
                    starts.append(start)
                    session_notes.extend(n for n in notes if n not in session_notes)
                    qps = ", ".join(f"{s.qps:,.0f}" for s in start.slices)
                    console.print(
                        f"  start {index + 1}: ready in {start.start_s:.1f} s, warmed "
                        f"{start.warmup_s:.0f} s; slice QPS {qps}"
                    )
    summary = summarize(experiment, target, starts, options)
    summary.notes.extend(session_notes)
    return summary


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
    long a width of --target-ci takes. Nothing goes into the run store.

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
        "budget_s": parse_duration(budget, "--budget"),
        "target_ci_pct": target_ci_pct,
    }
    console = make_console(stderr=True)
    console.print(
        f"calibrating {target.describe()}: {starts} starts x {slices} slices of {slice_s} s"
    )
    summary = calibrate(experiment, target, out_dir, options, console)
    print_calibration(summary, make_console())
    if json_path is not None:
        write_json(summary, json_path)
        console.print(f"wrote {json_path}")


commands = [calibrate_cmd]
