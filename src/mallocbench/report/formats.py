"""Every output, in one registry: each entry names the kind of result it renders (a
run, a comparison, a recommendation, a pattern run, a memory account, a heap profile,
a calibration, a tune, and what `run` says around its reports) and the format it is,
as `--format` names it. Commands hand a value over and print only what this gives them.

Commands analyse once (`analysis.run_analysis.analyze`, `analysis.comparison.compare`,
`analysis.recommend.recommend`) and pick a format here; no format analyses again, so
--min-effect and --reference reach every file alike.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from mallocbench.errors import MallocbenchError
from mallocbench.files import disk_fault, is_disk_fault, write_text_atomic

# The renderers are imported when an entry is used (`_in`): a command that says a line
# (`record`'s start, `allocators`) does not load numpy and the analysis to say it.
if TYPE_CHECKING:
    from rich.console import Console

    from mallocbench.analysis.comparison import Comparison
    from mallocbench.analysis.patterns import PatternsAnalysis
    from mallocbench.analysis.run_analysis import RunAnalysis
    from mallocbench.calibrate.summary import CalibrationSummary
    from mallocbench.memory.massif import ProfileTop
    from mallocbench.memory.report import MemoryReport
    from mallocbench.report.recommend import Advice
    from mallocbench.servers.postgresql.attach import RunningMemory
    from mallocbench.tune.result import TuneDocument

Format = Callable[["RunAnalysis"], str]
TERMINAL = "terminal"  # drawn on a console, not returned as text


def _in(module: str, name: str) -> Callable[..., Any]:
    """report.`module`.`name`, imported when first called: most commands use a few."""

    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(f"mallocbench.report.{module}"), name)(*args)

    return call


def _of_run(name: str, module: str = "export", tail: str = "") -> Callable[[Shown], str]:
    """report.`module`.`name` of a shown run's analysis, and `tail` after it."""
    render = _in(module, name)
    return lambda r: render(r.analysis) + tail


def _line(module: str, name: str) -> Callable[[Any], str]:
    """report.`module`.`name`'s text and a line break after it."""
    render = _in(module, name)
    return lambda v: render(v) + "\n"


# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Shown:
    """A run as `report` and `run` show it: its analysis, and where it was read from (an
    output directory, a store) for the commands the terminal report suggests."""

    analysis: RunAnalysis
    source: str | None = None


def _memory_terminal(report: MemoryReport, console: Console) -> None:
    # Imported when drawn: the memory account's tables are for `memory` alone.
    from mallocbench.report.memory import gap_text
    from mallocbench.report.memory import render as render_memory

    render_memory(report, console)
    if report.breakdown is None and report.server is not None:
        # The renderer shows the gaps among the breakdown's notes; without a breakdown
        # (the process was not inspected) they would go unsaid. Plain lines, unwrapped.
        for gap in report.server.gaps:
            console.out(f"note: {gap_text(gap)}", highlight=False)


def _memory_json(report: MemoryReport) -> str:
    from mallocbench.report.memory import memory_json

    return json.dumps(memory_json(report), indent=2, default=str) + "\n"


def _profile_terminal(view: ProfileTop, console: Console) -> None:
    from mallocbench.report.memory import render_profile

    render_profile(view, console)


# The kinds of result a command hands over.
RUN = "run"  # a run's analysis, as Shown
COMPARE = "compare"
RECOMMEND = "recommend"
PATTERNS_KIND = "patterns"
MEMORY_KIND = "memory"
PG_MEMORY_KIND = "pg-memory"  # `memory --pid` on a PostgreSQL server
PROFILE_KIND = "profile"
CALIBRATE = "calibrate"
TUNE_KIND = "tune"
# What `run` and its neighbours say around the reports (report.runs' values).
PLAN = "plan"  # a dry run's plan
RUN_END = "run-end"  # how a run ended: the files, the notes, an interruption
RUN_ABORT = "run-abort"  # what stopped a run, for standard error
RUN_START = "run-start"  # a run about to start: the long-run warning
BANNER = "banner"  # its line above the progress display
DESIGN = "design"  # design = "auto"'s choice for this run
UNFINISHED = "unfinished"  # a stored run `report` shows that is not finished
RUN_LIST = "runs"  # the runs in a store
STEP_LIST = "steps"  # the step catalogue
# What `record` says (report.record's values).
RECORD_START = "record-start"  # a window about to start
RECORD_KEPT = "record-kept"  # the trace at --out, its size and how it closed
RECORD_EARLY = "record-early"  # why a server's window ended before its time
RECORD_UNDESCRIBED = "record-undescribed"  # the server's load went unrecorded
RECORD_INTERRUPTED = "record-interrupted"  # a signal's number
RECORD_NOT_AT_OUT = "record-not-at-out"  # where the trace is when --out refused it
RECORD_PROGRAM = "record-program"  # what became of a program record started
RECORD_FORM = "record-form"  # --print-dropin
RECORD_REMOVED = "record-removed"  # --remove-dropin
# What commands say around their work (each family's report module words it).
STOPPING = "stopping"  # a first Ctrl-C or SIGTERM's answer (report.runs.Stopping)
PLAIN = "plain"  # a line another package worded, as it is
ASIDE = "aside"  # ... dimmed, beside the progress
WROTE = "wrote"  # the files written in a directory (report.runs.Wrote)
JSON = "json"  # a document (a schema, the allocators' list) as indented JSON
SOAK = "soak"  # a soak's tables, its growth and its ratchets
SOAK_PLAN = "soak-plan"
SOAK_END = "soak-end"
SOAK_ABORT = "soak-abort"
ADVISE = "advise"  # an advise's outcome (report.advise.Advised)
ADVISE_OVERRUN = "advise-overrun"
ADVISE_STOPPED = "advise-stopped"
ADVISE_REMEASURING = "advise-remeasuring"
TUNE_KEPT = "tune-kept"  # where a stopped search's trials are
TUNE_WROTE = "tune-wrote"
CLUSTER_SCHEDULER = "cluster-scheduler"
CLUSTER_DASHBOARD = "cluster-dashboard"
CLUSTER_WORKER = "cluster-worker"
CLUSTER_INSECURE = "cluster-insecure"
CLUSTER_INIT = "cluster-init"
IN_FORCE = "in-force"  # `check`: the allocator and settings in force
BACKEND_ASKED = "backend-asked"  # `check` on a PostgreSQL backend reads its postmaster
CHECKED = "checked"  # `check --against`: the window against the recorded one
DOCTOR = "doctor"
INSTALLED = "installed"  # where install-shim put the shim
STORE_COPY = "store-copy"
STORE_INFO = "store-info"
ALLOCATORS = "allocators"
KNOBS = "knobs"
MEMORY_FOUND = "memory-found"  # which server `memory` found, and how
MEMORY_SAMPLE = "memory-sample"  # a --watch sample
MEMORY_WATCHING = "memory-watching"
MEMORY_WATCHED = "memory-watched"
PROFILE_PROGRESS = "profile-progress"
COMPARE_DIFFERS = "compare-differs"
COMPARE_SAME_RUN = "compare-same-run"
COMPARE_WROTE = "compare-wrote"
COMPARE_GATE = "compare-gate"  # --fail-on's findings
PATTERNS_PLAN = "patterns-plan"
PATTERNS_FILES = "patterns-files"
CALIBRATING = "calibrating"
CALIBRATION_KEPT = "calibration-kept"
CALIBRATION_WROTE = "calibration-wrote"
RECOMMEND_DROPIN = "recommend-dropin"
# The progress displays' lines (report.progress).
PROGRESS_LINE = "progress-line"  # a banner
RESUMING = "resuming"
CELL_DONE = "cell-done"
BLOCK = "block"
TRACE_READ = "trace-read"
REPLAY_DONE = "replay-done"


@dataclass(frozen=True)
class Entry:
    """One format of one kind of result: `text` returns what standard output receives,
    `draw` draws on a console (tables, colour) instead."""

    kind: str
    name: str
    text: Callable[[Any], str] | None = None
    draw: Callable[[Any, Console], None] | None = None


REGISTRY: tuple[Entry, ...] = (
    # `report --format`: each is printed as it is.
    Entry(RUN, TERMINAL, draw=lambda r, c: _in("terminal", "print_run")(r.analysis, c, r.source)),
    Entry(RUN, "markdown", _of_run("render", "markdown", "\n")),
    Entry(RUN, "html", _of_run("render_html", "html")),
    Entry(RUN, "csv", _of_run("cells_or_replay_csv")),
    Entry(RUN, "replay-csv", _of_run("replay_csv")),
    Entry(RUN, "summary-csv", _of_run("summary_csv")),
    Entry(RUN, "relative-csv", _of_run("relative_csv")),
    Entry(RUN, "relative-json", _of_run("relative_json", tail="\n")),
    Entry(RUN, "json", _of_run("results_json", tail="\n")),
    Entry(RUN, "ratchet-json", _of_run("ratchet_json", "ratchet", "\n")),
    # `compare --format`
    Entry(COMPARE, TERMINAL, draw=_in("comparison", "print_comparison")),
    Entry(COMPARE, "markdown", _line("comparison", "comparison_markdown")),
    Entry(COMPARE, "csv", _in("comparison", "comparison_csv")),
    Entry(COMPARE, "json", _line("comparison", "comparison_json")),
    # `recommend --format`: plain text on a terminal too, unwrapped, so the deployment
    # snippets survive copy and paste.
    Entry(RECOMMEND, TERMINAL, _line("recommend", "advice_text")),
    Entry(RECOMMEND, "markdown", _line("recommend", "advice_markdown")),
    Entry(RECOMMEND, "json", _line("recommend", "advice_json")),
    # `patterns`
    Entry(PATTERNS_KIND, TERMINAL, draw=_in("patterns", "print_patterns")),
    Entry(PATTERNS_KIND, "markdown", _in("patterns", "patterns_markdown")),
    Entry(PATTERNS_KIND, "csv", _in("patterns", "patterns_csv")),
    Entry(PATTERNS_KIND, "json", _in("patterns", "patterns_json")),
    # `memory`: one account of a running server, taken once.
    Entry(MEMORY_KIND, TERMINAL, draw=_memory_terminal),
    Entry(MEMORY_KIND, "json", _memory_json),
    Entry(PG_MEMORY_KIND, TERMINAL, draw=_in("pg_memory", "render")),
    Entry(PG_MEMORY_KIND, "json", _in("pg_memory", "to_json")),
    # `profile`: the heap peak's largest allocation sites.
    Entry(PROFILE_KIND, TERMINAL, draw=_profile_terminal),
    Entry(PROFILE_KIND, "json", lambda v: json.dumps(v.profile.to_dict(v.top), indent=2) + "\n"),
    # `calibrate`: one calibration of this host, its plan and designs.
    Entry(CALIBRATE, TERMINAL, draw=_in("calibrate", "print_calibration")),
    Entry(CALIBRATE, "json", _in("calibrate", "calibration_json")),
    # `tune`: the front per allocator, the choices and how to deploy them.
    Entry(TUNE_KIND, TERMINAL, draw=_in("tune", "print_terminal")),
    Entry(TUNE_KIND, "markdown", _in("tune", "markdown")),
    Entry(TUNE_KIND, "json", _in("tune", "tune_json")),
    Entry(TUNE_KIND, "html", _in("tune", "render_html")),
    # `run` around its reports, and `runs`, `steps`.
    Entry(PLAN, TERMINAL, _in("runs", "plan_text")),
    Entry(RUN_START, TERMINAL, draw=_in("runs", "print_start")),
    Entry(BANNER, TERMINAL, _in("runs", "banner")),
    Entry(DESIGN, TERMINAL, _in("runs", "design_text")),
    Entry(UNFINISHED, TERMINAL, draw=_in("runs", "print_unfinished")),
    Entry(RUN_END, TERMINAL, draw=_in("runs", "print_end")),
    Entry(RUN_ABORT, TERMINAL, _in("runs", "abort_text")),
    Entry(RUN_LIST, TERMINAL, _in("runs", "runs_text")),
    Entry(STEP_LIST, TERMINAL, lambda _: _in("runs", "steps_text")()),
    # `record`
    Entry(RECORD_START, TERMINAL, _in("record", "started_text")),
    Entry(RECORD_KEPT, TERMINAL, _in("record", "kept_text")),
    Entry(RECORD_EARLY, TERMINAL, _in("record", "early_text")),
    Entry(RECORD_UNDESCRIBED, TERMINAL, _in("record", "undescribed_text")),
    Entry(RECORD_INTERRUPTED, TERMINAL, _in("record", "interrupted_text")),
    Entry(RECORD_NOT_AT_OUT, TERMINAL, _in("record", "not_at_out_text")),
    Entry(RECORD_PROGRAM, TERMINAL, _in("record", "program_text")),
    Entry(RECORD_FORM, TERMINAL, _in("record", "form_text")),
    Entry(RECORD_REMOVED, TERMINAL, _in("record", "removed_text")),
    # What commands say around their work.
    Entry(STOPPING, TERMINAL, draw=_in("runs", "print_stopping")),
    Entry(PLAIN, TERMINAL, draw=_in("runs", "print_plain")),
    Entry(ASIDE, TERMINAL, draw=_in("runs", "print_aside")),
    Entry(WROTE, TERMINAL, draw=_in("runs", "print_wrote")),
    Entry(JSON, TERMINAL, lambda doc: json.dumps(doc, indent=2) + "\n"),
    Entry(SOAK, TERMINAL, draw=_in("ratchet", "print_soak_summary")),
    Entry(SOAK_PLAN, TERMINAL, _in("soak", "plan_text")),
    Entry(SOAK_END, TERMINAL, draw=_in("soak", "print_end")),
    Entry(SOAK_ABORT, TERMINAL, _in("soak", "abort_text")),
    Entry(ADVISE, TERMINAL, _in("advise", "advised_text")),
    Entry(ADVISE, "json", _in("advise", "advised_json")),
    Entry(ADVISE_OVERRUN, TERMINAL, draw=_in("advise", "print_overrun")),
    Entry(ADVISE_STOPPED, TERMINAL, _in("advise", "stopped_text")),
    Entry(ADVISE_REMEASURING, TERMINAL, draw=_in("advise", "print_remeasuring")),
    Entry(TUNE_KEPT, TERMINAL, _in("tune", "kept_text")),
    Entry(TUNE_WROTE, TERMINAL, draw=_in("tune", "print_wrote")),
    Entry(CLUSTER_SCHEDULER, TERMINAL, _in("cluster", "scheduler_text")),
    Entry(CLUSTER_DASHBOARD, TERMINAL, _in("cluster", "dashboard_text")),
    Entry(CLUSTER_WORKER, TERMINAL, _in("cluster", "worker_text")),
    Entry(CLUSTER_INSECURE, TERMINAL, _in("cluster", "insecure_text")),
    Entry(CLUSTER_INIT, TERMINAL, _in("cluster", "certificates_text")),
    Entry(IN_FORCE, TERMINAL, _in("held", "in_force_text")),
    Entry(IN_FORCE, "json", _in("held", "in_force_json")),
    Entry(BACKEND_ASKED, TERMINAL, _in("held", "backend_asked_text")),
    Entry(CHECKED, TERMINAL, _in("held", "checked_text")),
    Entry(CHECKED, "json", _in("held", "checked_json")),
    Entry(DOCTOR, TERMINAL, _in("doctor", "checks_text")),
    Entry(DOCTOR, "json", _in("doctor", "checks_json")),
    Entry(INSTALLED, TERMINAL, _in("doctor", "installed_text")),
    Entry(STORE_COPY, TERMINAL, _in("stores", "copy_text")),
    Entry(STORE_INFO, TERMINAL, _in("stores", "info_text")),
    Entry(ALLOCATORS, TERMINAL, draw=_in("terminal", "print_allocators")),
    Entry(KNOBS, TERMINAL, draw=_in("terminal", "print_knobs")),
    Entry(MEMORY_FOUND, TERMINAL, _in("memory", "found_text")),
    Entry(MEMORY_SAMPLE, TERMINAL, _in("memory", "sample_text")),
    Entry(MEMORY_SAMPLE, "json", _in("memory", "sample_json")),
    Entry(MEMORY_WATCHING, TERMINAL, _in("memory", "watching_text")),
    Entry(MEMORY_WATCHED, TERMINAL, _in("memory", "watched_text")),
    Entry(PROFILE_PROGRESS, TERMINAL, _in("memory", "progress_text")),
    Entry(COMPARE_DIFFERS, TERMINAL, _in("comparison", "differ_text")),
    Entry(COMPARE_SAME_RUN, TERMINAL, _in("comparison", "same_run_text")),
    Entry(COMPARE_WROTE, TERMINAL, draw=_in("comparison", "print_wrote")),
    Entry(COMPARE_GATE, TERMINAL, _in("comparison", "gate_text")),
    Entry(PATTERNS_PLAN, TERMINAL, draw=_in("patterns", "print_plan")),
    Entry(PATTERNS_FILES, TERMINAL, draw=_in("patterns", "print_files")),
    Entry(CALIBRATING, TERMINAL, draw=_in("calibrate", "print_calibrating")),
    Entry(CALIBRATION_KEPT, TERMINAL, draw=_in("calibrate", "print_kept")),
    Entry(CALIBRATION_WROTE, TERMINAL, draw=_in("calibrate", "print_wrote")),
    Entry(RECOMMEND_DROPIN, TERMINAL, draw=_in("recommend", "print_dropin")),
    Entry(PROGRESS_LINE, TERMINAL, draw=_in("progress", "print_line")),
    Entry(RESUMING, TERMINAL, draw=_in("progress", "print_resuming")),
    Entry(CELL_DONE, TERMINAL, draw=_in("progress", "print_cell_done")),
    Entry(BLOCK, TERMINAL, draw=_in("progress", "print_block")),
    Entry(TRACE_READ, TERMINAL, draw=_in("progress", "print_trace_read")),
    Entry(REPLAY_DONE, TERMINAL, draw=_in("progress", "print_replay_done")),
)

T = TypeVar("T")


@dataclass(frozen=True)
class Outputs(Generic[T]):
    """The formats of one kind of result, by the name `--format` gives them: `texts`
    return what standard output receives; `draw`, when given, is the terminal format,
    drawn on a console (tables, colour) rather than returned."""

    texts: Mapping[str, Callable[[T], str]]
    draw: Callable[[T, Console], None] | None = None

    @property
    def names(self) -> list[str]:
        return ([TERMINAL] if self.draw is not None else []) + list(self.texts)

    def render(self, name: str, value: T) -> str:
        return self.texts[name](value)

    def show(self, name: str, value: T, console: Console) -> str | None:
        """Format `name` of `value`: drawn on `console`, or returned for standard output."""
        if name in self.texts:
            return self.render(name, value)
        if self.draw is None or name != TERMINAL:
            raise KeyError(name)
        self.draw(value, console)
        return None


def outputs(kind: str) -> Outputs[Any]:
    """The registry's entries for one kind of result."""
    entries = [e for e in REGISTRY if e.kind == kind]
    if not entries:
        raise KeyError(kind)
    draw = next((e.draw for e in entries if e.draw is not None), None)
    return Outputs({e.name: e.text for e in entries if e.text is not None}, draw)


RUN_OUTPUTS: Outputs[Shown] = outputs(RUN)
COMPARISON: Outputs[Comparison] = outputs(COMPARE)
RECOMMENDATION: Outputs[Advice] = outputs(RECOMMEND)
PATTERNS: Outputs[PatternsAnalysis] = outputs(PATTERNS_KIND)
MEMORY: Outputs[MemoryReport] = outputs(MEMORY_KIND)
PG_MEMORY: Outputs[RunningMemory] = outputs(PG_MEMORY_KIND)
PROFILE: Outputs[ProfileTop] = outputs(PROFILE_KIND)
CALIBRATION: Outputs[CalibrationSummary] = outputs(CALIBRATE)
TUNE: Outputs[TuneDocument] = outputs(TUNE_KIND)
NAMES = RUN_OUTPUTS.names  # `report --format`'s choices


def render(name: str, analysis: RunAnalysis) -> str:
    """The format called `name` (one of NAMES but terminal) of the analysed run."""
    return RUN_OUTPUTS.render(name, Shown(analysis))


def print_terminal(analysis: RunAnalysis, console: Console, source: str | None) -> None:
    RUN_OUTPUTS.show(TERMINAL, Shown(analysis, source), console)


# The files `write_reports` puts in an output directory, and their formats.
FILES: dict[str, Format] = {
    "report.md": _in("markdown", "render"),
    "cells.csv": _in("export", "cells_csv"),
    "relative.csv": _in("export", "relative_csv"),
    "summary.csv": _in("export", "summary_csv"),
}
# ... and a replay run's setups, beside them when the run is a replay, in place of the
# files of cells it has none of (each would be a header and nothing under it).
REPLAY_FILE = "replay.csv"
CELL_FILES = frozenset({"cells.csv", "relative.csv", "summary.csv"})


# The files `write_pattern_reports` puts in a pattern run's output directory.
PATTERN_FILES = {"patterns.json": "json", "patterns.csv": "csv", "patterns.md": "markdown"}


def write_pattern_reports(analysis: PatternsAnalysis, out_dir: Path) -> list[Path]:
    """A pattern run's files; the store already holds every result, so a directory
    that refuses them costs only these (`patterns --report` writes them again)."""
    written = []
    with _reports_refused_in_one_line(out_dir, "`patterns --report --out DIR` writes them"):
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, fmt in PATTERN_FILES.items():
            write_text_atomic(out_dir / name, PATTERNS.render(fmt, analysis))
            written.append(out_dir / name)
    return written


@contextlib.contextmanager
def _reports_refused_in_one_line(out_dir: Path, rewrite: str) -> Iterator[None]:
    """A directory that refuses report files costs only those files: the store holds
    every measurement, so the refusal is one line naming the directory and the way back."""
    try:
        yield
    except OSError as exc:
        if is_disk_fault(exc):
            raise disk_fault(exc, f"the reports into {out_dir}") from exc
        # os.replace names its temporary source first; the user knows the target.
        name = exc.filename2 or exc.filename
        culprit = f" ({name})" if name and name != str(out_dir) else ""
        raise MallocbenchError(
            f"cannot write the reports into {out_dir}: {exc.strerror}{culprit}: give a "
            f"writable directory with --out ({rewrite}); the results store is not affected"
        ) from exc


def write_reports(analysis: RunAnalysis, out_dir: Path, self_contained: bool = False) -> list[Path]:
    """results.json, report.md and CSVs next to each other in the output directory.

    Only these files are written: a directory that refuses them loses no measurement,
    which the store already holds, so it is one line naming the directory.
    """
    written: list[Path] = []
    with _reports_refused_in_one_line(out_dir, "`mallocbench report STORE --out DIR` writes them"):
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "results.json"
        write_text_atomic(path, _in("export", "results_json")(analysis))
        written.append(path)
        for name, render_file in FILES.items():
            if name in CELL_FILES and analysis.replay is not None and not analysis.result.cells:
                continue  # a replay has no cells: replay.csv holds its rows
            target = out_dir / name
            write_text_atomic(target, render_file(analysis))
            written.append(target)
        if analysis.replay is not None:
            write_text_atomic(out_dir / REPLAY_FILE, _in("export", "replay_csv")(analysis))
            written.append(out_dir / REPLAY_FILE)
        written.append(_in("html", "write_html")(analysis, out_dir / "report.html", self_contained))
    return written


def write_run_reports(
    analysis: RunAnalysis, out_dir: Path, aborted: str | None, notes: list[str]
) -> list[Path]:
    """The reports of a run that ended; when they cannot be written after an abort, what
    stopped the run (often the same full disk) stays the error to read, and this
    becomes one of its `notes`: `mallocbench report --out` writes them later."""
    try:
        return write_reports(analysis, out_dir)
    except MallocbenchError as exc:
        if not aborted or aborted == "interrupted":
            raise
        notes.append(f"the reports were not written: {exc}")
        return []
