"""Run B against run A: the comparison `compare`, its gate and every format read.

Cells are matched by engine, step, threads and setup; each value is QPS(B) / QPS(A)
with a log-scale 95% interval over the repeats of both runs (independent samples: two
runs pair nothing). The base setup plays no part; every setup is compared with itself.
Peak RSS B/A gets an interval over each run's per-repeat peaks, so memory is judged
like throughput. Runs of different datasets are refused first (`analysis.comparability`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from mallocbench.analysis import stats
from mallocbench.analysis.comparability import (
    Difference,
    DifferentWorkloads,
    differences,
    refusals,
)
from mallocbench.analysis.summary import (
    QPS,
    RSS,
    CellSummary,
    MemoryRow,
    RatioCell,
    RatioRow,
    RatioTable,
    Unmeasured,
    group_rows,
    memory_rows,
    min_effect_of,
    peak_rss_by_repeat,
    ratio_cell,
    reserved_vsz_bytes,
    slug,
    summarize_run,
)
from mallocbench.analysis.verdict import VerdictRow, verdict_for
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import RunResult
from mallocbench.workloads.catalogue import group_of, label_order

# What --fail-on can ask for; "changed" is slower or faster.
SLOWER, FASTER, CHANGED, RSS_UP, RSS_DOWN = "slower", "faster", "changed", "rss-up", "rss-down"
FAIL_KINDS = (SLOWER, FASTER, CHANGED, RSS_UP, RSS_DOWN)


class Side(enum.StrEnum):
    """The reference of every relative value in a comparison: B is measured against A."""

    A = "run A"


class Memory(enum.StrEnum):
    """The step name of memory changes and CSV rows, beside the workload's own steps."""

    PEAK_RSS = "peak RSS"


PEAK_RSS = Memory.PEAK_RSS


@dataclass
class MemoryChange:
    engine: str
    setup: str
    # Peak RSS and VSZ in bytes, RSS per byte of cache: None where that run had none.
    rss_a: int | None
    rss_b: int | None
    vsz_a: int | None
    vsz_b: int | None
    per_cache_a: float | None
    per_cache_b: float | None
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
    # Why it counts when it is not a ratio: the run ("A" or "B") where the cell failed
    # (its status, e.g. "oom") or the setup's cells were OOM-killed (how many), the other
    # having measured.
    failed_in: str | None = None
    problem: str | None = None
    oom_cells: int = 0


@dataclass(frozen=True)
class OneSided:
    """What only one run measured, so no table holds it: a setup on an engine, or (for
    setups on engines in both) a step at a thread count."""

    side: str  # "A" or "B"
    engine: str
    setup: str | None = None  # a whole setup on the engine
    step: str | None = None  # else a step at a thread count
    threads: int | None = None


@dataclass
class Comparison:
    a: RunResult
    b: RunResult
    setups: list[str]
    tables: list[RatioTable]
    verdict: list[VerdictRow] = field(default_factory=list)
    memory: list[MemoryChange] = field(default_factory=list)
    unmatched: list[OneSided] = field(default_factory=list)  # measured in one run only
    min_effect: float = 0.0
    # Largest peak VSZ when either run's VSZ is mostly reserved address space, else None.
    reserved_vsz_bytes: int | None = None
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
        raise DifferentWorkloads(found)
    effect = min_effect
    if effect is None:
        effect = min_effect_of(b) or min_effect_of(a)
    sa, sb = summarize_run(a), summarize_run(b)
    common = set(sa) & set(sb)
    setups = [s for s in _ordered_setups(a, b) if any(k[0] == s for k in common)]
    pairs_a = {(k[0], k[1]) for k in sa}
    pairs_b = {(k[0], k[1]) for k in sb}
    unmatched = sorted(
        (
            OneSided("A" if (setup, engine) in pairs_a else "B", engine, setup)
            for setup, engine in pairs_a ^ pairs_b
        ),
        key=lambda u: (f"{u.setup}/{u.engine}", u.side),
    ) + _steps_in_one_run(set(sa), set(sb), pairs_a & pairs_b)
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
    rows_a, rows_b = memory_rows(a), memory_rows(b)
    verdict, memory, memory_changes = _memory(
        (a, b), (rows_a, rows_b), engines, setups, tables, effect
    )
    reserved = reserved_vsz_bytes(rows_a + rows_b)
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


def _steps_in_one_run(
    keys_a: set[Key], keys_b: set[Key], both: set[tuple[str, str]]
) -> list[OneSided]:
    """Steps (at a thread count) one run measured and the other did not, for setups
    on engines in both: dropped from the tables like a setup in one run, and named."""
    found = {
        (engine, step, threads, "A" if key in keys_a else "B")
        for key in keys_a ^ keys_b
        for setup, engine, step, threads in [key]
        if (setup, engine) in both
    }
    return [
        OneSided(side, engine, step=step, threads=threads)
        for engine, step, threads, side in sorted(
            found, key=lambda f: (f[0], label_order(f[1]), f[2], f[3])
        )
    ]


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
                    problem = y.problem or x.problem
                    cells[setup] = ratio_cell(
                        y.qps_values, x.qps_values, problem, Side.A, effect, y.unit
                    )
                    if problem:
                        cells[setup].problem_in = "B" if y.problem else "A"
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
                row.cells.setdefault(
                    column, ratio_cell([], [], Unmeasured.NOT_IN_BOTH, Side.A, effect)
                )
        group_rows(table)
    return tables, changes


def _table(
    engine: str, threads: int, columns: list[str], rows: list[RatioRow], effect: float
) -> RatioTable:
    return RatioTable(
        key=f"cmp-{slug(engine)}-{threads}",
        columns=columns,
        rows=rows,
        engine=engine,
        threads=threads,
        reference=Side.A,
        min_effect=effect,
        between_runs=True,
    )


def _throughput_change(a: CellSummary, b: CellSummary, cell: RatioCell) -> Change | None:
    """A finding, or a cell that failed in one run only: losing a cell that measured
    is a regression (a crash is worse than slow), regaining it an improvement."""
    where = (b.engine, b.setup, b.step, b.threads)
    if b.problem and not a.problem:
        return Change(SLOWER, *where, cell, failed_in="B", problem=b.problem)
    if a.problem and not b.problem:
        return Change(FASTER, *where, cell, failed_in="A", problem=a.problem)
    if cell.verdict in (stats.SLOWER, stats.FASTER):
        return Change(SLOWER if cell.verdict == stats.SLOWER else FASTER, *where, cell)
    return None


def _memory(
    runs: tuple[RunResult, RunResult],
    rows: tuple[list[MemoryRow], list[MemoryRow]],
    engines: list[str],
    setups: list[str],
    tables: list[RatioTable],
    effect: float,
) -> tuple[list[VerdictRow], list[MemoryChange], list[Change]]:
    """The verdict rows, peak memory B against A with an interval, and the RSS changes."""
    mem_a, mem_b = ({(m.engine, m.setup): m for m in side} for side in rows)
    # Two runs are independent samples: each repeat's peak is one value per run.
    peaks_a, peaks_b = (peak_rss_by_repeat(run) for run in runs)
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
                rss = ratio_cell(list(pb.values()), list(pa.values()), None, Side.A, effect, RSS)
            if ma and mb and ma.peak_rss_bytes and mb.peak_rss_bytes:
                peak_ratio = mb.peak_rss_bytes / ma.peak_rss_bytes
                row.rss_ratio = rss.ratio if rss and rss.ratio is not None else peak_ratio
                row.rss_peaks = (mb.peak_rss_bytes, ma.peak_rss_bytes)
            verdict.append(row)
            if ma or mb:
                memory.append(
                    MemoryChange(
                        engine,
                        setup,
                        ma.peak_rss_bytes if ma else None,
                        mb.peak_rss_bytes if mb else None,
                        ma.peak_vsz_bytes if ma else None,
                        mb.peak_vsz_bytes if mb else None,
                        ma.rss_per_cache if ma else None,
                        mb.rss_per_cache if mb else None,
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
    where = (m.engine, m.setup, PEAK_RSS, None, m.rss)
    if m.oom_b and not m.oom_a:
        out.append(Change(RSS_UP, *where, failed_in="B", oom_cells=m.oom_b))
    elif m.oom_a and not m.oom_b:
        out.append(Change(RSS_DOWN, *where, failed_in="A", oom_cells=m.oom_a))
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
