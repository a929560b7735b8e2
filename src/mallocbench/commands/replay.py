"""`mallocbench replay`: replay a recorded trace under each allocator and knob setting."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from mallocbench.commands.options import min_effect_option, timing_options
from mallocbench.commands.output import say
from mallocbench.errors import MallocbenchError
from mallocbench.store.base import StoreDiskFault

if TYPE_CHECKING:
    from mallocbench.model.results import RunResult
    from mallocbench.store.base import ResultsStore


def _setups(allocator_list: str, extra: tuple[str, ...]) -> list[tuple[str, str, dict[str, str]]]:
    from mallocbench.patterns.experiment import parse_allocator_flag

    specs = [s.strip() for s in allocator_list.split(",") if s.strip()] if allocator_list else []
    parsed = [parse_allocator_flag(spec) for spec in [*specs, *extra]]
    names = [name for name, _, _ in parsed]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise MallocbenchError(f"setup {duplicate!r} is given twice: list each setup once")
    if not parsed:
        raise MallocbenchError("give --allocators, e.g. --allocators glibc,jemalloc")
    return parsed


@click.command("replay")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--allocators",
    "allocator_list",
    default="glibc",
    show_default=True,
    metavar="A,B,...",
    help="Allocators to replay under, comma-separated; the first is the base.",
)
@click.option(
    "--set",
    "extra",
    multiple=True,
    metavar="NAME:KNOB=VALUE[,KNOB=VALUE]",
    help="A further setup with knobs, e.g. glibc:MALLOC_ARENA_MAX=2 (repeatable).",
)
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True)
@timing_options
@click.option(
    "--order",
    type=click.Choice(["recorded", "batched", "threads"]),
    default="recorded",
    show_default=True,
    help="recorded runs every thread's calls one at a time in the recorded order (the same "
    "calls in the same order each replay: a steady peak RSS); batched keeps that order by "
    "batches of 256 calls, free within each (no hand-over at every change of thread); "
    "threads lets the replay threads run freely (real concurrency: use it with --timing "
    "none for CPU cost).",
)
@min_effect_option("Ratios smaller than this are never findings (default 0).")
@click.option(
    "--expect-server-version",
    metavar="VERSION",
    help="Warn when the trace was recorded under another server version.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the results as JSON instead of the tables."
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the replay in DIR: its results store, results.json, report.md, report.html.",
)
def replay(
    trace: Path,
    allocator_list: str,
    extra: tuple[str, ...],
    repeats: int,
    timing: str,
    speed: float,
    order: str,
    min_effect: float | None,
    expect_server_version: str | None,
    as_json: bool,
    out_dir: Path | None,
) -> None:
    """Replay a recorded trace under each allocator and knob setting.

    Per setup: peak RSS beside the ideal (live requested bytes), RSS/live, CPU time and
    calls/s, with 95% intervals over the repeats. With --out the replay is a run like any
    other: `mallocbench report DIR` shows it again, in every format."""
    from mallocbench.analysis.run_analysis import analyze
    from mallocbench.commands.progress import ReplayProgress
    from mallocbench.console import make_console
    from mallocbench.patterns.experiment import make_setup
    from mallocbench.replay import run as replay_runs
    from mallocbench.replay import runner
    from mallocbench.replay import trace as tracemod
    from mallocbench.report import formats
    from mallocbench.report.replay import reading_text
    from mallocbench.report.runs import Wrote

    parsed = _setups(allocator_list, extra)
    setups = [make_setup("replay", name, spec, knobs) for name, spec, knobs in parsed]
    console = make_console(stderr=True)
    with ReplayProgress(console, len(setups) * repeats) as progress:
        progress.status(reading_text(trace))
        info = tracemod.check(trace)
        runner.replay_timeout(float(info.data.get("duration_s") or 0), speed, timing)
        progress.read(info)
        warnings = info.warnings(expect_server_version)
        result = replay_runs.new_result(
            info, setups, timing, speed, repeats, min_effect, warnings, order
        )
        store = None
        try:
            store = _open_store(out_dir)
            replay_runs.replay_run(
                result, setups, trace, store, progress.started, progress.finished
            )
        except StoreDiskFault as exc:
            raise _disk_fault(exc, result, as_json) from exc
        finally:
            if store is not None:
                store.close()
    analysis = analyze(result)
    if out_dir is not None:
        written = formats.write_reports(analysis, out_dir)
    shown = formats.Shown(analysis, str(out_dir) if out_dir else None)
    say(formats.RUN, shown, fmt="json" if as_json else None)
    if out_dir is not None:
        say(formats.WROTE, Wrote([p.name for p in written], out_dir), console=console)


def _disk_fault(exc: StoreDiskFault, result: RunResult, as_json: bool) -> MallocbenchError:
    """A full or failing disk under --out: the replays measured so far are printed (the
    last may not have reached the store), and the line says how a replay goes on."""
    from mallocbench.analysis.run_analysis import analyze
    from mallocbench.report import formats

    record = result.metadata.replay
    measured = len(record.runs or []) if record is not None else 0
    if measured:
        say(formats.RUN, formats.Shown(analyze(result)), fmt="json" if as_json else None)
    shown = f": the {measured} replay(s) measured are printed above" if measured else ""
    return exc.going_on(f"replay the trace again (a replay has no --resume){shown}")


def _open_store(out_dir: Path | None) -> ResultsStore | None:
    if out_dir is None:
        return None
    from mallocbench.store import open_store
    from mallocbench.store.base import STORE_NAME

    return open_store(out_dir / STORE_NAME)


commands = [replay]
