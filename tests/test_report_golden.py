"""Every report format, rendered from the stored fixtures, is byte-for-byte what it was.

The files under fixtures/golden/ were written by the code before the reports were
restructured (analyse once, render many); a refactor that changes one byte of any
report fails here. Regenerate them only for a change meant to alter a report:

    MB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_report_golden.py

Normalised before comparing, and only this:
- the HTML pages name plotly.js by a fixed file name instead of embedding its 4.8 MB
  (`plotly_src`), so nothing in them depends on the installed plotly version;
- the terminal reports are drawn on a fixed 120-column console, once without colour and
  once with the 16 standard colours (*.ansi), so the user's terminal does not enter them.
"""

from __future__ import annotations

import copy
import io
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mallocbench.analysis.comparison import Comparison, compare
from mallocbench.analysis.patterns import analyze_patterns
from mallocbench.analysis.recommend import recommend
from mallocbench.analysis.run_analysis import RunAnalysis, analyze
from mallocbench.model.patterns import PatternRun
from mallocbench.model.results import RunResult
from mallocbench.report import export, formats, html
from mallocbench.report import recommend as rec_report
from mallocbench.report import soak as soak_report

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "golden"
UPDATE = os.environ.get("MB_UPDATE_GOLDEN") == "1"
PLOTLY = "plotly-golden.min.js"

RUNS = {
    "small": "results-small.json",
    "aa": "results-aa.json",
    "soak": "results-soak.json",
    "replay": "results-replay.json",  # a replay of a recorded trace: a run without cells
}


def load(name: str) -> RunResult:
    return RunResult.from_dict(json.loads((FIXTURES / RUNS[name]).read_text()))


def console_text(draw: Callable[[Console], object], colour: bool = False) -> str:
    out = io.StringIO()
    if colour:
        console = Console(file=out, width=120, color_system="standard", force_terminal=True)
    else:
        console = Console(file=out, width=120, color_system=None, no_color=True)
    draw(console)
    return out.getvalue()


def run_reports(name: str, analysis: RunAnalysis) -> dict[str, Callable[[], str]]:
    """Every format of one analysed run, as `report --format` prints it (the golden
    files predate the registry: they end as the old per-format calls ended)."""
    out: dict[str, Callable[[], str]] = {
        f"{name}.terminal.txt": lambda: console_text(
            lambda c: formats.print_terminal(analysis, c, "out")
        ),
        f"{name}.terminal.ansi": lambda: console_text(
            lambda c: formats.print_terminal(analysis, c, "out"), colour=True
        ),
        f"{name}.report.html": lambda: html.render_html(analysis, plotly_src=PLOTLY),
        f"{name}.results-nosamples.json": lambda: export.results_json(analysis, with_samples=False),
    }
    golden_names = {
        "markdown": "report.md",
        "csv": "cells.csv",
        "replay-csv": "replay.csv",
        "summary-csv": "summary.csv",
        "relative-csv": "relative.csv",
        "relative-json": "relative.json",
        "json": "results.json",
    }
    for fmt, file in golden_names.items():
        # `report --format` adds the newline the older print added after these three.
        trim = fmt in ("markdown", "relative-json", "json")
        out[f"{name}.{file}"] = _rendered(fmt, analysis, trim)
    return out


def _rendered(fmt: str, analysis: RunAnalysis, trim: bool) -> Callable[[], str]:
    def render() -> str:
        text = formats.render(fmt, analysis)
        return text[:-1] if trim else text

    return render


def _comparison_files(label: str, cmp: Comparison) -> dict[str, Callable[[], str]]:
    """As `compare --format` prints them, through the registry (the golden files
    predate it: they end as the old calls ended, one newline fewer)."""

    def terminal() -> str:
        return console_text(lambda con: formats.COMPARISON.show("terminal", cmp, con))

    def rendered(name: str, trim: bool) -> Callable[[], str]:
        return lambda: formats.COMPARISON.render(name, cmp)[: -1 if trim else None]

    return {
        f"{label}.terminal.txt": terminal,
        f"{label}.md": rendered("markdown", True),
        f"{label}.csv": rendered("csv", False),
        f"{label}.json": rendered("json", True),
        f"{label}.html": lambda: html.render_compare_html(cmp, PLOTLY),
    }


def comparison_reports() -> dict[str, Callable[[], str]]:
    a = load("small")
    # Run B: the same run with je 5% faster and glibc's p99 10% worse, so the
    # comparison has changes to colour and word.
    b = copy.deepcopy(a)
    b.run_id = "small-b"
    for cell in b.cells:
        if cell.setup == "je" and cell.qps is not None:
            cell.qps *= 1.05
        elif cell.p99_ms is not None:
            cell.p99_ms *= 1.10
    out: dict[str, Callable[[], str]] = {}
    for label, cmp in (("compare", compare(a, b)), ("compare-2pct", compare(a, b, 0.02))):
        out |= _comparison_files(label, cmp)
    return out


def _registry(outputs: formats.Outputs[Any], name: str, value: Any) -> Callable[[], str]:
    """`recommend --format` prints these with the newline the golden files lack."""
    return lambda: outputs.render(name, value).removesuffix("\n")


def recommend_reports() -> dict[str, Callable[[], str]]:
    out: dict[str, Callable[[], str]] = {}
    for name in ("small", "aa"):
        for priorities in (("throughput", "p99", "rss"), ("rss", "throughput")):
            for min_effect in (None, 0.0):
                rec = recommend(load(name), priorities, min_effect)
                label = f"recommend.{name}.{'-'.join(priorities)}.{min_effect}"
                advice = rec_report.Advice(rec)
                out[f"{label}.txt"] = _registry(formats.RECOMMENDATION, "terminal", advice)
                out[f"{label}.json"] = _registry(formats.RECOMMENDATION, "json", advice)
    return out


def soak_reports() -> dict[str, Callable[[], str]]:
    run = analyze(load("soak"))
    return {
        "soak.soak-terminal.txt": lambda: console_text(lambda c: soak_report.print_soak(run, c)),
        "soak.soak.md": lambda: "\n".join(soak_report.markdown_lines(run)),
    }


def patterns_reports() -> dict[str, Callable[[], str]]:
    """A pattern run's terminal tables, and the files `patterns` writes, as written."""
    run = PatternRun.from_dict(json.loads((FIXTURES / "patterns-run.json").read_text()))
    analysis = analyze_patterns(run)

    def terminal(colour: bool) -> Callable[[], str]:
        draw = lambda c: formats.PATTERNS.show("terminal", analysis, c)  # noqa: E731
        return lambda: console_text(draw, colour)

    def written(name: str) -> Callable[[], str]:
        def read() -> str:
            with tempfile.TemporaryDirectory() as out:
                formats.write_pattern_reports(analysis, Path(out))
                return (Path(out) / name).read_bytes().decode()

        return read

    return {
        "patterns.terminal.txt": terminal(False),
        "patterns.terminal.ansi": terminal(True),
        **{name: written(name) for name in formats.PATTERN_FILES},
    }


def all_reports() -> dict[str, Callable[[], str]]:
    reports: dict[str, Callable[[], str]] = {}
    for name in RUNS:
        reports |= run_reports(name, analyze(load(name)))
    reports |= run_reports("small-min2pct", analyze(load("small"), min_effect=0.02))
    reports |= run_reports("small-min0", analyze(load("small"), min_effect=0.0))
    # `report --reference je`: the same cells, relative to another setup.
    reports |= run_reports("small-ref-je", analyze(load("small"), reference="je"))
    reports |= patterns_reports()
    return reports | comparison_reports() | recommend_reports() | soak_reports()


REPORTS = all_reports()


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_report_is_byte_identical_to_its_golden_file(name: str) -> None:
    # Bytes, not text: the CSVs end their lines in CRLF, which reading text would hide.
    data = REPORTS[name]().encode()
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert path.exists(), f"no golden file {path}: generate it with MB_UPDATE_GOLDEN=1"
    assert data == path.read_bytes(), f"{name} differs from its golden file"


def test_every_golden_file_is_still_rendered() -> None:
    """A golden file no test renders any more would prove nothing."""
    assert {p.name for p in GOLDEN.iterdir()} == set(REPORTS)
