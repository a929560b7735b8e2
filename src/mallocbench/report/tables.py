"""Plain-text pieces the terminal and Markdown reports share, so they print the same facts."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mallocbench import units as fmt
from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.analysis.summary import (
    QPS,
    CellSummary,
    MemoryRow,
    RatioCell,
    RatioRow,
    RatioTable,
)
from mallocbench.report.words import (
    ACCOUNTING_NOTE,
    CAP_NOTE,
    adjustment_notes,
    noise_notes,
    oom_text,
    sla_text,
    stability_notes,
)
from mallocbench.workloads.catalogue import label_order

MemoryRows = list[MemoryRow] | tuple[MemoryRow, ...]


def markdown_section(
    title: str, header: list[str], rows: list[list[str]], notes: Sequence[str]
) -> list[str]:
    """A Markdown section of one table and its sentences; nothing without rows."""
    if not rows:
        return []
    out = [f"## {title}", ""]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join("---" for _ in header) + "|")
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    out.append("")
    for note in notes:
        out += [note, ""]
    return out


def print_per_engine(
    console: Console,
    title: str,
    table: tuple[list[str], list[list[str]]],
    columns: Sequence[str],
    left: Sequence[str],
    notes: Sequence[str],
) -> None:
    """One terminal table per engine (each row's first cell), of `columns`; then the notes."""
    header, rows = table
    for engine in dict.fromkeys(row[0] for row in rows):
        shown = Table(title=f"{title}, {engine}")
        for name in columns:
            shown.add_column(name, justify="left" if name in left else "right", overflow="fold")
        for row in rows:
            if row[0] == engine:
                cells = dict(zip(header, row, strict=True))
                shown.add_row(*[escape(cells[name]) for name in columns])
        console.print(shown)
    for note in notes:
        console.print(f"[dim]{escape(note)}[/]")


def has_caps(rows: MemoryRows) -> bool:
    """Any row to show a cap, a cgroup charge or an OOM kill for."""
    return any(r.memory_limit_bytes or r.peak_cgroup_bytes or r.oom_cells for r in rows)


def has_accounting(rows: MemoryRows) -> bool:
    return any(r.unaccounted_bytes is not None for r in rows)


def memory_unit(rows: MemoryRows) -> str:
    """The unit of a memory table's RSS columns (VSZ, reserved address space, is in GiB)."""
    return fmt.memory_unit(
        v
        for r in rows
        for v in (
            r.peak_rss_bytes,
            r.accounted_bytes,
            r.unaccounted_bytes,
            r.memory_limit_bytes,
            r.peak_cgroup_bytes,
        )
    )


MemoryColumn = tuple[str, Callable[[MemoryRow], str]]


def memory_columns(rows: MemoryRows, vsz_reserved: bool) -> list[MemoryColumn]:
    """The memory table's columns, each a header and how to fill it, for these rows.

    Columns with nothing to say are left out: VSZ when it is mostly reserved address
    space (the note says so), caps when nothing was capped, the server's account when it
    gave none, so a terminal keeps its width for what matters.
    """
    unit = memory_unit(rows)
    columns: list[MemoryColumn] = [("engine", lambda r: r.engine), ("setup", lambda r: r.setup)]
    if not vsz_reserved:
        columns.append(("peak VSZ (GiB)", lambda r: fmt.gb(r.peak_vsz_bytes)))
    columns.append((f"peak RSS ({unit})", lambda r: fmt.size(r.peak_rss_bytes, unit)))
    if has_caps(rows):
        columns += [
            (f"memory cap ({unit})", lambda r: fmt.size(r.memory_limit_bytes, unit)),
            (f"peak cgroup charge ({unit})", lambda r: fmt.size(r.peak_cgroup_bytes, unit)),
            ("OOM", oom_text),
        ]
    columns.append(("RSS/cache", lambda r: fmt.ratio(r.rss_per_cache)))
    if any(r.idle_rss_bytes for r in rows):
        columns += [
            (f"idle RSS ({unit})", lambda r: fmt.size(r.idle_rss_bytes, unit)),
            ("(RSS − idle)/cache", lambda r: fmt.ratio(r.growth_per_cache)),
        ]
    if has_accounting(rows):
        columns += [
            (f"server accounts for ({unit})", lambda r: fmt.size(r.accounted_bytes, unit)),
            (
                f"unaccounted: RSS − accounted ({unit})",
                lambda r: fmt.size(r.unaccounted_bytes, unit),
            ),
            ("heap ratio", lambda r: fmt.ratio(r.heap_ratio)),
        ]
    return columns


IDLE_NOTE = (
    "idle RSS is the server's RSS once it answered, before any cell: a fixed base that "
    "dominates RSS/cache at small scale; (RSS − idle)/cache is the part that grows with "
    "the cache and the load."
)


def reference_text(row: RatioRow, base: str) -> str:
    """The base's absolute throughput, with its unit when it is not QPS."""
    if row.reference_problem:
        return row.reference_problem.upper()
    text = fmt.qps(row.reference_qps)
    return f"{text} {row.unit}" if row.unit != QPS and row.reference_qps is not None else text


def sla_lines(analysis: RunAnalysis) -> list[tuple[str, bool]]:
    """("where: SLA met: 98 of 100 rows/s", met) per insert-benchmark query cell."""
    return [(f"{where}: {sla_text(status)}", status.met) for where, status in analysis.sla]


def run_notes(analysis: RunAnalysis) -> list[str]:
    """What the run itself found worth telling the reader (e.g. a THP knob with no effect),
    and the cells whose measured seconds did not hold one level."""
    return [
        *analysis.recorded_notes,
        *noise_notes(analysis.noise),
        *adjustment_notes(analysis.cpu_adjusted),
        *stability_notes(analysis.unstable, analysis.not_steady),
    ]


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


PER_OP_COLUMNS: list[tuple[str, Callable[[CellSummary], str]]] = [
    ("QPS", lambda s: fmt.qps(s.qps)),
    ("p95 ms", lambda s: _number(s.p95_ms, 2)),
    ("p99 ms", lambda s: _number(s.p99_ms, 2)),
    ("cpu µs/o", lambda s: _number(s.metrics.get("server_cpu_us_per_op"), 1)),
    ("cs/o", lambda s: _number(s.cs_per_op, 2)),
]
PER_OP_NOTE = (
    "Absolute values, means over repeats (latency: the median of the repeats' "
    "percentiles); no interval, so never a finding on their own. cpu µs/o: server CPU "
    "(user + system) per query; cs/o: context switches per query (system-wide where "
    "recorded)."
)


def per_op_tables(analysis: RunAnalysis) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) per engine and thread count: each step and setup in the long
    form, so a terminal keeps every setup's name however many there are."""
    result = analysis.result
    summaries = analysis.summaries
    order = {name: i for i, name in enumerate(analysis.setups)}
    tables = []
    for engine in dict.fromkeys(c.engine for c in result.cells):
        for threads in sorted({c.threads for c in result.cells if c.engine == engine}):
            keys = sorted(
                (k for k in summaries if k[1] == engine and k[3] == threads),
                key=lambda k: (label_order(k[2]), order.get(k[0], 99)),
            )
            rows = []
            for key in keys:
                summary = summaries[key]
                if summary.problem and not summary.qps_values:
                    cells = [summary.problem.upper()] + ["-"] * (len(PER_OP_COLUMNS) - 1)
                else:
                    cells = [cell(summary) for _, cell in PER_OP_COLUMNS]
                rows.append([key[2], key[0], *cells])
            if rows:
                title = f"{engine}, {threads} client thread{'s' if threads != 1 else ''}"
                tables.append((title, ["step", "setup", *[h for h, _ in PER_OP_COLUMNS]], rows))
    return tables


@dataclass(frozen=True)
class RelativeMarkup:
    """How one output format marks the parts of a relative table."""

    heading: Callable[[str], str]  # a group's title row
    ratio: Callable[[RatioCell], str]  # a ratio with its interval and finding mark
    geomean_label: Callable[[str], str]
    geomean_value: Callable[[str], str]  # no interval: never marked as a finding
    indent: str = ""  # before a step's name and the geomean label


def relative_rows(
    table: RatioTable, markup: RelativeMarkup, with_reference: bool = True
) -> Iterator[tuple[list[str], bool]]:
    """A relative table's rows, the one walk every format renders: per group a title
    row, its steps, then the geomean (no interval, never a finding); the flag marks a
    group's last row. `with_reference` adds the base's absolute throughput column."""
    blank = [""] if with_reference else []
    for group, title, rows, geomeans in table.groups():
        yield [markup.heading(title), *blank, *["" for _ in table.columns]], False
        for row in rows:
            reference = [reference_text(row, table.reference)] if with_reference else []
            ratios = [markup.ratio(row.cells[c]) for c in table.columns]
            yield [markup.indent + row.step, *reference, *ratios], False
        values = [markup.geomean_value(fmt.ratio(geomeans[c])) for c in table.columns]
        label = markup.indent + markup.geomean_label(f"geomean {group}")
        yield [label, *blank, *values], True


def memory_notes(rows: MemoryRows) -> list[str]:
    """What a memory table's columns need said, for the columns it shows."""
    notes = [ACCOUNTING_NOTE] if has_accounting(rows) else []
    notes += [CAP_NOTE] if has_caps(rows) else []
    notes += [IDLE_NOTE] if any(r.idle_rss_bytes for r in rows) else []
    return notes
