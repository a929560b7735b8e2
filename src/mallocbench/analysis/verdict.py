"""Per setup and engine: group geomeans and the findings the statistics support.

Only cells `stats.classify` calls faster or slower are listed as findings; geomeans
have no interval of their own and are never coloured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mallocbench import formatting as fmt
from mallocbench.analysis import stats
from mallocbench.analysis.summary import (
    UNSTABLE_MARK,
    MemoryRow,
    RatioCell,
    RatioTable,
    percent,
    rss_ratio_cells,
)
from mallocbench.results import RunResult
from mallocbench.workloads.catalogue import GROUPS


@dataclass
class VerdictRow:
    engine: str
    setup: str
    group_geomeans: dict[str, RatioCell]  # group -> geomean over steps and thread counts
    group_details: dict[str, str]  # group -> per-thread-count geomeans, for hover
    rss_ratio: float | None
    rss_text: str
    faster: list[str]  # findings, already worded
    slower: list[str]
    problems: list[str]
    note: str
    rss_interval: str = ""  # 95% interval of the RSS ratio over repeats, when there is one
    # The peak-RSS difference the statistics support, worded, and whether it is more
    # memory than the base (empty: none is supported).
    rss_finding: str = ""
    rss_more: bool = False


def verdict_for(engine: str, column: str, tables: list[RatioTable]) -> VerdictRow:
    """Summarize one column (setup) of an engine's tables: geomeans and findings.

    Only cells `stats.classify` calls faster or slower are listed; geomeans have no
    interval and are shown uncolored.
    """
    engine_tables = [t for t in tables if t.engine == engine and column in t.columns]
    min_effect = max((t.min_effect for t in engine_tables), default=0.0)
    geomeans: dict[str, RatioCell] = {}
    details: dict[str, str] = {}
    faster: list[str] = []
    slower: list[str] = []
    problems: list[str] = []
    any_interval = False
    within = 0  # intervals excluding 1.0 whose change is below min_effect
    for group in GROUPS:
        values: list[float] = []
        parts = []
        for table in engine_tables:
            group_values = [
                r.cells[column].ratio
                for r in table.rows
                if r.group == group and column in r.cells and r.cells[column].ratio
            ]
            values += [v for v in group_values if v is not None]
            if group_values:
                parts.append(f"{table.threads} thr: {stats.geomean(group_values):.2f}")
        if values:
            geomeans[group] = RatioCell(stats.geomean(values), min_effect=min_effect)
            details[group] = f"geomean of {len(values)} cells; " + ", ".join(parts)
    for table in engine_tables:
        for row in table.rows:
            cell = row.cells.get(column)
            if cell is None:
                continue
            where = f"{row.step} @{table.threads}"
            if cell.problem:
                problems.append(f"{where}: {cell.problem}")
            any_interval = any_interval or cell.has_interval
            if cell.significant and cell.ratio is not None:
                text = f"{where} {cell.ratio:.2f}x {fmt.interval(cell.low, cell.high)}"
                (faster if cell.verdict == stats.FASTER else slower).append(text)
            elif cell.verdict == stats.INCONCLUSIVE:
                within += 1
    band = f" of at least ±{percent(min_effect)}" if min_effect > 0 else ""
    notes = []
    if any_interval:
        if not (faster or slower):
            notes.append(f"no difference{band} the statistics support")
        elif min_effect > 0:
            notes.append(
                f"listed: 95% interval excludes 1.0, change at least ±{percent(min_effect)}"
            )
    else:
        notes.append("1 repeat: no interval, so no difference can be claimed")
    if within:
        notes.append(
            f"{within} inconclusive: real but possibly smaller than ±{percent(min_effect)}"
        )
    return VerdictRow(
        engine, column, geomeans, details, None, "", faster, slower, problems, "; ".join(notes)
    )


def verdict_rows(
    result: RunResult,
    tables: list[RatioTable],
    memory_list: list[MemoryRow],
    min_effect: float | None = None,
    rss_cells: Mapping[tuple[str, str], RatioCell] | None = None,
) -> list[VerdictRow]:
    """`min_effect` overrides the run's own, as in `relative_tables`; `rss_cells`:
    rss_ratio_cells(result, min_effect), when already at hand."""
    base = result.base_setup
    memory = {(m.engine, m.setup): m for m in memory_list}
    if rss_cells is None:
        rss_cells = rss_ratio_cells(result, min_effect)
    rows = []
    for engine in dict.fromkeys(t.engine for t in tables):
        base_mem = memory.get((engine, base))
        columns = next(t.columns for t in tables if t.engine == engine)
        for setup in columns:
            row = verdict_for(engine, setup, tables)
            mem = memory.get((engine, setup))
            if mem and base_mem and mem.peak_rss_bytes and base_mem.peak_rss_bytes:
                row.rss_ratio = mem.peak_rss_bytes / base_mem.peak_rss_bytes
                row.rss_text = (
                    f"{fmt.mib(mem.peak_rss_bytes)} vs {fmt.mib(base_mem.peak_rss_bytes)}"
                )
            rss = rss_cells.get((engine, setup))
            if rss is not None and rss.has_interval:
                row.rss_interval = fmt.interval(rss.low, rss.high)
                peaks = fmt.ratio(rss.ratio) + (UNSTABLE_MARK if rss.unstable else "")
                row.rss_text += f"; per-repeat peaks {peaks} {row.rss_interval}, {rss.verdict}"
                _add_rss_finding(row, rss)
            rows.append(row)
    return rows


def _add_rss_finding(row: VerdictRow, rss: RatioCell) -> None:
    """A supported peak-RSS difference is a finding beside the QPS ones, so the note must
    not say that no difference is supported."""
    if not rss.significant or rss.ratio is None:
        return
    # stats.classify words a ratio above 1 "faster": for RSS that is more memory.
    row.rss_more = rss.verdict == stats.FASTER
    row.rss_finding = f"peak RSS {rss.ratio:.2f}x {row.rss_interval}"
    if row.note.startswith("no difference"):
        row.note = "no QPS difference" + row.note.removeprefix("no difference")
