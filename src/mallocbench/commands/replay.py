"""`mallocbench replay`: replay a recorded trace under each allocator and knob setting."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mallocbench import exitcodes
from mallocbench.commands.options import (
    StopOnSignals,
    cluster_access,
    cluster_options,
    min_effect_option,
    timing_options,
)
from mallocbench.commands.output import say
from mallocbench.errors import EnvironmentLost, MallocbenchError, NothingMeasured
from mallocbench.store import locks
from mallocbench.store.base import STORE_NAME, StoreDiskFault

if TYPE_CHECKING:
    from rich.console import Console

    from mallocbench.cluster.replays import ClusterReplays
    from mallocbench.commands.progress import ReplayProgress
    from mallocbench.model.metadata import ReplayRecord
    from mallocbench.model.results import RunResult
    from mallocbench.patterns.experiment import PatternSetup
    from mallocbench.store.base import ResultsStore


def _setups(allocator_list: str, extra: tuple[str, ...]) -> list[tuple[str, str, dict[str, str]]]:
    from mallocbench import allocators
    from mallocbench.patterns.experiment import parse_allocator_flag

    specs = allocators.split_list(allocator_list) if allocator_list else []
    parsed = [parse_allocator_flag(spec, "--allocators") for spec in specs]
    parsed += [parse_allocator_flag(spec, "--set") for spec in extra]
    names = [name for name, _, _ in parsed]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise MallocbenchError(f"setup {duplicate!r} is given twice: list each setup once")
    if not parsed:
        raise MallocbenchError("give --allocators, e.g. --allocators glibc,jemalloc")
    return parsed


@click.command("replay", epilog=exitcodes.POLICY_HELP)
@click.argument("trace", type=click.Path(path_type=Path), required=False)
@click.option(
    "--allocators",
    "allocator_list",
    default="glibc",
    show_default=True,
    metavar="A,B,...",
    help="Allocators to replay under, comma-separated; the first is the base. One may "
    "carry knobs as --set does: glibc,jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0 is "
    "two setups (after a knob, a comma starts another setup only before an allocator's "
    "name or path).",
)
@click.option(
    "--set",
    "extra",
    multiple=True,
    metavar="NAME:KNOB=VALUE[,KNOB=VALUE]",
    help="A further setup with knobs, e.g. glibc:MALLOC_ARENA_MAX=2 (repeatable: one setup "
    "each). A comma starts another knob only before KNOB=, so a value keeps its commas: "
    "jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0 is one knob.",
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
@click.option(
    "--resume",
    "resume_id",
    metavar="RUN_ID",
    help="Run the replays run RUN_ID of --out's store is missing (its trace, setups, "
    "repeats and pacing are the stored ones; TRACE only if the trace has moved since).",
)
@cluster_options(
    "Run each repeat of every setup on one benchmark host (setups compared on the same "
    "host) through the Dask scheduler at ADDRESS (see `mallocbench cluster`); every host "
    "reads the trace at its path here (absolute), so it must be there on each: a shared "
    "mount or a copy. Needs --out."
)
def replay(
    trace: Path | None,
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
    resume_id: str | None,
    cluster_address: str | None,
    tls_dir: Path | None,
    insecure: bool,
) -> None:
    """Replay a recorded trace under each allocator and knob setting.

    Per setup: peak RSS beside the ideal (live requested bytes), RSS/live, CPU time and
    calls/s, with 95% intervals over the repeats. With --out the replay is a run like any
    other: `mallocbench report DIR` shows it again, in every format; `--resume RUN_ID`
    runs the replays it is missing, here or on a cluster."""
    from mallocbench.commands.progress import ReplayProgress
    from mallocbench.console import make_console
    from mallocbench.replay import run as replay_runs
    from mallocbench.report.cluster import news_text
    from mallocbench.report.replay import reading_text

    address, security = cluster_access(cluster_address, tls_dir, insecure)
    if out_dir is None and (address is not None or resume_id is not None):
        raise MallocbenchError(
            f"{'--cluster' if resume_id is None else '--resume'} needs --out DIR: the "
            "replays are committed to its store as they end, and a --resume finds them there"
        )
    console = make_console(stderr=True)
    if resume_id is None:
        asked = _Asked(trace, allocator_list, extra, repeats, timing, speed, order)
        setups, trace = asked.setups(), asked.trace_given()
    else:
        _no_changes(click.get_current_context(), resume_id)
    with contextlib.ExitStack() as held:
        _lock_out(held, out_dir, resume_id)
        elsewhere = _elsewhere(held, address, security, out_dir, console)
        store = None
        if resume_id is not None:
            assert out_dir is not None
            store = held.enter_context(_store(out_dir, resume_id))
            stored, setups, trace = _resumed(store, resume_id, trace)
        assert trace is not None
        total = len(setups) * repeats
        if resume_id is not None:
            total = len(replay_runs.pending(_record(stored), setups))
        progress = held.enter_context(ReplayProgress(console, total))
        if elsewhere is not None:
            elsewhere.tell = lambda news: progress.status(news_text(news))
        progress.status(reading_text(trace))
        if resume_id is None:
            result = asked.result(setups, progress, min_effect, expect_server_version)
        else:
            result = _same_trace(stored, trace)
        try:
            if store is None and out_dir is not None:
                store = held.enter_context(_store(out_dir, None))
            replay_runs.replay_run(
                result,
                setups,
                trace,
                store,
                progress.started,
                progress.finished,
                elsewhere=elsewhere,
                resumed=resume_id is not None,
            )
        except StoreDiskFault as exc:
            raise _disk_fault(exc, result, as_json, out_dir) from exc
        except EnvironmentLost:
            _print_measured(result, as_json)
            raise
    _conclude(result, as_json, out_dir, console)


def _lock_out(held: contextlib.ExitStack, out_dir: Path | None, resume_id: str | None) -> None:
    """--out's lock, as `run` takes, for a new replay as for a resume, before the trace
    is read: two would write one directory's reports over each other. A new run's own
    lock comes with its id (replay.run.replay_run). A resume's --out must hold a store
    first: a mistyped one is not created for its lock."""
    if out_dir is None:
        return
    if resume_id is not None and not (out_dir / STORE_NAME).is_file():
        raise MallocbenchError(
            f"no results store in {out_dir}: give the --out the replay run {resume_id} was kept in"
        )
    held.enter_context(locks.lock_directory(out_dir))


def _elsewhere(
    held: contextlib.ExitStack,
    address: str | None,
    security: object,
    out_dir: Path | None,
    console: Console,
) -> ClusterReplays | None:
    """With --cluster, the replays' dispatcher, connected: a cluster without hosts is one
    line before anything is created. A first signal stops the replays under way."""
    if address is None:
        return None
    from mallocbench.cluster.replays import ClusterReplays

    assert out_dir is not None
    stop = held.enter_context(StopOnSignals(console, dropped="replay"))
    hint = _resume_hint(shlex.quote(str(out_dir)))
    return held.enter_context(ClusterReplays(address, security, stop.requested, hint).connected())


def _resume_hint(where: str) -> Callable[[str], str]:
    """Run id -> the command that runs a replay run's missing replays."""
    return lambda run_id: (
        f"mallocbench replay --resume {shlex.quote(run_id)} --out {where} (add --cluster "
        "and --tls to spread them over the hosts again)"
    )


@dataclass(frozen=True)
class _Asked:
    """A new replay as the command line asks for it."""

    trace: Path | None
    allocator_list: str
    extra: tuple[str, ...]
    repeats: int
    timing: str
    speed: float
    order: str

    def setups(self) -> list[PatternSetup]:
        from mallocbench.patterns.experiment import make_setup

        parsed = _setups(self.allocator_list, self.extra)
        return [make_setup("replay", name, spec, knobs) for name, spec, knobs in parsed]

    def trace_given(self) -> Path:
        if self.trace is None:
            raise MallocbenchError("give the TRACE to replay (or --resume RUN_ID with --out)")
        return self.trace

    def result(
        self,
        setups: list[PatternSetup],
        progress: ReplayProgress,
        min_effect: float | None,
        expected: str | None,
    ) -> RunResult:
        """The replay's run, from the trace once it is read and its pace is possible."""
        from mallocbench.replay import run as replay_runs
        from mallocbench.replay import runner
        from mallocbench.replay import trace as tracemod

        info = tracemod.check(self.trace_given())
        runner.replay_timeout(float(info.data.get("duration_s") or 0), self.speed, self.timing)
        progress.read(info)
        return replay_runs.new_result(
            info,
            setups,
            self.timing,
            self.speed,
            self.repeats,
            min_effect,
            info.warnings(expected),
            self.order,
        )


# What a resume takes from the stored run: none of it may be given again.
_STORED = ("allocator_list", "extra", "repeats", "timing", "speed", "order", "min_effect")


def _no_changes(ctx: click.Context, run_id: str) -> None:
    from click.core import ParameterSource

    for param in ctx.command.params:
        if param.name in _STORED and ctx.get_parameter_source(param.name) in (
            ParameterSource.COMMANDLINE,
            ParameterSource.ENVIRONMENT,
        ):
            flag = param.opts[0] if param.opts else param.name
            raise MallocbenchError(
                f"{flag} cannot change replay run {run_id} while resuming it: its stored "
                "setups, repeats and pacing are what it replays; start a new replay to "
                "change them"
            )


def _record(result: RunResult) -> ReplayRecord:
    record = result.metadata.replay
    assert record is not None, "_resumed returns replay runs only"
    return record


@contextlib.contextmanager
def _store(out_dir: Path, resume_id: str | None) -> Iterator[ResultsStore]:
    """--out's store; with --resume, one that exists, the run's lock held while it runs."""
    from mallocbench.store import open_store

    path = out_dir / STORE_NAME
    with contextlib.ExitStack() as held:
        if resume_id is not None:
            held.enter_context(locks.lock_run(path, resume_id))
        store = open_store(path)
        held.callback(store.close)
        yield store


def _resumed(
    store: ResultsStore, run_id: str, trace: Path | None
) -> tuple[RunResult, list[PatternSetup], Path]:
    """The stored replay run, its setups, and its trace (where it is now, when given)."""
    from mallocbench.patterns.experiment import make_setup

    if not store.run_exists(run_id):
        raise MallocbenchError(
            f"{run_id} is no run of {store.label}: give a replay's run id (mallocbench runs "
            f"{store.label})"
        )
    result = store.load_run(run_id, with_samples=False)
    record = result.metadata.replay
    if record is None:
        raise MallocbenchError(
            f"run {run_id} measured servers, it replayed no trace: resume it with "
            f"mallocbench run --resume {run_id}"
        )
    setups = [
        make_setup("replay", str(s["name"]), str(s["allocator"]), s.get("knobs") or {})
        for s in record.setups or []
    ]
    return result, setups, trace or Path(record.trace_path or "")


def _same_trace(result: RunResult, trace: Path) -> RunResult:
    """The stored run, once `trace` is read and found to be the one it replays."""
    from mallocbench.replay import trace as tracemod

    info = tracemod.check(trace)
    stored = _record(result).trace or {}
    for key in ("events", "duration_s"):
        if key in stored and info.data.get(key) != stored[key]:
            raise MallocbenchError(
                f"{trace} is not the trace replay run {result.run_id} replays (its {key} is "
                f"{info.data.get(key)}, the run's {stored[key]}): give that trace's path as "
                "TRACE"
            )
    return result


def _conclude(result: RunResult, as_json: bool, out_dir: Path | None, console: Console) -> None:
    """The replay's tables (or JSON), and its reports under --out."""
    from mallocbench.analysis.run_analysis import analyze
    from mallocbench.report import formats
    from mallocbench.report.replay import nothing_replayed_text
    from mallocbench.report.runs import Wrote

    analysis = analyze(result)
    if out_dir is not None:
        written = formats.write_reports(analysis, out_dir)
    shown = formats.Shown(analysis, str(out_dir) if out_dir else None)
    say(formats.RUN, shown, fmt="json" if as_json else None)
    if out_dir is not None:
        # on standard error: --json keeps standard output for the document alone
        say(formats.WROTE, Wrote([p.name for p in written], out_dir), console=console)
    # Some replays failed is a run with failed cells (named above, exit 0); all of them
    # is no result at all, which a script must not read as one.
    nothing = nothing_replayed_text(_record(result), str(out_dir) if out_dir else None)
    if nothing is not None:
        raise NothingMeasured(nothing)


def _print_measured(result: RunResult, as_json: bool) -> int:
    """The replays measured so far, printed before the line that says why there are no
    more; how many."""
    from mallocbench.analysis.run_analysis import analyze
    from mallocbench.report import formats

    record = result.metadata.replay
    measured = len(record.runs or []) if record is not None else 0
    if measured:
        say(formats.RUN, formats.Shown(analyze(result)), fmt="json" if as_json else None)
    return measured


def _disk_fault(
    exc: StoreDiskFault, result: RunResult, as_json: bool, out_dir: Path | None
) -> MallocbenchError:
    """A full or failing disk under --out: the replays measured so far are printed (the
    last may not have reached the store), and the line says how a replay goes on."""
    measured = _print_measured(result, as_json)
    shown = f": the {measured} replay(s) measured are printed above" if measured else ""
    where = shlex.quote(str(out_dir))
    return exc.going_on(
        f"once the disk has room, run the missing replays with `mallocbench replay --resume "
        f"{result.run_id} --out {where}`{shown}"
    )


commands = [replay]
