"""A pattern run analysed once: per case x threads x setup, mean ops/s with its 95%
interval, ops/s and peak RSS relative to the case's base setup with log-scale intervals
(significant when the interval excludes 1.0), and RSS per live byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mallocbench.analysis import stats

if TYPE_CHECKING:
    # Types only: the reports of every kind import this module, and the pattern
    # experiment's loader brings the allocator registry with it.
    from mallocbench.model.patterns import Case, PatternResult, PatternRun, RunModel


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
        return stats.Relative(
            self.rel_ops, self.rel_ops_low, self.rel_ops_high, self.rel_ops_significant
        )

    @property
    def rel_rss_value(self) -> stats.Relative:
        return stats.Relative(
            self.rel_rss_per_live,
            self.rel_rss_per_live_low,
            self.rel_rss_per_live_high,
            self.rel_rss_per_live_significant,
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


@dataclass(frozen=True)
class PatternsAnalysis:
    """What every format of a pattern run reads."""

    run: PatternRun
    rows: tuple[SummaryRow, ...]


def analyze_patterns(run: PatternRun) -> PatternsAnalysis:
    return PatternsAnalysis(run, tuple(summarize(run.model, run.results)))
