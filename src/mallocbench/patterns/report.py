"""Summaries and exports of a pattern run: terminal table, Markdown, CSV, JSON.

Per case x threads x setup: mean ops/s with its 95% interval, ops/s and peak RSS relative
to the case's base setup with log-scale intervals (significant when the interval excludes
1.0, marked *), and RSS per live byte.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mallocbench.analysis import stats
from mallocbench.console import make_console
from mallocbench.patterns.experiment import Case
from mallocbench.patterns.store import PatternResult, PatternRun, RunModel
from mallocbench.report.words import relative_text

MIB = 1024 * 1024


@dataclass
class SummaryRow:
    case: str
    pattern: str
    threads: int
    setup: str
    base: str
    runs: int
    failed: int
    ops_per_sec: float
    ops_per_sec_low: float
    ops_per_sec_high: float
    rel_ops: float
    rel_ops_low: float
    rel_ops_high: float
    rel_ops_significant: bool
    peak_rss_bytes: float
    rss_metric: str
    rel_rss_per_live: float
    rel_rss_per_live_low: float
    rel_rss_per_live_high: float
    rel_rss_per_live_significant: bool
    final_rss_bytes: float
    live_bytes: float
    peak_live_bytes: float
    rss_per_live: float
    peak_rss_per_live: float
    error: str | None = None

    @property
    def rel_ops_value(self) -> stats.Relative:
        return stats.Relative(self.rel_ops, self.rel_ops_low, self.rel_ops_high)

    @property
    def rel_rss_value(self) -> stats.Relative:
        return stats.Relative(
            self.rel_rss_per_live, self.rel_rss_per_live_low, self.rel_rss_per_live_high
        )


def _values(results: list[PatternResult], key: str) -> list[float]:
    return [float(v) for r in results if (v := r.metric(key)) is not None]


def summarize(model: RunModel, results: list[PatternResult]) -> list[SummaryRow]:
    """One row per case x threads x setup, in the order the experiment defines them."""
    rows: list[SummaryRow] = []
    for case in model.cases:
        for threads in case.threads:

            def cell(setup: str, case: Case = case, threads: int = threads) -> list[PatternResult]:
                return [
                    r
                    for r in results
                    if r.case == case.name and r.setup == setup and r.threads == threads
                ]

            base_ok = [r for r in cell(case.base) if r.status == "ok"]
            for setup in case.setups:
                runs = cell(setup)
                ok = [r for r in runs if r.status == "ok"]
                if not runs:
                    continue
                ops = _values(ok, "ops_per_sec")
                mean_ops, low, high = stats.mean_ci(ops)
                rel_ops = stats.relative(ops, _values(base_ok, "ops_per_sec"))
                rss = _values(ok, "peak_rss_bytes")
                # RSS/live at the end where something stays live (a cache); where nothing
                # does (sortbuf frees every buffer), peak RSS over peak live instead
                metric = "rss_per_live"
                if any(r.metric(metric) is None for r in ok + base_ok):
                    metric = "peak_rss_per_live"
                rel_rss = stats.relative(_values(ok, metric), _values(base_ok, metric))
                errors = [r.error for r in runs if r.status != "ok" and r.error]
                rows.append(
                    SummaryRow(
                        case=case.name,
                        pattern=case.pattern,
                        threads=threads,
                        setup=setup,
                        base=case.base,
                        runs=len(ok),
                        failed=len(runs) - len(ok),
                        ops_per_sec=mean_ops,
                        ops_per_sec_low=low,
                        ops_per_sec_high=high,
                        rel_ops=rel_ops.ratio,
                        rel_ops_low=rel_ops.low,
                        rel_ops_high=rel_ops.high,
                        rel_ops_significant=rel_ops.significant,
                        peak_rss_bytes=stats.mean(rss),
                        rss_metric=metric,
                        rel_rss_per_live=rel_rss.ratio,
                        rel_rss_per_live_low=rel_rss.low,
                        rel_rss_per_live_high=rel_rss.high,
                        rel_rss_per_live_significant=rel_rss.significant,
                        final_rss_bytes=stats.mean(_values(ok, "final_rss_bytes")),
                        live_bytes=stats.mean(_values(ok, "live_bytes")),
                        peak_live_bytes=stats.mean(_values(ok, "peak_live_bytes")),
                        rss_per_live=stats.mean(_values(ok, "rss_per_live")),
                        peak_rss_per_live=stats.mean(_values(ok, "peak_rss_per_live")),
                        error=errors[0] if errors else None,
                    )
                )
    return rows


# --- formatting -----------------------------------------------------------------------


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


def exploratory_note(rows: list[SummaryRow]) -> str | None:
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


def print_table(rows: list[SummaryRow], title: str, console: Console | None = None) -> None:
    """One small table per case and thread count, so each stays narrow."""
    console = console or make_console()
    console.print(f"[bold]{title}[/]")
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


def markdown(run: PatternRun, rows: list[SummaryRow]) -> str:
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


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def write_exports(out: Path, run: PatternRun, rows: list[SummaryRow]) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "patterns.json",
        "csv": out / "patterns.csv",
        "md": out / "patterns.md",
    }
    document = run.to_dict()
    document["summary"] = [asdict(r) for r in rows]
    paths["json"].write_text(json.dumps(_json_safe(document), indent=2) + "\n", encoding="utf-8")
    with paths["csv"].open("w", newline="", encoding="utf-8") as f:
        names = list(SummaryRow.__dataclass_fields__)
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: ("" if v is None else v) for k, v in _json_safe(asdict(row)).items()}
            )
    paths["md"].write_text(markdown(run, rows), encoding="utf-8")
    return paths
