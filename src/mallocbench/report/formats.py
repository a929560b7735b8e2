"""Every output format of a run, by name, each a function of its `RunAnalysis`; and the
files one run's reports are written to.

Commands analyse once (`analysis.run_analysis.analyze`) and pick a format here; no
format analyses again, so --min-effect and --reference reach every file alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from rich.console import Console

from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.errors import MallocbenchError
from mallocbench.files import disk_fault, is_disk_fault, write_text_atomic
from mallocbench.report import export, markdown, ratchet, terminal

Format = Callable[[RunAnalysis], str]

# Text formats, as `report --format` names them; each is printed as it is.
FORMATS: dict[str, Format] = {
    "markdown": lambda a: markdown.render(a) + "\n",
    "html": lambda a: _html().render_html(a),
    "csv": export.cells_csv,
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


def write_reports(analysis: RunAnalysis, out_dir: Path, self_contained: bool = False) -> list[Path]:
    """results.json, report.md and CSVs next to each other in the output directory.

    Only these files are written: a directory that refuses them loses no measurement,
    which the store already holds, so it is one line naming the directory.
    """
    written: list[Path] = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "results.json"
        write_text_atomic(path, export.results_json(analysis))
        written.append(path)
        for name, render_file in FILES.items():
            target = out_dir / name
            write_text_atomic(target, render_file(analysis))
            written.append(target)
        written.append(_html().write_html(analysis, out_dir / "report.html", self_contained))
    except OSError as exc:
        if is_disk_fault(exc):
            raise disk_fault(exc, f"the reports into {out_dir}") from exc
        culprit = f" ({exc.filename})" if exc.filename and exc.filename != str(out_dir) else ""
        raise MallocbenchError(
            f"cannot write the reports into {out_dir}: {exc.strerror}{culprit}: give a "
            "writable directory with --out; the results store is not affected"
        ) from exc
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
