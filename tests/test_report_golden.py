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
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from mallocbench.analysis.comparison import compare
from mallocbench.analysis.recommend import recommend
from mallocbench.commands.run import select_setups
from mallocbench.report import comparison as cmp_report
from mallocbench.report import export, html, markdown, terminal
from mallocbench.report import recommend as rec_report
from mallocbench.report import soak as soak_report
from mallocbench.results import RunResult

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "golden"
UPDATE = os.environ.get("MB_UPDATE_GOLDEN") == "1"
PLOTLY = "plotly-golden.min.js"

RUNS = {"small": "results-small.json", "aa": "results-aa.json", "soak": "results-soak.json"}


def load(name: str) -> RunResult:
    return RunResult.from_dict(json.loads((FIXTURES / RUNS[name]).read_text()))


def console_text(draw: Callable[[Console], None], colour: bool = False) -> str:
    out = io.StringIO()
    if colour:
        console = Console(file=out, width=120, color_system="standard", force_terminal=True)
    else:
        console = Console(file=out, width=120, color_system=None, no_color=True)
    draw(console)
    return out.getvalue()


def with_min_effect(result: RunResult, min_effect: float) -> RunResult:
    """What `report --min-effect` hands the reports."""
    changed = copy.deepcopy(result)
    changed.metadata.min_effect = min_effect
    return changed


def run_reports(name: str, result: RunResult) -> dict[str, Callable[[], str]]:
    return {
        f"{name}.terminal.txt": lambda: console_text(
            lambda c: terminal.print_run(result, c, "out")
        ),
        f"{name}.terminal.ansi": lambda: console_text(
            lambda c: terminal.print_run(result, c, "out"), colour=True
        ),
        f"{name}.report.md": lambda: markdown.render(result),
        f"{name}.report.html": lambda: html.render_html(result, plotly_src=PLOTLY),
        f"{name}.cells.csv": lambda: export.cells_csv(result),
        f"{name}.summary.csv": lambda: export.summary_csv(result),
        f"{name}.relative.csv": lambda: export.relative_csv(result),
        f"{name}.relative.json": lambda: export.relative_json(result),
        f"{name}.results.json": lambda: export.results_json(result),
        f"{name}.results-nosamples.json": lambda: export.results_json(result, with_samples=False),
    }


def comparison_reports() -> dict[str, Callable[[], str]]:
    a = load("small")
    # Run B: the same run with je 5% faster and glibc's p99 10% worse, so the
    # comparison has changes to colour and word.
    b = copy.deepcopy(a)
    b.run_id = "small-b"
    for cell in b.cells:
        if cell.setup == "je":
            cell.qps *= 1.05
        elif cell.p99_ms is not None:
            cell.p99_ms *= 1.10
    out: dict[str, Callable[[], str]] = {}
    for label, cmp in (("compare", compare(a, b)), ("compare-2pct", compare(a, b, 0.02))):
        out |= {
            f"{label}.terminal.txt": lambda c=cmp: console_text(
                lambda con: cmp_report.print_comparison(c, con)
            ),
            f"{label}.md": lambda c=cmp: cmp_report.comparison_markdown(c),
            f"{label}.csv": lambda c=cmp: cmp_report.comparison_csv(c),
            f"{label}.json": lambda c=cmp: cmp_report.comparison_json(c),
            f"{label}.html": lambda c=cmp: html.render_compare_html(c, PLOTLY),
        }
    return out


def recommend_reports() -> dict[str, Callable[[], str]]:
    out: dict[str, Callable[[], str]] = {}
    for name in ("small", "aa"):
        for priorities in (("throughput", "p99", "rss"), ("rss", "throughput")):
            for min_effect in (None, 0.0):
                rec = recommend(load(name), list(priorities), min_effect)
                label = f"recommend.{name}.{'-'.join(priorities)}.{min_effect}"
                out[f"{label}.txt"] = lambda r=rec: "\n".join(rec_report.recommendation_lines(r))
                out[f"{label}.json"] = lambda r=rec: json.dumps(r.to_dict(), indent=1)
    return out


def soak_reports() -> dict[str, Callable[[], str]]:
    run = load("soak")
    return {
        "soak.soak-terminal.txt": lambda: console_text(lambda c: soak_report.print_soak(run, c)),
        "soak.soak.md": lambda: "\n".join(soak_report.markdown_lines(run)),
    }


def all_reports() -> dict[str, Callable[[], str]]:
    reports: dict[str, Callable[[], str]] = {}
    for name in RUNS:
        reports |= run_reports(name, load(name))
    reports |= run_reports("small-min2pct", with_min_effect(load("small"), 0.02))
    reports |= run_reports("small-min0", with_min_effect(load("small"), 0.0))
    # `report --reference je`: the same cells, relative to another setup.
    reports |= run_reports("small-ref-je", select_setups(load("small"), "je", None))
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
