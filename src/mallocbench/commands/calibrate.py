"""`mallocbench calibrate`: how noisy is this machine right now, and what does it cost?

A pilot in the sense of Kalibera & Jones ("Rigorous Benchmarking in Reasonable Time",
ISMM 2013): a few server starts of one setup, several short slices in each, give the
variance at each level (seconds, slices of one start, starts) and the cost of each
level; analysis.noise turns them into the number of slices per start and of starts that
reach an interval width in the least time. Nothing is stored in the run store.

The command parses and prints: the calibrate package measures and summarizes, and
report.calibrate words the result.
"""

from __future__ import annotations

from pathlib import Path

import click

from mallocbench.calibrate.measure import calibrate
from mallocbench.calibrate.store import calibration_key, store_calibration
from mallocbench.calibrate.summary import (
    DEFAULT_STARTS,
    START_SERIES,
    CalibrationSummary,
    compared_setups,
    default_starts,
)
from mallocbench.calibrate.target import pick_target
from mallocbench.commands.options import out_dir_option, percent_option
from mallocbench.commands.output import say
from mallocbench.console import make_console
from mallocbench.errors import MallocbenchError
from mallocbench.report import formats
from mallocbench.report.calibrate import Calibrating
from mallocbench.run import loading as loading_mod
from mallocbench.run.experiment import DEFAULT_TURN_S, MIN_RUN_SLICE_S, MIN_TURN_S
from mallocbench.units import parse_duration


def write_json(summary: CalibrationSummary, path: Path) -> None:
    try:
        path.write_text(formats.CALIBRATION.render("json", summary))
    except OSError as exc:
        raise MallocbenchError(f"cannot write {path}: {exc.strerror}; give another --json") from exc


@click.command("calibrate")
@click.argument("experiment_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--setup", help="Setup to calibrate (default: the experiment's base).")
@click.option("--engine", help="Engine (default: the experiment's first).")
@click.option("--step", help="Step, by name or label (default: the experiment's first).")
@click.option("--threads", type=click.IntRange(1), help="Client threads (default: the first).")
# Starts before slices: a block of a run is one server start, and the between-start
# variance, most of a turns block's, is known only as well as the starts are many (3
# starts: 2 degrees of freedom; its estimates came out at a quarter to a half of what
# the runs measured after them saw). Short starts also measure servers as young as a
# run's blocks; 5 starts of 3 slices and 6 rounds of turns take what 3 of 6 and 10 took.
# Each start gives one ratio series per copy after a, so two copies need twice the
# starts for as many (a 2-setup prediction from 5 starts, 4 degrees of freedom, came out
# 0.76 of the widths its runs reached, where 4 setups' came out 0.93).
@click.option(
    "--starts",
    type=click.IntRange(2, 100),
    default=None,
    help="Server starts; at least 2, or the between-start variance is unknown "
    f"[default: {DEFAULT_STARTS}, or enough for {START_SERIES} ratio series with "
    "pairs: 10 for two copies].",
)
@click.option(
    "--slices",
    type=click.IntRange(2, 1000),
    default=3,
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
    help="Start copies of the setup each time, as many as the experiment has setups (at "
    "least two), and compare them as runs and as turns (every design); --no-pairs: one "
    "copy (the sequential design only).",
)
@click.option(
    "--turns",
    type=click.IntRange(2, 1000),
    default=6,
    show_default=True,
    help="Rounds of turns per start (a turn of each copy).",
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
    starts: int | None,
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
    long a width of --target-ci takes. Each start is of as many copies of the setup as
    the experiment has setups (at least two), up together as a run's block has them,
    copy a compared with each other: their slices as separate runs (design runs), then
    --turns rounds of turns (design turns). The spread of those ratios, per slice or
    turn and per start, is what each design's interval is made of, so the width each
    design reaches in --budget is predicted for the experiment's number of setups, and
    the narrowest named. Nothing goes into the run store; the calibration is kept for
    runs with design = "auto" (a day).

    \b
    Examples:
      mallocbench calibrate examples/quick.toml
      mallocbench calibrate examples/quick.toml --starts 8 --budget 2h --target-ci 2%
    """
    experiment = loading_mod.load(experiment_file)
    target = pick_target(experiment, setup, engine, step, threads)
    if starts is None:
        starts = default_starts(compared_setups(experiment) if pairs else 1)
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
    copies = compared_setups(experiment) if pairs else None
    start = Calibrating(target.describe(), starts, slices, slice_s, copies, turns, turn_s)
    say(formats.CALIBRATING, start, console=console)
    summary = calibrate(experiment, target, out_dir, options, console)
    stored = store_calibration(summary, calibration_key(experiment, target))
    say(formats.CALIBRATE, summary)
    if stored is not None:
        say(formats.CALIBRATION_KEPT, stored, console=console)
    if json_path is not None:
        write_json(summary, json_path)
        say(formats.CALIBRATION_WROTE, json_path, console=console)


commands = [calibrate_cmd]
