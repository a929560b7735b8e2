"""Per-cell summaries and values relative to the base setup: the one source every report reads.

Relative QPS = QPS(setup) / QPS(base) for the same engine, step and threads, using the
mean over repeats of the cells that measured (crashed or failed cells count as missing),
with a log-scale 95% interval from `analysis.stats`. Terminal, Markdown, HTML, the CSV/JSON
exports and `compare` all print the `RatioTable`s built here, so they cannot disagree on
a value, its interval or its verdict.

Insert-benchmark steps are measured in their own unit: rows/s inserted for the loads and
queries/s of the query steps (`analysis.sla.ibench_throughput`), since sysbench's QPS of
1000-row INSERT statements says little.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import statistics
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mallocbench.analysis import stats
from mallocbench.analysis.sla import ibench_throughput
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import STATUS_OK, STATUS_OOM, Cell, RunResult, SessionInfo
from mallocbench.units import MIN_EFFECT_UPPER, slug
from mallocbench.workloads.catalogue import GROUPS, group_of, label_order

QPS = "QPS"


@dataclass
class CellSummary:
    """All repeats of one setup x engine x step x threads.

    `qps_values` holds each repeat's throughput in `unit`: QPS, or for the insert
    benchmark rows/s or queries/s.
    """

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
    unit: str = QPS
    unstable: int = 0  # repeats whose measured seconds trended or shifted level
    by_repeat: dict[int, float] = field(default_factory=dict)  # qps_values by block
    # Over the repeats, set once `summarize` has them all (`_settled`): the mean
    # throughput, the median p99 and p95 latency, the context switches per operation.
    qps: float | None = None
    p99_ms: float | None = None
    p95_ms: float | None = None
    cs_per_op: float | None = None

    @property
    def problem(self) -> str | None:
        bad = [s for s in self.statuses if s != STATUS_OK]
        return bad[0] if bad else None


def cs_per_op(summary: CellSummary) -> float | None:
    """Context switches per operation: system-wide (vmstat cs / queries) as the published
    studies count them where recorded, else the server's voluntary + involuntary."""
    metrics = summary.metrics
    if "system_cs_per_op" in metrics:
        return metrics["system_cs_per_op"]
    parts = [metrics.get("voluntary_cs_per_op"), metrics.get("involuntary_cs_per_op")]
    return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


def throughput(cell: Cell) -> tuple[float | None, str]:
    """A measured cell's throughput and its unit."""
    if (cell.group or group_of(cell.step)) == "insert-benchmark":
        own = ibench_throughput(cell.metrics or {})
        if own is not None:
            return own
    return cell.qps, QPS


def summarize(
    cells: list[Cell], *, one_block: bool = False
) -> dict[tuple[str, str, str, int], CellSummary]:
    """Each setup x engine x step x threads over its repeats.

    `one_block` is for runs whose repeats are not independent blocks (a soak's segments
    are consecutive windows of one server lifetime): each summary then holds one value,
    the mean over its repeats, so no interval is computed from windows that share a
    server start, a cache state and a heap.
    """
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
        summary.unstable += cell.unstable
        value, unit = throughput(cell)
        if cell.status == STATUS_OK and value is not None:
            summary.qps_values.append(value)
            summary.by_repeat[cell.repeat] = value
            summary.unit = unit
            if cell.p95_ms is not None:
                summary.p95_values.append(cell.p95_ms)
            if cell.p99_ms is not None:
                summary.p99_values.append(cell.p99_ms)
            for name, metric in cell.metrics.items():
                metric_values[key][name].append(metric)
        if cell.peak_rss_bytes:
            summary.peak_rss_bytes = max(summary.peak_rss_bytes or 0, cell.peak_rss_bytes)
        if cell.peak_vsz_bytes:
            summary.peak_vsz_bytes = max(summary.peak_vsz_bytes or 0, cell.peak_vsz_bytes)
    for key, by_name in metric_values.items():
        summaries[key].metrics = {n: statistics.fmean(v) for n, v in by_name.items()}
    for summary in summaries.values():
        if one_block:
            _as_one_block(summary)
        _settled(summary)
    return summaries


def _settled(summary: CellSummary) -> None:
    """What a summary's readers take from its repeats, computed once they are all in."""
    summary.qps = statistics.fmean(summary.qps_values) if summary.qps_values else None
    summary.p99_ms = statistics.median(summary.p99_values) if summary.p99_values else None
    summary.p95_ms = statistics.median(summary.p95_values) if summary.p95_values else None
    summary.cs_per_op = cs_per_op(summary)


def _as_one_block(summary: CellSummary) -> None:
    if summary.qps_values:
        summary.qps_values = [statistics.fmean(summary.qps_values)]
        summary.by_repeat = {0: summary.qps_values[0]}
    if summary.p95_values:
        summary.p95_values = [statistics.median(summary.p95_values)]
    if summary.p99_values:
        summary.p99_values = [statistics.median(summary.p99_values)]


def summarize_run(result: RunResult) -> dict[tuple[str, str, str, int], CellSummary]:
    """`summarize` over a run's cells, knowing whether its repeats are blocks."""
    return summarize(result.cells, one_block=repeats_share_a_server(result))


def repeats_share_a_server(result: RunResult) -> bool:
    """Whether the run's repeats are segments of one server lifetime (a soak), not starts."""
    # Imported here: analysis.soak loads numpy, which `run --dry-run` and `steps` never need.
    from mallocbench.analysis.soak import is_soak

    return is_soak(result)


# ---------------------------------------------------------------- min_effect


def min_effect_of(result: RunResult, override: float | None = None) -> float:
    """The smallest relative change worth reporting: `override`, else the run's own."""
    if override is not None:
        return override
    metadata = result.metadata
    unread = metadata.extra.get("min_effect")
    if metadata.min_effect is None and unread not in (None, ""):
        raise MallocbenchError(
            f"min_effect of run {result.run_id} = {unread!r} is not a fraction below "
            f"{MIN_EFFECT_UPPER:g}: give --min-effect (e.g. 2%) to report it"
        )
    return metadata.min_effect or 0.0


class Unmeasured(enum.StrEnum):
    """Why a relative value has no ratio, beside a cell's own status ("oom", ...)."""

    MISSING = "missing"  # the setup has no such cell
    NOT_IN_BOTH = "not in both"  # compare: one run lacks the cell
    NO_BASE_RSS = "base has no RSS"


# After a ratio whose cells (either side) were unstable while measured.
UNSTABLE_MARK = "~"


# ---------------------------------------------------------------- relative values


def _nan(x: float | None) -> bool:
    return x is None or math.isnan(x)


@dataclass
class RatioCell:
    """One relative value (B over A) with what a reader needs to trust it."""

    ratio: float | None
    low: float = math.nan
    high: float = math.nan
    value: float | None = None  # absolute throughput of the compared side
    reference: float | None = None  # absolute throughput of the reference side
    repeats: tuple[int, int] = (0, 0)  # (compared, reference)
    problem: str | None = None
    reference_label: str = "base"
    min_effect: float = 0.0
    unit: str = QPS
    unstable: bool = False  # a repeat on either side trended or shifted while measured
    paired: bool = False  # the interval pairs blocks (repeats) measured together
    # A paired interval's blocks and degrees of freedom (nan: unpaired, or no interval):
    # what a prediction of the blocks a narrower interval needs starts from.
    blocks: int = 0
    df: float = math.nan
    problem_in: str | None = None  # compare: the run ("A", "B") the problem happened in
    # Judged once, by `judged`, for every reader: faster, slower, same, not significant
    # or no interval (`stats.classify`); whether the 95% interval lies wholly above or
    # below 1.0 (whatever min_effect says); its width in ratio units (inf: none).
    verdict: str = stats.NO_INTERVAL
    excludes_one: bool = False
    width: float = math.inf

    @property
    def significant(self) -> bool:
        return self.verdict in (stats.FASTER, stats.SLOWER)

    @property
    def same(self) -> bool:
        """The whole interval within min_effect of 1.0: shown to be no change."""
        return self.verdict == stats.SAME

    @property
    def has_interval(self) -> bool:
        return not (self.low is None or math.isnan(self.low)) and not (
            self.high is None or math.isnan(self.high)
        )


def judged(cell: RatioCell) -> RatioCell:
    """The cell with its verdict, whether its interval excludes 1.0, and its width."""
    verdict = (
        stats.NO_INTERVAL
        if cell.problem
        else stats.classify(cell.ratio, cell.low, cell.high, cell.min_effect)
    )
    return dataclasses.replace(
        cell,
        verdict=verdict,
        excludes_one=stats.significant(cell.low, cell.high),
        width=stats.interval_width(cell.low, cell.high),
    )


def ratio_cell(
    values: list[float],
    reference: list[float],
    problem: str | None = None,
    reference_label: str = "base",
    min_effect: float = 0.0,
    unit: str = QPS,
    blocked: stats.BlockedRatio | None = None,
) -> RatioCell:
    """The relative value of two sets of repeats: paired by block when `blocked` is given

    (repeats of one run), else as independent samples (two runs, `compare`).
    """
    common: dict[str, Any] = {
        "value": stats.mean(values) if values else None,
        "reference": stats.mean(reference) if reference else None,
        "repeats": (len(values), len(reference)),
        "reference_label": reference_label,
        "min_effect": min_effect,
        "unit": unit,
    }
    if problem or not values or not reference:
        return judged(RatioCell(None, problem=problem, **common))
    if blocked is not None and blocked.blocks >= 1:
        r, low, high = blocked.ratio, blocked.low, blocked.high
        common.update(paired=True, blocks=blocked.blocks, df=blocked.df)
    else:
        r, low, high = stats.ratio_ci(values, reference)
    return judged(RatioCell(None if _nan(r) else r, low, high, **common))


@dataclass
class RatioRow:
    step: str
    group: str
    reference_qps: float | None
    reference_problem: str | None
    cells: dict[str, RatioCell]
    unit: str = QPS  # of reference_qps and the cells' absolute values


@dataclass
class RatioGroup:
    """The rows of one catalogue group and the geometric mean of each column over them."""

    group: str
    rows: list[RatioRow]
    geomeans: dict[str, float | None]


@dataclass
class RatioTable:
    """Steps x columns of relative values, grouped like the published tables."""

    key: str
    columns: list[str]
    rows: list[RatioRow]
    reference_header: str | None = None  # column of absolute reference QPS, if any
    engine: str = ""
    threads: int = 0
    reference: str = ""  # the base setup (run report) or "run A" (compare)
    min_effect: float = 0.0
    between_runs: bool = False  # run B over run A (compare), else setups over the base
    grouped: list[RatioGroup] = field(default_factory=list)  # set by `group_rows`

    def groups(self) -> list[tuple[str, str, list[RatioRow], dict[str, float | None]]]:
        """(group, title, rows, geomean per column) in the catalogue's group order."""
        return [(g.group, GROUPS[g.group], g.rows, g.geomeans) for g in self.grouped]

    def entries(self) -> Iterator[tuple[RatioRow, str, RatioCell]]:
        """Every cell with its row and column, in table order: the walk every export does."""
        for row in self.rows:
            for column in self.columns:
                yield row, column, row.cells[column]

    @property
    def has_intervals(self) -> bool:
        return any(c.has_interval for r in self.rows for c in r.cells.values())

    @property
    def units(self) -> list[str]:
        """The throughput units other than QPS that some rows use (the insert benchmark's)."""
        return list(dict.fromkeys(r.unit for r in self.rows if r.unit != QPS))


def group_rows(table: RatioTable) -> RatioTable:
    """`table` with its rows grouped as the published tables group them, in the
    catalogue's order, and each column's geometric mean per group; once its cells are
    final."""
    table.grouped = []
    for group in GROUPS:
        rows = [r for r in table.rows if r.group == group]
        if rows:
            means = {
                column: geomean([r.cells[column].ratio for r in rows if column in r.cells])
                for column in table.columns
            }
            table.grouped.append(RatioGroup(group, rows, means))
    return table


def geomean(values: list[float | None]) -> float | None:
    """stats.geomean over the values that measured; None when none did."""
    clean = [v for v in values if v is not None and v > 0]
    return stats.geomean(clean) if clean else None


def setup_order(result: RunResult) -> list[str]:
    names = [s.name for s in result.setups]
    for cell in result.cells:
        if cell.setup not in names:
            names.append(cell.setup)
    return names


def stein_blocks(result: RunResult) -> int | None:
    """The blocks whose spread sets every interval when --target-ci chose how many to run.

    Stein's two-stage rule: the first stage's spread decides how many blocks to add and
    alone gives the intervals' width, so stopping early cannot make them too narrow.
    """
    adaptive = result.metadata.adaptive
    stage = adaptive.stage1_blocks if adaptive is not None else None
    return int(stage) if isinstance(stage, int) and stage >= 2 else None


def _blocked(
    base: CellSummary | None, others: list[CellSummary], variance_blocks: int | None
) -> dict[str, stats.BlockedRatio]:
    """Paired relative values for one row, or {} where nothing pairs (no base values)."""
    if base is None or not base.by_repeat:
        return {}
    usable = {s.setup: s.by_repeat for s in others if not s.problem and s.by_repeat}
    return stats.blocked_ratios(base.by_repeat, usable, variance_blocks=variance_blocks)


def relative_tables(
    result: RunResult,
    min_effect: float | None = None,
    summaries: Mapping[tuple[str, str, str, int], CellSummary] | None = None,
) -> list[RatioTable]:
    """Relative throughput versus the base per engine and thread count, with intervals.

    `min_effect` overrides the run's own (its metadata); see `min_effect_of`.
    """
    effect = min_effect_of(result, min_effect)
    summaries = summaries if summaries is not None else summarize_run(result)
    variance_blocks = stein_blocks(result)
    base = result.base_setup
    others = [s for s in setup_order(result) if s != base]
    engines = list(dict.fromkeys(c.engine for c in result.cells))
    threads_list = sorted({c.threads for c in result.cells})
    steps = sorted({c.step for c in result.cells}, key=label_order)
    tables = []
    for engine in engines:
        for threads in threads_list:
            rows = []
            for step in steps:
                base_summary = summaries.get((base, engine, step, threads))
                present = [
                    s for s in (summaries.get((o, engine, step, threads)) for o in others) if s
                ]
                if base_summary is None and not present:
                    continue
                unit = next((s.unit for s in [base_summary, *present] if s and s.qps_values), QPS)
                base_values = base_summary.qps_values if base_summary else []
                blocked = _blocked(base_summary, present, variance_blocks)
                cells = {}
                for setup in others:
                    summary = summaries.get((setup, engine, step, threads))
                    problem = summary.problem if summary else Unmeasured.MISSING
                    values = summary.qps_values if summary else []
                    cells[setup] = ratio_cell(
                        values, base_values, problem, base, effect, unit, blocked.get(setup)
                    )
                    cells[setup].unstable = bool(
                        (summary and summary.unstable) or (base_summary and base_summary.unstable)
                    )
                rows.append(
                    RatioRow(
                        step,
                        base_summary.group if base_summary else group_of(step),
                        stats.mean(base_values) if base_values else None,
                        base_summary.problem if base_summary else None,
                        cells,
                        unit,
                    )
                )
            if rows:
                tables.append(
                    group_rows(
                        RatioTable(
                            key=f"rel-{slug(engine)}-{threads}",
                            columns=others,
                            rows=rows,
                            reference_header=f"{base} QPS",
                            engine=engine,
                            threads=threads,
                            reference=base,
                            min_effect=effect,
                        )
                    )
                )
    return tables


# ---------------------------------------------------------------- memory

# Above this VSZ/RSS the address space is mostly reserved, not used: MariaDB 10.11
# reserves innodb_buffer_pool_size_max at start (~8 TiB by default).
VSZ_RESERVED_FACTOR = 64


@dataclass
class MemoryRow:
    """Peak memory of one setup on one engine, and where its RSS went.

    The account (`accounted_bytes` and `unaccounted_bytes`) comes from the cell whose
    unaccounted RSS was largest: the worst the allocator did.
    """

    setup: str
    engine: str
    peak_vsz_bytes: int | None
    peak_rss_bytes: int | None
    cache_bytes: int | None
    rss_at_accounting_bytes: float | None = None
    accounted_bytes: float | None = None  # the part of RSS the server accounts for
    unaccounted_bytes: float | None = None  # RSS minus accounted: allocator overhead
    heap_rss_bytes: float | None = None
    heap_accounted_bytes: float | None = None
    accounted_in: str = ""  # which cell the account was taken from
    # A capped setup's memory cgroup: the cap and the highest charge it reached.
    memory_limit_bytes: int | None = None
    peak_cgroup_bytes: int | None = None
    oom_cells: int = 0  # cells whose server the OOM killer ended
    idle_rss_bytes: int | None = None  # the server's RSS before any cell (lowest start)

    @property
    def rss_per_cache(self) -> float | None:
        if self.peak_rss_bytes and self.cache_bytes:
            return self.peak_rss_bytes / self.cache_bytes
        return None

    @property
    def growth_per_cache(self) -> float | None:
        """RSS the run added above the idle server, per byte of cache: the part of
        RSS/cache that scales, without the fixed base that dominates small caches."""
        if self.peak_rss_bytes and self.idle_rss_bytes and self.cache_bytes:
            return (self.peak_rss_bytes - self.idle_rss_bytes) / self.cache_bytes
        return None

    @property
    def heap_ratio(self) -> float | None:
        """Resident heap over the heap the server says it holds (1.0 = no overhead)."""
        if self.heap_rss_bytes is not None and self.heap_accounted_bytes:
            return self.heap_rss_bytes / self.heap_accounted_bytes
        return None

    @property
    def vsz_reserved(self) -> bool:
        """VSZ is mostly reserved address space, so comparing it says nothing."""
        return bool(
            self.peak_vsz_bytes
            and self.peak_rss_bytes
            and self.peak_vsz_bytes > VSZ_RESERVED_FACTOR * self.peak_rss_bytes
        )


def _measured(result: RunResult) -> list[SessionInfo | Cell]:
    """Everything that kept a peak: sessions first, then cells."""
    return [*result.sessions, *result.cells]


def memory_rows(result: RunResult) -> list[MemoryRow]:
    """Peak VSZ and RSS per setup and engine over all its sessions (the seeds' table)."""
    peaks: dict[tuple[str, str], list[int | None]] = {}
    cache: dict[tuple[str, str], int | None] = {}
    worst: dict[tuple[str, str], Cell] = {}
    # Sessions keep the server's lifetime peak; cells cover sessions whose end was lost.
    for measured in _measured(result):
        key = (measured.setup, measured.engine)
        entry = peaks.setdefault(key, [None, None])
        for index, value in enumerate((measured.peak_vsz_bytes, measured.peak_rss_bytes)):
            if value:
                entry[index] = max(entry[index] or 0, value)
    for cell in result.cells:
        key = (cell.setup, cell.engine)
        cache[key] = cell.cache_bytes
        unaccounted = (cell.metrics or {}).get("rss_unaccounted_bytes")
        if unaccounted is not None and (
            key not in worst or unaccounted > worst[key].metrics["rss_unaccounted_bytes"]
        ):
            worst[key] = cell
    order = {name: i for i, name in enumerate(setup_order(result))}
    rows = []
    for (setup, engine), (vsz, rss) in peaks.items():
        row = MemoryRow(setup, engine, vsz, rss, cache.get((setup, engine)))
        account = worst.get((setup, engine))
        if account is not None:
            m = account.metrics
            row.rss_at_accounting_bytes = m.get("rss_at_accounting_bytes")
            row.accounted_bytes = m.get("rss_accounted_bytes")
            row.unaccounted_bytes = m.get("rss_unaccounted_bytes")
            row.heap_rss_bytes = m.get("heap_rss_bytes")
            row.heap_accounted_bytes = m.get("heap_accounted_bytes")
            row.accounted_in = f"{account.step} @{account.threads} r{account.repeat}"
        _add_cgroup(row, result)
        idle = [
            s.idle_rss_bytes
            for s in result.sessions
            if (s.setup, s.engine) == (setup, engine) and s.idle_rss_bytes
        ]
        row.idle_rss_bytes = min(idle, default=None)
        rows.append(row)
    return sorted(rows, key=lambda r: (r.engine, order.get(r.setup, 99)))


RSS = "bytes"


def peak_rss_by_repeat(result: RunResult) -> dict[tuple[str, str], dict[int, float]]:
    """Each (setup, engine)'s peak RSS per repeat (block): the highest of its server starts.

    The repeat is the pairing unit of every interval on memory, as it is for throughput:
    in one block every setup's server ran the same cells, so peaks compare pairwise.
    Sessions keep the server's lifetime peak; cells stand in where a session's end was lost.
    """
    peaks: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    # A soak's segments share one server: its lifetime peak is the one value it has.
    one_block = repeats_share_a_server(result)
    for measured in _measured(result):
        if not measured.peak_rss_bytes:
            continue
        by_repeat = peaks[(measured.setup, measured.engine)]
        block = 0 if one_block else measured.repeat
        by_repeat[block] = max(by_repeat.get(block, 0), measured.peak_rss_bytes)
    return dict(peaks)


def rss_ratio_cells(
    result: RunResult, min_effect: float | None = None
) -> dict[tuple[str, str], RatioCell]:
    """Peak RSS of each setup over the base's, per (engine, setup), paired by block.

    A ratio above 1 means more memory; the verdict words are `stats.classify`'s, so
    "faster" here reads "more RSS" and "slower" "less RSS".
    """
    effect = min_effect_of(result, min_effect)
    peaks = peak_rss_by_repeat(result)
    base = result.base_setup
    out: dict[tuple[str, str], RatioCell] = {}
    for engine in dict.fromkeys(c.engine for c in result.cells):
        base_peaks = peaks.get((base, engine), {})
        others = {
            s: peaks[(s, engine)] for s in setup_order(result) if s != base and (s, engine) in peaks
        }
        blocked = stats.blocked_ratios(base_peaks, others) if base_peaks else {}
        for setup, values in others.items():
            out[(engine, setup)] = ratio_cell(
                list(values.values()),
                list(base_peaks.values()),
                None if base_peaks else Unmeasured.NO_BASE_RSS,
                base,
                effect,
                RSS,
                blocked.get(setup),
            )
    return out


def _add_cgroup(row: MemoryRow, result: RunResult) -> None:
    """The cap, peak charge and OOM kills of one setup on one engine."""
    sessions = [s for s in result.sessions if (s.setup, s.engine) == (row.setup, row.engine)]
    cells = [c for c in result.cells if (c.setup, c.engine) == (row.setup, row.engine)]
    limits: list[float | None] = [s.memory_limit_bytes for s in sessions]
    limits += [c.metrics.get("cgroup_limit_bytes") for c in cells if c.metrics]
    peaks: list[float | None] = [s.peak_cgroup_bytes for s in sessions]
    peaks += [c.metrics.get("cgroup_peak_bytes") for c in cells if c.metrics]
    row.memory_limit_bytes = max((int(v) for v in limits if v), default=None)
    row.peak_cgroup_bytes = max((int(v) for v in peaks if v), default=None)
    row.oom_cells = sum(1 for c in cells if c.status == STATUS_OOM)


def reserved_vsz_bytes(rows: list[MemoryRow] | tuple[MemoryRow, ...]) -> int | None:
    """The largest peak VSZ among rows whose VSZ is mostly reserved address space, or
    None when no row's is (then VSZ is worth showing and comparing)."""
    reserved = [r for r in rows if r.vsz_reserved]
    if not reserved:
        return None
    return max(r.peak_vsz_bytes or 0 for r in reserved)


class Exploratory(enum.Enum):
    """Why a run can support no finding at all (report.words says it to the reader)."""

    SOAK = "soak"  # repeats are segments of one server lifetime, not server starts
    ONE_REPEAT = "one repeat"  # every cell measured once: no interval anywhere


def exploratory(result: RunResult) -> Exploratory | None:
    """Whether the run cannot support any finding, and why; None when it can.

    One measurement per cell gives no interval, and without one a 1.9x can be noise (a
    5 s cell on a busy machine varies that much); so such a run is exploratory, and its
    ratios are shown but never colored, marked or listed as faster or slower.
    """
    if repeats_share_a_server(result):
        return Exploratory.SOAK
    counts: dict[tuple[str, str, str, int], int] = defaultdict(int)
    for cell in result.cells:
        if cell.status == STATUS_OK:
            counts[(cell.setup, cell.engine, cell.step, cell.threads)] += 1
    if not counts or max(counts.values()) >= 2:
        return None
    return Exploratory.ONE_REPEAT
