"""`mallocbench soak`: one step under load for hours per setup; RSS growth and OOM as results."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click
from rich.console import Console

from mallocbench import exitcodes
from mallocbench.analysis.run_analysis import analyze
from mallocbench.commands.options import StopOnSignals, out_dir_option, store_option
from mallocbench.commands.output import say
from mallocbench.console import make_console
from mallocbench.errors import MallocbenchError
from mallocbench.files import disk_fault, is_disk_fault, write_text_atomic
from mallocbench.report import formats
from mallocbench.report import ratchet as ratchet_report
from mallocbench.report import soak as soak_report
from mallocbench.report.formats import write_run_reports
from mallocbench.run import experiment as experiment_mod
from mallocbench.run import loading as loading_mod
from mallocbench.run.options import RunOptions, RunOutcome
from mallocbench.soak.runner import (
    DEFAULT_DURATION,
    DEFAULT_SEGMENT,
    plan_soak,
    soak_experiment,
    soak_metadata,
    soak_pipeline,
    soak_spec,
)

# Seconds a server start, the cache warming and the commits add to each setup's soak.
START_OVERHEAD_S = 20.0


def _run(
    experiment: experiment_mod.Experiment,
    options: RunOptions,
    console: Console,
    banner: str | None,
    segment_s: float,
) -> tuple[RunOutcome, int | None]:
    """Run the soak with Ctrl-C and SIGTERM turned into a stop after the segment under way
    is dropped; returns the outcome and the signal that stopped it, if one did. No banner:
    no live progress."""
    stop = StopOnSignals(console, dropped="segment")
    with stop:
        if banner is None:
            outcome = soak_pipeline(experiment, options, stop_requested=stop.requested).execute()
        else:
            from mallocbench.commands.progress import RichProgress

            with RichProgress(console, segment_s, banner) as progress:
                outcome = soak_pipeline(experiment, options, progress, stop.requested).execute()
    return outcome, stop.signal


@click.command("soak", epilog=exitcodes.POLICY_HELP)
@click.argument("experiment_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--duration",
    metavar="DURATION",
    help="Time under load per setup (and engine), e.g. 90m, 6h. Default: the experiment's "
    f"durations.step when it sets one, else {DEFAULT_DURATION}.",
)
@click.option(
    "--segment",
    metavar="DURATION",
    help="Each setup's soak is cut into cells this long, each committed as it ends: an "
    "interruption loses at most one. Default: the experiment's durations.slice when it "
    f"sets one, else {DEFAULT_SEGMENT}.",
)
@out_dir_option("Directory for results.json, report.md, soak.md, the store and server logs.")
@store_option()
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the latest soak of this experiment (same --duration, --segment, --set): "
    "finished segments are kept, the rest run on a new server.",
)
@click.option("--keep-datadirs", is_flag=True, help="Keep each session's datadir for inspection.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a key of the experiment file (repeatable), e.g. "
    'steps=["point-query"], threads=[16], setup.glibc.memory_limit=512M.',
)
@click.option("--quiet", "-q", is_flag=True, help="No live progress; print the summary only.")
@click.option("--dry-run", is_flag=True, help="Validate the experiment and print the plan.")
def soak_cmd(
    experiment_file: Path,
    duration: str | None,
    segment: str | None,
    out_dir: Path,
    store_path: str | Path | None,
    resume: bool,
    keep_datadirs: bool,
    overrides: tuple[str, ...],
    quiet: bool,
    dry_run: bool,
) -> None:
    """Soak: hold one step's load on each setup for hours; measure how RSS grows.

    \b
    Every setup (on every engine) gets one server and --duration of continuous load
    with the experiment's one step and client count (choose with --set when it has
    several), with RSS, the server's own memory counters and its cgroup charge sampled
    every second and its account of RSS taken at the end of each segment. Setups run
    back to back: hours of load per setup rule out interleaving them. A setup's
    memory_limit caps its server; an OOM kill is a result and ends that setup's soak.
    The file's repeats and warmup do not apply (one lifetime per setup, timed from its
    start), and --duration is rounded up to whole segments.

    \b
    Reported per setup: peak RSS against the cap, when the server was killed, the RSS
    slope in MiB/hour with a 95% interval that allows for autocorrelated samples, where
    growth levelled off, and when RSS would reach the cap at that slope. A soak is a
    run: `mallocbench report OUT` and `compare` read it like any other.

    \b
    Examples:
      mallocbench soak examples/myrocks-oom.toml --out oom
      mallocbench soak my.toml --duration 6h --set 'steps=["point-query"]' --out soak
      mallocbench soak my.toml --duration 6h --out soak --resume
    """
    loaded = loading_mod.load(experiment_file, list(overrides))
    spec = soak_spec(loaded, duration, segment, overrides)
    experiment = soak_experiment(loaded, spec)
    plan = soak_report.SoakPlan(experiment, spec, len(plan_soak(experiment)), START_OVERHEAD_S)
    if dry_run:
        say(formats.SOAK_PLAN, plan)
        return
    options = RunOptions(
        out_dir=out_dir,
        store_path=store_path,
        resume=resume,
        keep_datadirs=keep_datadirs,
        extra_metadata=soak_metadata(experiment, spec),
    )
    console = make_console(stderr=True)
    banner = soak_report.banner(plan, out_dir)
    outcome, stopped_by = _run(
        experiment, options, console, None if quiet else banner, spec.segment_s
    )
    _finish(outcome, out_dir, console, options.store_label, stopped_by)


def _finish(
    outcome: RunOutcome, out_dir: Path, console: Console, store_file: str, stopped_by: int | None
) -> None:
    """Reports, the soak summary, notes and the exit status the run's end calls for."""
    result = outcome.result
    written: list[Path] = []
    if result.cells:
        analysis = analyze(result)
        written = write_run_reports(analysis, out_dir, outcome.aborted, outcome.notes)
        path = out_dir / "soak.md"
        try:
            if written:
                lines = soak_report.markdown_lines(analysis) + ratchet_report.markdown_lines(
                    analysis
                )
                write_text_atomic(path, "\n".join(lines) + "\n")
                written.append(path)
                if analysis.ratchets:
                    path = out_dir / "ratchet.json"
                    write_text_atomic(path, ratchet_report.ratchet_json(analysis) + "\n")
                    written.append(path)
        except OSError as exc:
            if is_disk_fault(exc):
                raise disk_fault(exc, f"the soak report {path}") from exc
            raise MallocbenchError(f"cannot write {path}: {exc.strerror}") from exc
        say(formats.SOAK, analysis)
    interrupted = outcome.aborted == "interrupted"
    end = soak_report.SoakEnd(
        written if result.cells else None, outcome.notes, interrupted, len(result.cells), store_file
    )
    say(formats.SOAK_END, end, console=console)
    if interrupted:
        sys.exit(exitcodes.interrupted(stopped_by or signal.SIGINT))
    if outcome.aborted:
        abort = soak_report.SoakAbort(outcome.aborted, len(result.cells), store_file)
        say(formats.SOAK_ABORT, abort, err=True)
        sys.exit(exitcodes.ABORTED)


commands = [soak_cmd]
