"""report: another reference, a subset of setups, HTML on stdout, a run still in progress,
and a memory table that keeps what matters at small scale."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cli_runner import run_cli
from mallocbench.analysis.run_analysis import analyze
from mallocbench.analysis.summary import memory_rows, reserved_vsz_bytes
from mallocbench.model.results import RunResult, SessionInfo
from mallocbench.report import html
from mallocbench.report.tables import memory_columns
from mallocbench.store import Store, locks

FIXTURE = Path(__file__).parent / "fixtures" / "results-small.json"


def _fixture() -> RunResult:
    return RunResult.from_dict(json.loads(FIXTURE.read_text()))


def test_reference_turns_the_tables_around() -> None:
    base = run_cli("report", str(FIXTURE), "--format", "relative-json")
    flipped = run_cli("report", str(FIXTURE), "--format", "relative-json", "--reference", "je")
    assert base.returncode == 0 and flipped.returncode == 0, flipped.stderr
    forward = {(r["step"], r["threads"]): r["relative"] for r in json.loads(base.stdout)["cells"]}
    back = {(r["step"], r["threads"]): r["relative"] for r in json.loads(flipped.stdout)["cells"]}
    assert {r["setup"] for r in json.loads(flipped.stdout)["cells"]} == {"glibc"}
    for key, ratio in forward.items():
        if ratio is not None and back[key] is not None:
            assert abs(ratio * back[key] - 1) < 1e-9


def test_setups_must_keep_the_reference_and_name_real_setups() -> None:
    missing = run_cli("report", str(FIXTURE), "--setups", "je")
    assert missing.returncode == 2
    assert "--setups leaves out 'glibc'" in missing.stderr and "--reference" in missing.stderr
    unknown = run_cli("report", str(FIXTURE), "--reference", "jemalloc")
    assert unknown.returncode == 2
    assert "setup 'jemalloc' is not in run" in unknown.stderr and "glibc, je" in unknown.stderr


def test_html_goes_to_stdout_like_every_other_format() -> None:
    done = run_cli("report", str(FIXTURE), "--format", "html")
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().lower().startswith("<!doctype html>")
    assert 'data-kind="verdict"' in done.stdout


def test_a_run_in_progress_says_so(tmp_path: Path) -> None:
    result = _fixture()
    store = Store(tmp_path / "results.sqlite")
    try:
        store.save_run(result)
        store.set_status(result.run_id, "running")
    finally:
        store.close()
    # Nobody holds the run: its harness is gone, which the report must not call running.
    done = run_cli("report", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "still" not in done.stderr
    with locks.lock_run(tmp_path / "results.sqlite", result.run_id):
        live = run_cli("report", str(tmp_path))
    assert live.returncode == 0, live.stderr
    cells = len(result.cells)
    assert f"is still running (PID {os.getpid()}): {cells} of about {cells} cells" in live.stderr
    finished = run_cli("report", str(FIXTURE))
    assert "still" not in finished.stderr and "died" not in finished.stderr


def test_memory_table_drops_what_says_nothing_and_shows_growth_above_idle() -> None:
    result = _fixture()
    for session in result.sessions:
        session.idle_rss_bytes = 100 << 20
    if not result.sessions:
        result.sessions = [
            SessionInfo(c.session or f"s{i}", c.setup, c.engine, c.repeat, idle_rss_bytes=100 << 20)
            for i, c in enumerate(result.cells)
        ]
    rows = memory_rows(result)
    headers = [h for h, _ in memory_columns(rows, reserved_vsz_bytes(rows) is not None)]
    assert "idle RSS (MiB)" in headers and "(RSS − idle)/cache" in headers
    row = rows[0]
    assert row.growth_per_cache is not None and row.rss_per_cache is not None
    assert row.growth_per_cache < row.rss_per_cache
    # The page shows the same columns as the terminal and Markdown, in their order, and
    # its own beside them.
    page_headers = html.build_context(analyze(result)).memory_headers
    assert [h for h in page_headers if h in headers] == headers
    assert page_headers[page_headers.index("peak RSS (MiB)") + 1] == "RSS vs base"
    assert '<th class="num">idle RSS (MiB)</th>' in html.render_html(analyze(result))
    # VSZ in the TiB (reserved address space) is left out; the note says why.
    for r in rows:
        r.peak_vsz_bytes = (r.peak_rss_bytes or 1) * 1000
    reserved = reserved_vsz_bytes(rows) is not None
    assert reserved
    assert not any(h.startswith("peak VSZ") for h, _ in memory_columns(rows, reserved))
    page = html.memory_columns_html(result, rows, reserved)
    assert not any(h.startswith("peak VSZ") or h == "VSZ / RSS" for h, _ in page)
