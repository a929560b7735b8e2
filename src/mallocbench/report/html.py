"""The self-contained HTML report: verdict first, colored relative-QPS tables, charts.

One file per run, viewable offline: the CSS, the page's own script and plotly.js (from
the `plotly` Python package, so no npm and no CDN) are inlined. Charts are built here as
plain Plotly figure dicts and drawn by the page; a `data-charts-rendered` attribute on
<body> tells tests (and anyone curious) that every chart was drawn.

The relative tables are `analysis.summary.relative_tables`, the ones every other report
prints: a relative value is the ratio of two means over repeats with a log-scale 95%
interval, and its verdict (faster, slower, same within the run's min_effect, not
significant) is `analysis.stats.classify`'s. One repeat gives no interval and the page
says so instead of inventing one.
"""

from __future__ import annotations

import base64
import gzip
import html as html_mod
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from mallocbench import formatting as fmt
from mallocbench.analysis import stats
from mallocbench.analysis.client import client_cpu_warnings
from mallocbench.analysis.comparison import Comparison
from mallocbench.analysis.recommend import recommend
from mallocbench.analysis.sla import SlaStatus, sla_results
from mallocbench.analysis.summary import (
    CellSummary,
    MemoryRow,
    RatioTable,
    adaptive_lines,
    color_rule,
    cs_per_op,
    exploratory_note,
    has_accounting,
    has_caps,
    memory_rows,
    min_effect_of,
    percent,
    relative_tables,
    setup_order,
    significance_rule,
    slug,
    summarize_run,
    unit_note,
    vsz_note,
)
from mallocbench.analysis.verdict import VerdictRow, verdict_rows
from mallocbench.files import write_text_atomic
from mallocbench.report.facts import headline_facts, run_facts, setup_differences, setup_table
from mallocbench.report.recommend import engine_lines
from mallocbench.report.soak import soak_charts, soak_notes, soak_table
from mallocbench.report.tables import (
    MemoryColumn,
    memory_columns,
    memory_notes,
    memory_unit,
    run_notes,
)
from mallocbench.results import STATUS_OK, Cell, RunResult, SessionInfo
from mallocbench.workloads.catalogue import GROUPS, label_order

_HERE = Path(__file__).parent
# Colorblind-safe (Okabe-Ito) so setups stay distinguishable in every chart.
PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#000000",
)


# ---------------------------------------------------------------- memory table


@dataclass
class MemoryView:
    """One row of the page's memory table: the text of each column, by header."""

    engine: str
    setup: str
    is_base: bool
    accounted_title: str  # where the server's account was taken, for hover
    cells: dict[str, str]

    def column(self, header_start: str) -> str:
        """The text under the header starting with `header_start` ("-": not shown)."""
        return next((t for h, t in self.cells.items() if h.startswith(header_start)), "-")

    @property
    def accounted(self) -> str:
        return self.column("server accounts for")

    @property
    def unaccounted(self) -> str:
        return self.column("unaccounted")

    @property
    def heap_ratio(self) -> str:
        return self.column("heap ratio")

    @property
    def memory_limit(self) -> str:
        return self.column("memory cap")

    @property
    def peak_cgroup(self) -> str:
        return self.column("peak cgroup charge")

    @property
    def oom(self) -> str:
        return self.column("OOM")


def memory_columns_html(result: RunResult, rows: list[MemoryRow]) -> list[MemoryColumn]:
    """The columns every format shows (tables.memory_columns) and what the page adds:
    RSS against the base, VSZ over RSS (only when VSZ is not mostly reserved), the cache."""
    base_rss = {r.engine: r.peak_rss_bytes for r in rows if r.setup == result.base_setup}

    def vs_base(r: MemoryRow) -> str:
        base = base_rss.get(r.engine)
        return fmt.ratio(r.peak_rss_bytes / base if r.peak_rss_bytes and base else None)

    # Each beside the column it explains; VSZ/RSS only where VSZ is shown at all.
    out: list[MemoryColumn] = []
    for header, cell in memory_columns(rows):
        if header == "RSS/cache":
            out.append(("cache", lambda r: fmt.mib(r.cache_bytes)))
        out.append((header, cell))
        if header.startswith("peak VSZ"):
            out.append(("VSZ / RSS", _vsz_per_rss))
        elif header.startswith("peak RSS"):
            out.append(("RSS vs base", vs_base))
    return out


def _vsz_per_rss(r: MemoryRow) -> str:
    if r.peak_vsz_bytes and r.peak_rss_bytes:
        return fmt.ratio(r.peak_vsz_bytes / r.peak_rss_bytes)
    return "-"


def memory_view(result: RunResult, rows: list[MemoryRow]) -> list[MemoryView]:
    columns = memory_columns_html(result, rows)
    out = []
    for r in rows:
        title = ""
        if r.accounted_in:
            title = f"account taken at the end of {r.accounted_in}"
            if r.rss_at_accounting_bytes is not None:
                title += f", RSS then {fmt.mib(r.rss_at_accounting_bytes)}"
        cells = {header: cell(r) for header, cell in columns}
        out.append(MemoryView(r.engine, r.setup, r.setup == result.base_setup, title, cells))
    return out


# ---------------------------------------------------------------- charts


@dataclass
class Chart:
    id: str
    title: str
    data: list[dict[str, Any]]
    layout: dict[str, Any]
    note: str = ""
    wide: bool = False

    def spec(self) -> dict[str, Any]:
        layout = {
            "margin": {"l": 60, "r": 20, "t": 30, "b": 60},
            "height": 360,
            "font": {"size": 12},
            # Anchored at its top so a legend of many rows grows down, not into the axis.
            "legend": {"orientation": "h", "y": -0.22, "yanchor": "top"},
            "hovermode": "closest",
            **self.layout,
        }
        return {"id": self.id, "data": self.data, "layout": layout}


def _colors(result: RunResult) -> dict[str, str]:
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(setup_order(result))}


def short_labels(steps: list[str]) -> list[str]:
    """Step names without their range where the run used only one range of that step.

    Half-width charts cannot fit "read-only-order range=1000" under each bar.
    """
    names = [s.split(" ", 1)[0] for s in steps]
    return [
        name if names.count(name) == 1 else step.replace(" range=", " r=")
        for name, step in zip(names, steps, strict=True)
    ]


def relative_chart(table: RatioTable, colors: dict[str, str]) -> Chart:
    ordered = [r for _, _, rows, _ in table.groups() for r in rows]
    steps = [r.step for r in ordered]
    x = short_labels(steps)
    ratios = [r.cells[s].ratio for r in ordered for s in table.columns]
    top = max([v for v in ratios if v] + [1.0]) * 1.25
    data = []
    for setup in table.columns:
        cells = [r.cells[setup] for r in ordered]
        ys = [c.ratio for c in cells]
        # With few noisy repeats an interval can reach far above the bars; such whiskers
        # are drawn to the chart's edge rather than stretching its axis.
        up = [min(c.high, top) - c.ratio if c.has_interval and c.ratio else None for c in cells]
        down = [c.ratio - max(c.low, 0) if c.has_interval and c.ratio else None for c in cells]
        trace: dict[str, Any] = {
            "type": "bar",
            "name": setup,
            "x": x,
            "y": ys,
            "marker": {"color": colors.get(setup)},
            "hovertext": [f"{step}: {c.title}" for step, c in zip(steps, cells, strict=True)],
            "hoverinfo": "text+name",
        }
        if any(v is not None and math.isfinite(v) for v in up):
            trace["error_y"] = {
                "type": "data",
                "array": [v if v is not None and math.isfinite(v) else 0 for v in up],
                "arrayminus": [v if v is not None and math.isfinite(v) else 0 for v in down],
                "thickness": 1,
                "width": 3,
            }
        data.append(trace)
    layout = {
        "barmode": "group",
        # Half-width charts: whole step names fit only at an angle, with room below them;
        # the legend goes on top so the labels cannot run into it.
        "xaxis": {"type": "category", "tickangle": -35, "automargin": True},
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "margin": {"l": 60, "r": 20, "t": 60, "b": 20},
        "yaxis": {"title": {"text": "relative QPS (1.0 = base)"}, "range": [0, top]},
        "shapes": [
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": 1,
                "y1": 1,
                "line": {"color": "#555", "dash": "dot", "width": 1},
            }
        ],
    }
    return Chart(
        f"chart-{table.key}",
        f"Relative QPS, {table.title}",
        data,
        layout,
        "Bars: mean QPS over repeats divided by the base's; whiskers: 95% interval "
        "(none with one repeat; cut at the chart's edge when very wide).",
    )


# Sample.extra keys drawn beside RSS: what the server says it holds, same color as its
# session, so the distance to the RSS line is the memory it cannot name.
SERVER_LINES = (
    ("server_memory_used_bytes", "Memory_used", "dash"),
    ("rocksdb_block_cache_usage_bytes", "block cache", "dot"),
)
# A capped server's cgroup charge: what its cap acts on, drawn like the server's own lines.
CHARGE_LINE = ("cgroup_bytes", "cgroup charge", "dashdot")
DASH_WORDS = {"dash": "dashed", "dot": "dotted", "dashdot": "dash-dotted"}
REPEAT_MARKERS = ("circle", "square", "diamond", "triangle-up")


def memory_time_charts(result: RunResult, colors: dict[str, str]) -> list[Chart]:
    """RSS and VSZ over each session's lifetime, one line per session, per engine."""
    charts = []
    engines = list(dict.fromkeys(c.engine for c in result.cells))
    sessions = {s.id: s for s in result.sessions}
    for engine in engines:
        by_session: dict[str, list[Cell]] = defaultdict(list)
        for cell in result.cells:
            if cell.engine == engine and cell.samples:
                by_session[cell.session].append(cell)
        if by_session:
            charts += _engine_memory_charts(engine, by_session, sessions, colors)
    return charts


@dataclass
class _SessionSeries:
    """One session's samples in GiB against seconds since its server started."""

    xs: list[float | None] = field(default_factory=list)
    rss: list[float | None] = field(default_factory=list)
    vsz: list[float | None] = field(default_factory=list)
    own: dict[str, list[float | None]] = field(
        default_factory=lambda: {key: [] for key, _, _ in (*SERVER_LINES, CHARGE_LINE)}
    )
    labels: list[str | None] = field(default_factory=list)
    boundaries: list[tuple[float, str]] = field(default_factory=list)  # (x, step @threads)


def _session_series(cells: list[Cell], start: float) -> _SessionSeries:
    series = _SessionSeries()
    for cell in cells:
        for sample in cell.samples:
            series.xs.append(round(sample.t - start, 2))
            series.rss.append(sample.rss_bytes / fmt.GB if sample.rss_bytes else None)
            series.vsz.append(sample.vsz_bytes / fmt.GB if sample.vsz_bytes else None)
            for key, values in series.own.items():
                value = (sample.extra or {}).get(key)
                values.append(value / fmt.GB if value is not None else None)
            series.labels.append(f"{cell.step} @{cell.threads}")
        # A gap between cells (warmup, restarts) must not be drawn as a line.
        for values in (series.xs, series.rss, series.vsz, series.labels, *series.own.values()):
            values.append(None)
        if cell.started_at:
            series.boundaries.append((cell.started_at - start, f"{cell.step} @{cell.threads}"))
    return series


def _engine_memory_charts(
    engine: str,
    by_session: dict[str, list[Cell]],
    sessions: dict[str, SessionInfo],
    colors: dict[str, str],
) -> list[Chart]:
    rss_traces: list[dict[str, Any]] = []
    vsz_traces: list[dict[str, Any]] = []
    shown: set[str] = set()  # server lines drawn
    caps: dict[tuple[str, int], None] = {}  # (setup, memory cap), in order
    boundaries: list[tuple[float, str]] = []
    for index, (session_id, cells) in enumerate(by_session.items()):
        cells.sort(key=lambda c: c.started_at or (c.samples[0].t if c.samples else 0))
        info = sessions.get(session_id)
        start = (
            info.started_at
            if info and info.started_at
            else min(c.started_at or c.samples[0].t for c in cells)
        )
        series = _session_series(cells, start)
        if index == 0:
            # Every session's step starts would crowd the axis; the note names this one.
            boundaries = series.boundaries
        rss, vsz, drawn = _session_traces(session_id, cells[0], series, colors)
        rss_traces += rss
        vsz_traces.append(vsz)
        shown |= drawn
        if info is not None and info.memory_limit_bytes:
            caps[(cells[0].setup, info.memory_limit_bytes)] = None
    first = next(iter(by_session))
    shapes = _boundary_lines(boundaries) + _cap_lines(caps, colors)
    annotations = _boundary_labels(boundaries)
    server_note = _server_lines_note(shown, caps)
    return [
        Chart(
            f"chart-{kind.lower()}-{slug(engine)}",
            f"{kind} over time, {engine}",
            traces,
            {
                "xaxis": {"title": {"text": "seconds since the server started"}},
                "yaxis": {"title": {"text": f"{kind} (GiB)"}, "rangemode": "tozero"},
                "shapes": shapes,
                "annotations": annotations,
            },
            f"One line per session (color: setup, marker: repeat). Dotted verticals: "
            f"step starts in session {first}; hover a line for the step it ran."
            + (server_note if kind == "RSS" else ""),
        )
        for kind, traces in (("RSS", rss_traces), ("VSZ", vsz_traces))
    ]


def _session_traces(
    session_id: str, first_cell: Cell, series: _SessionSeries, colors: dict[str, str]
) -> tuple[list[dict[str, Any]], dict[str, Any], set[str]]:
    """A session's RSS line and its server lines, its VSZ line, and the server lines drawn."""
    setup = first_cell.setup
    repeat = first_cell.repeat
    common = {
        "type": "scatter",
        "mode": "lines+markers",
        # Dashes are taken by the server's own lines, so repeats differ by marker.
        "marker": {"size": 5, "symbol": REPEAT_MARKERS[repeat % len(REPEAT_MARKERS)]},
        "name": session_id,
        "x": series.xs,
        "line": {"color": colors.get(setup), "width": 1.5},
        "customdata": series.labels,
        "legendgroup": setup,
    }
    rss_traces = [
        {**common, "y": series.rss, "hovertemplate": "RSS %{y:.3f} GiB, %{customdata}<extra>"
         + html_mod.escape(session_id) + "</extra>"}
    ]  # fmt: skip
    vsz_trace = {**common, "y": series.vsz, "hovertemplate": "%{y:.2f} GiB, %{customdata}<extra>"
                 + html_mod.escape(session_id) + "</extra>"}  # fmt: skip
    shown: set[str] = set()
    for key, label, dash in (*SERVER_LINES, CHARGE_LINE):
        if not any(v is not None for v in series.own[key]):
            continue
        shown.add(label)
        name = f"{session_id} {label}"
        # Out of the legend (the note explains the dashes); they toggle with their
        # setup's RSS lines through the shared legendgroup.
        rss_traces.append(
            {**common, "mode": "lines", "name": name, "y": series.own[key], "showlegend": False,
             "line": {"color": colors.get(setup), "width": 1.2, "dash": dash},
             "hovertemplate": f"{label} %{{y:.3f}} GiB, %{{customdata}}<extra>"
             + html_mod.escape(session_id) + "</extra>"}
        )  # fmt: skip
    return rss_traces, vsz_trace, shown


def _boundary_lines(boundaries: list[tuple[float, str]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": x,
            "x1": x,
            "y0": 0,
            "y1": 1,
            "line": {"color": "#999", "width": 1, "dash": "dot"},
        }
        for x, _ in boundaries
    ]


def _cap_lines(caps: dict[tuple[str, int], None], colors: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": cap / fmt.GB,
            "y1": cap / fmt.GB,
            "line": {"color": colors.get(setup), "width": 1, "dash": "dashdot"},
        }
        for setup, cap in caps
    ]


def _boundary_labels(boundaries: list[tuple[float, str]]) -> list[dict[str, Any]]:
    return [
        {
            "x": x,
            "y": 1,
            "xref": "x",
            "yref": "paper",
            "text": label.split(" range=")[0] + label[label.rfind(" @") :],
            "showarrow": False,
            "textangle": -90,
            "xanchor": "left",
            "yanchor": "top",
            "font": {"size": 9, "color": "#777"},
        }
        for x, label in boundaries
    ]


def _server_lines_note(shown: set[str], caps: dict[tuple[str, int], None]) -> str:
    """What the RSS chart's dashed, dotted and dash-dotted lines are, for those drawn."""
    server_note = ""
    if shown - {CHARGE_LINE[1]}:
        drawn = "; ".join(
            f"{DASH_WORDS[dash]}: the server's own {label}"
            for _, label, dash in SERVER_LINES
            if label in shown
        )
        server_note = (
            f" {drawn[0].upper()}{drawn[1:]} (the gap up to RSS is what it does not name)."
        )
    if CHARGE_LINE[1] in shown or caps:
        server_note += (
            " Dash-dotted: a capped server's cgroup charge, and across the chart its "
            "memory cap, which acts on that charge, not on RSS."
        )
    return server_note


def _threads_dropdown(threads_list: list[int], traces_per: int) -> list[dict[str, Any]]:
    buttons = []
    for i, threads in enumerate(threads_list):
        visible = [j // traces_per == i for j in range(traces_per * len(threads_list))]
        buttons.append(
            {"label": f"{threads} thread{'s' if threads != 1 else ''}", "method": "restyle",
             "args": [{"visible": visible}]}
        )  # fmt: skip
    return [
        {"buttons": buttons, "direction": "down", "x": 1, "xanchor": "right", "y": 1.12,
         "yanchor": "top", "showactive": True}
    ]  # fmt: skip


def per_step_charts(
    result: RunResult,
    summaries: dict[tuple[str, str, str, int], CellSummary],
    colors: dict[str, str],
) -> list[Chart]:
    """Bars per step and setup of p99 latency and per-op costs; threads in a dropdown."""
    setups = setup_order(result)
    engines = list(dict.fromkeys(c.engine for c in result.cells))
    threads_list = sorted({c.threads for c in result.cells})
    steps = sorted({c.step for c in result.cells}, key=label_order)
    has = {name for s in summaries.values() for name in s.metrics}

    measures: list[tuple[str, str, str, Any, str]] = [
        ("p99", "Latency p99 per step", "p99 latency (ms)", lambda s: s.p99_ms,
         "Median over repeats of the cells' p99 latency."),
    ]  # fmt: skip
    if "server_cpu_us_per_op" in has:
        measures.append(
            ("cpu", "Server CPU per operation (cpu/o)", "server CPU µs per operation",
             lambda s: s.metrics.get("server_cpu_us_per_op"),
             "Server process CPU time (user + system) per query, mean over repeats.")
        )  # fmt: skip
    if has & {"system_cs_per_op", "voluntary_cs_per_op", "involuntary_cs_per_op"}:
        cs_note = (
            "System-wide context switches per query (vmstat cs / queries), as the published "
            "studies count them; mean over repeats."
            if "system_cs_per_op" in has
            else "Voluntary + involuntary context switches of the server per query."
        )
        measures.append(
            ("cs", "Context switches per operation (cs/o)", "context switches per op",
             cs_per_op, cs_note)
        )  # fmt: skip
    charts = []
    for engine in engines:
        for key, title, ytitle, getter, note in measures:
            data = []
            engine_steps = [
                s for s in steps if any(k[1] == engine and k[2] == s for k in summaries)
            ]
            x = short_labels(engine_steps)
            for t_index, threads in enumerate(threads_list):
                for setup in setups:
                    ys = []
                    for step in engine_steps:
                        summary = summaries.get((setup, engine, step, threads))
                        value = getter(summary) if summary and summary.qps_values else None
                        ys.append(value)
                    data.append(
                        {"type": "bar", "name": setup, "x": x, "y": ys,
                         "marker": {"color": colors.get(setup)}, "visible": t_index == 0,
                         "customdata": engine_steps,
                         "hovertemplate": f"%{{customdata}}: %{{y:.3g}}<extra>"
                         f"{html_mod.escape(setup)}, {threads} thr</extra>"}
                    )  # fmt: skip
            if not any(v is not None for trace in data for v in trace["y"]):
                continue
            layout: dict[str, Any] = {
                "barmode": "group",
                "yaxis": {"title": {"text": ytitle}, "rangemode": "tozero"},
            }
            if len(threads_list) > 1:
                layout["updatemenus"] = _threads_dropdown(threads_list, len(setups))
                layout["margin"] = {"l": 60, "r": 20, "t": 45, "b": 60}
                note = note + " Choose the thread count at the top right."
            else:
                note = note + f" {threads_list[0]} client thread(s)."
            charts.append(Chart(f"chart-{key}-{slug(engine)}", f"{title}, {engine}", data,
                                layout, note))  # fmt: skip
    return charts


def scalability_charts(
    result: RunResult,
    summaries: dict[tuple[str, str, str, int], CellSummary],
    colors: dict[str, str],
) -> list[Chart]:
    """QPS versus client threads per setup; the step is chosen in a dropdown."""
    threads_list = sorted({c.threads for c in result.cells})
    if len(threads_list) < 2:
        return []
    setups = setup_order(result)
    charts = []
    for engine in dict.fromkeys(c.engine for c in result.cells):
        steps = sorted({k[2] for k in summaries if k[1] == engine}, key=label_order)
        data = []
        for s_index, step in enumerate(steps):
            for setup in setups:
                ys: list[float | None] = []
                err: list[float] = []
                err_minus: list[float] = []
                for threads in threads_list:
                    summary = summaries.get((setup, engine, step, threads))
                    if summary and summary.qps_values:
                        m, low, high = stats.mean_ci(summary.qps_values)
                        ys.append(m)
                        err.append(0 if math.isnan(low) else high - m)
                        err_minus.append(0 if math.isnan(low) else m - max(low, 0.0))
                    else:
                        ys.append(None)
                        err.append(0)
                        err_minus.append(0)
                trace: dict[str, Any] = {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": setup,
                    "x": threads_list,
                    "y": ys,
                    "line": {"color": colors.get(setup)},
                    "visible": s_index == 0,
                    "hovertemplate": "%{y:,.0f} QPS at %{x} threads<extra>"
                    + html_mod.escape(setup)
                    + "</extra>",
                }
                if any(err):
                    trace["error_y"] = {
                        "type": "data", "array": err, "arrayminus": err_minus, "thickness": 1
                    }  # fmt: skip
                data.append(trace)
        buttons = []
        for s_index, step in enumerate(steps):
            visible = [i // len(setups) == s_index for i in range(len(data))]
            buttons.append({"label": step, "method": "restyle", "args": [{"visible": visible}]})
        charts.append(
            Chart(
                f"chart-threads-{slug(engine)}",
                f"QPS versus client threads, {engine}",
                data,
                {
                    "xaxis": {"title": {"text": "client threads"}, "tickvals": threads_list},
                    "yaxis": {"title": {"text": "QPS"}, "rangemode": "tozero"},
                    "updatemenus": [
                        {
                            "buttons": buttons,
                            "direction": "down",
                            "x": 1,
                            "xanchor": "right",
                            "y": 1.12,
                            "yanchor": "top",
                        }
                    ],  # fmt: skip
                    "margin": {"l": 60, "r": 20, "t": 45, "b": 60},
                },
                "Mean QPS over repeats with 95% interval whiskers. Choose the step at the top "
                "right.",
            )
        )
    return charts


# ---------------------------------------------------------------- rendering


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["ratio"] = fmt.ratio
    env.filters["qps"] = fmt.qps
    env.globals["color_rule"] = color_rule
    env.globals["percent"] = percent
    env.globals["significance_rule"] = significance_rule
    return env


@cache
def _static(name: str) -> str:
    return (_HERE / "static" / name).read_text()


@cache
def plotly_js() -> str:
    """plotly.js from the Python package, so the page needs no network to draw."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def plotly_file_name() -> str:
    """The shared copy's name: versioned, so reports of different versions can share a
    directory and an old copy is never taken for a new one."""
    from plotly.offline.offline import get_plotlyjs_version

    return f"plotly-{get_plotlyjs_version()}.min.js"


@cache
def plotly_gzip_base64() -> str:
    """plotly.js gzipped for a self-contained page: 1.9 MB of base64 instead of 4.8 MB
    of script; the page inflates it with the browser's DecompressionStream."""
    return base64.b64encode(gzip.compress(plotly_js().encode(), 9, mtime=0)).decode()


def write_plotly_beside(page: Path) -> str:
    """Write the shared plotly.js next to `page` unless it is there; its name for the page.

    Every report in a directory loads the one copy, so each page stays small.
    """
    name = plotly_file_name()
    target = page.parent / name
    if not target.is_file():
        # Through a temporary name that a failure removes: a partial 4.8 MB left behind
        # would keep a full disk full.
        write_text_atomic(target, plotly_js())
    return name


def _charts_json(charts: list[Chart]) -> str:
    # "</" inside a <script> block would end it early; "<\/" is the same JSON string.
    text = json.dumps([c.spec() for c in charts], separators=(",", ":"), allow_nan=False,
                      default=str)  # fmt: skip
    return text.replace("</", "<\\/")


def _clean_nan(value: Any) -> Any:
    """JSON has no NaN: missing values become null, which Plotly leaves as gaps."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_nan(v) for v in value]
    return value


def _verdict_groups(rows: list[VerdictRow]) -> list[str]:
    """Only groups that ran get a verdict column; the catalogue has more than most runs."""
    present = {g for r in rows for g in r.group_geomeans}
    return [g for g in GROUPS if g in present]


def _page(template: str, charts: list[Chart], plotly_src: str | None = None, **context: Any) -> str:
    """The page; charts load plotly.js from `plotly_src` beside it, else from a gzipped
    copy inside the page (self-contained)."""
    for chart in charts:
        chart.data = _clean_nan(chart.data)
        chart.layout = _clean_nan(chart.layout)
    return (
        _environment()
        .get_template(template)
        .render(
            charts=charts,
            charts_json=jinja2.utils.markupsafe.Markup(_charts_json(charts)),
            css=jinja2.utils.markupsafe.Markup(_static("report.css")),
            page_js=jinja2.utils.markupsafe.Markup(_static("report.js")),
            plotly_src=plotly_src,
            plotly_gz=None if plotly_src else jinja2.utils.markupsafe.Markup(plotly_gzip_base64()),
            groups=GROUPS,
            **context,
        )
    )


@dataclass
class ReportContext:
    """Everything the run page shows, computed once (tests inspect it too)."""

    result: RunResult
    tables: list[RatioTable]
    verdict: list[VerdictRow]
    memory: list[MemoryView]
    charts: list[Chart]
    relative_charts: dict[str, Chart]
    facts: list[tuple[str, str]]
    differences: list[tuple[str, dict[str, str]]]
    problems: list[Cell] = field(default_factory=list)
    min_effect: float = 0.0
    adaptive: list[str] = field(default_factory=list)
    sla: list[tuple[str, SlaStatus]] = field(default_factory=list)
    client_warnings: list[str] = field(default_factory=list)
    memory_unit: str = "GiB"
    memory_headers: list[str] = field(default_factory=list)
    memory_notes: list[str] = field(default_factory=list)  # what the memory columns mean
    notes: list[str] = field(default_factory=list)
    accounting: bool = False  # any memory row has the server's account of its RSS
    caps: bool = False  # any memory row has a memory cap, a cgroup charge or an OOM kill
    vsz_note: str | None = None
    unit_note: str = ""
    exploratory: str | None = None  # why nothing on the page is a finding, when so
    # A soak run's section: (header, rows) and its sentences; empty for other runs.
    soak: tuple[list[str], list[list[str]]] | None = None
    soak_notes: list[str] = field(default_factory=list)
    # Per engine: the decision line, then the claims behind it (report.recommend's words).
    recommendation: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def color_rule(self) -> str:
        return color_rule(self.min_effect)

    @property
    def significance_rule(self) -> str:
        return significance_rule(self.min_effect)


def build_context(result: RunResult, min_effect: float | None = None) -> ReportContext:
    """The page's content; `min_effect` overrides the run's own."""
    effect = min_effect_of(result, min_effect)
    summaries = summarize_run(result)
    tables = relative_tables(result, effect, summaries)
    colors = _colors(result)
    relative = {t.key: relative_chart(t, colors) for t in tables}
    charts = (
        list(relative.values())
        + [Chart(**spec) for spec in soak_charts(result, colors)]
        + memory_time_charts(result, colors)
        + scalability_charts(result, summaries, colors)
        + per_step_charts(result, summaries, colors)
    )
    rows = memory_rows(result)
    return ReportContext(
        result=result,
        tables=tables,
        verdict=verdict_rows(result, tables, rows),
        memory=memory_view(result, rows),
        memory_headers=[h for h, _ in memory_columns_html(result, rows)],
        charts=charts,
        relative_charts=relative,
        facts=run_facts(result.metadata),
        differences=setup_differences(result),
        problems=[c for c in result.cells if c.status != STATUS_OK],
        min_effect=effect,
        adaptive=adaptive_lines(result),
        sla=sla_results(result.cells),
        client_warnings=client_cpu_warnings(result.cells),
        notes=run_notes(result),
        memory_unit=memory_unit(rows),
        accounting=has_accounting(rows),
        caps=has_caps(rows),
        memory_notes=memory_notes(rows),
        vsz_note=vsz_note(rows),
        unit_note=unit_note(tables),
        exploratory=exploratory_note(result),
        recommendation=_recommendation(result, effect),
        soak=soak_table(result),
        soak_notes=soak_notes(result),
    )


def _recommendation(result: RunResult, min_effect: float) -> list[tuple[str, list[str]]]:
    rec = recommend(result, min_effect=min_effect)
    if rec.exploratory:
        return []
    out = []
    for engine in rec.engines:
        headline, *details = engine_lines(engine, rec)
        out.append((headline, [line.strip().removeprefix("- ") for line in details]))
    return out


def render_html(
    result: RunResult, min_effect: float | None = None, plotly_src: str | None = None
) -> str:
    ctx = build_context(result, min_effect)
    beside_tables = {c.id for c in ctx.relative_charts.values()}
    other_charts = [c for c in ctx.charts if c.id not in beside_tables]
    return _page(
        "report.html.j2",
        ctx.charts,
        plotly_src,
        ctx=ctx,
        result=result,
        headline=headline_facts(result.metadata),
        setup_columns=setup_table(result.setups),
        verdict_groups=_verdict_groups(ctx.verdict),
        other_charts=other_charts,
        title=f"mallocbench: {result.experiment}",
    )


def write_html(result: RunResult, path: Path, self_contained: bool = False) -> Path:
    """Write the report; plotly.js goes beside it (shared by the directory's reports)
    unless `self_contained`. Returns the page's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    source = None if self_contained else write_plotly_beside(path)
    write_text_atomic(path, render_html(result, plotly_src=source))
    return path


def write_compare_html(comparison: Comparison, path: Path, self_contained: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    source = None if self_contained else write_plotly_beside(path)
    write_text_atomic(path, render_compare_html(comparison, source))
    return path


def render_compare_html(comparison: Comparison, plotly_src: str | None = None) -> str:
    colors = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(comparison.setups)}
    charts = [relative_chart(t, colors) for t in comparison.tables]
    for chart in charts:
        chart.title = chart.title.replace("Relative QPS", "B / A QPS")
        chart.note = "Bars: mean QPS of run B over run A's; whiskers: 95% interval."
        chart.layout["yaxis"] = {"title": {"text": "QPS(B) / QPS(A)"}}
    return _page(
        "compare.html.j2",
        charts,
        plotly_src,
        cmp=comparison,
        verdict_groups=_verdict_groups(comparison.verdict),
        chart_by_key={t.key: c for t, c in zip(comparison.tables, charts, strict=True)},
        facts_a=dict(run_facts(comparison.a.metadata)),
        facts_b=dict(run_facts(comparison.b.metadata)),
        title=f"mallocbench compare: {comparison.a.run_id} vs {comparison.b.run_id}",
    )
