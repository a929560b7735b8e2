"""`mallocbench compare RUN_A RUN_B`: the same relative tables, between two runs.

For tracking a regression across builds or versions: cells are matched by engine, step,
threads and setup, and each value is QPS(B) / QPS(A) with a log-scale 95% interval over
the repeats of both runs. The base setup plays no part; every setup is compared with
itself. The cells, intervals and verdicts are `analysis.summary`'s, as in every report;
a change within min_effect (--min-effect, else run B's, else run A's) is "same".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mallocbench.analysis.summary import (
    QPS,
    RatioRow,
    RatioTable,
    color_rule,
    memory_rows,
    min_effect_of,
    percent,
    ratio_cell,
    significance_rule,
    slug,
    summarize,
    vsz_note,
)
from mallocbench.commands.options import min_effect_option
from mallocbench.errors import MallocbenchError
from mallocbench.report import formatting as fmt
from mallocbench.report import markdown
from mallocbench.report.export import interval_record, location_record, records_csv
from mallocbench.report.html import VerdictRow, render_compare_html, verdict_for
from mallocbench.report.terminal import geomean_text, ratio_text
from mallocbench.results import RunResult
from mallocbench.store.loading import load_result
from mallocbench.workloads.catalogue import group_of, label_order


@dataclass
class MemoryChange:
    engine: str
    setup: str
    rss_a: str
    rss_b: str
    vsz_a: str
    vsz_b: str
    per_cache_a: str
    per_cache_b: str
    rss_ratio: float | None


@dataclass
class Comparison:
    a: RunResult
    b: RunResult
    setups: list[str]
    tables: list[RatioTable]
    verdict: list[VerdictRow] = field(default_factory=list)
    memory: list[MemoryChange] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # "setup/engine" in one run only
    min_effect: float = 0.0
    vsz_note: str | None = None  # when either run's VSZ is mostly reserved address space


def _ordered_setups(a: RunResult, b: RunResult) -> list[str]:
    names: list[str] = []
    for result in (a, b):
        for name in [s.name for s in result.setups] + [c.setup for c in result.cells]:
            if name not in names:
                names.append(name)
    return names


def compare(a: RunResult, b: RunResult, min_effect: float | None = None) -> Comparison:
    """B against A; `min_effect` overrides the runs' own (B's, else A's)."""
    effect = min_effect
    if effect is None:
        effect = min_effect_of(b) or min_effect_of(a)
    sa, sb = summarize(a.cells), summarize(b.cells)
    common = set(sa) & set(sb)
    setups = [s for s in _ordered_setups(a, b) if any(k[0] == s for k in common)]
    pairs_a = {(k[0], k[1]) for k in sa}
    pairs_b = {(k[0], k[1]) for k in sb}
    unmatched = sorted(
        f"{setup}/{engine} (only in {'A' if (setup, engine) in pairs_a else 'B'})"
        for setup, engine in pairs_a ^ pairs_b
    )
    common_engines = {k[1] for k in common}
    engines = [
        e for e in dict.fromkeys(c.engine for c in [*a.cells, *b.cells]) if e in common_engines
    ]
    tables = []
    for engine in engines:
        for threads in sorted({k[3] for k in common if k[1] == engine}):
            keys = [k for k in common if k[1] == engine and k[3] == threads]
            steps = sorted({k[2] for k in keys}, key=label_order)
            columns = [s for s in setups if any(k[0] == s for k in keys)]
            rows = []
            for step in steps:
                cells = {}
                for setup in columns:
                    key = (setup, engine, step, threads)
                    if key not in common:
                        continue
                    x, y = sa[key], sb[key]
                    problem = None
                    if y.problem or x.problem:
                        problem = f"{y.problem} in B" if y.problem else f"{x.problem} in A"
                    cells[setup] = ratio_cell(
                        y.qps_values, x.qps_values, problem, "run A", effect, y.unit
                    )
                units = [c.unit for c in cells.values()]
                rows.append(
                    RatioRow(step, group_of(step), None, None, cells, units[0] if units else QPS)
                )
            tables.append(
                RatioTable(
                    key=f"cmp-{slug(engine)}-{threads}",
                    title=f"{engine}, {threads} client thread{'s' if threads != 1 else ''}",
                    caption="QPS(B) / QPS(A), 95% interval below"
                    + (
                        f"; same: the whole interval within ±{percent(effect)}"
                        if effect > 0
                        else ""
                    ),
                    columns=columns,
                    rows=rows,
                    engine=engine,
                    threads=threads,
                    reference="run A",
                    min_effect=effect,
                )
            )
    # Tables may lack a setup on some steps; verdict_for and the template skip those.
    for table in tables:
        for row in table.rows:
            for column in table.columns:
                row.cells.setdefault(column, ratio_cell([], [], "not in both", "run A", effect))
    verdict = []
    mem_a = {(m.engine, m.setup): m for m in memory_rows(a)}
    mem_b = {(m.engine, m.setup): m for m in memory_rows(b)}
    memory = []
    for engine in engines:
        for setup in setups:
            if not any(t.engine == engine and setup in t.columns for t in tables):
                continue
            row = verdict_for(engine, setup, tables)
            ma, mb = mem_a.get((engine, setup)), mem_b.get((engine, setup))
            if ma and mb and ma.peak_rss_bytes and mb.peak_rss_bytes:
                row.rss_ratio = mb.peak_rss_bytes / ma.peak_rss_bytes
                row.rss_text = f"{fmt.mib(mb.peak_rss_bytes)} vs {fmt.mib(ma.peak_rss_bytes)}"
            verdict.append(row)
            if ma or mb:
                memory.append(
                    MemoryChange(
                        engine,
                        setup,
                        fmt.gb(ma.peak_rss_bytes if ma else None),
                        fmt.gb(mb.peak_rss_bytes if mb else None),
                        fmt.gb(ma.peak_vsz_bytes if ma else None),
                        fmt.gb(mb.peak_vsz_bytes if mb else None),
                        fmt.ratio(ma.rss_per_cache if ma else None),
                        fmt.ratio(mb.rss_per_cache if mb else None),
                        row.rss_ratio,
                    )
                )
    if not tables:
        raise MallocbenchError(
            f"runs {a.run_id} and {b.run_id} share no cell (same engine, step, threads and "
            "setup): nothing to compare"
        )
    reserved = vsz_note(list(mem_a.values()) + list(mem_b.values()))
    return Comparison(a, b, setups, tables, verdict, memory, unmatched, effect, reserved)


# ---------------------------------------------------------------- loading


def load_run(source: str, store: Path | None = None) -> RunResult:
    """A results.json, an output directory, a .sqlite store, or a run id in --store."""
    if store is not None:
        return load_result(store, run_id=source, with_samples=False)
    return load_result(source, with_samples=False)


# ---------------------------------------------------------------- text formats


def _rules(cmp: Comparison, intervals: bool) -> str:
    text = color_rule(cmp.min_effect)
    if intervals:
        return text + "; " + significance_rule(cmp.min_effect)
    return text + "; 1 repeat: no interval, no significance"


def print_comparison(cmp: Comparison, console: Console | None = None) -> None:
    console = console or Console()
    console.print(
        f"[bold]B / A[/]: A = {cmp.a.run_id} ({cmp.a.experiment}), "
        f"B = {cmp.b.run_id} ({cmp.b.experiment})"
    )
    for t in cmp.tables:
        # With one repeat per side no cell has an interval: say so once, not per cell.
        intervals = t.has_intervals
        table = Table(title=f"QPS(B) / QPS(A): {t.title}", caption=_rules(cmp, intervals))
        table.add_column("step")
        width = 2 if intervals else 1
        for column in t.columns:
            table.add_column(column, justify="right")
            if intervals:
                table.add_column("95% interval", justify="right", style="dim")
        for group, title, rows, geomeans in t.groups():
            table.add_row(f"[bold]{title}[/]", *["" for _ in range(width * len(t.columns))])
            for row in rows:
                values = []
                for column in t.columns:
                    cell = row.cells[column]
                    values.append(ratio_text(cell))
                    if intervals:
                        values.append(cell.interval_text)
                table.add_row("  " + row.step, *values)
            gm = []
            for column in t.columns:
                gm += [geomean_text(geomeans[column]), ""][:width]
            table.add_row(f"  [italic]geomean {group}[/]", *gm, end_section=True)
        console.print(table)
    if cmp.memory:
        table = Table(title="Peak memory (GiB): A -> B")
        for column in ("engine", "setup", "RSS A", "RSS B", "RSS B/A", "VSZ A", "VSZ B"):
            table.add_column(column, justify="left" if column in ("engine", "setup") else "right")
        for m in cmp.memory:
            table.add_row(
                m.engine, m.setup, m.rss_a, m.rss_b, fmt.ratio(m.rss_ratio), m.vsz_a, m.vsz_b
            )
        console.print(table)
        if cmp.vsz_note:
            console.print(f"[yellow]note[/]: {cmp.vsz_note}")
    for row in cmp.verdict:
        for label, items in (("faster in B", row.faster), ("slower in B", row.slower)):
            if items:
                console.print(f"{row.engine}/{row.setup} {label}: " + "; ".join(items))
        if row.note:
            console.print(f"{row.engine}/{row.setup}: {row.note}")
    if cmp.unmatched:
        console.print("[dim]not compared (only in one run): " + ", ".join(cmp.unmatched) + "[/]")


def comparison_records(cmp: Comparison) -> list[dict[str, Any]]:
    records = []
    for t in cmp.tables:
        for row in t.rows:
            for setup in t.columns:
                cell = row.cells[setup]
                records.append(
                    {
                        **location_record(t, row, setup),
                        "qps_a": cell.reference,
                        "qps_b": cell.value,
                        "ratio": cell.ratio,
                        **interval_record(cell),
                        "unit": cell.unit,
                        "repeats_a": cell.repeats[1],
                        "repeats_b": cell.repeats[0],
                        "problem": cell.problem,
                        "min_effect": cell.min_effect,
                    }
                )
    return records


def comparison_csv(cmp: Comparison) -> str:
    return records_csv(comparison_records(cmp), ("engine",))


def comparison_json(cmp: Comparison) -> str:
    return json.dumps(
        {
            "a": cmp.a.run_id,
            "b": cmp.b.run_id,
            "min_effect": cmp.min_effect,
            "cells": comparison_records(cmp),
            "memory": [m.__dict__ for m in cmp.memory],
            "unmatched": cmp.unmatched,
        },
        indent=1,
    )


def comparison_markdown(cmp: Comparison) -> str:
    out = [
        f"# mallocbench compare: {cmp.b.run_id} (B) against {cmp.a.run_id} (A)",
        "",
        "QPS(B) / QPS(A) for the same engine, step, threads and setup; "
        + _rules(cmp, True).replace("*", "\\*", 1)
        + ".",
        "",
    ]
    for t in cmp.tables:
        out += [f"## {t.title}", ""]
        if not t.has_intervals:
            out += ["1 repeat: no interval, so no significance can be claimed.", ""]
        out.append("| step | " + " | ".join(t.columns) + " |")
        out.append("|---|" + "|".join("---:" for _ in t.columns) + "|")
        for _, title, rows, geomeans in t.groups():
            out.append(f"| **{title}** |" + " |" * len(t.columns))
            for row in rows:
                values = [markdown.ratio_text(row.cells[column]) for column in t.columns]
                out.append(f"| {row.step} | " + " | ".join(values) + " |")
            out.append(
                "| *geomean* | "
                + " | ".join(f"*{fmt.ratio(geomeans[c])}*" for c in t.columns)
                + " |"
            )
        out.append("")
    if cmp.memory:
        out += [
            "## Peak memory (GiB)",
            "",
            "| engine | setup | RSS A | RSS B | RSS B/A | VSZ A | VSZ B |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for m in cmp.memory:
            out.append(
                f"| {m.engine} | {m.setup} | {m.rss_a} | {m.rss_b} | {fmt.ratio(m.rss_ratio)} "
                f"| {m.vsz_a} | {m.vsz_b} |"
            )
        out.append("")
        if cmp.vsz_note:
            out += [f"> **Note:** {cmp.vsz_note}", ""]
    return "\n".join(out)


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--store",
    "store_path",
    type=click.Path(path_type=Path),
    help="Read RUN_A and RUN_B as run ids in this store (.sqlite or output directory).",
)
@click.option(
    "--format",
    "fmt_name",
    type=click.Choice(["terminal", "markdown", "csv", "json"]),
    default="terminal",
    show_default=True,
    help="What to print on standard output.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a self-contained HTML page of the comparison.",
)
@min_effect_option(
    "Report changes smaller than this as the same (0.02 or 2%); default: run B's "
    "min_effect, else run A's; 0 turns it off."
)
def compare_cmd(
    run_a: str,
    run_b: str,
    store_path: Path | None,
    fmt_name: str,
    html_path: Path | None,
    min_effect: float | None,
) -> None:
    """Compare run B against run A: QPS(B) / QPS(A) per engine, step, threads and setup.

    \b
    RUN_A and RUN_B are results.json files, output directories, .sqlite stores (their
    latest run), or, with --store, run ids in one store.

    \b
    Examples:
      mallocbench compare out-10.11/results.json out-11.4/results.json
      mallocbench compare --store out/results.sqlite small-20250101-1200 small-20250102-0900
      mallocbench compare old-out new-out --html compare.html --min-effect 2%
    """
    cmp = compare(load_run(run_a, store_path), load_run(run_b, store_path), min_effect)
    if html_path is not None:
        try:
            html_path.parent.mkdir(parents=True, exist_ok=True)
            html_path.write_text(render_compare_html(cmp), encoding="utf-8")
        except OSError as exc:
            raise MallocbenchError(
                f"cannot write {html_path}: {exc.strerror}; give a writable path with --html"
            ) from exc
    if fmt_name == "terminal":
        print_comparison(cmp, Console())
        if html_path is not None:
            Console(stderr=True).print(f"wrote {html_path}")
    elif fmt_name == "markdown":
        click.echo(comparison_markdown(cmp))
    elif fmt_name == "csv":
        click.echo(comparison_csv(cmp), nl=False)
    else:
        click.echo(comparison_json(cmp))


commands = [compare_cmd]
