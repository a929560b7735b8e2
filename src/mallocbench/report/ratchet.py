"""The ratchet section of a soak's report: the RSS step each event left behind.

Beside the soak section (report.soak), for a soak with [[soak.event]] entries:
`ratchet_table` and `ratchet_notes` give plain header, rows and sentences,
`markdown_lines` the Markdown section, `print_ratchet` the terminal one, and
`with_event_marks` adds the events to the soak's RSS-over-time charts. All of them give
nothing for a run without events.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console

from mallocbench.analysis.ratchet import (
    BEFORE_S,
    SETTLE_FLOOR,
    SETTLE_RISE_SHARE,
    SETTLE_TIMEOUT_S,
    SETTLE_WINDOW_S,
    SETTLED,
    EventMeasure,
    Interval,
    SetupRatchet,
    StepReading,
)
from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.console import make_console
from mallocbench.model.results import json_safe
from mallocbench.report import backends
from mallocbench.report.soak import duration_text, print_soak
from mallocbench.report.tables import markdown_section, print_per_engine
from mallocbench.units import slug

MiB = float(1 << 20)
HOUR = 3600.0

HEADER = [
    "engine",
    "setup",
    "event",
    "events (ok)",
    "step per event (MiB, 95%)",
    "settled",
    "slope between events (MiB/h, 95%)",
    "peak during (MiB)",
    "time to the cap, events included",
]
TERMINAL_COLUMNS = tuple(h for h in HEADER if h != "engine")

METHOD_NOTE = (
    f"Ratchet: per event, RSS before is the mean over the {BEFORE_S:g} s before it started, "
    "the peak the highest RSS while it ran, and RSS after is taken once it settled: the "
    f"first {SETTLE_WINDOW_S:g} s window after its end whose samples all lie within a "
    f"band of their mean, the larger of {SETTLE_RISE_SHARE:.0%} of the event's rise (peak "
    f"minus before) and {SETTLE_FLOOR:.2%} of that mean (that window's mean); when none "
    "settles within "
    f"{SETTLE_TIMEOUT_S:g} s, before the next event or before the server's end, the last "
    f"{SETTLE_WINDOW_S:g} s before that limit (the 'settled' column counts the events that "
    "settled). The step is after minus before, with a 95% t interval over the soak's "
    "events; an interval that holds 0 shows no ratchet. The slope between events is "
    "fitted on each gap from an event's settling to the next event's start (the steps "
    "left out), its interval over the gaps; the time before the first event (caches "
    "filling) is left out. Time to the cap: from RSS at the end, growing by the mean step "
    "per mean spacing of the events plus the slope between them."
)


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MiB:+,.1f}"


def interval_text(interval: Interval | None, scale: float = 1 / MiB, digits: int = 1) -> str:
    """+3.2 [+1.0, +5.4]; the mean alone (n = 1) when there is no interval."""
    if interval is None:
        return "-"
    mean = f"{interval.mean * scale:+,.{digits}f}"
    if interval.low is None or interval.high is None:
        return f"{mean} (one event: no interval)"
    return f"{mean} [{interval.low * scale:+,.{digits}f}, {interval.high * scale:+,.{digits}f}]"


READINGS = {
    StepReading.UP: "steps up",
    StepReading.DOWN: "steps down",
    StepReading.NONE_SHOWN: "no step shown",
    StepReading.TOO_FEW: "too few events to tell",
}


def _cap_text(ratchet: SetupRatchet) -> str:
    projection = ratchet.projection
    if projection is None:
        return "-"
    if math.isinf(projection.seconds):
        return "not growing"
    low, high = duration_text(projection.low), duration_text(projection.high)
    return f"~{duration_text(projection.seconds)} [{low}, {high}]"


def _rows(ratchet: SetupRatchet) -> list[list[str]]:
    rows = []
    for steps in ratchet.steps:
        label, interval = steps.label, steps.interval
        events = [e for e in ratchet.events if e.label == label]
        ok = sum(1 for e in events if e.status == "ok")
        settled = sum(1 for e in events if e.settled_by == SETTLED)
        peaks = [e.peak_bytes for e in events if e.peak_bytes is not None]
        rows.append(
            [
                ratchet.engine,
                ratchet.setup,
                label,
                f"{len(events)} ({ok})",
                f"{interval_text(interval)}: {READINGS[steps.reading]}",
                f"{settled} of {len(events)}",
                interval_text(ratchet.between, HOUR / MiB, 0),
                f"{max(peaks) / MiB:,.0f}" if peaks else "-",
                _cap_text(ratchet),
            ]
        )
    return rows


def ratchet_table(analysis: RunAnalysis) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one per setup and event label; no rows without events."""
    return HEADER, [row for ratchet in analysis.ratchets for row in _rows(ratchet)]


def ratchet_notes(analysis: RunAnalysis) -> list[str]:
    if not analysis.ratchets:
        return []
    notes = [METHOD_NOTE]
    for ratchet in analysis.ratchets:
        failed = [e for e in ratchet.events if e.status != "ok"]
        if failed:
            first = failed[0]
            notes.append(
                f"{ratchet.setup} on {ratchet.engine}: {len(failed)} of "
                f"{len(ratchet.events)} events did not end well (measured all the same), "
                f"the first {first.label} at {duration_text(first.start_s)}: {first.status}"
                + (f", {first.error}" if first.error else "")
            )
    return notes


def markdown_lines(analysis: RunAnalysis) -> list[str]:
    """The ratchet's Markdown section, then the events' own backends' (report.backends)."""
    section = markdown_section(
        "Soak events: the RSS step each left behind", *ratchet_table(analysis),
        ratchet_notes(analysis),
    )  # fmt: skip
    return section + backends.markdown_lines(analysis)


def print_ratchet(analysis: RunAnalysis, console: Console | None = None) -> None:
    table = ratchet_table(analysis)
    if table[1]:
        console = console or make_console()
        print_per_engine(
            console, "Soak events: the RSS step each left behind", table, TERMINAL_COLUMNS,
            ("setup", "event"), ratchet_notes(analysis),
        )  # fmt: skip
    backends.print_backends(analysis, console)


def ratchet_json(analysis: RunAnalysis) -> str:
    """The ratchet figures per setup (bytes, seconds since each server's start) as JSON:
    every event measured, the steps' and the slope's intervals, the projection."""
    return json.dumps([json_safe(r.to_dict()) for r in analysis.ratchets], indent=1)


# --- the chart's marks ----------------------------------------------------------------------


def _hover(event: EventMeasure) -> str:
    text = (
        f"{event.label} at {duration_text(event.start_s)} ({event.status}"
        f"{': ' + event.error if event.error else ''}), "
        f"{event.end_s - event.start_s:.1f} s"
    )
    if event.before_bytes is not None:
        text += f"<br>before {event.before_bytes / MiB:,.0f} MiB"
    if event.peak_bytes is not None:
        text += f", peak {event.peak_bytes / MiB:,.0f}"
    if event.after_bytes is not None:
        how = "settled" if event.settled_by == SETTLED else f"at the {event.settled_by}"
        text += f", after {event.after_bytes / MiB:,.0f} ({how}): step {_mib(event.step_bytes)}"
    return text


def _level(event: EventMeasure) -> float | None:
    return next(
        (v for v in (event.before_bytes, event.peak_bytes, event.after_bytes) if v is not None),
        None,
    )


def _event_trace(ratchet: SetupRatchet, color: str | None, scale: float) -> dict[str, Any]:
    # At RSS before the event; at its peak or after it when no sample preceded it.
    placed = [(e, _level(e)) for e in ratchet.events]
    events = [e for e, level in placed if level is not None]
    return {
        "type": "scatter",
        "mode": "markers",
        "name": f"{ratchet.setup} events",
        "legendgroup": ratchet.setup,
        "showlegend": False,
        "x": [e.start_s / scale for e in events],
        "y": [level / MiB for _, level in placed if level is not None],
        "marker": {
            "color": color,
            "size": 10,
            "symbol": ["star" if e.status == "ok" else "star-open" for e in events],
            "line": {"color": "#333", "width": 1},
        },
        "hoverinfo": "text",
        "text": [_hover(e) for e in events],
    }


def with_event_marks(
    charts: list[dict[str, Any]], analysis: RunAnalysis, colors: dict[str, str]
) -> list[dict[str, Any]]:
    """The soak charts (report.soak.soak_charts) with each event marked where it started,
    at RSS before it; the charts as they were for a run without events."""
    if not analysis.ratchets:
        return charts
    for chart in charts:
        unit = chart["layout"]["xaxis"]["title"]["text"].split(" ", 1)[0]
        scale = 3600.0 if unit == "h" else 60.0
        marks = [
            _event_trace(r, colors.get(r.setup), scale)
            for r in analysis.ratchets
            if chart["id"] == f"chart-soak-{slug(r.engine)}"
        ]
        chart["data"] = list(chart["data"]) + marks
        chart["note"] = (
            chart.get("note", "")
            + " Star: a soak event started (at RSS before it); open star: one "
            "that failed; hover for its step."
        )
    return charts


__all__ = [
    "HEADER",
    "METHOD_NOTE",
    "READINGS",
    "interval_text",
    "markdown_lines",
    "print_ratchet",
    "ratchet_json",
    "ratchet_notes",
    "ratchet_table",
    "with_event_marks",
]


def print_soak_summary(analysis: RunAnalysis, console: Console) -> None:
    """A soak's tables on standard output: its growth, then its ratchets."""
    print_soak(analysis, console)
    print_ratchet(analysis, console)
