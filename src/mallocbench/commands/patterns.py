"""`mallocbench patterns`: database-shaped allocation patterns under each allocator."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from mallocbench.analysis.patterns import analyze_patterns
from mallocbench.commands.options import FiniteFloatRange, store_option
from mallocbench.commands.output import say
from mallocbench.console import make_console
from mallocbench.errors import MallocbenchError
from mallocbench.model.patterns import PatternRun
from mallocbench.patterns import experiment as pexp
from mallocbench.patterns import runner
from mallocbench.patterns.driver import PATTERNS
from mallocbench.report import formats
from mallocbench.report.patterns import PatternFiles, PatternPlan
from mallocbench.store import load_pattern_run, locks, store_label
from mallocbench.store.base import STORE_NAME


@click.command("patterns")
@click.argument("experiment_file", required=False, type=click.Path(dir_okay=False))
@click.option(
    "-p",
    "--pattern",
    "patterns",
    multiple=True,
    type=click.Choice(PATTERNS),
    help="Pattern to run (repeatable; default: all four).",
)
@click.option(
    "-a",
    "--allocator",
    "allocator_flags",
    multiple=True,
    metavar="SPEC",
    help="Allocator as NAME, NAME:KNOB=VALUE[,KNOB=VALUE] or a .so path "
    "(repeatable; default: every installed one). The first is the base.",
)
@click.option(
    "-t",
    "--threads",
    multiple=True,
    type=click.IntRange(1, 1024),
    help="Worker threads (repeatable; default: the number of CPUs).",
)
@click.option(
    "-s",
    "--seconds",
    type=FiniteFloatRange(0.001, 86400, min_open=False),
    help="Seconds per run (default 1).",
)
@click.option("--ops", type=click.IntRange(1), help="Operations per thread instead of seconds.")
@click.option(
    "-r",
    "--repeats",
    type=click.IntRange(1, 1000),
    help="Runs per cell, interleaved across setups (default 3).",
)
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Driver option for the patterns that take it, e.g. size=32M, init=calloc, "
    "capacity=256M (repeatable).",
)
@click.option("--base", help="Setup the others are compared with (default: the first).")
@click.option(
    "--seed",
    type=click.IntRange(0),
    default=1,
    show_default=True,
    help="Random seed; repeat i uses seed + i.",
)
@click.option(
    "--out",
    "out_dir",
    default="patterns-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for patterns.json, patterns.csv, patterns.md and the store.",
)
@store_option()
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the latest run of the same experiment in the store: runs it finished "
    "are skipped (the experiment must be unchanged).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan (with --resume: what is left).")
@click.option(
    "--report",
    "report_run",
    is_flag=False,
    flag_value="latest",
    default=None,
    metavar="[RUN_ID]",
    help="Print the report of a stored run (default the latest) "
    "again and rewrite the exports, without running anything.",
)
def patterns(
    experiment_file: str | None,
    patterns: tuple[str, ...],
    allocator_flags: tuple[str, ...],
    threads: tuple[int, ...],
    seconds: float | None,
    ops: int | None,
    repeats: int | None,
    options: tuple[str, ...],
    base: str | None,
    seed: int,
    out_dir: str,
    store_path: str | Path | None,
    resume: bool,
    dry_run: bool,
    report_run: str | None,
) -> None:
    """Replay database-shaped allocation patterns under each allocator, in seconds.

    No database needed: a small native driver (mbpatterns; `mallocbench doctor` shows
    where) allocates the way servers do and reports ops/s, peak RSS and RSS per live byte requested.

    \b
    Patterns:
      sortbuf     per-query buffer: malloc SIZE + memset (or calloc), use, free.
                  32M is above glibc's mmap threshold: try MALLOC_MMAP_MAX_=0
      blockcache  LRU block cache (4-64 KB blocks, capacity in bytes), misses
                  allocate, evictions free, some blocks pinned long: RSS bloat
      oltp        many 16-512 B allocations per query plus long-lived ones
      xthread     blocks allocated in one thread and freed in another

    \b
    Examples:
      mallocbench patterns --pattern blockcache -a glibc -a jemalloc -t 2 -s 2
      mallocbench patterns -p sortbuf -o size=32M -a glibc -a glibc:MALLOC_MMAP_MAX_=0
      mallocbench patterns -p sortbuf -o init=calloc -a jemalloc
      mallocbench patterns examples/patterns.toml --out out
      mallocbench patterns examples/patterns.toml --out out --resume
      mallocbench patterns --report --out out

    Every run is checked to really use the allocator it names. Results go to
    OUT/results.sqlite as each run finishes, so Ctrl-C keeps them and --resume goes on
    from there. The table compares each setup with the base: ratios with a 95%
    interval, * where the interval excludes 1. `mbpatterns --help` (the driver itself)
    lists every driver option.
    """
    out = Path(out_dir)
    store = store_path or out / STORE_NAME
    console = make_console()

    if report_run is not None:
        if resume:
            raise MallocbenchError("--report prints a stored run: drop --resume")
        run = load_pattern_run(store, None if report_run == "latest" else report_run)
        _show(run, out, store, console)
        return

    experiment = _experiment(
        experiment_file,
        (patterns, allocator_flags, options),
        threads,
        seconds,
        ops,
        repeats,
        base,
        seed,
    )
    if dry_run:
        _print_plan(experiment, store, resume, console)
        return
    # The output directory's lock, as `run` takes: two runs would write one directory's
    # reports over each other.
    with locks.lock_directory(out):
        run = runner.execute(experiment, store, resume=resume)
        _show(run, out, store, console)
    if run.status != "finished":
        raise MallocbenchError(f"the run ended {run.status}")


def _experiment(
    experiment_file: str | None,
    flags: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]],
    threads: tuple[int, ...],
    seconds: float | None,
    ops: int | None,
    repeats: int | None,
    base: str | None,
    seed: int,
) -> pexp.PatternExperiment:
    """The experiment file (--threads, --seconds and --repeats over it), or the flags'.

    `flags` are --pattern, --allocator and --option, which only an ad-hoc run takes.
    """
    patterns, allocator_flags, options = flags
    if experiment_file is None:
        made = pexp.from_flags(
            list(patterns),
            list(allocator_flags),
            list(threads),
            seconds,
            ops,
            repeats or 3,
            list(options),
            base,
            seed,
        )
        pexp.check_runs(made.cases, made.repeats)
        return made
    adhoc = {
        "--pattern": patterns,
        "--allocator": allocator_flags,
        "--option": options,
        "--base": base,
        "--ops": ops,
    }
    given = [name for name, value in adhoc.items() if value]
    if given:
        raise MallocbenchError(
            f"{', '.join(given)} cannot be combined with an experiment file: edit "
            f"{experiment_file} instead (--threads, --seconds and --repeats do override it)"
        )
    experiment = pexp.load(experiment_file)
    _override(experiment, threads, seconds, repeats)
    pexp.check_runs(experiment.cases, experiment.repeats)
    return experiment


def _print_plan(
    experiment: pexp.PatternExperiment, store: str | Path, resume: bool, console: Console
) -> None:
    """--dry-run: the runs still to do, one a line, and how many."""
    plan = experiment.plan()
    done: set[tuple[str, str, int, int]] = set()
    resumed = None
    if resume:
        run_id, done = runner.resume_point(experiment, store)
        resumed = (run_id, len(done))
    todo = [planned for planned in plan if planned.key not in done]
    say(formats.PATTERNS_PLAN, PatternPlan(todo, resumed), console=console)


def _override(
    experiment: pexp.PatternExperiment,
    threads: tuple[int, ...],
    seconds: float | None,
    repeats: int | None,
) -> None:
    """Command-line overrides of a file's values, for a quicker or longer pass."""
    for case in experiment.cases:
        if threads:
            case.threads = list(threads)
        if seconds is not None:
            case.seconds, case.ops = seconds, None
    if repeats is not None:
        experiment.repeats = repeats


def _show(run: PatternRun, out: Path, store: str | Path, console: Console) -> None:
    analysis = analyze_patterns(run)
    say(formats.PATTERNS_KIND, analysis, console=console)
    json_path, csv_path, md_path = formats.write_pattern_reports(analysis, out)
    files = PatternFiles(md_path, csv_path, json_path, store_label(store), run.run_id)
    say(formats.PATTERNS_FILES, files, console=console)


commands = [patterns]
