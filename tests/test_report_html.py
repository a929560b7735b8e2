"""The HTML report, rendered from a recorded run and drawn by a real headless Chromium.

tests/fixtures/results-small.json is the results.json of a real run: 2 setups (glibc,
je with a knob and a config override) x InnoDB and MyRocks x 3 steps x 1 and 2 threads x
2 repeats, 2-second cells.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mallocbench.analysis.run_analysis import analyze
from mallocbench.model.metadata import AdaptiveRecord
from mallocbench.model.results import Cell, RunResult, SessionInfo
from mallocbench.report import html
from mallocbench.report.words import verdict_note, verdict_rss_finding

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "results-small.json"
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def result() -> RunResult:
    return RunResult.from_dict(json.loads(FIXTURE.read_text()))


@pytest.fixture(scope="module")
def page(result: RunResult) -> str:
    return html.render_html(analyze(result))


def test_page_has_verdict_tables_memory_and_metadata(result: RunResult, page: str) -> None:
    # Verdict first: before any relative table.
    assert page.index('id="verdict"') < page.index('id="relative"') < page.index('id="memory"')
    # One relative table per engine and thread count.
    for key in ("rel-innodb-1", "rel-innodb-2", "rel-myrocks-1", "rel-myrocks-2"):
        assert f'<table class="ratios" id="{key}"' in page
    assert 'data-kind="verdict"' in page and 'data-kind="memory"' in page
    assert '<th class="num">RSS/cache</th>' in page
    # Colored cells carry the absolute QPS on hover.
    assert re.search(r'<td class="r (slower|same|faster|none)[^"]*" title="[\d,.]+ QPS vs', page)
    # Metadata: host facts, what differs between setups, the experiment file itself.
    for text in ("AMD EPYC", "glibc</th><td>2.36", "transparent huge pages"):
        assert text in page
    assert "knob MALLOC_CONF" in page and "background_thread:true" in page
    assert "config table_open_cache" in page
    assert "[[setup]]" in page


def test_page_is_self_contained(page: str) -> None:
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    # plotly.js travels inside, gzipped: under half its 4.8 MB.
    assert 'id="mb-plotly-gz"' in page and len(page) < 2_500_000


def test_written_reports_share_one_plotly_beside_them(result: RunResult, tmp_path: Path) -> None:
    first = html.write_html(analyze(result), tmp_path / "report.html")
    second = html.write_html(analyze(result), tmp_path / "again.html")
    (shared,) = tmp_path.glob("plotly-*.min.js")
    for page in (first, second):
        text = page.read_text()
        assert f'<script src="{shared.name}"' in text and 'id="mb-plotly-gz"' not in text
        assert len(text) < 500_000
    dom = run_chromium(first, tmp_path / "profile", "--dump-dom")
    assert re.search(r'data-charts-rendered="([1-9]\d*)"', dom.stdout), dom.stderr[-1000:]
    # Mailed alone, the page says what is missing instead of drawing nothing silently.
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "report.html").write_text(first.read_text())
    dom = run_chromium(alone / "report.html", tmp_path / "profile2", "--dump-dom")
    assert f"{shared.name} is missing beside this page" in dom.stdout
    assert "--self-contained" in dom.stdout


def test_charts_cover_each_kind(result: RunResult) -> None:
    ctx = html.build_context(analyze(result))
    ids = [c.id for c in ctx.charts]
    assert len(ids) == len(set(ids))
    for prefix in ("chart-rel-", "chart-rss-", "chart-vsz-", "chart-threads-", "chart-p99-",
                   "chart-cpu-", "chart-cs-"):  # fmt: skip
        assert any(i.startswith(prefix) for i in ids), prefix
    rss = next(c for c in ctx.charts if c.id == "chart-rss-innodb")
    assert len(rss.data) == 4  # one line per session: 2 setups x 2 repeats
    assert rss.layout["shapes"], "step boundaries are marked"


def test_one_repeat_says_there_is_no_interval(result: RunResult) -> None:
    single = copy.deepcopy(result)
    single.cells = [c for c in single.cells if c.repeat == 0]
    page = html.render_html(analyze(single))
    assert "1 repeat: no interval" in page
    assert "<sup>*</sup>" not in page


def test_clear_difference_is_significant(result: RunResult) -> None:
    made = copy.deepcopy(result)
    for cell in made.cells:
        level = 1000.0 if cell.setup == "glibc" else 700.0
        cell.qps = level * (1 + 0.01 * cell.repeat)
    ctx = html.build_context(analyze(made))
    verdict = {(v.engine, v.setup): v for v in ctx.verdict}
    row = verdict[("innodb", "je")]
    assert row.slower and not row.faster
    assert row.group_geomeans["point"].ratio == pytest.approx(0.7, rel=0.01)
    assert "<sup>*</sup>" in html.render_html(analyze(made))


def test_write_html(result: RunResult, tmp_path: Path) -> None:
    path = html.write_html(analyze(result), tmp_path / "sub" / "report.html")
    assert path.is_file() and path.read_text().startswith("<!DOCTYPE html>")


# ---------------------------------------------------------------- headless Chromium


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    install = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-deps.sh"), "chromium"],
        capture_output=True,
        text=True,
    )
    found = shutil.which("chromium")
    if not found:
        pytest.skip(
            "chromium is not installed and `scripts/install-deps.sh chromium` could not "
            f"install it: {install.stderr.strip()[-300:]}"
        )
    return found


def run_chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium_binary(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            # Any attempt to reach the network fails to resolve: the page must not need it.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--virtual-time-budget=15000",
            "--window-size=1280,2400",
            *extra,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def console_messages(stderr: str) -> list[str]:
    """The page logs nothing when all is well: every console line is a failure."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def check_in_browser(page_html: str, tmp_path: Path, screenshot: Path) -> str:
    page = tmp_path / "page.html"
    page.write_text(page_html, encoding="utf-8")
    dom = run_chromium(page, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, dom.stdout[:500]
    wanted = re.search(r'data-charts-expected="(\d+)"', body.group(1))
    assert wanted, body.group(0)
    expected = int(wanted.group(1))
    rendered = re.search(r'data-charts-rendered="(\d+)"', body.group(1))
    assert "data-charts-error" not in body.group(1), body.group(1)
    assert expected > 0 and rendered and int(rendered.group(1)) == expected
    containers = re.findall(r'<div class="plot[^"]*" id="chart-[^"]+" data-chart', dom.stdout)
    assert len(containers) == expected
    # Plotly drew into every container: each holds its SVG.
    assert dom.stdout.count('class="main-svg"') >= expected
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    shot = run_chromium(page, tmp_path / "profile", f"--screenshot={screenshot}")
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    return dom.stdout


def test_report_renders_in_headless_chromium(page: str, tmp_path: Path) -> None:
    dom = check_in_browser(page, tmp_path, ARTIFACTS / "report.png")
    assert dom.count('class="ratios"') == 4
    assert 'data-kind="verdict"' in dom and 'data-kind="memory"' in dom


def test_crashed_cells_are_shown_not_hidden(result: RunResult) -> None:
    made = copy.deepcopy(result)
    for cell in made.cells:
        if cell.setup == "je" and cell.engine == "myrocks" and cell.group == "write":
            cell.status, cell.qps = "oom", None
            cell.error, cell.exit_signal, cell.log_tail = "OOM-killed", "SIGKILL", "Killed"
    page = html.render_html(analyze(made))
    assert 'class="r problem"' in page and ">OOM<" in page
    assert 'id="problems"' in page and "server log tail" in page
    row = next(v for v in html.build_context(analyze(made)).verdict if v.engine == "myrocks")
    assert row.problems and "write" not in row.group_geomeans


def test_base_only_and_empty_runs_still_render(result: RunResult) -> None:
    base_only = copy.deepcopy(result)
    base_only.cells = [c for c in base_only.cells if c.setup == "glibc"]
    base_only.setups = base_only.setups[:1]
    assert "Only the base setup ran" in html.render_html(analyze(base_only))
    base_only.cells, base_only.sessions = [], []
    assert 'data-charts-expected="0"' in html.render_html(analyze(base_only))


# ---------------------------------------------------------------- issue 4 additions


def _with_new_facts(result: RunResult) -> RunResult:
    """The recorded run as a newer mallocbench records it: the server's memory account,
    its own counters per second, min_effect and the adaptive-repetition outcome."""
    made = copy.deepcopy(result)
    made.metadata.min_effect = 0.02
    made.metadata.adaptive = AdaptiveRecord(
        target_ci_pct=5.0, budget_s=300.0, rounds=3, stopped="budget",
        not_converged=[{"engine": "innodb", "step": "point-query range=100", "threads": 2,
                        "setup": "je", "width_pct": 9.5}],
    )  # fmt: skip
    for cell in made.cells:
        rss = float(cell.peak_rss_bytes or 100 << 20)
        cell.metrics.update(
            rss_at_accounting_bytes=rss,
            rss_accounted_bytes=rss * 0.8,
            rss_unaccounted_bytes=rss * 0.2,
            heap_rss_bytes=rss * 0.4,
            heap_accounted_bytes=rss * 0.2,
        )
        for sample in cell.samples:
            sample.extra["server_memory_used_bytes"] = (sample.rss_bytes or 0) * 0.6
            if cell.engine == "myrocks":
                sample.extra["rocksdb_block_cache_usage_bytes"] = (sample.rss_bytes or 0) * 0.3
    return made


def test_relative_charts_show_whole_step_names(result: RunResult) -> None:
    ctx = html.build_context(analyze(result))
    chart = ctx.relative_charts["rel-innodb-1"]
    # Plain category labels at an angle: multicategory axes cut long names off.
    assert chart.layout["xaxis"]["tickangle"] and chart.layout["xaxis"]["automargin"]
    x = chart.data[0]["x"]
    assert x == ["point-query", "read-only-order", "update-index"]
    assert chart.data[0]["hovertext"][0].startswith("point-query range=100: ")


def test_new_sections_render_in_headless_chromium(result: RunResult, tmp_path: Path) -> None:
    made = _with_new_facts(result)
    ctx = html.build_context(analyze(made))
    rss = next(c for c in ctx.charts if c.id == "chart-rss-myrocks")
    names = {t["name"].split(" ", 1)[-1] for t in rss.data if " " in t["name"]}
    assert names == {"Memory_used", "block cache"}
    page = html.render_html(analyze(made))
    assert (
        "adaptive repetition: target 5% interval width, 3 rounds, "
        "stopped: another round would overrun the 5 min budget"
    ) in page
    assert "je / innodb / point-query range=100 / 2 threads: interval width 9.5%" in page
    assert "whole interval within ±2%" in page and "server accounts for" in page
    assert 'data-kind="vsz-note"' in page  # the fixture's VSZ is 8 TiB for ~100 MiB RSS
    dom = check_in_browser(page, tmp_path, ARTIFACTS / "report-issue4.png")
    assert 'data-kind="adaptive"' in dom


def _with_peaks(result: RunResult, factor: float) -> RunResult:
    """The recorded run with je's server peaks `factor` times glibc's in each block."""
    made = copy.deepcopy(result)
    base = 400 << 20
    peaked: list[SessionInfo | Cell] = [*made.sessions, *made.cells]
    for measured in peaked:
        jitter = 1 + 0.001 * measured.repeat  # blocks differ a little, as real ones do
        peak = base * jitter * (factor if measured.setup == "je" else 1.0)
        measured.peak_rss_bytes = int(peak)
    return made


def test_a_supported_rss_difference_is_a_finding_of_the_verdict(result: RunResult) -> None:
    more = html.build_context(analyze(_with_peaks(result, 1.25)))
    row = next(r for r in more.verdict if (r.engine, r.setup) == ("innodb", "je"))
    assert row.rss_more and verdict_rss_finding(row).startswith("peak RSS 1.25x [")
    assert not verdict_note(row).startswith("no difference")  # the RSS difference is supported
    page = html.render_html(analyze(_with_peaks(result, 1.25)))
    assert 'class="slower-text">more memory</span>: peak RSS 1.25x [' in page
    less = html.build_context(analyze(_with_peaks(result, 0.8)))
    row = next(r for r in less.verdict if (r.engine, r.setup) == ("innodb", "je"))
    assert not row.rss_more and verdict_rss_finding(row).startswith("peak RSS 0.80x [")
    # Identical peaks: nothing to find, and nothing is worded as one.
    same = html.build_context(analyze(_with_peaks(result, 1.0)))
    assert not any(verdict_rss_finding(r) for r in same.verdict)


def test_the_verdict_shows_the_rss_ratio_its_interval_belongs_to(result: RunResult) -> None:
    """The verdict table's peak-RSS number sits above the blocked ratio's interval, and a
    finding quotes that ratio: they must be one estimate, not the ratio of the two
    lifetime peaks (here 0.75 against a blocked ratio of 0.82)."""
    made = _with_peaks(result, 0.9)
    last = max(c.repeat for c in made.cells)
    measured_list: list[SessionInfo | Cell] = [*made.sessions, *made.cells]
    for measured in measured_list:
        if measured.setup != "je" and measured.repeat == last:
            measured.peak_rss_bytes = int((measured.peak_rss_bytes or 0) * 1.2)
    context = html.build_context(analyze(made))
    row = next(r for r in context.verdict if (r.engine, r.setup) == ("innodb", "je"))
    assert row.rss is not None and row.rss.ratio is not None and row.rss_peaks is not None
    peaks_ratio = row.rss_peaks[0] / row.rss_peaks[1]
    assert abs(peaks_ratio - row.rss.ratio) > 0.05, (peaks_ratio, row.rss.ratio)
    assert row.rss_ratio == row.rss.ratio
    assert f"{row.rss.ratio:.2f}x<br>" in html.render_html(analyze(made))
