"""Terminal rendering with rich."""

from __future__ import annotations

import shlex
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.analysis.summary import RatioCell, RatioTable
from mallocbench.console import make_console
from mallocbench.report.ratchet import print_ratchet
from mallocbench.report.recommend import verdict_lines
from mallocbench.report.replay import print_replay
from mallocbench.report.soak import print_soak
from mallocbench.report.tables import (
    PER_OP_NOTE,
    RelativeMarkup,
    memory_columns,
    memory_notes,
    per_op_tables,
    relative_rows,
    run_notes,
    sla_lines,
)
from mallocbench.report.words import (
    adaptive_lines,
    cell_class,
    cell_interval,
    cell_mark,
    cell_text,
    client_cpu_warnings,
    color_rule,
    exploratory_note,
    significance_rule,
    unit_note,
    vsz_note,
)

COLORS = {"slower": "red", "faster": "green", "problem": "bold red"}


def print_allocators(entries: list[dict[str, Any]], console: Console | None = None) -> None:
    console = console or make_console()
    table = Table(title="Allocators")
    for column in ("name", "version", "library", "status"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        status = (
            "[green]available[/]"
            if entry["available"]
            else f"[red]missing[/]: apt-get install {entry['debian_package']}"
        )
        table.add_row(entry["name"], entry["version"] or "-", entry["path"] or "-", status)
    console.print(table)
    console.print("Any other malloc library: give its path (e.g. /opt/lib/libfoo.so) as allocator.")


def print_knobs(entries: list[dict[str, Any]], console: Console) -> None:
    """One table per allocator; a knob the installed version does not read is marked."""
    for entry in entries:
        version = entry["version"] or ("not installed" if not entry["available"] else "-")
        table = Table(title=f"{entry['name']} {version}", title_justify="left")
        for column in ("knob", "type", "range", "default", "unit", "passed as", "installed"):
            table.add_column(column, overflow="fold")
        for knob in entry["knobs"]:
            table.add_row(
                knob["name"],
                knob["type"],
                knob["range"],
                knob["default"],
                knob["unit"] or "-",
                knob["passed_as"],
                "[green]yes[/]" if knob["available"] else "[red]no[/]",
            )
        console.print(table)
    console.print(
        "A knob marked 'no' is not in the installed library and is refused; names the "
        "library reads beyond this list are accepted as raw knobs."
    )


def colored(text: str, css: str) -> str:
    """Text in the color the HTML report gives the same class."""
    color = COLORS.get(css)
    return f"[{color}]{text}[/]" if color else text


def ratio_text(cell: RatioCell) -> str:
    """A relative value with its finding mark and, under it, its interval: without the
    interval a reader cannot see why a 1.07 is left uncolored."""
    text = colored(cell_text(cell) + cell_mark(cell), cell_class(cell))
    text += " [dim]same[/]" if cell.same else ""
    interval = cell_interval(cell)
    return text + (f"\n[dim]{interval}[/]" if interval else "")


TERMINAL_MARKUP = RelativeMarkup(
    heading=lambda title: f"[bold]{title}[/]",
    ratio=ratio_text,
    geomean_label=lambda label: f"[italic]{label}[/]",
    # A geomean has no interval: dim, never colored as a finding.
    geomean_value=lambda value: f"[dim]{value}[/]",
    indent="  ",
)


def print_run(
    analysis: RunAnalysis, console: Console | None = None, source: str | None = None
) -> None:
    """The relative-QPS tables and the peak-memory table, colored like the HTML report.

    `source` is where the run was read from (an output directory, a store), for the
    commands the report suggests.
    """
    console = console or make_console()
    exploratory = exploratory_note(analysis.exploratory)
    if exploratory:
        console.print(f"[bold yellow]{exploratory}[/]")
    tables = analysis.tables
    for rel in tables:
        console.print(_relative_table(rel))
    note = unit_note(tables)
    if note:
        console.print(f"[dim]{note}[/]")
    for title, header, rows in per_op_tables(analysis):
        console.print(_per_op_table(title, header, rows))
    if analysis.memory:
        _print_memory(analysis, console)
    print_soak(analysis, console)
    print_replay(analysis.replay, console)
    print_ratchet(analysis, console)
    _print_findings(analysis, console, source)


def _relative_table(rel: RatioTable) -> Table:
    caption = "QPS(setup)/QPS(base): " + color_rule(rel.min_effect)
    if rel.has_intervals:
        caption += "; " + significance_rule(rel.min_effect)
    table = Table(
        title=f"Relative QPS vs {rel.reference}: {rel.engine}, {rel.threads} thread(s)",
        caption=caption,
    )
    table.add_column("step", overflow="fold")
    table.add_column(f"{rel.reference} QPS", justify="right", overflow="fold")
    for setup in rel.columns:
        table.add_column(setup, justify="right", overflow="fold")
    for cells, last in relative_rows(rel, TERMINAL_MARKUP):
        table.add_row(*cells, end_section=last)
    return table


def _per_op_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=f"Per operation: {title}", caption=PER_OP_NOTE)
    for name in header:
        table.add_column(
            name, justify="left" if name in ("step", "setup") else "right", overflow="fold"
        )
    previous = None
    for row in rows:
        # The step once per group of setups, as the relative tables do.
        table.add_row(row[0] if row[0] != previous else "", *row[1:])
        previous = row[0]
    return table


def _print_memory(analysis: RunAnalysis, console: Console) -> None:
    memory = analysis.memory
    columns = memory_columns(memory, analysis.reserved_vsz_bytes is not None)
    notes = memory_notes(memory)
    table = Table(title="Peak memory of the server", caption=" ".join(notes) or None)
    for header, _ in columns:
        table.add_column(
            header,
            justify="left" if header in ("engine", "setup") else "right",
            overflow="fold",
        )
    for row in memory:
        table.add_row(*[cell(row) for _, cell in columns])
    console.print(table)
    reserved = vsz_note(analysis.reserved_vsz_bytes)
    if reserved:
        console.print(f"[yellow]note[/]: {reserved}")


def _print_findings(analysis: RunAnalysis, console: Console, source: str | None) -> None:
    """The lines under the tables: the verdict, then what a reader should double-check."""
    result = analysis.result
    rec = analysis.recommendation
    if rec.engines and not rec.exploratory:
        for line in verdict_lines(rec):
            console.print(f"[bold]recommendation[/]: {escape(line)}")
        where = shlex.quote(source) if source else "OUT_DIR"
        run = f" --run {shlex.quote(result.run_id)}" if source else ""
        # Unwrapped: a command to copy must stay on one line.
        console.print(
            f"[dim]the evidence: mallocbench recommend {escape(where)}{run}[/]", soft_wrap=True
        )
    for line in adaptive_lines(analysis.adaptive):
        console.print(escape(line))
    for line, met in sla_lines(analysis):
        console.print(escape(line), style=None if met else "red")
    for warning in client_cpu_warnings(analysis.client_bound):
        console.print(f"[yellow]warning[/]: {escape(warning)}")
    for note in run_notes(analysis):
        console.print(f"[yellow]note[/]: {escape(note)}")
    for cell in analysis.problems:
        console.print(
            f"[red]{cell.status}[/]: {cell.setup}/{cell.engine}/{cell.step}/"
            f"{cell.threads}t: {escape(cell.error or '')}"
        )
