"""A tune's outputs, from its values (tune.result): the terminal tables, Markdown, the
JSON document and the HTML page in the run report's style.

Only a ratio that is a finding (interval excludes 1, beyond min_effect) is coloured or
worded "lower"/"higher"; the rest show their verdict plainly. When no point beats the
default as a finding, every format says "no setting beats the default" and chooses
nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from mallocbench.analysis.replay import Estimate
from mallocbench.analysis.tune import Versus
from mallocbench.files import write_text_atomic
from mallocbench.report.charts import Chart
from mallocbench.report.replay import RatioView, markdown_ratio, rich_ratio
from mallocbench.tune.result import (
    BudgetOverrun,
    ChoiceRule,
    Confirm,
    MeasuredBy,
    NothingToConfirm,
    TuneNote,
)
from mallocbench.units import MB, knobs, quantity

if TYPE_CHECKING:
    from mallocbench.tune.result import AllocatorTune, Objective, Point, TuneDocument

PRIORITY_TITLES = {"memory": "memory first", "speed": "speed first"}
NO_WINNER = "no setting beats the default"
# Fenced-block languages of the deploy forms (launch.FORMS).
FORM_LANGUAGES = {"systemd": "ini", "mysqld_safe": "ini", "env": "sh", "docker": "yaml",
                  "kubernetes": "yaml"}  # fmt: skip
FILES = {"json": "tune.json", "markdown": "tune.md", "html": "tune.html"}


def estimate_text(unit: str, e: Estimate | None) -> str:
    if e is None or math.isnan(e.mean):
        return "-"
    text = quantity(e.mean, unit)
    if not (math.isnan(e.low) or math.isnan(e.high)):
        # The unit once, after the mean: "12.0 MiB [11.8, 12.2 MiB]".
        bounds = f" [{quantity(e.low, unit)}, {quantity(e.high, unit)}]"
        text += bounds.replace(" MiB,", ",")
    return text


def versus_view(v: Versus | None) -> RatioView:
    """A ratio to the default as shown; worded and marked a finding only when it is one."""
    if v is None or math.isnan(v.ratio):
        return RatioView("")
    bounds = "" if math.isnan(v.low) else f" [{v.low:.2f}, {v.high:.2f}]"
    text = f"{v.ratio:.2f}x{bounds}"
    if not (v.better or v.worse):
        return RatioView(f"{text} {v.verdict}")
    word = "lower" if v.ratio < 1 else "higher"
    return RatioView(f"{text} {word}", "better" if v.better else "worse")


def setting_text(setting: dict[str, str]) -> str:
    return knobs(setting) if setting else "(defaults)"


def status_text(point: Point) -> str:
    if point.dominated_by:
        return "dominated by " + ", ".join(point.dominated_by)
    status = "front" if point.feasible else "front, breaks a constraint"
    return status + (f", {point.failed} repeats failed" if point.failed else "")


# Each measured quantity's name for a reader, by the key it is measured under (a trace
# replay's and a server run's keys differ where their meaning does: steady vs whole-life
# peak RSS, CPU time vs CPU per operation).
OBJECTIVE_LABELS = {
    "peak_heap_rss_steady": "steady peak RSS",
    "rss_over_live": "RSS/live",
    "cpu_s": "CPU time",
    "wall_s": "wall time",
    "calls_per_s": "calls/s",
    "peak_rss_bytes": "server peak RSS",
    "server_cpu_us_per_op": "server CPU/op",
    "qps": "QPS",
    "p99_ms": "p99 latency",
}


def objective_label(m: Objective) -> str:
    return OBJECTIVE_LABELS.get(m.key, m.name)


def headers(doc: TuneDocument) -> list[str]:
    out = ["point", "knobs"]
    for m in doc.objectives:
        out += [f"{objective_label(m)} (95% CI)", f"{objective_label(m)} vs default"]
    return [*out, "status"]


def cells(doc: TuneDocument, point: Point) -> list[str | RatioView]:
    """One point's row: its label and knobs, per objective the estimate and the ratio
    to the default, its status."""
    row: list[str | RatioView] = [point.label, setting_text(point.setting)]
    for m in doc.objectives:
        row.append(estimate_text(m.unit, point.estimates.get(m.key)))
        row.append(versus_view(point.versus_default.get(m.name)))
    row.append(status_text(point))
    return row


def _plain_rows(doc: TuneDocument, result: AllocatorTune, markup: bool) -> list[list[str]]:
    show = rich_ratio if markup else markdown_ratio
    return [[c if isinstance(c, str) else show(c) for c in cells(doc, p)] for p in result.points]


def choice_lines(result: AllocatorTune, doc: TuneDocument) -> list[str]:
    """One sentence per priority: the chosen point with its ratio to the default on every
    objective (what it saves and what it costs, in the same line), or that nothing beats
    the default."""
    if not result.beats_default:
        return [f"{result.allocator}: {NO_WINNER} (by min_effect, on the intervals)"]
    out = []
    for priority, label in result.chosen.items():
        title = PRIORITY_TITLES.get(priority, f"{priority} first")
        if label is None:
            out.append(f"{result.allocator}, {title}: {NO_WINNER} on {priority}"
                       + _bound_text(doc, priority))  # fmt: skip
            continue
        env = result.deploy[priority].environment
        setting = " ".join(f"{k}={v}" for k, v in env.items() if k != "LD_PRELOAD")
        line = f"{result.allocator}, {title}: {label} ({setting or 'defaults'})"
        out.append(f"{line}: {_price(doc, result.point(label))}")
    return out


def _price(doc: TuneDocument, point: Point) -> str:
    """The point against the default on each objective, e.g. "peak RSS 0.90x [0.88,
    0.92] lower, CPU time 1.02x [0.97, 1.07] same"."""
    return ", ".join(
        f"{objective_label(m)} {versus_view(point.versus_default[m.name]).text}"
        for m in doc.objectives
        if m.name in point.versus_default
    )


def _bound_text(doc: TuneDocument, priority: str) -> str:
    if priority != "memory" or not doc.max_cpu:
        return ""
    return f" with CPU within {doc.max_cpu:g}x the default's (--max-cpu)"


def _title(result: AllocatorTune) -> str:
    return f"{result.allocator} {result.version or ''}".rstrip()


def print_terminal(doc: TuneDocument, console: Console) -> None:
    for result in doc.allocators:
        table = Table(
            title=f"{result.allocator} {result.version or ''}: "
            f"{result.trials} settings searched, front re-measured "
            f"{doc.repeats} times each",
            title_justify="left",
        )
        for h in headers(doc):
            table.add_column(h, overflow="fold")  # a knob setting is never cut to "…"
        for row in _plain_rows(doc, result, markup=True):
            table.add_row(*row)
        console.print(table)
        for line in choice_lines(result, doc):
            console.print(line, markup=False, highlight=False)
        for priority, deploy in result.deploy.items():
            title = PRIORITY_TITLES.get(priority, priority)
            console.print(f"\n[bold]{title}[/]: {doc.deploy_form} ({form_why(doc)})")
            text = deploy.forms.get(doc.deploy_form) or deploy.systemd
            console.print(text, markup=False, highlight=False)
    for line in note_lines(doc):
        console.print(line, markup=False, highlight=False)


def summary_line(doc: TuneDocument) -> str:
    return (
        f"Objectives: {', '.join(m.name for m in doc.objectives)}; constraints: "
        f"{', '.join(doc.constraints) or 'none'}; min_effect {doc.min_effect:g}; "
        f"front points re-measured {doc.repeats} times each (95% intervals; the "
        "ratios' intervals are simultaneous over the comparisons, Bonferroni)."
    )


def markdown(doc: TuneDocument) -> str:
    out = [f"# Tune of `{doc.trace}`", "", summary_line(doc)]
    for result in doc.allocators:
        out += ["", f"## {_title(result)}", ""]
        out.append(f"{result.trials} settings searched over: {'; '.join(result.space)}.")
        out += ["", "| " + " | ".join(headers(doc)) + " |"]
        out.append("|" + " --- |" * len(headers(doc)))
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"
                for r in _plain_rows(doc, result, markup=False)]  # fmt: skip
        out += [""] + [f"- {line}" for line in choice_lines(result, doc)]
        for priority, deploy in result.deploy.items():
            title = PRIORITY_TITLES.get(priority, priority)
            for form, text in forms_first(doc, deploy.forms):
                out += ["", f"### {title}: {form}", "", f"```{FORM_LANGUAGES.get(form, '')}"]
                out += [text.rstrip(), "```"]
    out += [""] + [f"- {n}" for n in note_lines(doc)]
    return "\n".join(out) + "\n"


def tune_json(doc: TuneDocument) -> str:
    data = doc.to_dict()
    data["objectives"] = [  # in place, each with its name for scripts
        {"name": m.name, "key": m.key, "label": objective_label(m), "unit": m.unit,
         "direction": m.direction}
        for m in doc.objectives
    ]  # fmt: skip
    data["notes"] = note_lines(doc)
    return json.dumps(data, indent=1) + "\n"


def note_lines(doc: TuneDocument) -> list[str]:
    out = []
    for note in doc.notes:
        if isinstance(note, Confirm):
            out += _confirm_lines(note)
        else:
            out.append(note_text(note))
    return out


def note_text(note: TuneNote) -> str:
    if isinstance(note, BudgetOverrun):
        return (
            f"the tune took {note.elapsed_s / 60:.1f} min against a budget of "
            f"{note.budget_s / 60:.1f} min: re-measuring the front (the default, the "
            f"front's ends and knee at least, --repeats times each) took longer than the "
            f"{note.repeats_share} of it left for that"
        )
    if isinstance(note, ChoiceRule):
        return _rule_text(note)
    if isinstance(note, MeasuredBy):
        confirmation = (
            "the confirmation's blocked run (the default and the choice up at once, 5 "
            "blocks) is for the choice"
            if note.on_servers
            else "the confirmation on servers is for the whole workload"
        )
        return (
            f"every setting was measured by a {note.evaluator}, the search's trials and "
            f"the front's repeats alike: the intervals are for that, and {confirmation}"
        )
    if isinstance(note, NothingToConfirm):
        return "no setting beats the default on any allocator: nothing to confirm"
    if isinstance(note, Confirm):
        return " ".join(_confirm_lines(note))
    return note.text


def _rule_text(rule: ChoiceRule) -> str:
    """How "memory first" was chosen, since the lowest RSS is not always the choice."""
    if rule.memory_at_any_cost:
        return "memory first is the lowest RSS whatever its CPU (--memory-at-any-cost)"
    bound = f", and only CPU within {rule.max_cpu:g}x the default's" if rule.max_cpu else ""
    return (
        "memory first is the cheapest in CPU among the settings whose RSS interval "
        f"overlaps the lowest's (RSS within its noise){bound}; speed first likewise the "
        "lowest RSS among those within the fastest's noise"
    )


def _confirm_lines(note: Confirm) -> list[str]:
    """The command that confirms the choice, and what its experiment runs."""
    first = (
        "confirm on real private servers before deploying: mallocbench run "
        f"{note.path} --out {note.out}"
    )
    lines = [first, *note.derived_notes]
    if note.workload is not None:
        lines.append(f"{note.path} runs the tuned workload, {note.workload} ({note.source})")
    elif not note.derived:
        lines.append(
            f"{note.path} runs a generic workload (nothing said what the trace was recorded "
            "under): set its engines, steps, threads and [dataset] to that load first, or "
            "give --workload EXPERIMENT.toml"
        )
    return lines


def form_why(doc: TuneDocument) -> str:
    others = ", ".join(f for f in FORM_LANGUAGES if f != doc.deploy_form)
    why = doc.deploy_form_why
    return f"{why + '; ' if why else ''}{others} with --form, all in tune.md"


def forms_first(doc: TuneDocument, forms: dict[str, str]) -> list[tuple[str, str]]:
    """Every form of one choice, the one that fits first."""
    return [(f, forms[f]) for f in sorted(forms, key=lambda f: f != doc.deploy_form)]


# ---------------------------------------------------------------- the page


@dataclass(frozen=True)
class PageCell:
    """A value as the page's tables show one: bold, its interval under it, and a colour
    class for a finding only ("faster"/"slower" are the run report's better and worse)."""

    text: str
    interval: str = ""
    verdict: str = ""  # the verdict's word, under the interval (not for a finding)
    css: str = ""


def estimate_cell(unit: str, e: Estimate | None) -> PageCell:
    if e is None or math.isnan(e.mean):
        return PageCell("-", css="none")
    if math.isnan(e.low) or math.isnan(e.high):
        return PageCell(quantity(e.mean, unit))
    low, high = quantity(e.low, unit, named=False), quantity(e.high, unit)
    return PageCell(quantity(e.mean, unit), f"[{low}, {high}]")


CSS = {"better": "faster", "worse": "slower"}


def versus_cell(v: Versus | None) -> PageCell:
    if v is None or math.isnan(v.ratio):
        return PageCell("", css="none")
    interval = "" if math.isnan(v.low) else f"[{v.low:.2f}, {v.high:.2f}]"
    view = versus_view(v)
    if view.kind:
        word = "lower" if v.ratio < 1 else "higher"
        return PageCell(f"{v.ratio:.2f}x {word}", interval, css=CSS[view.kind])
    return PageCell(f"{v.ratio:.2f}x", interval, v.verdict, "same" if v.same else "none")


def page_row(doc: TuneDocument, point: Point) -> list[PageCell]:
    """One point's row on the page: per objective its estimate and its ratio."""
    out = []
    for m in doc.objectives:
        out += [estimate_cell(m.unit, point.estimates.get(m.key)),
                versus_cell(point.versus_default.get(m.name))]  # fmt: skip
    return out


def axes(doc: TuneDocument) -> tuple[Objective, Objective]:
    """The chart's x (time) and y (memory) objectives, as far as the tune has them."""
    by_name = {m.name: m for m in doc.objectives}
    x = by_name.get("time") or by_name.get("wall") or doc.objectives[0]
    y = by_name.get("rss") or by_name.get("rss_over_live") or x
    return x, y


def _scale(m: Objective) -> float:
    return MB if m.unit == "bytes" else 1.0


def _axis_title(m: Objective) -> str:
    label = objective_label(m)
    return f"{label} (MiB)" if m.unit == "bytes" else f"{label} ({m.unit})"


def _bars(estimates: list[Estimate | None], scale: float) -> dict[str, Any]:
    """Plotly's asymmetric error bars for the estimates' 95% intervals."""

    def half(e: Estimate | None, upper: bool) -> float:
        if e is None or math.isnan(e.mean) or math.isnan(e.low):
            return 0.0
        return ((e.high - e.mean) if upper else (e.mean - e.low)) / scale

    return {"type": "data", "symmetric": False,
            "array": [half(e, True) for e in estimates],
            "arrayminus": [half(e, False) for e in estimates]}  # fmt: skip


GROUP_STYLES = {
    "default": {"color": "#d62728", "size": 14, "symbol": "star"},
    "front": {"color": "#1f77b4", "size": 10},
    "dominated": {"color": "#9467bd", "size": 8, "symbol": "x"},
}


def _points_trace(group: str, points: list[Point], x: Objective, y: Objective) -> dict[str, Any]:
    xs = [p.estimates.get(x.key) for p in points]
    ys = [p.estimates.get(y.key) for p in points]
    return {
        "type": "scatter",
        "mode": "markers+text",
        "name": group + ("" if group == "default" else " (re-measured)"),
        "x": [e.mean / _scale(x) if e else None for e in xs],
        "y": [e.mean / _scale(y) if e else None for e in ys],
        "text": [p.label for p in points],
        "textposition": "top center",
        "hovertext": [setting_text(p.setting) for p in points],
        "error_x": _bars(xs, _scale(x)),
        "error_y": _bars(ys, _scale(y)),
        "marker": GROUP_STYLES[group],
    }


def front_chart(doc: TuneDocument, result: AllocatorTune, index: int) -> Chart:
    """Every searched setting (grey, one replay each), the re-measured points with their
    95% intervals, the default marked."""
    x, y = axes(doc)
    searched = [s for s in result.searched if x.key in s.metrics and y.key in s.metrics]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "searched (one replay each)",
            "x": [s.metrics[x.key] / _scale(x) for s in searched],
            "y": [s.metrics[y.key] / _scale(y) for s in searched],
            "text": [f"#{s.trial} {setting_text(s.setting)}" for s in searched],
            "marker": {"color": "#bbbbbb", "size": 6},
        }
    ]
    groups = {
        "default": [p for p in result.points if p.default],
        "front": [p for p in result.points if not p.default and p.on_front],
        "dominated": [p for p in result.points if not p.default and not p.on_front],
    }
    data += [_points_trace(g, points, x, y) for g, points in groups.items() if points]
    return Chart(
        id=f"chart-tune-{index}",
        title=f"{_title(result)}: {objective_label(y)} against {objective_label(x)}",
        data=data,
        layout={
            "xaxis": {"title": {"text": _axis_title(x)}},
            "yaxis": {"title": {"text": _axis_title(y)}},
            "height": 480,
        },
        note="Grey: each searched setting, measured once. Marked: the default and the "
        "front, re-measured; whiskers: 95% intervals.",
        wide=True,
    )


def render_html(doc: TuneDocument, plotly_src: str | None = None) -> str:
    from mallocbench.report.html import code_spans, page

    charts = [front_chart(doc, r, i) for i, r in enumerate(doc.allocators)]
    sections = [
        {
            "result": r,
            "id": f"allocator-{r.allocator}",
            "title": _title(r),
            "rows": [
                (p, setting_text(p.setting), page_row(doc, p), status_text(p)) for p in r.points
            ],  # fmt: skip
            "choices": choice_lines(r, doc),
            "chart": chart,
            "forms": {
                PRIORITY_TITLES.get(priority, priority): forms_first(doc, d.forms)
                for priority, d in r.deploy.items()
            },
        }
        for r, chart in zip(doc.allocators, charts, strict=True)
    ]
    return page(
        "tune.html.j2",
        charts,
        plotly_src,
        doc=doc,
        summary=summary_line(doc),
        headers=headers(doc),
        sections=sections,
        form_why=form_why(doc),
        notes=[code_spans(n) for n in note_lines(doc)],
        title=f"mallocbench tune: {Path(doc.trace).name}",
    )


def write_tune_reports(doc: TuneDocument, out: Path) -> dict[str, Path]:
    """tune.json, tune.md and tune.html (plotly.js beside it) in `out`; their paths."""
    from mallocbench.report.html import write_plotly_beside

    paths = {kind: out / name for kind, name in FILES.items()}
    write_text_atomic(paths["json"], tune_json(doc))
    write_text_atomic(paths["markdown"], markdown(doc))
    source = write_plotly_beside(paths["html"])
    write_text_atomic(paths["html"], render_html(doc, source))
    return paths


# --- what `tune` says while it works --------------------------------------------------------

REMEASURING_FRONT = "re-measuring the front"


def remeasuring_text(what: str) -> str:
    return f"re-measuring {what}"


def kept_text(db: Path) -> str:
    """A search a signal ended: where its trials are, and how to go on."""
    return (
        f"mallocbench: every finished trial is kept in {db}: "
        "the same command with --resume continues\n"
    )


def print_wrote(paths: list[Path], console: Console) -> None:
    console.print("wrote " + ", ".join(str(p) for p in paths), markup=False)
