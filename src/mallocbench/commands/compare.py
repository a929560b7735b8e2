"""`mallocbench compare RUN_A RUN_B`: the same relative tables, between two runs.

For tracking a regression across builds or versions: cells are matched by engine, step,
threads and setup, and each value is QPS(B) / QPS(A) with Fieller's 95% interval over
the repeats of both runs. The base setup plays no part; every setup is compared with
itself.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mallocbench.analysis.summary import memory_rows, summarize
from mallocbench.errors import MallocbenchError
from mallocbench.report import formatting as fmt
from mallocbench.report.html import (
    RatioRow,
    RatioTable,
    VerdictRow,
    ratio_cell,
    ratio_class,
    render_compare_html,
    verdict_for,
)
from mallocbench.results import RunResult
from mallocbench.store import Store
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


def _ordered_setups(a: RunResult, b: RunResult) -> list[str]:
    names: list[str] = []
    for result in (a, b):
        for name in [s.name for s in result.setups] + [c.setup for c in result.cells]:
            if name not in names:
                names.append(name)
    return names


def compare(a: RunResult, b: RunResult) -> Comparison:
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
                    cells[setup] = ratio_cell(y.qps_values, x.qps_values, problem, "run A")
                rows.append(RatioRow(step, group_of(step), None, None, cells))
            tables.append(
                RatioTable(
                    key=f"cmp-{engine}-{threads}",
                    title=f"{engine}, {threads} client thread{'s' if threads != 1 else ''}",
                    caption="QPS(B) / QPS(A), 95% interval below",
                    columns=columns,
                    rows=rows,
                    engine=engine,
                    threads=threads,
                )
            )
    # Tables may lack a setup on some steps; verdict_for and the template skip those.
    for table in tables:
        for row in table.rows:
            for column in table.columns:
                row.cells.setdefault(column, ratio_cell([], [], "not in both", "run A"))
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
    return Comparison(a, b, setups, tables, verdict, memory, unmatched)


# ---------------------------------------------------------------- loading


def load_result(source: str, store: Path | None = None) -> RunResult:
    """A results.json, an output directory, a .sqlite store, or a run id in --store."""
    if store is not None:
        return _from_store(store, source)
    path = Path(source)
    if path.is_dir():
        if (path / "results.json").is_file():
            path = path / "results.json"
        elif (path / "results.sqlite").is_file():
            path = path / "results.sqlite"
        else:
            raise MallocbenchError(f"{path} holds no results.json or results.sqlite")
    if not path.exists():
        raise MallocbenchError(
            f"{source} does not exist: give a results.json, an output directory, a .sqlite "
            "store, or run ids with --store"
        )
    if path.suffix == ".json":
        try:
            return RunResult.from_dict(json.loads(path.read_text()))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise MallocbenchError(f"{path} is not a mallocbench results.json ({exc})") from exc
    return _from_store(path, None)


def _from_store(path: Path, run_id: str | None) -> RunResult:
    if path.is_dir():
        path = path / "results.sqlite"
    if not path.is_file():
        raise MallocbenchError(f"no results store at {path}")
    db = Store(path)
    try:
        return db.load_run(run_id, with_samples=False)
    finally:
        db.close()


# ---------------------------------------------------------------- text formats


def _color(cell_text: str, css: str) -> str:
    color = {"slower": "red", "faster": "green", "problem": "bold red"}.get(css)
    return f"[{color}]{cell_text}[/]" if color else cell_text


def print_comparison(cmp: Comparison, console: Console | None = None) -> None:
    console = console or Console()
    console.print(
        f"[bold]B / A[/]: A = {cmp.a.run_id} ({cmp.a.experiment}), "
        f"B = {cmp.b.run_id} ({cmp.b.experiment})"
    )
    for t in cmp.tables:
        # With one repeat per side no cell has an interval: say so once, not per cell.
        intervals = _has_intervals(t)
        caption = "red <= 0.95, green >= 1.05"
        caption += (
            ", * significant (95% interval excludes 1.0)"
            if intervals
            else "; 1 repeat: no interval, no significance"
        )
        table = Table(title=f"QPS(B) / QPS(A): {t.title}", caption=caption)
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
                    text = cell.text + ("*" if cell.significant else "")
                    values.append(_color(text, cell.css))
                    if intervals:
                        values.append(cell.interval_text)
                table.add_row("  " + row.step, *values)
            gm = []
            for column in t.columns:
                value = geomeans[column]
                gm += [_color(fmt.ratio(value), ratio_class(value)), ""][:width]
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
    for row in cmp.verdict:
        for label, items in (("faster in B", row.faster), ("slower in B", row.slower)):
            if items:
                console.print(f"{row.engine}/{row.setup} {label}: " + "; ".join(items))
        if row.note:
            console.print(f"{row.engine}/{row.setup}: {row.note}")
    if cmp.unmatched:
        console.print("[dim]not compared (only in one run): " + ", ".join(cmp.unmatched) + "[/]")


def _has_intervals(table: RatioTable) -> bool:
    return any(c.has_interval for r in table.rows for c in r.cells.values())


def comparison_records(cmp: Comparison) -> list[dict[str, Any]]:
    records = []
    for t in cmp.tables:
        for row in t.rows:
            for setup in t.columns:
                cell = row.cells[setup]
                records.append(
                    {
                        "engine": t.engine,
                        "threads": t.threads,
                        "step": row.step,
                        "group": row.group,
                        "setup": setup,
                        "qps_a": cell.reference,
                        "qps_b": cell.value,
                        "ratio": cell.ratio,
                        "low": None if not cell.has_interval else cell.low,
                        "high": None if not cell.has_interval else cell.high,
                        "significant": cell.significant,
                        "repeats_a": cell.repeats[1],
                        "repeats_b": cell.repeats[0],
                        "problem": cell.problem,
                    }
                )
    return records


def comparison_csv(cmp: Comparison) -> str:
    records = comparison_records(cmp)
    buffer = io.StringIO()
    columns = list(records[0]) if records else ["engine"]
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()


def comparison_json(cmp: Comparison) -> str:
    def finite(x: float | None) -> float | None:
        return x if x is not None and abs(x) != float("inf") else None

    records = comparison_records(cmp)
    for record in records:
        record["low"], record["high"] = finite(record["low"]), finite(record["high"])
    return json.dumps(
        {
            "a": cmp.a.run_id,
            "b": cmp.b.run_id,
            "cells": records,
            "memory": [m.__dict__ for m in cmp.memory],
            "unmatched": cmp.unmatched,
        },
        indent=1,
    )


def comparison_markdown(cmp: Comparison) -> str:
    out = [
        f"# mallocbench compare: {cmp.b.run_id} (B) against {cmp.a.run_id} (A)",
        "",
        "QPS(B) / QPS(A) for the same engine, step, threads and setup; `*` marks a "
        "significant change (the 95% interval excludes 1.0).",
        "",
    ]
    for t in cmp.tables:
        out += [f"## {t.title}", ""]
        intervals = _has_intervals(t)
        if not intervals:
            out += ["1 repeat: no interval, so no significance can be claimed.", ""]
        out.append("| step | " + " | ".join(t.columns) + " |")
        out.append("|---|" + "|".join("---:" for _ in t.columns) + "|")
        for _, title, rows, geomeans in t.groups():
            out.append(f"| **{title}** |" + " |" * len(t.columns))
            for row in rows:
                values = []
                for column in t.columns:
                    cell = row.cells[column]
                    text = cell.text + ("\\*" if cell.significant else "")
                    if intervals and cell.interval_text:
                        text += f" {cell.interval_text}"
                    values.append(text)
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
def compare_cmd(
    run_a: str, run_b: str, store_path: Path | None, fmt_name: str, html_path: Path | None
) -> None:
    """Compare run B against run A: QPS(B) / QPS(A) per engine, step, threads and setup.

    \b
    RUN_A and RUN_B are results.json files, output directories, .sqlite stores (their
    latest run), or, with --store, run ids in one store.

    \b
    Examples:
      mallocbench compare out-10.11/results.json out-11.4/results.json
      mallocbench compare --store out/results.sqlite small-20250101-1200 small-20250102-0900
      mallocbench compare old-out new-out --html compare.html
    """
    cmp = compare(load_result(run_a, store_path), load_result(run_b, store_path))
    if html_path is not None:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_compare_html(cmp), encoding="utf-8")
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
