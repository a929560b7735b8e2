"""A pattern run's reports, each a function of its `PatternsAnalysis`: the terminal
tables, Markdown, CSV and JSON (`analysis.patterns` computes the rows once)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from mallocbench.patterns.experiment import PlannedRun

from mallocbench.analysis import stats
from mallocbench.analysis.patterns import PatternsAnalysis, SummaryRow
from mallocbench.model.results import json_safe
from mallocbench.report.words import relative_text

MIB = 1024 * 1024


def _num(x: float, digits: int = 0) -> str:
    if x is None or math.isnan(x):
        return "-"
    return f"{x:,.{digits}f}"


def _mib(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x / MIB:,.1f}"


def _ops(row: SummaryRow) -> str:
    text = _num(row.ops_per_sec)
    if not math.isnan(row.ops_per_sec_high) and row.ops_per_sec > 0:
        # Half the (asymmetric, log-scale) interval's width, relative to the mean.
        spread = (row.ops_per_sec_high - row.ops_per_sec_low) / 2 / row.ops_per_sec
        text += f" ±{spread * 100:.0f}%"
    return text


def exploratory_note(rows: Sequence[SummaryRow]) -> str | None:
    """First line of the report when no comparison has an interval (one repeat)."""
    compared = [r for r in rows if r.setup != r.base]
    if compared and all(math.isnan(r.rel_ops_low) for r in compared):
        return (
            "Exploratory run: one repeat, so no difference below has an interval and none "
            "is a finding. For a verdict, run with --repeats 3 or more."
        )
    return None


def _rel(row: SummaryRow, value: stats.Relative, suffix: str = "") -> str:
    if row.setup == row.base:
        return "base"
    return relative_text(value) + suffix


def _ratio(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}"


COLUMNS = (
    "case",
    "threads",
    "setup",
    "ops/s ±95% CI",
    "ops/s vs base",
    "peak MiB",
    "final MiB",
    "RSS/live",
    "peak RSS/live",
    "RSS/live vs base",
)


def _cells(row: SummaryRow) -> list[str]:
    status = "" if not row.failed else f" ({row.failed} failed)"
    return [
        row.case,
        str(row.threads),
        row.setup + status,
        _ops(row),
        _rel(row, row.rel_ops_value),
        _mib(row.peak_rss_bytes),
        _mib(row.final_rss_bytes),
        _ratio(row.rss_per_live),
        _ratio(row.peak_rss_per_live),
        _rel(row, row.rel_rss_value, "" if row.rss_metric == "rss_per_live" else " (peak)"),
    ]


def print_patterns(a: PatternsAnalysis, console: Console) -> None:
    """One small table per case and thread count, so each stays narrow."""
    rows = a.rows
    console.print(f"[bold]Allocation patterns: {a.run.experiment} ({a.run.run_id})[/]")
    exploratory = exploratory_note(rows)
    if exploratory:
        console.print(f"[bold yellow]{exploratory}[/]")
    groups: dict[tuple[str, int], list[SummaryRow]] = {}
    for row in rows:
        groups.setdefault((row.case, row.threads), []).append(row)
    for (case, threads), group in groups.items():
        table = Table(
            title=f"{case} · {threads} thread{'s' if threads != 1 else ''}", title_justify="left"
        )
        for i, column in enumerate(TERMINAL_COLUMNS):
            table.add_column(column, justify="left" if i == 0 else "right", overflow="fold")
        for row in group:
            cells = _cells(row)[2:]
            for idx, rel in ((2, row.rel_ops_value), (7, row.rel_rss_value)):
                if row.setup != row.base and rel.significant:
                    good = (rel.ratio > 1) == (idx == 2)
                    cells[idx] = f"[{'green' if good else 'red'}]{cells[idx]}[/]"
            table.add_row(*cells)
        console.print(table)
    console.print(LEGEND)
    for row in rows:
        if row.error:
            console.print(f"[red]{row.case} / {row.setup} / {row.threads} threads:[/] {row.error}")


TERMINAL_COLUMNS = ("setup",) + COLUMNS[3:]


LEGEND = (
    "vs base: mean / base mean with a 95% interval (log scale: never below zero); "
    "* and color = significant (the interval "
    "excludes 1.00). RSS/live = final RSS / live bytes requested; peak RSS/live = peak RSS "
    "(VmHWM) / peak live bytes; (peak): compared on peak RSS/live because nothing stays live."
)


def patterns_markdown(a: PatternsAnalysis) -> str:
    run, rows = a.run, a.rows
    meta = run.metadata
    lines = [
        f"# Allocation patterns: {run.experiment}",
        "",
        f"Run `{run.run_id}` on {meta.host} ({meta.cpus} CPUs, "
        f"kernel {meta.kernel}, glibc {meta.glibc}); "
        f"{run.model.repeats} repeats, interleaved.",
        "",
        *([f"> **{note}**", ""] if (note := exploratory_note(rows)) else []),
        "| setup | allocator | version | knobs | options |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in run.model.setups:
        knobs = " ".join(f"`{k}={v}`" for k, v in s.knobs.items()) or "-"
        options = " ".join(f"`{k}={v}`" for k, v in s.options.items()) or "-"
        lines.append(
            f"| {s.name} | {s.allocator} | {s.allocator_version or '-'} | {knobs} | {options} |"
        )
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(row)) + " |")
    lines += ["", LEGEND, ""]
    errors = [r for r in rows if r.error]
    if errors:
        lines += ["Failures:", ""]
        lines += [f"- {r.case} / {r.setup} / {r.threads} threads: {r.error}" for r in errors]
        lines.append("")
    return "\n".join(lines)


def patterns_json(a: PatternsAnalysis) -> str:
    """The run as stored, with its summary rows (no NaN: JSON has none)."""
    document = a.run.to_dict()
    document["summary"] = [asdict(r) for r in a.rows]
    return json.dumps(json_safe(document), indent=2) + "\n"


def patterns_csv(a: PatternsAnalysis) -> str:
    """The summary rows, one a line (the csv module's \\r\\n line ends)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(SummaryRow)])
    writer.writeheader()
    for row in a.rows:
        writer.writerow({k: ("" if v is None else v) for k, v in json_safe(asdict(row)).items()})
    return out.getvalue()


# --- what `patterns` says around its tables --------------------------------------------------


@dataclass(frozen=True)
class PatternPlan:
    """--dry-run: the runs still to do, and (with --resume) the run and how many it has."""

    runs: list[PlannedRun]
    resumed: tuple[str, int] | None = None


def print_plan(plan: PatternPlan, console: Console) -> None:
    for planned in plan.runs:
        console.print(
            f"{planned.case.name:<32} threads={planned.threads:<3} "
            f"setup={planned.setup.name:<24} repeat={planned.repeat + 1}"
        )
    note = "" if plan.resumed is None else f" ({plan.resumed[1]} done in {plan.resumed[0]})"
    console.print(f"{len(plan.runs)} runs{note}")


@dataclass(frozen=True)
class PatternFiles:
    """The files a pattern run's tables were written to, and its store and id."""

    markdown: Path
    csv: Path
    json: Path
    store: str
    run_id: str


def print_files(f: PatternFiles, console: Console) -> None:
    console.print(f"Wrote {f.markdown}, {f.csv}, {f.json}; store {f.store} (run {f.run_id})")
