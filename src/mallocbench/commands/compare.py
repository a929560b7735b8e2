"""`mallocbench compare RUN_A RUN_B`: the same relative tables, between two runs.

For tracking a regression across builds or versions: cells are matched by engine, step,
threads and setup, and each value is QPS(B) / QPS(A) with a log-scale 95% interval over
the repeats of both runs. The base setup plays no part; every setup is compared with
itself. The cells, intervals and verdicts are `analysis.summary`'s, as in every report;
a change within min_effect (--min-effect, else run B's, else run A's) is "same".

With --fail-on it is a CI gate: exit 1 (`exitcodes.FINDING`) when B has a significant
change of the kinds asked for. Runs of different datasets are refused first
(`analysis.comparability`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from mallocbench import exitcodes
from mallocbench.analysis import stats
from mallocbench.analysis.comparability import Difference, differences, refusal_message, refusals
from mallocbench.analysis.summary import (
    QPS,
    RSS,
    CellSummary,
    RatioCell,
    RatioRow,
    RatioTable,
    color_rule,
    memory_rows,
    min_effect_of,
    peak_rss_by_repeat,
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
from mallocbench.report.html import VerdictRow, verdict_for, write_compare_html
from mallocbench.report.terminal import colored, geomean_text, ratio_text
from mallocbench.results import RunResult
from mallocbench.store.loading import load_result
from mallocbench.workloads.catalogue import group_of, label_order

# What --fail-on can ask for; "changed" is slower or faster.
SLOWER, FASTER, CHANGED, RSS_UP, RSS_DOWN = "slower", "faster", "changed", "rss-up", "rss-down"
FAIL_KINDS = (SLOWER, FASTER, CHANGED, RSS_UP, RSS_DOWN)
_KIND_WORDS = {
    SLOWER: "slowdown",
    FASTER: "speedup",
    CHANGED: "throughput change",
    RSS_UP: "RSS increase",
    RSS_DOWN: "RSS decrease",
}
PEAK_RSS = "peak RSS"  # the step name of memory changes and CSV rows


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
    rss_ratio: float | None  # rss.ratio where it has one, else the ratio of the peaks
    # Peak RSS B/A over each run's per-repeat peaks, with an interval and a verdict
    # (stats' words: "faster" is more RSS); None when either run has no RSS.
    rss: RatioCell | None = None
    oom_a: int = 0  # cells the OOM killer ended, in each run
    oom_b: int = 0


@dataclass
class Change:
    """Something --fail-on can fail on: a significant change, or a one-sided failure."""

    kind: str  # SLOWER, FASTER, RSS_UP or RSS_DOWN
    engine: str
    setup: str
    step: str  # PEAK_RSS for memory
    threads: int | None
    cell: RatioCell | None
    reason: str = ""  # why it counts when it is not a ratio (a crash in one run)

    def describe(self) -> str:
        where = [self.engine]
        if self.threads is not None:
            where.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        where += [self.step, self.setup]
        text = f"{self.kind}: {', '.join(where)}: "
        if self.reason or self.cell is None:
            return text + self.reason
        cell = self.cell
        beyond = f"beyond ±{percent(cell.min_effect)}" if cell.min_effect > 0 else "excludes 1.0"
        return text + f"{fmt.ratio(cell.ratio)} {cell.interval_text}, {beyond}"

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "kind": self.kind,
            "engine": self.engine,
            "threads": self.threads,
            "step": self.step,
            "setup": self.setup,
            "reason": self.reason or None,
        }
        if self.cell is not None:
            record.update(ratio=self.cell.ratio, **interval_record(self.cell))
        return record


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
    changes: list[Change] = field(default_factory=list)  # what --fail-on may fail on
    differences: list[Difference] = field(default_factory=list)  # analysis.comparability


def _ordered_setups(a: RunResult, b: RunResult) -> list[str]:
    names: list[str] = []
    for result in (a, b):
        for name in [s.name for s in result.setups] + [c.setup for c in result.cells]:
            if name not in names:
                names.append(name)
    return names


Key = tuple[str, str, str, int]


def compare(
    a: RunResult, b: RunResult, min_effect: float | None = None, allow_different: bool = False
) -> Comparison:
    """B against A; `min_effect` overrides the runs' own (B's, else A's).

    Runs that did not measure the same workload (`analysis.comparability`) are refused
    unless `allow_different`.
    """
    found = differences(a, b)
    if refusals(found) and not allow_different:
        raise MallocbenchError(refusal_message(found))
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
    tables, changes = _tables(engines, setups, common, sa, sb, effect)
    if not tables:
        raise MallocbenchError(
            f"runs {a.run_id} and {b.run_id} share no cell (same engine, step, threads and "
            "setup): nothing to compare"
        )
    verdict, memory, memory_changes = _memory(a, b, engines, setups, tables, effect)
    reserved = vsz_note(memory_rows(a) + memory_rows(b))
    return Comparison(
        a,
        b,
        setups,
        tables,
        verdict,
        memory,
        unmatched,
        effect,
        reserved,
        changes + memory_changes,
        found,
    )


def _tables(
    engines: list[str],
    setups: list[str],
    common: set[Key],
    sa: dict[Key, CellSummary],
    sb: dict[Key, CellSummary],
    effect: float,
) -> tuple[list[RatioTable], list[Change]]:
    """One table per engine and thread count, and the throughput changes in them."""
    tables, changes = [], []
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
                    change = _throughput_change(x, y, cells[setup])
                    if change is not None:
                        changes.append(change)
                units = [c.unit for c in cells.values()]
                rows.append(
                    RatioRow(step, group_of(step), None, None, cells, units[0] if units else QPS)
                )
            tables.append(_table(engine, threads, columns, rows, effect))
    # Tables may lack a setup on some steps; verdict_for and the template skip those.
    for table in tables:
        for row in table.rows:
            for column in table.columns:
                row.cells.setdefault(column, ratio_cell([], [], "not in both", "run A", effect))
    return tables, changes


def _table(
    engine: str, threads: int, columns: list[str], rows: list[RatioRow], effect: float
) -> RatioTable:
    return RatioTable(
        key=f"cmp-{slug(engine)}-{threads}",
        title=f"{engine}, {threads} client thread{'s' if threads != 1 else ''}",
        caption="QPS(B) / QPS(A), 95% interval below"
        + (f"; same: the whole interval within ±{percent(effect)}" if effect > 0 else ""),
        columns=columns,
        rows=rows,
        engine=engine,
        threads=threads,
        reference="run A",
        min_effect=effect,
    )


def _throughput_change(a: CellSummary, b: CellSummary, cell: RatioCell) -> Change | None:
    """A finding, or a cell that failed in one run only: losing a cell that measured
    is a regression (a crash is worse than slow), regaining it an improvement."""
    where = (b.engine, b.setup, b.step, b.threads)
    if b.problem and not a.problem:
        return Change(SLOWER, *where, cell, f"{b.problem} in B, measured in A")
    if a.problem and not b.problem:
        return Change(FASTER, *where, cell, f"{a.problem} in A, measured in B")
    if cell.verdict in (stats.SLOWER, stats.FASTER):
        return Change(SLOWER if cell.verdict == stats.SLOWER else FASTER, *where, cell)
    return None


def _memory(
    a: RunResult,
    b: RunResult,
    engines: list[str],
    setups: list[str],
    tables: list[RatioTable],
    effect: float,
) -> tuple[list[VerdictRow], list[MemoryChange], list[Change]]:
    """The verdict rows, peak memory B against A with an interval, and the RSS changes."""
    mem_a = {(m.engine, m.setup): m for m in memory_rows(a)}
    mem_b = {(m.engine, m.setup): m for m in memory_rows(b)}
    # Two runs are independent samples: each repeat's peak is one value per run.
    peaks_a, peaks_b = peak_rss_by_repeat(a), peak_rss_by_repeat(b)
    verdict, memory, changes = [], [], []
    for engine in engines:
        for setup in setups:
            if not any(t.engine == engine and setup in t.columns for t in tables):
                continue
            row = verdict_for(engine, setup, tables)
            ma, mb = mem_a.get((engine, setup)), mem_b.get((engine, setup))
            pa, pb = peaks_a.get((setup, engine)), peaks_b.get((setup, engine))
            rss = None
            if pa and pb:
                rss = ratio_cell(list(pb.values()), list(pa.values()), None, "run A", effect, RSS)
            if ma and mb and ma.peak_rss_bytes and mb.peak_rss_bytes:
                peak_ratio = mb.peak_rss_bytes / ma.peak_rss_bytes
                row.rss_ratio = rss.ratio if rss and rss.ratio is not None else peak_ratio
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
                        rss,
                        ma.oom_cells if ma else 0,
                        mb.oom_cells if mb else 0,
                    )
                )
                changes += _memory_changes(memory[-1])
    return verdict, memory, changes


def _memory_changes(m: MemoryChange) -> list[Change]:
    """More or less peak RSS in B, judged like throughput; and OOM kills in one run only,
    which say more RSS than the cap allowed whatever the peaks show."""
    out = []
    if m.rss is not None and m.rss.verdict in (stats.FASTER, stats.SLOWER):
        kind = RSS_UP if m.rss.verdict == stats.FASTER else RSS_DOWN
        out.append(Change(kind, m.engine, m.setup, PEAK_RSS, None, m.rss))
    if m.oom_b and not m.oom_a:
        reason = f"OOM-killed in B ({m.oom_b} cell{'s' if m.oom_b != 1 else ''}), not in A"
        out.append(Change(RSS_UP, m.engine, m.setup, PEAK_RSS, None, m.rss, reason))
    elif m.oom_a and not m.oom_b:
        reason = f"OOM-killed in A ({m.oom_a} cell{'s' if m.oom_a != 1 else ''}), not in B"
        out.append(Change(RSS_DOWN, m.engine, m.setup, PEAK_RSS, None, m.rss, reason))
    return out


# ---------------------------------------------------------------- --fail-on


def parse_fail_on(values: tuple[str, ...] | list[str] | str | None) -> tuple[str, ...]:
    """--fail-on KIND[,KIND], possibly repeated, to its kinds in order; () when not given."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    kinds: list[str] = []
    for value in values:
        for part in value.split(","):
            kind = part.strip().lower()
            if kind not in FAIL_KINDS:
                raise MallocbenchError(
                    f"--fail-on {part.strip()!r} is not a kind of change: give one or more of "
                    f"{', '.join(FAIL_KINDS)}, separated by commas (e.g. --fail-on slower,rss-up)"
                )
            if kind not in kinds:
                kinds.append(kind)
    return tuple(kinds)


def findings(cmp: Comparison, kinds: tuple[str, ...]) -> list[Change]:
    """The changes of the kinds asked for; "changed" is slower or faster."""
    wanted = set(kinds)
    if CHANGED in wanted:
        wanted |= {SLOWER, FASTER}
    return [c for c in cmp.changes if c.kind in wanted]


def findings_summary(cmp: Comparison, kinds: tuple[str, ...], count: int) -> str:
    """The last line of a gate: how many findings, or what was not found."""
    flag = f"--fail-on {','.join(kinds)}"
    if count:
        return f"compare: {count} finding{'s' if count != 1 else ''} ({flag})"
    named = [_KIND_WORDS[k] for k in kinds]
    words = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " or " + named[-1]
    beyond = f" beyond ±{percent(cmp.min_effect)}" if cmp.min_effect > 0 else ""
    return f"compare: no finding ({flag}): no significant {words}{beyond}"


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
        # ratio_text puts each interval under its ratio; with one repeat per side no cell
        # has one, and the caption says so once.
        table = Table(title=f"QPS(B) / QPS(A): {t.title}", caption=_rules(cmp, t.has_intervals))
        table.add_column("step", overflow="fold")
        for column in t.columns:
            table.add_column(column, justify="right", overflow="fold")
        for group, title, rows, geomeans in t.groups():
            table.add_row(f"[bold]{title}[/]", *["" for _ in t.columns])
            for row in rows:
                table.add_row("  " + row.step, *[ratio_text(row.cells[c]) for c in t.columns])
            gm = [geomean_text(geomeans[column]) for column in t.columns]
            table.add_row(f"  [italic]geomean {group}[/]", *gm, end_section=True)
        console.print(table)
    if cmp.memory:
        _print_memory(cmp, console)
    for row in cmp.verdict:
        for label, items in (("faster in B", row.faster), ("slower in B", row.slower)):
            if items:
                console.print(f"{row.engine}/{row.setup} {label}: " + "; ".join(items))
        if row.note:
            console.print(f"{row.engine}/{row.setup}: {row.note}")
    if cmp.unmatched:
        console.print("[dim]not compared (only in one run): " + ", ".join(cmp.unmatched) + "[/]")


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
    text = colored(cell.text + cell.mark, _RSS_CSS.get(cell.css, ""))
    return text + (f"\n[dim]{cell.interval_text}[/]" if cell.interval_text else "")


def _print_memory(cmp: Comparison, console: Console) -> None:
    table = Table(title="Peak memory (GiB): A -> B", caption=_rss_rule(cmp.min_effect))
    for column in ("engine", "setup", "RSS A", "RSS B", "RSS B/A", "VSZ A", "VSZ B"):
        table.add_column(
            column, justify="left" if column in ("engine", "setup") else "right", overflow="fold"
        )
    for m in cmp.memory:
        table.add_row(m.engine, m.setup, m.rss_a, m.rss_b, _rss_text(m), m.vsz_a, m.vsz_b)
    console.print(table)
    if cmp.vsz_note:
        console.print(f"[yellow]note[/]: {cmp.vsz_note}")


def memory_records(cmp: Comparison) -> list[dict[str, Any]]:
    """Peak RSS B/A per engine and setup, in the columns of `comparison_records`: the
    absolute values are bytes (unit "bytes"), each run's mean of its per-repeat peaks."""
    records = []
    for m in cmp.memory:
        cell = m.rss or ratio_cell([], [], "no RSS in both runs", "run A", cmp.min_effect, RSS)
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
                **interval_record(cell),
                "unit": RSS,
                "repeats_a": cell.repeats[1],
                "repeats_b": cell.repeats[0],
                "problem": cell.problem,
                "min_effect": cell.min_effect,
            }
        )
    return records


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
    """Every cell's throughput B/A, then peak RSS B/A per engine and setup (step
    "peak RSS", unit "bytes")."""
    return records_csv(comparison_records(cmp) + memory_records(cmp), ("engine",))


def _memory_json(m: MemoryChange) -> dict[str, Any]:
    record = {k: v for k, v in m.__dict__.items() if k != "rss"}
    cell = m.rss
    record["rss"] = (
        None
        if cell is None
        else {
            "a": cell.reference,
            "b": cell.value,
            "ratio": cell.ratio,
            **interval_record(cell),
            "repeats_a": cell.repeats[1],
            "repeats_b": cell.repeats[0],
        }
    )
    return record


def comparison_json(cmp: Comparison) -> str:
    return json.dumps(
        {
            "a": cmp.a.run_id,
            "b": cmp.b.run_id,
            "min_effect": cmp.min_effect,
            "cells": comparison_records(cmp),
            "memory": [_memory_json(m) for m in cmp.memory],
            "changes": [c.to_dict() for c in cmp.changes],
            "differences": [d.to_dict() for d in cmp.differences],
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
    if cmp.differences:
        out += [
            "> **The runs differ:** " + "; ".join(d.text for d in cmp.differences) + ".",
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
            _rss_rule(cmp.min_effect, "\\* more or less RSS") + ".",
            "",
            "| engine | setup | RSS A | RSS B | RSS B/A | VSZ A | VSZ B |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for m in cmp.memory:
            rss = markdown.ratio_text(m.rss) if m.rss else fmt.ratio(m.rss_ratio)
            out.append(
                f"| {m.engine} | {m.setup} | {m.rss_a} | {m.rss_b} | {rss} "
                f"| {m.vsz_a} | {m.vsz_b} |"
            )
        out.append("")
        if cmp.vsz_note:
            out += [f"> **Note:** {cmp.vsz_note}", ""]
    return "\n".join(out)


FAIL_ON_HELP = (
    "Exit 1 when B has a significant change of these kinds against A: slower, faster, "
    "changed (either), rss-up, rss-down; comma-separated or repeated. A change counts "
    "when its 95% interval excludes 1.0 and it is at least --min-effect: 'same', "
    "'not significant', 'inconclusive' and ratios without an interval (1 repeat) never "
    "do. A cell that crashed, was OOM-killed or failed in B but measured in A counts as "
    "slower (the reverse as faster); a setup OOM-killed in B and not in A counts as "
    "rss-up. Each finding is one line on stderr."
)


@click.command("compare", epilog=exitcodes.POLICY_HELP)
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
    help="Also write an HTML page of the comparison (plotly.js beside it).",
)
@click.option(
    "--self-contained",
    is_flag=True,
    help="With --html: plotly.js inside the page (2 MB, one file to mail).",
)
@min_effect_option(
    "Report changes smaller than this as the same (0.02 or 2%); default: run B's "
    "min_effect, else run A's; 0 turns it off."
)
@click.option(
    "--fail-on",
    "fail_on",
    metavar="KIND[,KIND]",
    multiple=True,
    callback=lambda _ctx, _param, value: parse_fail_on(value),
    help=FAIL_ON_HELP,
)
@click.option(
    "--allow-different",
    is_flag=True,
    help="Compare runs whose dataset or cache size differ (refused otherwise); the "
    "differences are still printed as warnings.",
)
def compare_cmd(
    run_a: str,
    run_b: str,
    store_path: Path | None,
    fmt_name: str,
    html_path: Path | None,
    self_contained: bool,
    min_effect: float | None,
    fail_on: tuple[str, ...],
    allow_different: bool,
) -> None:
    """Compare run B against run A: QPS(B) / QPS(A) per engine, step, threads and setup.

    \b
    RUN_A and RUN_B are results.json files, output directories, .sqlite stores (their
    latest run), or, with --store, run ids in one store.

    \b
    The runs must have measured the same workload: a different dataset (tables, rows)
    or cache size is refused (--allow-different compares anyway). Different durations,
    design, host (CPU, memory, kernel, glibc, THP) or server and allocator versions are
    printed as warnings on stderr and listed in the JSON output.

    \b
    Peak RSS B/A is the mean of each repeat's peak in B over A's, with a 95% interval,
    so rss-up is judged like throughput; with --fail-on, compare is a CI gate.

    \b
    Examples:
      mallocbench compare out-10.11/results.json out-11.4/results.json
      mallocbench compare --store out/results.sqlite small-20250101-1200 small-20250102-0900
      mallocbench compare old-out new-out --html compare.html --min-effect 2%
      mallocbench compare baseline/results.json out --fail-on slower,rss-up
    """
    cmp = compare(
        load_run(run_a, store_path), load_run(run_b, store_path), min_effect, allow_different
    )
    for difference in cmp.differences:
        # Before the tables: whoever reads the verdicts should know this first.
        click.echo(f"compare: warning: the runs differ: {difference.text}", err=True)
    if html_path is not None:
        try:
            write_compare_html(cmp, html_path, self_contained)
        except OSError as exc:
            raise MallocbenchError(
                f"cannot write {html_path}: {exc.strerror}; give a writable path with --html"
            ) from exc
    _print(cmp, fmt_name)
    if html_path is not None and fmt_name == "terminal":
        Console(stderr=True).print(f"wrote {html_path}")
    if fail_on and _gate(cmp, fail_on):
        sys.exit(exitcodes.FINDING)


def _gate(cmp: Comparison, kinds: tuple[str, ...]) -> int:
    """Print the findings of --fail-on on stderr, one line each and a summary; their count."""
    found = findings(cmp, kinds)
    for change in found:
        click.echo(f"compare: {change.describe()}", err=True)
    if not any(t.has_intervals for t in cmp.tables):
        # A gate that cannot fail should not pass quietly.
        click.echo(
            "compare: warning: no ratio has an interval (one repeat in a run), so no "
            "change can be a finding: run with repeats >= 3",
            err=True,
        )
    click.echo(findings_summary(cmp, kinds, len(found)), err=True)
    return len(found)


def _print(cmp: Comparison, fmt_name: str) -> None:
    if fmt_name == "terminal":
        print_comparison(cmp, Console())
    elif fmt_name == "markdown":
        click.echo(comparison_markdown(cmp))
    elif fmt_name == "csv":
        click.echo(comparison_csv(cmp), nl=False)
    else:
        click.echo(comparison_json(cmp))


commands = [compare_cmd]
