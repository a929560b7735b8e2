"""Every output format, by name, each a function of one analysed value: a run's
`RunAnalysis`, a `Comparison`, a recommendation; and the files one run's reports are
written to.

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
from typing import TYPE_CHECKING, Generic, TypeVar

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

Format = Callable[[RunAnalysis], str]

# Text formats, as `report --format` names them; each is printed as it is.
FORMATS: dict[str, Format] = {
    "markdown": lambda a: markdown.render(a) + "\n",
    "html": lambda a: _html().render_html(a),
    "csv": export.cells_or_replay_csv,
    "replay-csv": export.replay_csv,
    "summary-csv": export.summary_csv,
    "relative-csv": export.relative_csv,
    "relative-json": lambda a: export.relative_json(a) + "\n",
    "json": lambda a: export.results_json(a) + "\n",
    "ratchet-json": lambda a: ratchet.ratchet_json(a) + "\n",
}
TERMINAL = "terminal"  # drawn on a console, not returned as text
NAMES = [TERMINAL, *FORMATS]

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


def _html() -> ModuleType:
    # Imported when a page is drawn: jinja2 and plotly's script are for runs that end,
    # not for `--dry-run` or `--help`.
    from mallocbench.report import html

    return html


def render(name: str, analysis: RunAnalysis) -> str:
    """The format called `name` (one of NAMES but terminal) of the analysed run."""
    return FORMATS[name](analysis)


def print_terminal(analysis: RunAnalysis, console: Console, source: str | None) -> None:
    terminal.print_run(analysis, console, source)


T = TypeVar("T")


@dataclass(frozen=True)
class Outputs(Generic[T]):
    """The formats of one kind of analysed value, by the name `--format` gives them:
    `texts` return what standard output receives; `draw`, when given, is the terminal
    format, drawn on a console (tables, colour) rather than returned."""

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


COMPARISON: Outputs[Comparison] = Outputs(
    {
        "markdown": lambda c: comparison.comparison_markdown(c) + "\n",
        "csv": comparison.comparison_csv,
        "json": lambda c: comparison.comparison_json(c) + "\n",
    },
    comparison.print_comparison,
)

# Plain text on a terminal too, unwrapped: the deployment snippets must survive copy and paste.
RECOMMENDATION: Outputs[Advice] = Outputs(
    {
        TERMINAL: lambda a: recommend_report.advice_text(a) + "\n",
        "markdown": lambda a: recommend_report.advice_markdown(a) + "\n",
        "json": lambda a: recommend_report.advice_json(a) + "\n",
    }
)


PATTERNS: Outputs[PatternsAnalysis] = Outputs(
    {
        "markdown": patterns.patterns_markdown,
        "csv": patterns.patterns_csv,
        "json": patterns.patterns_json,
    },
    patterns.print_patterns,
)

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


def _memory_terminal(report: MemoryReport, console: Console) -> None:
    # Imported when drawn: the memory account's tables are for `memory` alone.
    from mallocbench.report.memory import render as render_memory

    render_memory(report, console)
    if report.breakdown is None and report.server is not None:
        # The renderer shows the gaps among the breakdown's notes; without a breakdown
        # (the process was not inspected) they would go unsaid. Plain lines, unwrapped.
        for gap in report.server.gaps:
            console.out(f"note: {gap.text}", highlight=False)


# `memory`: one account of a running server, taken once.
MEMORY: Outputs[MemoryReport] = Outputs(
    {"json": lambda r: json.dumps(r.to_dict(), indent=2, default=str) + "\n"},
    _memory_terminal,
)


def _profile_terminal(view: ProfileTop, console: Console) -> None:
    from mallocbench.report.memory import render_profile

    render_profile(view, console)


# `profile`: the heap peak's largest allocation sites.
PROFILE: Outputs[ProfileTop] = Outputs(
    {"json": lambda v: json.dumps(v.profile.to_dict(v.top), indent=2) + "\n"},
    _profile_terminal,
)


# `calibrate`: one calibration of this host, its plan and designs.
CALIBRATION: Outputs[CalibrationSummary] = Outputs(
    {"json": calibrate_report.calibration_json}, calibrate_report.print_calibration
)


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
