"""A comparison (`analysis.comparison`) as terminal tables, Markdown, CSV and JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mallocbench import units as fmt
from mallocbench.analysis.comparability import Difference
from mallocbench.analysis.comparison import PEAK_RSS, Change, Comparison, MemoryChange
from mallocbench.analysis.summary import RSS, RatioCell
from mallocbench.console import make_console
from mallocbench.report import markdown
from mallocbench.report.export import location_record, records_csv
from mallocbench.report.tables import relative_rows
from mallocbench.report.terminal import TERMINAL_MARKUP, colored
from mallocbench.report.words import (
    cell_class,
    cell_interval,
    cell_mark,
    cell_text,
    change_reason,
    change_text,
    color_rule,
    difference_fields,
    difference_text,
    finding_text,
    findings_summary,
    interval_fields,
    one_sided_text,
    problem_text,
    significance_rule,
    table_title,
    verdict_note,
    vsz_note,
)
from mallocbench.units import percent


def _rules(cmp: Comparison, intervals: bool) -> str:
    text = color_rule(cmp.min_effect)
    if intervals:
        return text + "; " + significance_rule(cmp.min_effect)
    return text + "; 1 repeat: no interval, no significance"


def print_comparison(cmp: Comparison, console: Console | None = None) -> None:
    console = console or make_console()
    console.print(
        f"[bold]B / A[/]: A = {cmp.a.run_id} ({cmp.a.experiment}), "
        f"B = {cmp.b.run_id} ({cmp.b.experiment})"
    )
    for t in cmp.tables:
        # ratio_text puts each interval under its ratio; with one repeat per side no cell
        # has one, and the caption says so once.
        table = Table(
            title=f"QPS(B) / QPS(A): {table_title(t)}", caption=_rules(cmp, t.has_intervals)
        )
        table.add_column("step", overflow="fold")
        for column in t.columns:
            table.add_column(column, justify="right", overflow="fold")
        for cells, last in relative_rows(t, TERMINAL_MARKUP, with_reference=False):
            table.add_row(*cells, end_section=last)
        console.print(table)
    if cmp.memory:
        _print_memory(cmp, console)
    for row in cmp.verdict:
        for label, items in (("faster in B", row.faster), ("slower in B", row.slower)):
            if items:
                found = "; ".join(finding_text(f) for f in items)
                console.print(f"{row.engine}/{row.setup} {label}: {found}")
        note = verdict_note(row)
        if note:
            console.print(f"{row.engine}/{row.setup}: {note}")
    if cmp.unmatched:
        only = ", ".join(one_sided_text(u) for u in cmp.unmatched)
        console.print("[dim]not compared (only in one run): " + only + "[/]")


# More RSS is the bad direction: red, where a faster throughput is green.
_RSS_CSS = {"faster": "slower", "slower": "faster"}


def _rss_rule(min_effect: float, marks: str = "red more, green less") -> str:
    """How the RSS B/A column reads; `marks` names how a change is shown."""
    band = f" and the change is at least {percent(min_effect)}" if min_effect > 0 else ""
    return (
        "RSS B/A: the mean of each repeat's peak RSS in B over A's, with its 95% interval; "
        f"{marks}: the interval excludes 1.0{band}"
    )


def _rss_text(m: MemoryChange) -> str:
    """Peak RSS B/A for the terminal, its interval under it as under every ratio."""
    if m.rss is None or m.rss.ratio is None:
        return fmt.ratio(m.rss_ratio)
    cell = m.rss
    text = colored(cell_text(cell) + cell_mark(cell), _RSS_CSS.get(cell_class(cell), ""))
    interval = cell_interval(cell)
    return text + (f"\n[dim]{interval}[/]" if interval else "")


def _print_memory(cmp: Comparison, console: Console) -> None:
    table = Table(title="Peak memory (GiB): A -> B", caption=_rss_rule(cmp.min_effect))
    for column in ("engine", "setup", "RSS A", "RSS B", "RSS B/A", "VSZ A", "VSZ B"):
        table.add_column(
            column, justify="left" if column in ("engine", "setup") else "right", overflow="fold"
        )
    for m in cmp.memory:
        table.add_row(
            m.engine,
            m.setup,
            fmt.gb(m.rss_a),
            fmt.gb(m.rss_b),
            _rss_text(m),
            fmt.gb(m.vsz_a),
            fmt.gb(m.vsz_b),
        )
    console.print(table)
    reserved = vsz_note(cmp.reserved_vsz_bytes)
    if reserved:
        console.print(f"[yellow]note[/]: {reserved}")


def memory_records(cmp: Comparison) -> list[dict[str, Any]]:
    """Peak RSS B/A per engine and setup, in the columns of `comparison_records`: the
    absolute values are bytes (unit "bytes"), each run's mean of its per-repeat peaks."""
    records = []
    for m in cmp.memory:
        cell = m.rss or RatioCell(
            None,
            repeats=(0, 0),
            problem="no RSS in both runs",
            reference_label="run A",
            min_effect=cmp.min_effect,
            unit=RSS,
        )
        records.append(
            {
                "engine": m.engine,
                "threads": None,
                "step": PEAK_RSS,
                "group": "memory",
                "setup": m.setup,
                "qps_a": cell.reference,
                "qps_b": cell.value,
                "ratio": cell.ratio,
                **interval_fields(cell),
                "unit": RSS,
                "repeats_a": cell.repeats[1],
                "repeats_b": cell.repeats[0],
                "problem": problem_text(cell) if cell.problem else None,
                "min_effect": cell.min_effect,
            }
        )
    return records


def comparison_records(cmp: Comparison) -> list[dict[str, Any]]:
    return [
        {
            **location_record(t, row, setup),
            "qps_a": cell.reference,
            "qps_b": cell.value,
            "ratio": cell.ratio,
            **interval_fields(cell),
            "unit": cell.unit,
            "repeats_a": cell.repeats[1],
            "repeats_b": cell.repeats[0],
            "problem": problem_text(cell) if cell.problem else None,
            "min_effect": cell.min_effect,
        }
        for t in cmp.tables
        for row, setup, cell in t.entries()
    ]


def comparison_csv(cmp: Comparison) -> str:
    """Every cell's throughput B/A, then peak RSS B/A per engine and setup (step
    "peak RSS", unit "bytes")."""
    return records_csv(comparison_records(cmp) + memory_records(cmp), ("engine",))


def _memory_json(m: MemoryChange) -> dict[str, Any]:
    # Worded as the tables show them (GiB, two decimals), as before the figures were kept.
    shown = {"rss_a", "rss_b", "vsz_a", "vsz_b"}
    record = {
        k: fmt.gb(v) if k in shown else fmt.ratio(v) if k.startswith("per_cache") else v
        for k, v in m.__dict__.items()
        if k != "rss"
    }
    cell = m.rss
    record["rss"] = (
        None
        if cell is None
        else {
            "a": cell.reference,
            "b": cell.value,
            "ratio": cell.ratio,
            **interval_fields(cell),
            "repeats_a": cell.repeats[1],
            "repeats_b": cell.repeats[0],
        }
    )
    return record


def _change_json(change: Change) -> dict[str, Any]:
    record: dict[str, Any] = {
        "kind": change.kind,
        "engine": change.engine,
        "threads": change.threads,
        "step": change.step,
        "setup": change.setup,
        "reason": change_reason(change) or None,
    }
    if change.cell is not None:
        record.update(ratio=change.cell.ratio, **interval_fields(change.cell))
    return record


def comparison_json(cmp: Comparison) -> str:
    return json.dumps(
        {
            "a": cmp.a.run_id,
            "b": cmp.b.run_id,
            "min_effect": cmp.min_effect,
            "cells": comparison_records(cmp),
            "memory": [_memory_json(m) for m in cmp.memory],
            "changes": [_change_json(c) for c in cmp.changes],
            "differences": [difference_fields(d) for d in cmp.differences],
            "unmatched": [one_sided_text(u) for u in cmp.unmatched],
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
    if cmp.differences:
        out += [
            "> **The runs differ:** "
            + "; ".join(difference_text(d) for d in cmp.differences)
            + ".",
            "",
        ]
    for t in cmp.tables:
        out += [f"## {table_title(t)}", ""]
        if not t.has_intervals:
            out += ["1 repeat: no interval, so no significance can be claimed.", ""]
        out.append("| step | " + " | ".join(t.columns) + " |")
        out.append("|---|" + "|".join("---:" for _ in t.columns) + "|")
        for cells, _ in relative_rows(t, markdown.MARKDOWN_MARKUP, with_reference=False):
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    if cmp.memory:
        out += [
            "## Peak memory (GiB)",
            "",
            _rss_rule(cmp.min_effect, "\\* more or less RSS") + ".",
            "",
            "| engine | setup | RSS A | RSS B | RSS B/A | VSZ A | VSZ B |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for m in cmp.memory:
            rss = markdown.ratio_text(m.rss) if m.rss else fmt.ratio(m.rss_ratio)
            out.append(
                f"| {m.engine} | {m.setup} | {fmt.gb(m.rss_a)} | {fmt.gb(m.rss_b)} | {rss} "
                f"| {fmt.gb(m.vsz_a)} | {fmt.gb(m.vsz_b)} |"
            )
        out.append("")
        reserved = vsz_note(cmp.reserved_vsz_bytes)
        if reserved:
            out += [f"> **Note:** {reserved}", ""]
    return "\n".join(out)


# --- what `compare` says on standard error ---------------------------------------------------


def differ_text(difference: Difference) -> str:
    """Said before the tables: whoever reads the verdicts should know this first."""
    return f"compare: warning: the runs differ: {difference_text(difference)}\n"


def same_run_text(run_id: str) -> str:
    return (
        f"compare: warning: A and B are the same run ({run_id}): it is compared "
        "with itself, so every ratio is 1 by construction\n"
    )


def print_wrote(path: Path, console: Console) -> None:
    console.print(f"wrote {path}")


@dataclass(frozen=True)
class Gate:
    """--fail-on's outcome: the comparison, the kinds of change asked about, the findings."""

    comparison: Comparison
    kinds: tuple[str, ...]
    found: list[Change]


def gate_text(g: Gate) -> str:
    """The findings, one line each, and a summary."""
    lines = [f"compare: {change_text(change)}" for change in g.found]
    if not any(t.has_intervals for t in g.comparison.tables):
        # A gate that cannot fail should not pass quietly.
        lines.append(
            "compare: warning: no ratio has an interval (one repeat in a run), so no "
            "change can be a finding: run with repeats >= 3"
        )
    lines.append(findings_summary(g.comparison, g.kinds, len(g.found)))
    return "".join(f"{line}\n" for line in lines)
