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
import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from mallocbench import units as fmt
from mallocbench.analysis.comparison import Comparison
from mallocbench.analysis.criteria import Recommendation
from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.analysis.sla import SlaStatus
from mallocbench.analysis.summary import MemoryRow, RatioTable
from mallocbench.analysis.verdict import VerdictRow
from mallocbench.files import write_text_atomic
from mallocbench.model.results import Cell, RunResult
from mallocbench.report.backends import TITLE as BACKENDS_TITLE
from mallocbench.report.backends import backend_notes, backend_table
from mallocbench.report.charts import PALETTE, REPLAY_RSS_CHART, Chart, relative_chart, run_charts
from mallocbench.report.facts import headline_facts, run_facts, setup_differences, setup_table
from mallocbench.report.ratchet import ratchet_notes, ratchet_table
from mallocbench.report.recommend import engine_lines
from mallocbench.report.replay import ReplayView, html_view
from mallocbench.report.soak import soak_notes, soak_table
from mallocbench.report.tables import (
    MemoryColumn,
    MemoryRows,
    has_accounting,
    has_caps,
    memory_columns,
    memory_notes,
    memory_unit,
    run_notes,
)
from mallocbench.report.words import (
    adaptive_lines,
    cell_class,
    cell_interval,
    cell_mark,
    cell_text,
    cell_title,
    client_cpu_warnings,
    color_rule,
    difference_text,
    exploratory_note,
    finding_text,
    group_detail_text,
    one_sided_text,
    significance_rule,
    sla_text,
    table_caption,
    table_title,
    unit_note,
    unmeasured_text,
    verdict_note,
    verdict_rss_finding,
    verdict_rss_interval,
    verdict_rss_text,
    vsz_note,
)
from mallocbench.units import percent
from mallocbench.workloads.catalogue import GROUPS

_HERE = Path(__file__).parent
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


def memory_columns_html(
    result: RunResult, rows: MemoryRows, vsz_reserved: bool
) -> list[MemoryColumn]:
    """The columns every format shows (tables.memory_columns) and what the page adds:
    RSS against the base, VSZ over RSS (only when VSZ is not mostly reserved), the cache."""
    base_rss = {r.engine: r.peak_rss_bytes for r in rows if r.setup == result.base_setup}

    def vs_base(r: MemoryRow) -> str:
        base = base_rss.get(r.engine)
        return fmt.ratio(r.peak_rss_bytes / base if r.peak_rss_bytes and base else None)

    # Each beside the column it explains; VSZ/RSS only where VSZ is shown at all.
    out: list[MemoryColumn] = []
    for header, cell in memory_columns(rows, vsz_reserved):
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


def memory_view(analysis: RunAnalysis) -> list[MemoryView]:
    result, rows = analysis.result, analysis.memory
    columns = memory_columns_html(result, rows, analysis.reserved_vsz_bytes is not None)
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
    env.filters["gb"] = fmt.gb
    env.filters["cell_class"] = cell_class
    env.filters["cell_title"] = cell_title
    env.filters["cell_text"] = cell_text
    env.filters["cell_mark"] = cell_mark
    env.filters["cell_interval"] = cell_interval
    env.filters["difference_text"] = difference_text
    env.filters["one_sided_text"] = one_sided_text
    for word in (
        finding_text,
        unmeasured_text,
        group_detail_text,
        verdict_note,
        verdict_rss_text,
        verdict_rss_interval,
        verdict_rss_finding,
    ):
        env.filters[word.__name__] = word
    env.filters["sla_text"] = sla_text
    env.filters["table_title"] = table_title
    env.filters["table_caption"] = table_caption
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


# Significant digits a chart's numbers keep: far more than a pixel needs, and few enough
# that the last bits, which differ between CPUs' vector paths in numpy's sums, never show
# (a page must not change with the host that drew it).
CHART_DIGITS = 10


def _chart_values(value: Any) -> Any:
    """JSON has no NaN: missing values become null, which Plotly leaves as gaps; other
    floats keep CHART_DIGITS significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{CHART_DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _chart_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_chart_values(v) for v in value]
    return value


def _verdict_groups(rows: list[VerdictRow]) -> list[str]:
    """Only groups that ran get a verdict column; the catalogue has more than most runs."""
    present = {g for r in rows for g in r.group_geomeans}
    return [g for g in GROUPS if g in present]


def page(template: str, charts: list[Chart], plotly_src: str | None = None, **context: Any) -> str:
    """The page; charts load plotly.js from `plotly_src` beside it, else from a gzipped
    copy inside the page (self-contained)."""
    for chart in charts:
        chart.data = _chart_values(chart.data)
        chart.layout = _chart_values(chart.layout)
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
    # A soak's events: the ratchet table (header, rows) and its sentences; empty without.
    ratchet: tuple[list[str], list[list[str]]] | None = None
    ratchet_notes: list[str] = field(default_factory=list)
    # The events' own backends (report.backends): (header, rows) and sentences; empty without.
    backends: tuple[list[str], list[list[str]]] | None = None
    backend_notes: list[str] = field(default_factory=list)
    # Per engine: the decision line, then the claims behind it (report.recommend's words).
    recommendation: list[tuple[str, list[str]]] = field(default_factory=list)
    replay: ReplayView | None = None  # a replay run's section (mallocbench replay)

    @property
    def color_rule(self) -> str:
        return color_rule(self.min_effect)

    @property
    def significance_rule(self) -> str:
        return significance_rule(self.min_effect)


def build_context(analysis: RunAnalysis) -> ReportContext:
    """The page's content, from the run's analysis."""
    result, rows = analysis.result, analysis.memory
    relative, charts = run_charts(analysis)
    vsz_reserved = analysis.reserved_vsz_bytes is not None
    return ReportContext(
        result=result,
        tables=list(analysis.tables),
        verdict=list(analysis.verdict),
        memory=memory_view(analysis),
        memory_headers=[h for h, _ in memory_columns_html(result, rows, vsz_reserved)],
        charts=charts,
        relative_charts=relative,
        facts=run_facts(result.metadata),
        differences=setup_differences(result),
        problems=list(analysis.problems),
        min_effect=analysis.min_effect,
        adaptive=adaptive_lines(analysis.adaptive),
        sla=list(analysis.sla),
        client_warnings=client_cpu_warnings(analysis.client_bound),
        notes=run_notes(analysis),
        memory_unit=memory_unit(rows),
        accounting=has_accounting(rows),
        caps=has_caps(rows),
        memory_notes=memory_notes(rows),
        vsz_note=vsz_note(analysis.reserved_vsz_bytes),
        unit_note=unit_note(analysis.tables),
        exploratory=exploratory_note(analysis.exploratory),
        recommendation=_recommendation(analysis.recommendation),
        soak=soak_table(analysis),
        soak_notes=soak_notes(analysis),
        replay=html_view(analysis.replay),
        ratchet=ratchet_table(analysis),
        ratchet_notes=ratchet_notes(analysis),
        backends=backend_table(analysis),
        backend_notes=backend_notes(analysis),
    )


def code_spans(text: str) -> str:
    """The words' `command` spans as <code>, the rest escaped: a command to copy reads
    as one on the page (an odd count of backticks leaves the text as it is)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        return text
    markup = jinja2.utils.markupsafe
    pieces = [
        markup.escape(p) if i % 2 == 0 else f"<code>{markup.escape(p)}</code>"
        for i, p in enumerate(parts)
    ]
    return markup.Markup("".join(str(p) for p in pieces))


def _recommendation(rec: Recommendation) -> list[tuple[str, list[str]]]:
    if rec.exploratory:
        return []
    out = []
    for engine in rec.engines:
        headline, *details = engine_lines(engine, rec)
        lines = [code_spans(line.strip().removeprefix("- ")) for line in details]
        out.append((code_spans(headline), lines))
    return out


def render_html(analysis: RunAnalysis, plotly_src: str | None = None) -> str:
    result = analysis.result
    ctx = build_context(analysis)
    beside_tables = {c.id for c in ctx.relative_charts.values()} | {REPLAY_RSS_CHART}
    other_charts = [c for c in ctx.charts if c.id not in beside_tables]
    return page(
        "report.html.j2",
        ctx.charts,
        plotly_src,
        ctx=ctx,
        result=result,
        headline=headline_facts(result.metadata),
        setup_columns=setup_table(result.setups),
        verdict_groups=_verdict_groups(ctx.verdict),
        other_charts=other_charts,
        backends_title=BACKENDS_TITLE,
        replay_chart=next((c for c in ctx.charts if c.id == REPLAY_RSS_CHART), None),
        # A replay's run has no cells: the sections about servers would all say "none".
        replay_only=ctx.replay is not None and not result.cells,
        title=f"mallocbench: {result.experiment}",
    )


def write_html(analysis: RunAnalysis, path: Path, self_contained: bool = False) -> Path:
    """Write the report; plotly.js goes beside it (shared by the directory's reports)
    unless `self_contained`. Returns the page's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    source = None if self_contained else write_plotly_beside(path)
    write_text_atomic(path, render_html(analysis, plotly_src=source))
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
    return page(
        "compare.html.j2",
        charts,
        plotly_src,
        cmp=comparison,
        verdict_groups=_verdict_groups(comparison.verdict),
        vsz_note=vsz_note(comparison.reserved_vsz_bytes),
        chart_by_key={t.key: c for t, c in zip(comparison.tables, charts, strict=True)},
        facts_a=dict(run_facts(comparison.a.metadata)),
        facts_b=dict(run_facts(comparison.b.metadata)),
        title=f"mallocbench compare: {comparison.a.run_id} vs {comparison.b.run_id}",
    )
