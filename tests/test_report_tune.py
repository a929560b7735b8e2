"""The tune's reports, rendered by report/ from its values: every format byte-for-byte
what the stored tune gives, tune.json read back unchanged, and the page drawn in a
browser in the run report's style.

The golden files under fixtures/golden-tune/ were written when the page moved into
report/ (its hand-built HTML gave way to the report's templates); regenerate them only
for a change meant to alter a tune's report:

    MB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_report_tune.py
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from mallocbench.report import tune as tune_report
from mallocbench.tune.result import TuneDocument

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "golden-tune"
UPDATE = os.environ.get("MB_UPDATE_GOLDEN") == "1"
PLOTLY = "plotly-golden.min.js"


def stored() -> TuneDocument:
    return TuneDocument.from_dict(json.loads((FIXTURES / "tune.json").read_text()))


def drawn(colour: bool) -> str:
    out = io.StringIO()
    if colour:
        console = Console(file=out, width=120, color_system="standard", force_terminal=True)
    else:
        console = Console(file=out, width=120, color_system=None, no_color=True)
    tune_report.print_terminal(stored(), console)
    return out.getvalue()


REPORTS: dict[str, Callable[[], str]] = {
    "tune.terminal.txt": lambda: drawn(False),
    "tune.terminal.ansi": lambda: drawn(True),
    "tune.md": lambda: tune_report.markdown(stored()),
    "tune.html": lambda: tune_report.render_html(stored(), PLOTLY),
}


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_tune_report_is_byte_identical_to_its_golden_file(name: str) -> None:
    data = REPORTS[name]().encode()
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert path.exists(), f"no golden file {path}: generate it with MB_UPDATE_GOLDEN=1"
    assert data == path.read_bytes(), f"{name} differs from its golden file"


def test_every_tune_golden_file_is_still_rendered() -> None:
    assert {p.name for p in GOLDEN.iterdir()} == set(REPORTS)


def test_tune_json_reads_back_to_the_same_document() -> None:
    text = (FIXTURES / "tune.json").read_text()
    assert tune_report.tune_json(stored()) == json.dumps(json.loads(text), indent=1) + "\n"


def test_only_findings_are_coloured_and_worded_lower_or_higher() -> None:
    doc = stored()
    glibc, jemalloc = doc.allocators
    for result in doc.allocators:
        for point in result.points:
            for m in doc.objectives:
                v = point.versus_default.get(m.name)
                if v is None:
                    continue
                cell = tune_report.versus_cell(v)
                assert (cell.css in ("faster", "slower")) == (v.better or v.worse)
                assert ("lower" in cell.text or "higher" in cell.text) == (v.better or v.worse)
    assert not jemalloc.beats_default
    assert tune_report.choice_lines(jemalloc, doc) == [
        "jemalloc: no setting beats the default (by min_effect, on the intervals)"
    ]
    # a choice states its price on every objective, in one line
    for line in tune_report.choice_lines(glibc, doc):
        assert all(tune_report.objective_label(m) in line for m in doc.objectives), line


def test_the_tune_page_is_the_run_reports_family() -> None:
    page = tune_report.render_html(stored(), PLOTLY)
    from mallocbench.report.html import _static

    assert _static("report.css") in page and _static("report.js") in page
    assert page.count('data-kind="tune-points"') == 2 and "data-chart" in page
    assert "<script>Plotly.newPlot" not in page  # drawn by the report's own script


def test_the_tune_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    from test_report_html import check_in_browser

    check_in_browser(
        tune_report.render_html(stored()),
        tmp_path,
        Path(__file__).resolve().parents[1] / "test-artifacts" / "tune.png",
    )
