"""A tune's outputs: the JSON document (for scripts), and from it alone the terminal
table, Markdown and the HTML chart.

Only a ratio that is a finding (interval excludes 1, beyond min_effect) is coloured or
worded "lower"/"higher"; the rest show their verdict plainly. When no point beats the
default as a finding, the page says "no setting beats the default" and chooses nothing.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

MIB = 1024 * 1024
PRIORITY_TITLES = {"memory": "memory first", "speed": "speed first"}
NO_WINNER = "no setting beats the default"


def fmt(unit: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "bytes":
        return f"{value / MIB:,.1f} MiB"
    if unit == "1/s":
        return f"{value:,.0f}/s"
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "ms":
        return f"{value:.2f} ms"
    if unit == "us":
        return f"{value:.1f} µs"
    return f"{value:.2f}"


def estimate_text(unit: str, e: dict[str, Any] | None) -> str:
    if not e or e.get("mean") is None:
        return "-"
    text = fmt(unit, e["mean"])
    if e.get("low") is not None and e.get("high") is not None:
        text += f" [{fmt(unit, e['low'])}, {fmt(unit, e['high'])}]".replace(" MiB,", ",")
    return text


def versus_text(v: dict[str, Any] | None, markup: bool) -> str:
    if not v or v.get("ratio") is None:
        return ""
    bounds = f" [{v['low']:.2f}, {v['high']:.2f}]" if v.get("low") is not None else ""
    text = f"{v['ratio']:.2f}x{bounds}"
    if not (v["better"] or v["worse"]):
        return f"{text} {v['verdict']}"
    word = "lower" if v["ratio"] < 1 else "higher"
    if not markup:
        return f"**{text} {word}**"
    return f"[{'green' if v['better'] else 'red'}]{text} {word}[/]"


def knobs_text(setting: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in setting.items()) or "(defaults)"


def status_text(point: dict[str, Any]) -> str:
    if point["dominated_by"]:
        return "dominated by " + ", ".join(point["dominated_by"])
    status = "front" if point["feasible"] else "front, breaks a constraint"
    return status + (f", {point['failed']} repeats failed" if point["failed"] else "")


def rows(doc: dict[str, Any], result: dict[str, Any], markup: bool) -> list[list[str]]:
    out = []
    for p in result["points"]:
        row = [p["label"], knobs_text(p["setting"])]
        for m in doc["objectives"]:
            row.append(estimate_text(m["unit"], p["estimates"].get(m["key"])))
            row.append(versus_text(p["versus_default"].get(m["name"]), markup))
        row.append(status_text(p))
        out.append(row)
    return out


def headers(doc: dict[str, Any]) -> list[str]:
    out = ["point", "knobs"]
    for m in doc["objectives"]:
        out += [f"{m['label']} (95% CI)", f"{m['label']} vs default"]
    return [*out, "status"]


def choice_lines(result: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    """One sentence per priority: the chosen point with its ratio to the default on every
    objective (what it saves and what it costs, in the same line), or that nothing beats
    the default."""
    if not result["beats_default"]:
        return [f"{result['allocator']}: {NO_WINNER} (by min_effect, on the intervals)"]
    out = []
    for priority, label in result["chosen"].items():
        title = PRIORITY_TITLES.get(priority, f"{priority} first")
        if label is None:
            out.append(f"{result['allocator']}, {title}: {NO_WINNER} on {priority}"
                       + _bound_text(doc, priority))  # fmt: skip
            continue
        env = result["deploy"][priority]["environment"]
        setting = " ".join(f"{k}={v}" for k, v in env.items() if k != "LD_PRELOAD")
        point = next(p for p in result["points"] if p["label"] == label)
        line = f"{result['allocator']}, {title}: {label} ({setting or 'defaults'})"
        out.append(f"{line}: {_price(doc, point)}")
    return out


def _price(doc: dict[str, Any], point: dict[str, Any]) -> str:
    """The point against the default on each objective, e.g. "peak RSS 0.90x [0.88,
    0.92] lower, CPU time 1.02x [0.97, 1.07] same"."""
    return ", ".join(
        f"{m['label']} {versus_text(point['versus_default'].get(m['name']), markup=False)}"
        .replace("**", "")
        for m in doc["objectives"]
        if point["versus_default"].get(m["name"])
    )  # fmt: skip


def _bound_text(doc: dict[str, Any], priority: str) -> str:
    if priority != "memory" or not doc.get("max_cpu"):
        return ""
    return f" with CPU within {doc['max_cpu']:g}x the default's (--max-cpu)"


def print_terminal(doc: dict[str, Any], console: Console) -> None:
    for result in doc["allocators"]:
        table = Table(
            title=f"{result['allocator']} {result.get('version') or ''}: "
            f"{result['trials']} settings searched, front re-measured "
            f"{doc['repeats']} times each",
            title_justify="left",
        )
        for h in headers(doc):
            table.add_column(h, overflow="fold")  # a knob setting is never cut to "…"
        for row in rows(doc, result, markup=True):
            table.add_row(*row)
        console.print(table)
        for line in choice_lines(result, doc):
            console.print(line, markup=False, highlight=False)
        form = _form(doc)
        for priority, deploy in result["deploy"].items():
            title = PRIORITY_TITLES.get(priority, priority)
            console.print(f"\n[bold]{title}[/]: {form} ({_form_why(doc)})")
            console.print(_form_text(deploy, form), markup=False, highlight=False)
    for line in doc["notes"]:
        console.print(line, markup=False, highlight=False)


def markdown(doc: dict[str, Any]) -> str:
    out = [
        f"# Tune of `{doc['trace']}`",
        "",
        f"Objectives: {', '.join(m['name'] for m in doc['objectives'])}; constraints: "
        f"{', '.join(doc['constraints']) or 'none'}; min_effect {doc['min_effect']:g}; "
        f"front points re-measured {doc['repeats']} times each (95% intervals; the "
        "ratios' intervals are simultaneous over the comparisons, Bonferroni).",
    ]
    for result in doc["allocators"]:
        out += ["", f"## {result['allocator']} {result.get('version') or ''}".rstrip(), ""]
        out.append(f"{result['trials']} settings searched over: {'; '.join(result['space'])}.")
        out += ["", "| " + " | ".join(headers(doc)) + " |"]
        out.append("|" + " --- |" * len(headers(doc)))
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"
                for r in rows(doc, result, markup=False)]  # fmt: skip
        out += [""] + [f"- {line}" for line in choice_lines(result, doc)]
        for priority, deploy in result["deploy"].items():
            out += _markdown_forms(doc, PRIORITY_TITLES.get(priority, priority), deploy)
    out += [""] + [f"- {n}" for n in doc["notes"]]
    return "\n".join(out) + "\n"


# Fenced-block languages of the deploy forms (launch.FORMS).
FORM_LANGUAGES = {"systemd": "ini", "mysqld_safe": "ini", "env": "sh", "docker": "yaml",
                  "kubernetes": "yaml"}  # fmt: skip


def _form(doc: dict[str, Any]) -> str:
    return str((doc.get("deploy_form") or {}).get("form") or "systemd")


def _form_why(doc: dict[str, Any]) -> str:
    why = (doc.get("deploy_form") or {}).get("why")
    others = ", ".join(f for f in FORM_LANGUAGES if f != _form(doc))
    return f"{why + '; ' if why else ''}{others} with --form, all in tune.md"


def _form_text(deploy: dict[str, Any], form: str) -> str:
    """One form's text; a tune.json from before the forms has the systemd drop-in only."""
    forms = deploy.get("forms") or {"systemd": deploy["systemd"]}
    return str(forms.get(form) or forms["systemd"])


def _markdown_forms(doc: dict[str, Any], title: str, deploy: dict[str, Any]) -> list[str]:
    """Every form of one choice, the one that fits first."""
    first = _form(doc)
    forms = deploy.get("forms") or {"systemd": deploy["systemd"]}
    out = []
    for form in sorted(forms, key=lambda f: f != first):
        out += ["", f"### {title}: {form}", "", f"```{FORM_LANGUAGES.get(form, '')}"]
        out += [str(forms[form]).rstrip(), "```"]
    return out


def _trace_points(
    doc: dict[str, Any], result: dict[str, Any], x_key: str, y_key: str
) -> list[dict[str, Any]]:
    """Plotly traces: every searched setting (grey), the re-measured points with their
    interval bars, the default marked."""
    searched = [s for s in result["searched"] if x_key in s["metrics"] and y_key in s["metrics"]]
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "searched (one replay each)",
            "x": [s["metrics"][x_key] for s in searched],
            "y": [s["metrics"][y_key] / MIB for s in searched],
            "text": [f"#{s['trial']} {knobs_text(s['setting'])}" for s in searched],
            "marker": {"color": "#bbbbbb", "size": 6},
        }
    ]
    for group, points in (
        ("default", [p for p in result["points"] if p["default"]]),
        ("front", [p for p in result["points"] if not p["default"] and p["on_front"]]),
        ("dominated", [p for p in result["points"] if not p["default"] and not p["on_front"]]),
    ):
        if not points:
            continue
        xs = [p["estimates"].get(x_key) or {} for p in points]
        ys = [p["estimates"].get(y_key) or {} for p in points]
        traces.append(_interval_trace(group, points, xs, ys))
    return traces


def _bar(e: dict[str, Any], scale: float, upper: bool) -> float:
    if e.get("mean") is None or e.get("low") is None:
        return 0.0
    return ((e["high"] - e["mean"]) if upper else (e["mean"] - e["low"])) / scale


def _interval_trace(
    group: str, points: Sequence[dict[str, Any]], xs: list[dict[str, Any]], ys: list[dict[str, Any]]
) -> dict[str, Any]:
    style = {
        "default": {"color": "#d62728", "size": 14, "symbol": "star"},
        "front": {"color": "#1f77b4", "size": 10},
        "dominated": {"color": "#9467bd", "size": 8, "symbol": "x"},
    }[group]
    return {
        "type": "scatter",
        "mode": "markers+text",
        "name": group + ("" if group == "default" else " (re-measured)"),
        "x": [e.get("mean") for e in xs],
        "y": [(e.get("mean") or 0) / MIB for e in ys],
        "text": [p["label"] for p in points],
        "textposition": "top center",
        "hovertext": [knobs_text(p["setting"]) for p in points],
        "error_x": {"type": "data", "symmetric": False,
                    "array": [_bar(e, 1, True) for e in xs],
                    "arrayminus": [_bar(e, 1, False) for e in xs]},
        "error_y": {"type": "data", "symmetric": False,
                    "array": [_bar(e, MIB, True) for e in ys],
                    "arrayminus": [_bar(e, MIB, False) for e in ys]},
        "marker": style,
    }  # fmt: skip


def html_page(doc: dict[str, Any], plotly_js: str) -> str:
    """One self-contained page: a chart per allocator (peak RSS against time)."""
    by_name = {m["name"]: m for m in doc["objectives"]}
    x = by_name.get("time") or by_name.get("wall") or next(iter(by_name.values()))
    y = by_name.get("rss") or by_name.get("rss_over_live") or x
    body = [f"<h1>Tune of {html.escape(doc['trace'])}</h1>"]
    script = []
    for i, result in enumerate(doc["allocators"]):
        body.append(f"<h2>{html.escape(result['allocator'])}</h2><div id='c{i}'></div><ul>")
        body += [f"<li>{html.escape(line)}</li>" for line in choice_lines(result, doc)]
        body.append("</ul>")
        layout = {
            "xaxis": {"title": {"text": f"{x['label']} ({x['unit']})"}},
            "yaxis": {"title": {"text": f"{y['label']} (MiB)" if y["unit"] == "bytes"
                                else y["label"]}},
            "height": 520,
        }  # fmt: skip
        traces = _trace_points(doc, result, x["key"], y["key"])
        script.append(f"Plotly.newPlot('c{i}', {json.dumps(traces)}, {json.dumps(layout)});")
    body += [f"<p>{html.escape(n)}</p>" for n in doc["notes"]]
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>mallocbench tune</title>"
        f"<style>body{{font-family:sans-serif}} li{{overflow-wrap:anywhere}}</style>"
        f"<script>{plotly_js}</script></head><body>"
        + "\n".join(body)
        + f"<script>{''.join(script)}</script></body></html>\n"
    )


def write_all(doc: dict[str, Any], out: Path) -> dict[str, Path]:
    """tune.json, tune.md and tune.html in `out`; returns their paths."""
    from mallocbench.files import write_text_atomic

    paths = {"json": out / "tune.json", "markdown": out / "tune.md", "html": out / "tune.html"}
    write_text_atomic(paths["json"], json.dumps(doc, indent=1) + "\n")
    write_text_atomic(paths["markdown"], markdown(doc))
    from plotly.offline import get_plotlyjs

    write_text_atomic(paths["html"], html_page(doc, get_plotlyjs()))
    return paths
