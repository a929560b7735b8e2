"""Terminal rendering with rich."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from mallocbench.analysis.summary import memory_rows, relative_tables
from mallocbench.report import formatting as fmt
from mallocbench.results import STATUS_OK, RunResult
from mallocbench.workloads.catalogue import GROUPS


def print_allocators(entries: list[dict[str, Any]], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="Allocators")
    for column in ("name", "version", "library", "status"):
        table.add_column(column)
    for entry in entries:
        status = (
            "[green]available[/]"
            if entry["available"]
            else f"[red]missing[/]: apt-get install {entry['debian_package']}"
        )
        table.add_row(entry["name"], entry["version"] or "-", entry["path"] or "-", status)
    console.print(table)
    console.print("Any other malloc library: give its path (e.g. /opt/lib/libfoo.so) as allocator.")


def _color_ratio(value: float | None) -> str:
    if value is None:
        return "-"
    if value <= 0.95:
        return f"[red]{value:.2f}[/]"
    if value >= 1.05:
        return f"[green]{value:.2f}[/]"
    return f"{value:.2f}"


def print_run(result: RunResult, console: Console | None = None) -> None:
    """The relative-QPS tables and the peak-memory table, colored like the HTML report."""
    console = console or Console()
    for rel in relative_tables(result):
        table = Table(
            title=f"Relative QPS vs {rel.base}: {rel.engine}, {rel.threads} thread(s)",
            caption="QPS(setup)/QPS(base): red <= 0.95, green >= 1.05"
            + (", * significant at 95%" if any(r.intervals for r in rel.rows) else ""),
        )
        table.add_column("step")
        table.add_column(f"{rel.base} QPS", justify="right")
        for setup in rel.setups:
            table.add_column(setup, justify="right")
        geomeans = rel.group_geomeans()
        for group, title in GROUPS.items():
            rows = [r for r in rel.rows if r.group == group]
            if not rows:
                continue
            table.add_row(f"[bold]{title}[/]", "", *["" for _ in rel.setups])
            for row in rows:
                values = [
                    f"[red]{row.problems[s].upper()}[/]"
                    if s in row.problems
                    else _color_ratio(row.values[s])
                    for s in rel.setups
                ]
                base = row.problems.get(rel.base, "").upper() or fmt.qps(row.base_qps)
                table.add_row("  " + row.step, base, *values)
            table.add_row(
                f"  [italic]geomean {group}[/]",
                "",
                *[_color_ratio(geomeans[group][s]) for s in rel.setups],
                end_section=True,
            )
        console.print(table)
    memory = memory_rows(result)
    if memory:
        table = Table(title="Peak memory of the server (GiB)")
        for column in ("engine", "setup", "peak VSZ", "peak RSS", "RSS/cache"):
            table.add_column(column, justify="left" if column in ("engine", "setup") else "right")
        for row in memory:
            table.add_row(
                row.engine,
                row.setup,
                fmt.gb(row.peak_vsz_bytes),
                fmt.gb(row.peak_rss_bytes),
                fmt.ratio(row.rss_per_cache),
            )
        console.print(table)
    problems = [c for c in result.cells if c.status != STATUS_OK]
    for cell in problems:
        console.print(
            f"[red]{cell.status}[/]: {cell.setup}/{cell.engine}/{cell.step}/"
            f"{cell.threads}t: {cell.error or ''}"
        )
