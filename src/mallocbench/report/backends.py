"""The soak report's section on each event's own backends (analysis.backends): the
private memory the backend that ran an event's work asked for, kept right after it and
still kept after the settle, per setup and event label, side by side.

`backend_table` and `backend_notes` give plain header, rows and sentences,
`markdown_lines` the Markdown section and `print_backends` the terminal one; all give
nothing when no event read a backend.
"""

from __future__ import annotations

from rich.console import Console

from mallocbench.analysis.backends import BackendSteps, Spread
from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.console import make_console
from mallocbench.report.tables import markdown_section, print_per_engine

MiB = float(1 << 20)
TITLE = "Soak events: the private memory of the backend each ran in"
HEADER = [
    "engine",
    "setup",
    "event",
    "backends read",
    "rise while it ran (MiB)",
    "step right after (MiB)",
    "stayed after the settle (MiB)",
]
TERMINAL_COLUMNS = tuple(h for h in HEADER if h != "engine")


def spread_text(value: Spread) -> str:
    """+27.0 for one reading; +27.0 (median; +25.1 to +28.3) for several."""
    median = f"{value.median / MiB:+,.1f}"
    if value.n == 1:
        return median
    return f"{median} (median; {value.low / MiB:+,.1f} to {value.high / MiB:+,.1f})"


def _readings(steps: BackendSteps) -> str:
    backends = "1 backend" if steps.step.n == 1 else f"{steps.step.n} backends"
    events = "1 event" if steps.events == 1 else f"{steps.events} events"
    return f"{backends} of {events}"


def backend_table(analysis: RunAnalysis) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one per setup and event label that read a backend."""
    rows = [
        [
            s.engine,
            s.setup,
            s.label,
            _readings(s),
            spread_text(s.rise),
            spread_text(s.step),
            spread_text(s.stayed) + f" after {s.settle_s:.0f} s",
        ]
        for s in analysis.backends
    ]
    return HEADER, rows


def backend_notes(analysis: RunAnalysis) -> list[str]:
    if not analysis.backends:
        return []
    notes = [
        "Per backend that ran an event's work on a connection of its own: its private "
        "anonymous memory (Pss_Anon in /proc/PID/smaps_rollup: its heap) before the work, "
        "at its highest while "
        "the work ran (sampled every 0.1 s), right after it, and after the settle with the "
        "connection still open. The rise is the highest minus before, the step right "
        "after minus before, what stayed the reading after the settle minus before. The "
        "server frees the work's memory (work_mem, maintenance_work_mem) when the "
        "statement ends, so the step and what stayed are what the backend's allocator "
        "kept of it. The dump tool's backend is not read."
    ]
    if any(s.step.n == 1 for s in analysis.backends):
        notes.append(
            "A row of one backend is one reading, not a finding: repeat the event (every) "
            "for several."
        )
    if any(s.step.n > 1 for s in analysis.backends):
        notes.append(
            "Several readings are given by their median and range, with no interval: the "
            "backends of one event share its moment and its load, and the setups' "
            "readings stand side by side, untested."
        )
    return notes


def markdown_lines(analysis: RunAnalysis) -> list[str]:
    return markdown_section(TITLE, *backend_table(analysis), backend_notes(analysis))


def print_backends(analysis: RunAnalysis, console: Console | None = None) -> None:
    table = backend_table(analysis)
    if table[1]:
        print_per_engine(
            console or make_console(), TITLE, table, TERMINAL_COLUMNS,
            ("setup", "event", "backends read"), backend_notes(analysis),
        )  # fmt: skip


__all__ = [
    "HEADER",
    "backend_notes",
    "backend_table",
    "markdown_lines",
    "print_backends",
    "spread_text",
]
