"""`mallocbench compare`: two runs matched cell by cell, B over A."""

from __future__ import annotations

import copy
import csv
import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mallocbench.analysis import stats
from mallocbench.analysis.comparison import OneSided, compare
from mallocbench.cli import main
from mallocbench.commands import compare as cmp_mod
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import RunResult
from mallocbench.report.comparison import comparison_markdown, comparison_records
from mallocbench.report.words import verdict_note
from mallocbench.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "results-small.json"


def _runs() -> tuple[RunResult, RunResult]:
    """A and B from the recorded run; in B, je on InnoDB lost 20%, all else is unchanged."""
    a = RunResult.from_dict(json.loads(FIXTURE.read_text()))
    for cell in a.cells:
        cell.qps = 1000.0 * (1 + 0.01 * cell.repeat)
    b = copy.deepcopy(a)
    b.run_id = a.run_id + "-b"
    for cell in b.cells:
        if cell.setup == "je" and cell.engine == "innodb":
            cell.qps = (cell.qps or 0) * 0.8
    # B did not run MyRocks with glibc: that pair is reported as unmatched, not compared.
    b.cells = [c for c in b.cells if not (c.setup == "glibc" and c.engine == "myrocks")]
    return a, b


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    a, b = _runs()
    pa, pb = tmp_path / "a" / "results.json", tmp_path / "b" / "results.json"
    for path, run in ((pa, a), (pb, b)):
        path.parent.mkdir()
        path.write_text(json.dumps(run.to_dict()))
    return pa, pb


def test_compare_matches_cells_and_finds_the_regression() -> None:
    a, b = _runs()
    result = compare(a, b)
    assert {(t.engine, t.threads) for t in result.tables} == {
        ("innodb", 1), ("innodb", 2), ("myrocks", 1), ("myrocks", 2)
    }  # fmt: skip
    verdict = {(v.engine, v.setup): v for v in result.verdict}
    je = verdict[("innodb", "je")]
    assert je.slower and not je.faster
    assert je.group_geomeans["write"].ratio == pytest.approx(0.8)
    assert verdict_note(verdict[("innodb", "glibc")]) == "no difference the statistics support"
    assert ("myrocks", "glibc") not in verdict
    assert OneSided("A", "myrocks", "glibc") in result.unmatched


def test_cli_formats(files: tuple[Path, Path], tmp_path: Path) -> None:
    pa, pb = files
    runner = CliRunner()
    out = runner.invoke(cmp_mod.compare_cmd, [str(pa), str(pb), "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    je = [c for c in data["cells"] if c["setup"] == "je" and c["engine"] == "innodb"]
    assert je and all(c["ratio"] == pytest.approx(0.8) and c["significant"] for c in je)

    out = runner.invoke(cmp_mod.compare_cmd, [str(pa.parent), str(pb.parent), "--format", "csv"])
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert {r["engine"] for r in rows} == {"innodb", "myrocks"}

    out = runner.invoke(cmp_mod.compare_cmd, [str(pa), str(pb), "--format", "markdown"])
    assert "| **point queries** |" in out.output
    assert re.search(r"\| 0\.80 \[0\.\d\d, 0\.\d\d\] \*\*\\\*\*\* \|", out.output)

    page = tmp_path / "cmp.html"
    out = runner.invoke(cmp_mod.compare_cmd, [str(pa), str(pb), "--html", str(page)])
    assert out.exit_code == 0, out.output
    assert "QPS(B) / QPS(A)" in out.output
    text = page.read_text()
    assert 'class="r slower sig"' in text and "data-charts-expected" in text


def test_cli_run_ids_in_one_store(tmp_path: Path) -> None:
    a, b = _runs()
    store_path = tmp_path / "results.sqlite"
    store = Store(store_path)
    try:
        for run in (a, b):
            store.save_run(run)
    finally:
        store.close()
    out = CliRunner().invoke(
        cmp_mod.compare_cmd,
        ["--store", str(store_path), a.run_id, b.run_id, "--format", "json"],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["b"] == b.run_id


def test_nothing_in_common_is_an_error(files: tuple[Path, Path]) -> None:
    a, b = _runs()
    b.cells = [c for c in b.cells if c.engine == "myrocks"]
    a.cells = [c for c in a.cells if c.engine == "innodb"]
    with pytest.raises(MallocbenchError, match="share no cell"):
        compare(a, b)


def test_compare_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    from mallocbench.report.html import render_compare_html
    from test_report_html import check_in_browser

    a, b = _runs()
    check_in_browser(
        render_compare_html(compare(a, b)),
        tmp_path,
        Path(__file__).resolve().parents[1] / "test-artifacts" / "compare.png",
    )


def test_min_effect_turns_a_small_change_into_same(files: tuple[Path, Path]) -> None:
    a, b = _runs()
    for run, level in ((a, 1000.0), (b, 1010.0)):
        for cell in run.cells:
            if cell.setup == "glibc":
                # Repeats 0.01% apart: a 1% change is significant even with two repeats.
                cell.qps = level * (1 + 0.0001 * cell.repeat)
    plain = compare(a, b)
    glibc = {(v.engine, v.setup): v for v in plain.verdict}[("innodb", "glibc")]
    assert glibc.faster
    cmp = compare(a, b, min_effect=0.02)
    verdict = {(v.engine, v.setup): v for v in cmp.verdict}
    assert not verdict[("innodb", "glibc")].faster
    assert "no difference of at least ±2%" in verdict_note(verdict[("innodb", "glibc")])
    assert verdict[("innodb", "je")].slower  # 20% is well beyond 2%
    records = comparison_records(cmp)
    assert {r["verdict"] for r in records if r["setup"] == "glibc"} == {stats.SAME}
    je = {r["verdict"] for r in records if r["setup"] == "je" and r["engine"] == "innodb"}
    assert je == {stats.SLOWER}
    # The runs' own min_effect applies when no option is given: B's first.
    b.metadata.min_effect = 0.02
    assert compare(a, b).min_effect == 0.02
    assert "whole interval within ±2%" in comparison_markdown(cmp)


def test_cli_min_effect_option_and_its_errors(files: tuple[Path, Path]) -> None:
    pa, pb = files
    runner = CliRunner()
    for value in ("2%", "0.02"):
        out = runner.invoke(main, ["compare", str(pa), str(pb), "--format", "json",
                                   "--min-effect", value])  # fmt: skip
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["min_effect"] == pytest.approx(0.02)
    for bad in ("lots", "2", "-1%", "80%"):
        out = runner.invoke(main, ["compare", str(pa), str(pb), "--min-effect", bad])
        assert out.exit_code == 2, out.output
        assert out.stderr.startswith("mallocbench: error: --min-effect")
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.output
