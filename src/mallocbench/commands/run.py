"""`mallocbench run`, `report`, `runs` and `steps`."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

import click
from rich.console import Console

from mallocbench import exitcodes
from mallocbench.analysis.run_analysis import analyze
from mallocbench.cluster import dispatch as cluster_mod
from mallocbench.commands.options import (
    StopOnSignals,
    cluster_access,
    cluster_options,
    min_effect_option,
    out_dir_option,
    percent_option,
    store_option,
)
from mallocbench.commands.output import emit, say
from mallocbench.console import make_console
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import RunResult
from mallocbench.report import formats
from mallocbench.report import runs as runs_report
from mallocbench.report.cluster import news_text
from mallocbench.report.formats import write_reports, write_run_reports
from mallocbench.run import experiment as experiment_mod
from mallocbench.run import planning as planning_mod
from mallocbench.run.options import RunOptions, RunOutcome, cell_estimate
from mallocbench.run.runner import Pipeline
from mallocbench.run.source import dry_run_checks
from mallocbench.store import is_url, open_store, store_label, store_target
from mallocbench.store.base import STORE_NAME, ResultsStore
from mallocbench.store.loading import load_result
from mallocbench.store.sqlite import STATUS_FINISHED
from mallocbench.units import parse_duration

# The help `mallocbench run --help` prints; long, as a command that starts servers owes.
RUN_HELP = """Run an experiment: every setup on every engine, step and thread count.

\b
Each session starts a private server from a copy of the loaded dataset, under the
setup's allocator and knobs, checks that allocator is really mapped, then runs the
steps with sysbench while probes sample RSS/VSZ, QPS and latency every second.
The server is the run's alone: no TCP, its socket in a 0700 directory, a fresh
random root password per start, FILE statements confined to its directory, and
(as root) the unprivileged mysql user. Every cell is committed to the store as it
finishes: Ctrl-C or SIGTERM keeps what was measured, --resume continues. One run
at a time per --out directory; --resume first stops any server a killed run left.

\b
Design "interleaved" (the default): each repeat is a block in which every setup's
server is up at once; a cell's measured seconds are cut into slices (durations.slice,
5 s) that alternate between the setups in rotating order, so the machine's drift
reaches all of them alike. Relative QPS pairs the setups within each block, and its
95% interval (Student's t over blocks, pooled over setups) includes the
differences between server starts: give 3 or more repeats for a verdict. Design
"sequential" (or too little memory for every server at once) runs one server at a
time, in A B C, C B A order.

\b
--target-ci: Stein's two-stage rule. 3 blocks of every cell (or the repeats, if
more) measure the spread; it decides how many blocks each cell needs and alone
sets the intervals' width, so stopping early never narrows them below 95%.

\b
Examples:
  mallocbench run examples/quick.toml --out out
  mallocbench run examples/quick.toml --out out --resume
  mallocbench run examples/arenas.toml --target-ci 5% --budget 2h --min-effect 2%
  mallocbench run my.toml --cluster tls://sched:8786 --tls tls/driver --store postgresql://db/mb
  mallocbench run --resume RUN_ID --store postgresql://db/mb   (no file: the stored one)
"""


@click.command("run", help=RUN_HELP, epilog=exitcodes.POLICY_HELP)
@click.argument("experiment_file", type=click.Path(dir_okay=False, path_type=Path))
@out_dir_option("Directory for results.json, report.md, CSVs, the store and server logs.")
@store_option()
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the latest run of this experiment: skip finished cells.",
)
@click.option("--keep-datadirs", is_flag=True, help="Keep each session's datadir for inspection.")
@percent_option(
    "--target-ci",
    "Adaptive repetition: after the planned repeats, add interleaved repeats of the "
    "cells whose relative QPS interval is wider than PCT (e.g. 5%: [0.97, 1.02] is "
    "narrow enough) until all are, or the budget is spent.",
)
@click.option(
    "--budget",
    metavar="DURATION",
    default="1h",
    show_default=True,
    help="Time budget of the whole run for --target-ci (e.g. 90m, 2h): no round is started "
    "that would end after it.",
)
@click.option(
    "--max-repeats",
    type=click.IntRange(2, 1000),
    default=20,
    show_default=True,
    help="Upper bound on blocks (repeats) per cell with --target-ci.",
)
@min_effect_option(
    "Report relative changes smaller than this as 'same' (0.02 or 2%); overrides the "
    "experiment's min_effect."
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a key of the experiment file for this run (repeatable): "
    'durations.step=10, threads=[1,8], steps=["point-query"], dataset.rows=50k, '
    "setup.NAME.knobs.MALLOC_ARENA_MAX=2. Recorded in the run's experiment text.",
)
@click.option("--quiet", "-q", is_flag=True, help="No live progress; print the report only.")
@click.option("--dry-run", is_flag=True, help="Validate the experiment and print the plan.")
@cluster_options(
    "Dispatch the blocks to benchmark hosts through the Dask scheduler at ADDRESS "
    "(tls://HOST:8786; see `mallocbench cluster`); give a store every host reaches."
)
def run_cmd(
    experiment_file: Path,
    out_dir: Path,
    store_path: str | Path | None,
    resume: bool,
    keep_datadirs: bool,
    target_ci_pct: float | None,
    budget: str,
    max_repeats: int,
    min_effect: float | None,
    overrides: tuple[str, ...],
    quiet: bool,
    dry_run: bool,
    cluster_address: str | None,
    tls_dir: Path | None,
    insecure: bool,
) -> None:
    cluster_address, security = cluster_access(cluster_address, tls_dir, insecure)
    experiment, pinned_run = cluster_mod.load_for_run(
        experiment_file,
        list(overrides),
        resume,
        RunOptions(out_dir=out_dir, store_path=store_path).store_target,
    )
    if experiment.events:
        raise MallocbenchError(
            f"{experiment_file}: [[soak.event]] entries run beside a soak's load only: "
            f"use `mallocbench soak {experiment_file}`, or remove them for `run`"
        )
    budget_s = parse_duration(budget, "--budget")
    if experiment.design == experiment_mod.AUTO:
        where = RunOptions(out_dir=out_dir, store_path=store_path, resume=resume)
        experiment = _choose_design(experiment, where, (pinned_run, cluster_address), dry_run)
    sessions = planning_mod.plan(experiment)
    cells = sum(len(s.cells) for s in sessions)
    per_cell = cell_estimate(experiment)
    console = make_console(stderr=True)
    if dry_run:
        if pinned_run is None:
            options = RunOptions(out_dir=out_dir, store_path=store_path, resume=resume)
            dry_run_checks(experiment, options, cluster_address is not None)
        dispatch = (
            cluster_mod.dispatch_line(experiment, cluster_address) if cluster_address else None
        )
        adaptive = (
            None
            if target_ci_pct is None
            else runs_report.Adaptive(max_repeats, target_ci_pct, budget_s)
        )
        say(formats.PLAN, runs_report.Plan(experiment, sessions, per_cell, dispatch, adaptive))
        return
    start = runs_report.Start(experiment.name, cells, len(sessions), per_cell, out_dir)
    say(formats.RUN_START, start, console=console)
    options = RunOptions(
        out_dir=out_dir,
        store_path=store_path,
        resume=resume,
        keep_datadirs=keep_datadirs,
        target_ci_pct=target_ci_pct,
        budget_s=budget_s,
        max_repeats=max_repeats,
        min_effect=min_effect,
    )
    stop = StopOnSignals(console)
    with stop:
        tell = None if quiet else lambda news: say(formats.ASIDE, news_text(news), console=console)
        pipeline = cluster_mod.pipeline_for(
            experiment, options, None, stop.requested, pinned_run, cluster_address, tell, security
        )
        if quiet:
            outcome = pipeline.execute()
        else:
            banner = formats.outputs(formats.BANNER).render(formats.TERMINAL, start)
            outcome = _with_progress(pipeline, console, per_cell, banner)
    _conclude(outcome, out_dir, options.store_label, console, target_ci_pct, stop.signal)


def _choose_design(
    experiment: experiment_mod.Experiment,
    where: RunOptions,
    pinned_and_cluster: tuple[str | None, str | None],
    dry_run: bool,
) -> experiment_mod.Experiment:
    """design = "auto": the design a calibration favours (a stored one, or a short one
    measured now), or the one the run being resumed chose; a dry run only says which it
    would take, or that it would calibrate."""
    from mallocbench.calibrate import auto as autodesign
    from mallocbench.report.calibrate import design_choice_text

    pinned_run, cluster_address = pinned_and_cluster
    if cluster_address is not None:
        raise MallocbenchError(
            'design = "auto" calibrates this machine, not the cluster\'s hosts: set '
            "design (and alternate) in the experiment for a --cluster run"
        )
    if where.resume:
        resumed = autodesign.resumed_choice(experiment, where.store_target, pinned_run)
        if resumed is not None:
            say(formats.DESIGN, runs_report.DesignChosen(resumed.design_why, True), err=True)
            return resumed
    if not dry_run:
        return autodesign.resolve(
            experiment, where.out_dir, make_console(stderr=True), design_choice_text
        )
    chosen = autodesign.stored_choice(experiment, design_choice_text)
    say(formats.DESIGN, runs_report.DesignChosen(chosen.design_why if chosen else None))
    if chosen is None:
        return dataclasses.replace(experiment, design=experiment_mod.INTERLEAVED)
    return chosen


def _with_progress(
    pipeline: Pipeline, console: Console, per_cell: float, banner: str
) -> RunOutcome:
    """Execute the pipeline under a live progress display (it draws what the pipeline
    reports, so it is handed over before anything runs)."""
    from mallocbench.commands.progress import RichProgress

    with RichProgress(console, per_cell, banner) as progress:
        pipeline.progress = progress
        return pipeline.execute()


def _conclude(
    outcome: RunOutcome,
    out_dir: Path,
    store_label: str,
    console: Console,
    target_ci_pct: float | None,
    stopped_by: int | None,
) -> None:
    """Write the reports, print the run, and exit with the status its end deserves."""
    end = runs_report.End(outcome, store_label, target_pct=target_ci_pct)
    if outcome.result.cells:
        analysis = analyze(outcome.result)
        end.written = write_run_reports(analysis, out_dir, outcome.aborted, outcome.notes)
        say(formats.RUN, formats.Shown(analysis, str(out_dir)))
    # On stderr too when the report above goes elsewhere (a file): the notes need the
    # user's eyes, once.
    end.notes_shown = not _same_file(sys.stdout, sys.stderr)
    say(formats.RUN_END, end, console=console)
    if outcome.aborted == "interrupted":
        sys.exit(exitcodes.interrupted(stopped_by or signal.SIGINT))
    if outcome.aborted:
        say(formats.RUN_ABORT, end, err=True)
        # Not 1: a CI gate reads 1 as "found a regression"; an abort is not a verdict.
        sys.exit(exitcodes.ABORTED)


def _same_file(one: TextIO, other: TextIO) -> bool:
    """Whether two streams write to one place (a terminal, or a pipe given both)."""
    try:
        a, b = os.fstat(one.fileno()), os.fstat(other.fileno())
    except (OSError, ValueError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@click.command("report")
# A str, not a Path: a postgresql:// URL would lose a slash.
@click.argument("source", required=False, metavar="[SOURCE]")
@click.option("--run", "run_id", help="Run id in the store (default: the latest).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(formats.NAMES),
    default="terminal",
    show_default=True,
    help="What to print on standard output.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write results.json, report.md, report.html and CSVs into this directory.",
)
@click.option(
    "--self-contained",
    is_flag=True,
    help="With --out: put plotly.js inside report.html (2 MB, one file to mail) instead "
    "of one shared copy beside the directory's reports. --format html always is.",
)
@click.option(
    "--reference",
    help="Relative values against this setup instead of the run's base.",
)
@click.option(
    "--setups",
    "setup_list",
    metavar="LIST",
    help="Report only these setups (comma-separated; the base or --reference among them).",
)
@min_effect_option(
    "Report relative changes smaller than this as the same (0.02 or 2%); "
    "overrides the run's own min_effect, 0 turns it off."
)
def report_cmd(
    source: str | None,
    run_id: str | None,
    fmt: str,
    out_dir: Path | None,
    self_contained: bool,
    reference: str | None,
    setup_list: str | None,
    min_effect: float | None,
) -> None:
    """Report a run from an output directory, a store (.sqlite or a postgresql:// URL) or
    a results.json.

    \b
    A directory holding both is read from its store, which keeps every run made there.

    \b
    Examples:
      mallocbench report out                       the latest run in out/
      mallocbench report out --run quick-20250101-1200
      mallocbench report out --format csv > cells.csv
      mallocbench report out/results.json --format markdown --min-effect 2%
      mallocbench report out --reference je --setups je,glibc-arena1
      mallocbench report out --format html > report.html
      mallocbench report postgresql://bench@db-host/mallocbench --run quick-20250101-1200
    """
    result = load_result(source, run_id)
    _say_if_running(source, result)
    wanted = [n.strip() for n in setup_list.split(",") if n.strip()] if setup_list else None
    # Once, for every format and file below: the options are arguments, not run edits.
    analysis = analyze(result, min_effect, reference, wanted)
    if out_dir is not None:
        write_reports(analysis, out_dir, self_contained)
    emit(formats.RUN_OUTPUTS, fmt, formats.Shown(analysis, source or "out"))


def _store_of(source: str | Path | None) -> str | Path | None:
    """The store `source` names, or None for a results.json or nothing."""
    target = store_target(source if source is not None else "out")
    if is_url(target) or (Path(target).is_file() and Path(target).suffix != ".json"):
        return target
    return None


def _say_if_running(source: str | None, result: RunResult) -> None:
    """A run still being measured shows MISSING cells that are only still to come; one
    that died, was interrupted or failed shows ones that never will without a resume."""
    target = _store_of(source)
    if target is None:
        return
    db = open_store(target, readonly=True)
    try:
        stored = next((r["status"] for r in db.list_runs() if r["run_id"] == result.run_id), "")
        status = db.live_status(result.run_id, stored)
    finally:
        db.close()
    if status in ("", STATUS_FINISHED):
        return
    done, planned, what = _progress_of(result)
    go_on = None if status.startswith("running") else _how_to_go_on(target, result)
    say(
        formats.UNFINISHED,
        runs_report.Unfinished(result.run_id, status, done, planned, what, go_on),
        err=True,
    )


def _progress_of(result: RunResult) -> tuple[int, int, str]:
    """(measured, planned, what is counted): cells of a run, replays of a replay."""
    meta = result.metadata
    if meta.replay is not None:
        replays = len(meta.replay.setups or []) * int(meta.replay.repeats or 1)
        return len(meta.replay.runs or []), replays, "replays"
    planned = 1
    for listed in (meta.engines, meta.steps, meta.threads):
        planned *= len(listed or [1])
    planned *= len(result.setups) * int(meta.repeats or 1)
    return len(result.cells), planned, "cells"


def _how_to_go_on(target: str | Path, result: RunResult) -> str:
    """The command that measures what an unfinished run is missing."""
    where = (
        f"--out {Path(target).parent}"
        if not is_url(target) and Path(target).name == STORE_NAME
        else f"--store {store_label(target)}"
    )
    replay = result.metadata.replay is not None
    return runs_report.go_on_text(replay, where, result.metadata.experiment_file, result.run_id)


@click.command("runs")
@click.argument("store", required=False, default="out")
def runs_cmd(store: str) -> None:
    """List the runs in a store: an output directory, a .sqlite file or a postgresql:// URL."""
    db = open_store(store_target(store, must_exist=True), readonly=True)
    try:
        # A store `patterns` wrote into holds its runs too: one list, oldest first.
        rows = [_listed(db, run) for run in db.list_runs()]
        rows += [_listed(db, run, patterns=True) for run in db.list_pattern_runs()]
    finally:
        db.close()
    rows.sort(key=lambda row: row[0])
    say(formats.RUN_LIST, [listed for _, listed in rows])


def _listed(
    db: ResultsStore, run: dict[str, Any], patterns: bool = False
) -> tuple[float, runs_report.Listed]:
    """A stored run as `runs` lists it, after when it started."""
    replay = None
    if not patterns and not run["cells"]:
        replay = db.load_run_header(run["run_id"]).metadata.replay
    status = db.live_status(run["run_id"], run["status"])
    listed = runs_report.Listed(
        run["run_id"], run["cells"], run["experiment"], status, replay, patterns
    )
    return float(run["started_at"] or 0), listed


@click.command("steps")
def steps_cmd() -> None:
    """List the microbenchmark steps, their groups, ranges and SQL."""
    say(formats.STEP_LIST, None)


commands = [run_cmd, report_cmd, runs_cmd, steps_cmd]
