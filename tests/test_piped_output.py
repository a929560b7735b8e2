"""Output into a pipe or a CI log: tables at their natural width (or COLUMNS), no word cut
in two, no colour unless FORCE_COLOR asks for it, one plain progress line per cell.

The report is rendered by a real `mallocbench report` process whose stdout is a pipe, as
`| tee` and CI runners read it. The run is tests/fixtures/results-small.json with its
"je" setup named "jemalloc" and the server's memory account filled in, so the memory
table has the long headers that rich used to fold at 80 columns ("unacc / ounte / d:").
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mallocbench.commands.progress import RichProgress
from mallocbench.console import NATURAL_WIDTH, make_console, wants_colour
from mallocbench.model.results import Cell
from mallocbench.run.experiment import PlannedCell
from mallocbench.workloads.catalogue import step_from_label
from mallocbench.workloads.sysbench import Interval

FIXTURE = Path(__file__).parent / "fixtures" / "results-small.json"
ANSI = re.compile(r"\x1b\[")
# Cursor movement, line erasing, cursor hiding: a live display redrawing itself.
CURSOR = re.compile(r"\x1b\[(\d*[ABCDGK]|\?25[lh])|\r")
MEMORY_HEADERS = [
    "engine",
    "setup",
    "peak RSS (MiB)",
    "RSS/cache",
    "idle RSS (MiB)",
    "(RSS − idle)/cache",
    "server accounts for (MiB)",
    "unaccounted: RSS − accounted (MiB)",
    "heap ratio",
]


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = json.loads(FIXTURE.read_text().replace('"je"', '"jemalloc"'))
    for cell in run["cells"]:
        rss = cell["peak_rss_bytes"]
        cell["metrics"] = {
            **(cell.get("metrics") or {}),
            "rss_accounted_bytes": rss * 0.8,
            "rss_unaccounted_bytes": rss * 0.2,
            "heap_rss_bytes": rss * 0.5,
            "heap_accounted_bytes": rss * 0.4,
        }
    for session in run["sessions"]:
        session["idle_rss_bytes"] = 60 << 20
    path = tmp_path_factory.mktemp("piped") / "results.json"
    path.write_text(json.dumps(run))
    return path


def piped_report(run: Path, **env: str) -> str:
    """`mallocbench report` with stdout a pipe, and none of the caller's width or colour."""
    unset = ("COLUMNS", "NO_COLOR", "FORCE_COLOR")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    out = subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", "report", str(run)],
        capture_output=True,  # stdout is a pipe, as under `| tee` or a CI runner
        stdin=subprocess.DEVNULL,
        text=True,
        env={**base, **env},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def memory_table(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Peak memory of the server" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    return lines[start + 1 : end + 1]


def header_cells(table: list[str]) -> list[str]:
    """Each header's text, its wrapped fragments joined: what a reader pieces together."""
    rows = [line for line in table if line.startswith("┃")]
    columns = zip(*(line.strip("┃").split("┃") for line in rows), strict=True)
    return [" ".join(part.strip() for part in column if part.strip()) for column in columns]


def test_a_piped_report_keeps_every_header_and_name_whole(wide_run: Path) -> None:
    text = piped_report(wide_run)
    table = memory_table(text)
    assert header_cells(table) == MEMORY_HEADERS
    # Each header on one line: nothing was wrapped, let alone folded inside a word.
    assert sum(line.startswith("┃") for line in table) == 1
    for engine in ("innodb", "myrocks"):
        for setup in ("glibc", "jemalloc"):
            assert any(re.match(rf"│ {engine} +│ {setup} +│", line) for line in table)
    assert not ANSI.search(text)
    # Wider than rich's 80-column default, yet no line padded out to the natural width.
    widths = [len(line) for line in text.splitlines()]
    assert 80 < max(widths) < NATURAL_WIDTH


def test_the_checks_see_a_report_folded_at_80_columns(wide_run: Path) -> None:
    """What the report looked like in a pipe before: the checks above would fail on it."""
    table = memory_table(piped_report(wide_run, COLUMNS="80"))
    assert header_cells(table) != MEMORY_HEADERS
    assert sum(line.startswith("┃") for line in table) > 1


def test_columns_sets_the_width_of_piped_output(wide_run: Path) -> None:
    text = piped_report(wide_run, COLUMNS="60")
    tables = [line for line in text.splitlines() if line[:1] in "┏┃│┡├└"]
    assert tables and max(len(line) for line in tables) <= 60
    # The relative-QPS tables fit in 60 columns without cutting a setup's name.
    assert any(re.match(r"┃ step +┃ glibc QPS ┃ +jemalloc ┃", line) for line in tables)


def test_force_color_colours_a_pipe_without_cursor_codes(wide_run: Path) -> None:
    text = piped_report(wide_run, FORCE_COLOR="1")
    assert ANSI.search(text)
    assert not CURSOR.search(text)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert header_cells(memory_table(plain)) == MEMORY_HEADERS


def test_no_color_wins_over_force_color(wide_run: Path) -> None:
    assert not ANSI.search(piped_report(wide_run, FORCE_COLOR="1", NO_COLOR="1"))


def test_the_console_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("COLUMNS", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    console = make_console(file=io.StringIO())
    assert (console.width, console.is_terminal, console.color_system) == (
        NATURAL_WIDTH,
        False,
        None,
    )
    monkeypatch.setenv("COLUMNS", "72")
    assert make_console(file=io.StringIO()).width == 72
    monkeypatch.setenv("FORCE_COLOR", "1")
    forced = make_console(file=io.StringIO())
    assert forced.color_system is not None and not forced.is_terminal


def _cell(setup: str, status: str = "ok", error: str | None = None) -> Cell:
    return Cell(
        setup=setup,
        engine="myrocks",
        step="read-only-order range=1000",
        threads=16,
        repeat=0,
        status=status,
        qps=123456.7,
        p99_ms=12.34,
        peak_rss_bytes=3_456_789_012,
        error=error,
    )


def test_progress_in_a_pipe_is_one_plain_line_per_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    # Narrower than a cell's line: the line must stay whole rather than wrap mid-number.
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    planned = PlannedCell("jemalloc", "myrocks", step_from_label("point-query"), 16, 0)
    with RichProgress(make_console(file=out), 5.0, "banner") as progress:
        progress.start(3, 1)
        progress.status("starting jemalloc on myrocks (s1)")
        progress.cell_started(planned, "warmup")
        progress.interval(planned, Interval(0.0, 1.0, 100, 1000, 0, 1.0), 1 << 30)
        progress.cell_finished(_cell("jemalloc"))
        progress.cell_finished(_cell("glibc", "failed", "server exited with signal 6"))
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["banner", "resuming: 1 of 3 cells already measured"]
    assert len(lines) == 4, lines
    assert lines[2].startswith("2/3 ") and "123,457 qps" in lines[2]
    assert "3,297 MiB" in lines[2] and "jemalloc" in lines[2]
    assert lines[3].startswith("3/3 ") and "failed: server exited with signal 6" in lines[3]
    assert not CURSOR.search(out.getvalue()) and not ANSI.search(out.getvalue())


def test_colour_follows_the_terminal_and_the_two_variables() -> None:
    assert wants_colour(True, {}) and not wants_colour(False, {})
    assert wants_colour(False, {"FORCE_COLOR": "1"})
    assert not wants_colour(True, {"NO_COLOR": "1"})
    assert not wants_colour(False, {"NO_COLOR": "1", "FORCE_COLOR": "1"})
    # Set but empty means unset (no-color.org, force-color.org).
    assert wants_colour(True, {"NO_COLOR": ""}) and not wants_colour(False, {"FORCE_COLOR": ""})
