"""Per-cell summaries and values relative to the base setup.

Relative QPS = QPS(setup) / QPS(base) for the same engine, step and threads, using the
mean over repeats of the cells that measured (crashed or failed cells count as missing).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from mallocbench.analysis import stats
from mallocbench.results import STATUS_OK, Cell, RunResult
from mallocbench.workloads.catalogue import GROUPS, group_of, label_order


@dataclass
class CellSummary:
    """All repeats of one setup x engine x step x threads."""

    setup: str
    engine: str
    step: str
    threads: int
    group: str
    qps_values: list[float] = field(default_factory=list)
    p95_values: list[float] = field(default_factory=list)
    p99_values: list[float] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    peak_rss_bytes: int | None = None
    peak_vsz_bytes: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def qps(self) -> float | None:
        return statistics.fmean(self.qps_values) if self.qps_values else None

    @property
    def p99_ms(self) -> float | None:
        return statistics.median(self.p99_values) if self.p99_values else None

    @property
    def p95_ms(self) -> float | None:
        return statistics.median(self.p95_values) if self.p95_values else None

    @property
    def problem(self) -> str | None:
        bad = [s for s in self.statuses if s != STATUS_OK]
        return bad[0] if bad else None


def summarize(cells: list[Cell]) -> dict[tuple[str, str, str, int], CellSummary]:
    summaries: dict[tuple[str, str, str, int], CellSummary] = {}
    metric_values: dict[tuple[str, str, str, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for cell in cells:
        key = (cell.setup, cell.engine, cell.step, cell.threads)
        summary = summaries.get(key)
        if summary is None:
            summary = CellSummary(
                cell.setup, cell.engine, cell.step, cell.threads, cell.group or group_of(cell.step)
            )
            summaries[key] = summary
        summary.statuses.append(cell.status)
        if cell.status == STATUS_OK and cell.qps is not None:
            summary.qps_values.append(cell.qps)
            if cell.p95_ms is not None:
                summary.p95_values.append(cell.p95_ms)
            if cell.p99_ms is not None:
                summary.p99_values.append(cell.p99_ms)
            for name, value in cell.metrics.items():
                metric_values[key][name].append(value)
        if cell.peak_rss_bytes:
            summary.peak_rss_bytes = max(summary.peak_rss_bytes or 0, cell.peak_rss_bytes)
        if cell.peak_vsz_bytes:
            summary.peak_vsz_bytes = max(summary.peak_vsz_bytes or 0, cell.peak_vsz_bytes)
    for key, by_name in metric_values.items():
        summaries[key].metrics = {n: statistics.fmean(v) for n, v in by_name.items()}
    return summaries


@dataclass
class RelativeRow:
    step: str
    group: str
    base_qps: float | None
    values: dict[str, float | None]  # setup -> relative QPS
    absolute: dict[str, float | None]  # setup -> QPS
    problems: dict[str, str]  # setup -> status when not ok
    # setup -> relative QPS with its 95% interval; only when both sides have 2+ repeats
    intervals: dict[str, stats.Relative] = field(default_factory=dict)

    def significant(self, setup: str) -> bool:
        interval = self.intervals.get(setup)
        return interval is not None and interval.significant


@dataclass
class RelativeTable:
    engine: str
    threads: int
    base: str
    setups: list[str]  # the compared setups (base excluded)
    rows: list[RelativeRow]

    def group_geomeans(self) -> dict[str, dict[str, float | None]]:
        """Geometric mean of relative QPS per group and setup."""
        result: dict[str, dict[str, float | None]] = {}
        for group in GROUPS:
            rows = [r for r in self.rows if r.group == group]
            if not rows:
                continue
            result[group] = {
                setup: geomean([r.values[setup] for r in rows if r.values.get(setup)])
                for setup in self.setups
            }
        return result


def geomean(values: list[float | None]) -> float | None:
    clean = [v for v in values if v is not None and v > 0]
    if not clean:
        return None
    return math.exp(statistics.fmean(math.log(v) for v in clean))


def setup_order(result: RunResult) -> list[str]:
    names = [s.name for s in result.setups]
    for cell in result.cells:
        if cell.setup not in names:
            names.append(cell.setup)
    return names


def relative_tables(result: RunResult) -> list[RelativeTable]:
    summaries = summarize(result.cells)
    setups = setup_order(result)
    others = [s for s in setups if s != result.base_setup]
    engines = list(dict.fromkeys(c.engine for c in result.cells))
    threads_list = sorted({c.threads for c in result.cells})
    steps = sorted({c.step for c in result.cells}, key=label_order)
    tables = []
    for engine in engines:
        for threads in threads_list:
            rows = []
            for step in steps:
                base = summaries.get((result.base_setup, engine, step, threads))
                if base is None and not any(
                    (s, engine, step, threads) in summaries for s in others
                ):
                    continue
                base_qps = base.qps if base else None
                values: dict[str, float | None] = {}
                absolute: dict[str, float | None] = {}
                problems: dict[str, str] = {}
                intervals: dict[str, stats.Relative] = {}
                if base and base.problem:
                    problems[result.base_setup] = base.problem
                for setup in others:
                    summary = summaries.get((setup, engine, step, threads))
                    qps = summary.qps if summary else None
                    absolute[setup] = qps
                    values[setup] = qps / base_qps if qps and base_qps else None
                    if summary and summary.problem:
                        problems[setup] = summary.problem
                    if summary and base and min(len(summary.qps_values), len(base.qps_values)) > 1:
                        intervals[setup] = stats.relative(summary.qps_values, base.qps_values)
                rows.append(
                    RelativeRow(
                        step, group_of(step), base_qps, values, absolute, problems, intervals
                    )
                )
            if rows:
                tables.append(RelativeTable(engine, threads, result.base_setup, others, rows))
    return tables


@dataclass
class MemoryRow:
    setup: str
    engine: str
    peak_vsz_bytes: int | None
    peak_rss_bytes: int | None
    cache_bytes: int | None

    @property
    def rss_per_cache(self) -> float | None:
        if self.peak_rss_bytes and self.cache_bytes:
            return self.peak_rss_bytes / self.cache_bytes
        return None


def memory_rows(result: RunResult) -> list[MemoryRow]:
    """Peak VSZ and RSS per setup and engine over all its sessions (the seeds' table)."""
    peaks: dict[tuple[str, str], list[int | None]] = {}
    cache: dict[tuple[str, str], int | None] = {}
    for session in result.sessions:
        key = (session.setup, session.engine)
        entry = peaks.setdefault(key, [None, None])
        if session.peak_vsz_bytes:
            entry[0] = max(entry[0] or 0, session.peak_vsz_bytes)
        if session.peak_rss_bytes:
            entry[1] = max(entry[1] or 0, session.peak_rss_bytes)
    for cell in result.cells:
        key = (cell.setup, cell.engine)
        entry = peaks.setdefault(key, [None, None])
        if cell.peak_vsz_bytes:
            entry[0] = max(entry[0] or 0, cell.peak_vsz_bytes)
        if cell.peak_rss_bytes:
            entry[1] = max(entry[1] or 0, cell.peak_rss_bytes)
        cache[key] = cell.cache_bytes
    order = {name: i for i, name in enumerate(setup_order(result))}
    rows = [
        MemoryRow(setup, engine, vsz, rss, cache.get((setup, engine)))
        for (setup, engine), (vsz, rss) in peaks.items()
    ]
    return sorted(rows, key=lambda r: (r.engine, order.get(r.setup, 99)))
