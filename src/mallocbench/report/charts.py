"""The report's charts as plain Plotly figure dicts, built from a run's analysis.

The HTML page draws them; nothing here computes a statistic: means, intervals and
relative values come from the `RunAnalysis` every other format reads too.
"""

from __future__ import annotations

import html as html_mod
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from mallocbench import units as fmt
from mallocbench.analysis.replay import ReplayAnalysis
from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.analysis.summary import CellSummary, RatioTable
from mallocbench.model.results import Cell, RunResult, SessionInfo
from mallocbench.report.growth import rate_text
from mallocbench.report.ratchet import with_event_marks
from mallocbench.report.soak import soak_charts
from mallocbench.report.words import cell_title, table_title
from mallocbench.units import slug
from mallocbench.workloads.catalogue import label_order

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


def setup_colors(setups: list[str] | tuple[str, ...]) -> dict[str, str]:
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(setups)}


def run_charts(analysis: RunAnalysis) -> tuple[dict[str, Chart], list[Chart]]:
    """The relative charts by table key, and every chart of the page in its order."""
    colors = setup_colors(analysis.setups)
    relative = {t.key: relative_chart(t, colors) for t in analysis.tables}
    charts = (
        list(relative.values())
        + [
            Chart(**spec)
            for spec in with_event_marks(soak_charts(analysis, colors), analysis, colors)
        ]
        + memory_time_charts(analysis.result, colors)
        + scalability_charts(analysis, colors)
        + per_step_charts(analysis, colors)
        + replay_charts(analysis.replay)
    )
    return relative, charts


REPLAY_RSS_CHART = "replay-rss"


def replay_charts(replay: ReplayAnalysis | None) -> list[Chart]:
    """The replay's heap RSS over time under each setup (its first good repeat), beside
    the ideal: the bytes the program had live, which no allocator can go below."""
    if replay is None or not replay.rows:
        return []
    colors = setup_colors([r.setup for r in replay.rows])
    mib = 1024 * 1024
    # With the recorded timing the lines are drawn over the trace's time (the analysis's
    # clock: a replay that fell behind is not drawn past the trace's end), beside the
    # ideal (the trace's own live bytes); flat out the clocks differ: the replay's
    # seconds, and no ideal.
    rec = replay.record
    on_trace = rec.timing == "recorded"
    data: list[dict[str, Any]] = []
    for row in replay.rows:
        if not row.rss_curve:
            continue
        clock = replay.clock(row.setup) if on_trace else None
        times = clock if clock is not None else [p[0] for p in row.rss_curve]
        growth = replay.growth.setup(row.setup) if replay.growth else None
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": row.setup + (f" {rate_text(growth.rss.slope)}" if growth else ""),
                "x": [round(t, 4) for t in times],
                "y": [round(p[1] / mib, 2) for p in row.rss_curve],
                "line": {"color": colors[row.setup]},
            }
        )
    ideal = (rec.ideal_curve or []) if on_trace else []
    if ideal:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "ideal (live bytes)",
                "x": [round(p[0], 3) for p in ideal],
                "y": [round(p[1] / mib, 2) for p in ideal],
                "line": {"color": "#777777", "dash": "dot"},
            }
        )
    if not data:
        return []
    return [
        Chart(
            id=REPLAY_RSS_CHART,
            title="Replay: heap RSS over time",
            data=data,
            layout={
                "xaxis": {
                    "title": {
                        "text": "seconds of the trace" if on_trace else "seconds of the replay"
                    }
                },
                "yaxis": {"title": {"text": "MiB"}, "rangemode": "tozero"},
            },
            note="One line per setup (its first repeat that ran"
            + (
                ", with its RSS slope per hour of the trace and 95% interval)"
                if replay.growth
                else ")"
            )
            + ("; dotted: the live requested bytes of the trace, the ideal." if ideal else "."),
            wide=True,
        )
    ]


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
            "hovertext": [f"{step}: {cell_title(c)}" for step, c in zip(steps, cells, strict=True)],
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
        f"Relative QPS, {table_title(table)}",
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
        columns: list[list[Any]] = [series.xs, series.rss, series.vsz, series.labels]
        for column in (*columns, *series.own.values()):
            column.append(None)
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
    rss_traces: list[dict[str, Any]] = [
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


def per_step_charts(analysis: RunAnalysis, colors: dict[str, str]) -> list[Chart]:
    """Bars per step and setup of p99 latency and per-op costs; threads in a dropdown."""
    result = analysis.result
    summaries = analysis.summaries
    setups = analysis.setups
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
             _cs_per_op, cs_note)
        )  # fmt: skip
    charts = []
    for engine in engines:
        for key, title, ytitle, getter, note in measures:
            data: list[dict[str, Any]] = []
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


def _cs_per_op(summary: CellSummary) -> float | None:
    return summary.cs_per_op


def scalability_charts(analysis: RunAnalysis, colors: dict[str, str]) -> list[Chart]:
    """QPS versus client threads per setup; the step is chosen in a dropdown."""
    result = analysis.result
    summaries = analysis.summaries
    threads_list = sorted({c.threads for c in result.cells})
    if len(threads_list) < 2:
        return []
    setups = analysis.setups
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
                        m, low, high = analysis.intervals[(setup, engine, step, threads)]
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
