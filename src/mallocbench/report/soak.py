"""The soak section of a report: per setup, how RSS grew, where it levelled off, when it
met its cap.

Every format places the section itself: `soak_table` and `soak_notes` give plain header,
rows and sentences (terminal and Markdown), `markdown_lines` the whole Markdown section,
`print_soak` the terminal one, and `soak_charts` the HTML page's charts as the keyword
arguments of report.html.Chart (a dict, so that html can import this module without
this one importing html). All of them return nothing for a run that is not a soak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mallocbench import units as fmt
from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.analysis.soak import Lifetime, SetupSoak, Slope
from mallocbench.console import make_console
from mallocbench.model.results import STATUS_CRASHED, STATUS_OOM
from mallocbench.report.runs import memory_caps_line
from mallocbench.units import slug

if TYPE_CHECKING:
    from mallocbench.run.experiment import Experiment
    from mallocbench.soak.runner import SoakSpec

MiB = float(1 << 20)
# Samples drawn per lifetime at most: a day of per-second RSS would make the page heavy
# without showing more than a screen's width of points can.
MAX_POINTS = 2400

HEADER = [
    "engine",
    "setup",
    "ran",
    "peak RSS (MiB)",
    "peak RSS/cache",
    "cap (MiB)",
    "OOM / time to the cap",
    "RSS slope (MiB/h, 95%)",
    "plateau",
    "unaccounted (MiB)",
]

METHOD_NOTE = (
    "RSS slope: least squares over the lifetime after its plateau, or else after the bend "
    "of its best two-segment fit (the rate RSS kept up once the caches had filled). "
    "Per-second RSS is strongly autocorrelated, so its 95% interval is the widest of "
    "intervals on 10 s to 30 min means with their sample size cut to an AR(1) model's "
    "effective one, or a random walk's drift where RSS steps up and stays; unbounded when "
    "no time scale can say. Plateau: RSS levelled off from the start, or after the bend, "
    "when the upper end of the slope's interval there would add at most 5% to RSS in as "
    "long again as the lifetime ran (growth, if any, too small to matter); 'not shown' "
    "when the interval is too wide to tell. Time to the cap: observed when the server was "
    "killed or RSS reached the cap; else projected from RSS over the last minute at the "
    "slope and its interval ('never' where the slope reaches zero). The cap acts on the "
    "cgroup charge, from which the kernel reclaims page cache first: RSS reaching the cap "
    "is when a kill becomes unavoidable."
)
# The terminal's table leaves out what the Markdown one repeats from the title or notes.
TERMINAL_COLUMNS = (
    "setup",
    "ran",
    "peak RSS (MiB)",
    "cap (MiB)",
    "OOM / time to the cap",
    "RSS slope (MiB/h, 95%)",
    "plateau",
)


def duration_text(seconds: float | None) -> str:
    """45 s, 7.2 min, 3.1 h, 2.0 d; never for infinity."""
    if seconds is None:
        return "-"
    if math.isinf(seconds):
        return "never"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _signed(value: float) -> str:
    if math.isinf(value):
        return "-inf" if value < 0 else "+inf"
    return f"{value:+,.0f}"


def slope_text(slope: Slope | None) -> str:
    """+12 [-3, +27] from 5.0 min: MiB per hour with its interval, and where the fit began."""
    if slope is None:
        return "too short to fit"
    point, low, high = slope.mib_per_hour()
    return f"{_signed(point)} [{_signed(low)}, {_signed(high)}] from {duration_text(slope.start_s)}"


def _plateau_text(life: Lifetime) -> str:
    fit = life.fit
    if fit is None or fit.slope is None:
        return "-"
    if fit.plateau_s is None:
        return "none: still growing" if fit.slope.growing else "not shown"
    level = fmt.mib(fit.plateau_level_bytes)
    if fit.flat_from_start:
        return f"flat from the start, {level}"
    return f"at {duration_text(fit.plateau_s)}, {level}"


def cap_text(soak: SetupSoak) -> str:
    """What became of the cap: killed (when), reached, or when it would be reached."""
    killed, crashed = soak.killed, soak.crashed
    if killed is not None:
        text = f"OOM-killed at {duration_text(killed.end_s)}" + _which(soak, killed)
        reached = killed.fit.reached_cap_s if killed.fit else None
        if reached is not None:
            text += f"; RSS reached the cap at {duration_text(reached)}"
        return text
    if crashed is not None:
        return f"crashed at {duration_text(crashed.end_s)}" + _which(soak, crashed)
    main = soak.main
    if soak.cap_bytes is None or main is None or main.fit is None:
        return "-"
    fit = main.fit
    if fit.reached_cap_s is not None:
        return f"RSS at the cap at {duration_text(fit.reached_cap_s)}"
    projection = fit.projection
    if projection is None:
        return "not reached"
    if fit.slope is not None and not fit.slope.bounded:
        return "not reached; too uncertain to project"
    if math.isinf(projection.seconds):
        return "not reached; not growing"
    low, high = duration_text(projection.low), duration_text(projection.high)
    return f"not reached; in ~{duration_text(projection.seconds)} [{low}, {high}] more"


def _which(soak: SetupSoak, life: Lifetime) -> str:
    if len(soak.lifetimes) < 2:
        return ""
    return f" (lifetime {soak.lifetimes.index(life) + 1} of {len(soak.lifetimes)})"


def _ran_text(soak: SetupSoak) -> str:
    total = sum(life.end_s for life in soak.lifetimes)
    text = duration_text(total)
    if len(soak.lifetimes) > 1:
        text += f" ({len(soak.lifetimes)} lifetimes)"
    return text


def _unaccounted_text(life: Lifetime | None) -> str:
    if life is None or not life.unaccounted:
        return "-"
    first, last = life.unaccounted[0][1], life.unaccounted[-1][1]
    if len(life.unaccounted) == 1:
        return f"{last / MiB:,.0f}"
    return f"{first / MiB:,.0f} -> {last / MiB:,.0f}"


def soak_table(analysis: RunAnalysis) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the soak table, one row per setup and engine; no rows when the
    run is not a soak."""
    if not analysis.is_soak:
        return HEADER, []
    rows = []
    for soak in analysis.soaks:
        main = soak.main
        fit = main.fit if main else None
        peak = soak.peak_bytes
        rows.append(
            [
                soak.engine,
                soak.setup,
                _ran_text(soak),
                f"{peak / MiB:,.0f}" if peak else "-",
                fmt.ratio(peak / soak.cache_bytes if peak and soak.cache_bytes else None),
                f"{soak.cap_bytes / MiB:,.0f}" if soak.cap_bytes else "-",
                cap_text(soak),
                slope_text(fit.slope if fit else None),
                _plateau_text(main) if main else "-",
                _unaccounted_text(main),
            ]
        )
    return HEADER, rows


def _or(value: object, unknown: str) -> object:
    return unknown if value is None else value


def soak_notes(analysis: RunAnalysis) -> list[str]:
    """Sentences the soak table needs beside it: design, method, restarts, what is missing."""
    if not analysis.is_soak:
        return []
    meta = analysis.result.metadata.soak
    assert meta is not None  # is_soak
    notes = [
        f"Soak: {_or(meta.step, '?')} with {_or(meta.threads, '?')} client threads for "
        f"{duration_text(meta.duration_s)} per setup, in segments of "
        f"{duration_text(meta.segment_s)} committed as each ends. The setups ran back "
        "to back (design sequential): each needs hours of continuous load, so they cannot "
        "be interleaved, and drift of the machine between them is not paired out. A server "
        "killed or crashed ends its setup's soak: the death is the outcome.",
        METHOD_NOTE,
        "In the relative QPS and RSS tables a soak's repeats are its segments: their "
        "intervals pair segments of one server lifetime per setup, not server starts, so "
        "they leave out the variation between starts and are narrower than a verdict needs.",
    ]
    planned = int(meta.segments or 0)
    for soak in analysis.soaks:
        notes += _lifetime_notes(soak)
        done = sum(life.segments for life in soak.lifetimes)
        ended = soak.killed is not None or soak.crashed is not None
        if planned and done < planned and not ended:
            notes.append(
                f"{soak.setup} on {soak.engine}: {done} of {planned} segments measured; "
                "`mallocbench soak --resume` continues (on a new server: a new lifetime)."
            )
    return notes


def _lifetime_notes(soak: SetupSoak) -> list[str]:
    if len(soak.lifetimes) < 2 or soak.main is None:
        return []
    others = "; ".join(
        f"{life.session} ({duration_text(life.end_s)}"
        + (f", {life.status}" if life.ended_by_death else "")
        + f"): slope {slope_text(life.fit.slope if life.fit else None)}"
        for life in soak.lifetimes
        if life is not soak.main
    )
    return [
        f"{soak.setup} on {soak.engine} ran in {len(soak.lifetimes)} server lifetimes (a "
        "resumed soak restarts the server): a restart begins a new heap, so each lifetime is "
        f"fitted on its own and the longest, {soak.main.session} "
        f"({duration_text(soak.main.end_s)}), gives the figures above. The others: {others}."
    ]


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]


def markdown_lines(analysis: RunAnalysis) -> list[str]:
    """The Markdown soak section (heading, table, notes); [] for a run that is no soak."""
    header, rows = soak_table(analysis)
    if not rows:
        return []
    out = ["## Soak: RSS over time", ""]
    out += _markdown_table(header, rows)
    out.append("")
    for note in soak_notes(analysis):
        out += [note, ""]
    return out


def print_soak(analysis: RunAnalysis, console: Console | None = None) -> None:
    """The soak table and its notes on the terminal; nothing for a run that is no soak."""
    header, rows = soak_table(analysis)
    if not rows:
        return
    console = console or make_console()
    meta = analysis.result.metadata.soak
    assert meta is not None  # is_soak
    for engine in dict.fromkeys(row[0] for row in rows):
        table = Table(
            title=f"Soak: RSS over time, {engine}, {_or(meta.step, '')} with "
            f"{_or(meta.threads, '?')} threads"
        )
        for name in TERMINAL_COLUMNS:
            table.add_column(name, justify="left" if name == "setup" else "right", overflow="fold")
        for row in rows:
            if row[0] != engine:
                continue
            cells = dict(zip(header, row, strict=True))
            ratio = cells["peak RSS/cache"]
            cells["peak RSS (MiB)"] += f" ({ratio}x cache)" if ratio != "-" else ""
            cells["RSS slope (MiB/h, 95%)"] = cells["RSS slope (MiB/h, 95%)"].replace(
                " from ", "\nfrom "
            )
            table.add_row(*[escape(cells[name]) for name in TERMINAL_COLUMNS])
        console.print(table)
    for note in soak_notes(analysis):
        console.print(f"[dim]{escape(note)}[/]")


# --- the chart ------------------------------------------------------------------------------


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    stride = max(1, math.ceil(len(points) / MAX_POINTS))
    return points[::stride] if stride > 1 else points


def _fit_line(life: Lifetime, scale: float) -> tuple[list[float], list[float]] | None:
    """The fitted slope as a two-point line over its window, through the window's means."""
    slope = life.fit.slope if life.fit else None
    if slope is None:
        return None
    tail = [(t, v) for t, v in life.series if t >= slope.start_s and v is not None]
    if not tail:
        return None
    mean_t = sum(t for t, _ in tail) / len(tail)
    mean_y = sum(v for _, v in tail) / len(tail)
    xs = [slope.start_s, slope.end_s]
    return [x / scale for x in xs], [(mean_y + slope.per_s * (x - mean_t)) / MiB for x in xs]


def _lifetime_traces(
    soak: SetupSoak, life: Lifetime, color: str | None, scale: float, unit: str
) -> list[dict[str, Any]]:
    several = len(soak.lifetimes) > 1
    name = f"{soak.setup} ({life.session})" if several else soak.setup
    common = {"legendgroup": soak.setup, "line": {"color": color, "width": 1.5}}
    points = _thin(life.series)
    traces: list[dict[str, Any]] = [
        {**common, "type": "scatter", "mode": "lines", "name": name,
         "x": [t / scale for t, _ in points], "y": [v / MiB for _, v in points],
         "hovertemplate": f"RSS %{{y:,.0f}} MiB at %{{x:.1f}} {unit}<extra>{name}</extra>"},
    ]  # fmt: skip
    if life.reported:
        own = _thin(life.reported)
        traces.append(
            {**common, "type": "scatter", "mode": "lines", "name": f"{name} Memory_used",
             "showlegend": False, "line": {"color": color, "width": 1, "dash": "dot"},
             "x": [t / scale for t, _ in own], "y": [v / MiB for _, v in own],
             "hovertemplate": f"Memory_used %{{y:,.0f}} MiB<extra>{name}</extra>"}
        )  # fmt: skip
    if life.unaccounted:
        traces.append(
            {**common, "type": "scatter", "mode": "markers", "name": f"{name} unaccounted",
             "showlegend": False, "marker": {"color": color, "symbol": "triangle-up", "size": 7},
             "x": [t / scale for t, _ in life.unaccounted],
             "y": [v / MiB for _, v in life.unaccounted],
             "hovertemplate": f"unaccounted %{{y:,.0f}} MiB<extra>{name}</extra>"}
        )  # fmt: skip
    line = _fit_line(life, scale)
    if line is not None and life.fit and life.fit.slope:
        traces.append(
            {**common, "type": "scatter", "mode": "lines", "name": f"{name} slope",
             "showlegend": False, "line": {"color": color, "width": 2.5, "dash": "dash"},
             "x": line[0], "y": line[1], "hoverinfo": "text",
             "text": [f"slope {slope_text(life.fit.slope)} MiB/h"] * 2}
        )  # fmt: skip
    marks = _marks(life)
    if marks:
        traces.append(
            {**common, "type": "scatter", "mode": "markers", "name": f"{name} events",
             "showlegend": False,
             "x": [t / scale for t, _, _, _ in marks], "y": [v / MiB for _, v, _, _ in marks],
             "marker": {"color": color, "size": 12, "symbol": [s for _, _, s, _ in marks],
                        "line": {"color": "#333", "width": 1}},
             "hoverinfo": "text", "text": [text for _, _, _, text in marks]}
        )  # fmt: skip
    return traces


def _marks(life: Lifetime) -> list[tuple[float, float, str, str]]:
    """(t, RSS, marker symbol, hover text) of the plateau and of the server's death."""
    marks = []
    fit = life.fit
    if fit is not None and fit.plateau_s is not None and fit.plateau_level_bytes is not None:
        marks.append(
            (fit.plateau_s, fit.plateau_level_bytes, "diamond",
             f"growth levelled off at {duration_text(fit.plateau_s)}")
        )  # fmt: skip
    if life.ended_by_death and life.series:
        t, v = life.series[-1]
        what = "OOM-killed" if life.status == STATUS_OOM else "crashed"
        if life.status not in (STATUS_OOM, STATUS_CRASHED):
            what = life.status
        marks.append((t, v, "x", f"{what} at {duration_text(t)}"))
    return marks


def soak_charts(analysis: RunAnalysis, colors: dict[str, str]) -> list[dict[str, Any]]:
    """RSS over each soak lifetime, one chart per engine, each the keyword arguments of
    report.html.Chart (id, title, data, layout, note, wide); [] for a run that is no soak.

    `colors` maps setups to colors: report.html's, so a setup looks the same on the whole
    page.
    """
    if not analysis.is_soak:
        return []
    soaks = analysis.soaks
    charts = []
    for engine in dict.fromkeys(s.engine for s in soaks):
        here = [s for s in soaks if s.engine == engine]
        longest = max((life.end_s for s in here for life in s.lifetimes), default=0.0)
        scale, unit = (3600.0, "h") if longest > 3 * 3600 else (60.0, "min")
        data = [
            trace
            for s in here
            for life in s.lifetimes
            for trace in _lifetime_traces(s, life, colors.get(s.setup), scale, unit)
        ]
        shapes = [
            {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": s.cap_bytes / MiB,
             "y1": s.cap_bytes / MiB,
             "line": {"color": colors.get(s.setup), "width": 1, "dash": "dashdot"}}
            for s in here
            if s.cap_bytes
        ]  # fmt: skip
        charts.append(
            dict(
                id=f"chart-soak-{slug(engine)}",
                title=f"RSS over the soak, {engine}",
                data=data,
                layout={
                    "xaxis": {"title": {"text": f"{unit} since the server started"}},
                    "yaxis": {"title": {"text": "MiB"}, "rangemode": "tozero"},
                    "shapes": shapes,
                },
                note="Solid: RSS per second, one line per server lifetime (color: setup). Dashed: "
                "the fitted slope over its window. Dotted: what the server says it uses "
                "(Memory_used). Triangle: RSS the server does not account for, after the last "
                "segment. Diamond: where growth levelled off; x: the server was killed or "
                "crashed. Dash-dotted across: a setup's memory cap (it acts on the cgroup "
                "charge, not on RSS).",
                wide=True,
            )
        )
    return charts


__all__ = [
    "HEADER",
    "METHOD_NOTE",
    "cap_text",
    "duration_text",
    "markdown_lines",
    "print_soak",
    "slope_text",
    "soak_charts",
    "soak_notes",
    "soak_table",
]


# --- what `soak` says around its reports ---------------------------------------------------


@dataclass(frozen=True)
class SoakPlan:
    """A soak's --dry-run: the experiment, its spec and how many setup/engine pairs."""

    experiment: Experiment
    spec: SoakSpec
    pairs: int
    overhead_s: float  # what a server start and the cache warming add to each pair


def plan_text(plan: SoakPlan) -> str:
    experiment, spec = plan.experiment, plan.spec
    total = plan.pairs * (spec.duration_s + plan.overhead_s)
    lines = [
        f"{experiment.name}: soak of {plan.pairs} setup/engine pair(s), "
        f"{duration_text(spec.duration_s)} each in {spec.segments} segments of "
        f"{duration_text(spec.segment_s)}; at most about "
        f"{duration_text(total)} in all (a killed server ends its soak early)",
        f"  step     {experiment.steps[0].label} with {experiment.threads[0]} threads",
        f"  engines  {', '.join(e.name for e in experiment.engines)}",
        "  setups   " + ", ".join(s.name for s in experiment.setups) + " (in this order)",
    ]
    for event in experiment.events:
        when = (
            f"every {duration_text(event.every_s)}"
            if event.every_s is not None
            else f"at {duration_text(event.at_s or 0.0)}"
        )
        times = len(event.due_times(spec.duration_s))
        lines.append(f"  event    {event.label}, {when} ({times} per setup), beside the load")
    caps = memory_caps_line(experiment)
    if caps is not None:
        lines.append(caps)
    lines.append(
        "  design   sequential: a soak needs continuous load per setup, so setups run back "
        "to back, never interleaved; no warmup (the timeline starts at the server start); "
        "a killed or crashed server ends its setup's soak"
    )
    return "".join(f"{line}\n" for line in lines)


def banner(plan: SoakPlan, out_dir: Path) -> str:
    return (
        f"[bold]{plan.experiment.name}[/]: soak of {plan.pairs} setup(s) back to back, "
        f"{duration_text(plan.spec.duration_s)} each; results in {out_dir}"
    )


@dataclass(frozen=True)
class SoakEnd:
    """How a soak ended: the files written (None: no segment was measured), its notes,
    and whether a signal stopped it, with the segments kept and where."""

    written: list[Path] | None
    notes: list[str]
    interrupted: bool
    segments: int
    store: str


def print_end(end: SoakEnd, console: Console) -> None:
    if end.written is None:
        # Empty reports would read like a finished soak.
        console.print("no segment was measured: no report written")
    elif end.written:
        console.print("wrote " + ", ".join(str(p) for p in end.written))
    for note in end.notes:
        console.print(f"[yellow]note[/]: {note}")
    if end.interrupted:
        console.print(
            f"[yellow]interrupted[/]: {end.segments} segments kept in {end.store}; "
            "continue with --resume"
        )


@dataclass(frozen=True)
class SoakAbort:
    """What stopped a soak (its first line is said), and the segments kept so far."""

    aborted: str
    segments: int
    store: str


def abort_text(a: SoakAbort) -> str:
    return (
        f"mallocbench: error: {a.aborted.splitlines()[0]}\n"
        f"  ({a.segments} segments measured so far are kept in {a.store})\n"
    )
