"""Per setup and engine: group geomeans and the findings the statistics support.

Only cells `stats.classify` calls faster or slower are listed as findings; geomeans
have no interval of their own and are never coloured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mallocbench.analysis import stats
from mallocbench.analysis.summary import (
    MemoryRow,
    RatioCell,
    RatioTable,
    judged,
    rss_ratio_cells,
)
from mallocbench.model.results import RunResult
from mallocbench.workloads.catalogue import GROUPS


@dataclass(frozen=True)
class Finding:
    """A cell the statistics call faster or slower (or, with a problem, not measured)."""

    step: str
    threads: int
    cell: RatioCell


@dataclass(frozen=True)
class GroupDetail:
    """How a group's geomean was made: over how many cells, and per thread count."""

    cells: int
    by_threads: tuple[tuple[int, float], ...]  # (threads, geomean over that table)


@dataclass
class VerdictRow:
    engine: str
    setup: str
    group_geomeans: dict[str, RatioCell]  # group -> geomean over steps and thread counts
    group_details: dict[str, GroupDetail]  # group -> per-thread-count geomeans, for hover
    faster: list[Finding]  # findings
    slower: list[Finding]
    problems: list[Finding]  # cells that did not measure
    min_effect: float
    any_interval: bool  # some cell of the setup has an interval
    inconclusive: int  # intervals excluding 1.0 whose change may be below min_effect
    rss_ratio: float | None = None  # rss.ratio where it has an interval, else of the peaks
    # Peak RSS of the setup and of what it is compared with (the base, run A).
    rss_peaks: tuple[int, int] | None = None
    # The RSS ratio over each repeat's peaks, when it has an interval.
    rss: RatioCell | None = None

    @property
    def rss_supported(self) -> bool:
        """A peak-RSS difference the statistics support: a finding beside the QPS ones."""
        return self.rss is not None and self.rss.significant and self.rss.ratio is not None

    @property
    def rss_more(self) -> bool:
        # stats.classify words a ratio above 1 "faster": for RSS that is more memory.
        return self.rss_supported and self.rss is not None and self.rss.verdict == stats.FASTER


def verdict_for(engine: str, column: str, tables: list[RatioTable]) -> VerdictRow:
    """Summarize one column (setup) of an engine's tables: geomeans and findings.

    Only cells `stats.classify` calls faster or slower are listed; geomeans have no
    interval and are shown uncolored.
    """
    engine_tables = [t for t in tables if t.engine == engine and column in t.columns]
    min_effect = max((t.min_effect for t in engine_tables), default=0.0)
    geomeans: dict[str, RatioCell] = {}
    details: dict[str, GroupDetail] = {}
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
                parts.append((table.threads, stats.geomean(group_values)))
        if values:
            geomeans[group] = judged(RatioCell(stats.geomean(values), min_effect=min_effect))
            details[group] = GroupDetail(len(values), tuple(parts))
    row = VerdictRow(engine, column, geomeans, details, [], [], [], min_effect, False, 0)
    for table in engine_tables:
        for table_row in table.rows:
            cell = table_row.cells.get(column)
            if cell is None:
                continue
            found = Finding(table_row.step, table.threads, cell)
            if cell.problem:
                row.problems.append(found)
            row.any_interval = row.any_interval or cell.has_interval
            if cell.significant and cell.ratio is not None:
                (row.faster if cell.verdict == stats.FASTER else row.slower).append(found)
            elif cell.verdict == stats.INCONCLUSIVE:
                row.inconclusive += 1
    return row


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
                row.rss_peaks = (mem.peak_rss_bytes, base_mem.peak_rss_bytes)
            rss = rss_cells.get((engine, setup))
            if rss is not None and rss.has_interval:
                row.rss = rss
                # The interval shown beside it is of the blocked ratio: the number
                # above it must be that estimate, not the ratio of the two peaks.
                if rss.ratio is not None:
                    row.rss_ratio = rss.ratio
            rows.append(row)
    return rows
