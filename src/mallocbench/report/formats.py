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
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from rich.console import Console

from mallocbench.analysis.comparison import Comparison
from mallocbench.analysis.patterns import PatternsAnalysis
from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.errors import MallocbenchError
from mallocbench.files import disk_fault, is_disk_fault, write_text_atomic
from mallocbench.report import calibrate as calibrate_report
from mallocbench.report import comparison, export, markdown, patterns, ratchet, terminal
from mallocbench.report import recommend as recommend_report
from mallocbench.report.recommend import Advice

if TYPE_CHECKING:
    from mallocbench.calibrate.summary import CalibrationSummary
    from mallocbench.memory.massif import ProfileTop
    from mallocbench.memory.report import MemoryReport
    from mallocbench.servers.postgresql.attach import RunningMemory
    from mallocbench.tune.result import TuneDocument

Format = Callable[[RunAnalysis], str]
TERMINAL = "terminal"  # drawn on a console, not returned as text


# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Shown:
    """A run as `report` and `run` show it: its analysis, and where it was read from (an
    output directory, a store) for the commands the terminal report suggests."""

    analysis: RunAnalysis
    source: str | None = None


def _html() -> ModuleType:
    # Imported when a page is drawn: jinja2 and plotly's script are for runs that end,
    # not for `--dry-run` or `--help`.
    from mallocbench.report import html

    return html


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


def _pg_memory() -> ModuleType:
    from mallocbench.report import pg_memory

    return pg_memory


def _profile_terminal(view: ProfileTop, console: Console) -> None:
    from mallocbench.report.memory import render_profile

    render_profile(view, console)


def _tune() -> ModuleType:
    from mallocbench.report import tune

    return tune


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


@dataclass(frozen=True)
class Entry:
    """One format of one kind of result: `text` returns what standard output receives,
    `draw` draws on a console (tables, colour) instead."""

    kind: str
    name: str
    text: Callable[[Any], str] | None = None
    draw: Callable[[Any, Console], None] | None = None


def _runs() -> ModuleType:
    from mallocbench.report import runs

    return runs


REGISTRY: tuple[Entry, ...] = (
    # `report --format`: each is printed as it is.
    Entry(RUN, TERMINAL, draw=lambda r, c: terminal.print_run(r.analysis, c, r.source)),
    Entry(RUN, "markdown", lambda r: markdown.render(r.analysis) + "\n"),
    Entry(RUN, "html", lambda r: _html().render_html(r.analysis)),
    Entry(RUN, "csv", lambda r: export.cells_or_replay_csv(r.analysis)),
    Entry(RUN, "replay-csv", lambda r: export.replay_csv(r.analysis)),
    Entry(RUN, "summary-csv", lambda r: export.summary_csv(r.analysis)),
    Entry(RUN, "relative-csv", lambda r: export.relative_csv(r.analysis)),
    Entry(RUN, "relative-json", lambda r: export.relative_json(r.analysis) + "\n"),
    Entry(RUN, "json", lambda r: export.results_json(r.analysis) + "\n"),
    Entry(RUN, "ratchet-json", lambda r: ratchet.ratchet_json(r.analysis) + "\n"),
    # `compare --format`
    Entry(COMPARE, TERMINAL, draw=comparison.print_comparison),
    Entry(COMPARE, "markdown", lambda c: comparison.comparison_markdown(c) + "\n"),
    Entry(COMPARE, "csv", comparison.comparison_csv),
    Entry(COMPARE, "json", lambda c: comparison.comparison_json(c) + "\n"),
    # `recommend --format`: plain text on a terminal too, unwrapped, so the deployment
    # snippets survive copy and paste.
    Entry(RECOMMEND, TERMINAL, lambda a: recommend_report.advice_text(a) + "\n"),
    Entry(RECOMMEND, "markdown", lambda a: recommend_report.advice_markdown(a) + "\n"),
    Entry(RECOMMEND, "json", lambda a: recommend_report.advice_json(a) + "\n"),
    # `patterns`
    Entry(PATTERNS_KIND, TERMINAL, draw=patterns.print_patterns),
    Entry(PATTERNS_KIND, "markdown", patterns.patterns_markdown),
    Entry(PATTERNS_KIND, "csv", patterns.patterns_csv),
    Entry(PATTERNS_KIND, "json", patterns.patterns_json),
    # `memory`: one account of a running server, taken once.
    Entry(MEMORY_KIND, TERMINAL, draw=_memory_terminal),
    Entry(MEMORY_KIND, "json", _memory_json),
    Entry(PG_MEMORY_KIND, TERMINAL, draw=lambda r, c: _pg_memory().render(r, c)),
    Entry(PG_MEMORY_KIND, "json", lambda r: json.dumps(_pg_memory().to_dict(r), indent=2) + "\n"),
    # `profile`: the heap peak's largest allocation sites.
    Entry(PROFILE_KIND, TERMINAL, draw=_profile_terminal),
    Entry(PROFILE_KIND, "json", lambda v: json.dumps(v.profile.to_dict(v.top), indent=2) + "\n"),
    # `calibrate`: one calibration of this host, its plan and designs.
    Entry(CALIBRATE, TERMINAL, draw=calibrate_report.print_calibration),
    Entry(CALIBRATE, "json", calibrate_report.calibration_json),
    # `tune`: the front per allocator, the choices and how to deploy them.
    Entry(TUNE_KIND, TERMINAL, draw=lambda d, c: _tune().print_terminal(d, c)),
    Entry(TUNE_KIND, "markdown", lambda d: _tune().markdown(d)),
    Entry(TUNE_KIND, "json", lambda d: _tune().tune_json(d)),
    Entry(TUNE_KIND, "html", lambda d: _tune().render_html(d)),
    # `run` around its reports, and `runs`, `steps`.
    Entry(PLAN, TERMINAL, lambda p: _runs().plan_text(p)),
    Entry(RUN_START, TERMINAL, draw=lambda s, c: _runs().print_start(s, c)),
    Entry(BANNER, TERMINAL, lambda s: _runs().banner(s)),
    Entry(DESIGN, TERMINAL, lambda d: _runs().design_text(d)),
    Entry(UNFINISHED, TERMINAL, draw=lambda u, c: _runs().print_unfinished(u, c)),
    Entry(RUN_END, TERMINAL, draw=lambda e, c: _runs().print_end(e, c)),
    Entry(RUN_ABORT, TERMINAL, lambda e: _runs().abort_text(e)),
    Entry(RUN_LIST, TERMINAL, lambda rows: _runs().runs_text(rows)),
    Entry(STEP_LIST, TERMINAL, lambda _: _runs().steps_text()),
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
    "report.md": markdown.render,
    "cells.csv": export.cells_csv,
    "relative.csv": export.relative_csv,
    "summary.csv": export.summary_csv,
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
        write_text_atomic(path, export.results_json(analysis))
        written.append(path)
        for name, render_file in FILES.items():
            if name in CELL_FILES and analysis.replay is not None and not analysis.result.cells:
                continue  # a replay has no cells: replay.csv holds its rows
            target = out_dir / name
            write_text_atomic(target, render_file(analysis))
            written.append(target)
        if analysis.replay is not None:
            write_text_atomic(out_dir / REPLAY_FILE, export.replay_csv(analysis))
            written.append(out_dir / REPLAY_FILE)
        written.append(_html().write_html(analysis, out_dir / "report.html", self_contained))
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
