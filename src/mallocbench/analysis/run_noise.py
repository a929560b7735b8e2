"""The noise a run met, from its own slices: what every report states beside the verdict.

Per cell (setup x engine x step x threads), the slices of each block are one server
start's; their spread within and between blocks gives the two variance components of
`analysis.noise`. The interference the machine saw (other processes' CPU, steal) comes
from each slice's record. Medians over cells keep one noisy cell from speaking for all.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from mallocbench.analysis.noise import (
    cv_pct_from_log_var,
    optimal_slices_per_start,
    variance_components,
)
from mallocbench.model.results import STATUS_OK, RunResult

# Other processes' CPU share above which the verdict is read with that in mind.
BUSY_SHARE = 0.10


@dataclass(frozen=True)
class RunNoise:
    cells: int  # cells with 2+ slices in at least one block
    slice_cv_pct: float | None  # median within-start spread of one slice
    start_cv_pct: float | None  # median between-start spread (None: one block)
    slices: int  # measured slices in all
    other_cpu_median: float | None  # other processes' share of all CPU time
    other_cpu_max: float | None
    steal_max: float | None
    best_slices_per_start: int | None  # Kalibera & Jones, at this run's costs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run_noise(result: RunResult, start_cost_s: float = 30.0) -> RunNoise | None:
    """The run's noise floor; None when no cell was measured in slices.

    `start_cost_s` (a server start, cache warming and a step's warmup, in seconds) only
    enters the suggested number of slices per start.
    """
    by_cell: dict[tuple[str, str, str, int], dict[int, list[float]]] = defaultdict(dict)
    shares, steals = [], []
    slice_s = []
    for cell in result.cells:
        if cell.status != STATUS_OK or not cell.slices:
            continue
        rates = [float(s["qps"]) for s in cell.slices if s.get("qps")]
        by_cell[(cell.setup, cell.engine, cell.step, cell.threads)][cell.repeat] = rates
        shares += [float(s["other_cpu_share"]) for s in cell.slices if "other_cpu_share" in s]
        steals += [float(s["steal_share"]) for s in cell.slices if "steal_share" in s]
        # A slice that was a sysbench run of its own also cost the second it dropped.
        slice_s += [
            float(s["seconds"]) + (0.0 if s.get("turn") else 1.0)
            for s in cell.slices
            if s.get("seconds")
        ]
    within, between, judged = [], [], 0
    for blocks in by_cell.values():
        starts = [rates for rates in blocks.values() if rates]
        if not any(len(r) >= 2 for r in starts):
            continue
        components = variance_components(starts)
        judged += 1
        within.append(components.within_var)
        if components.between_var is not None:
            between.append(components.between_var)
    if not shares and not judged:
        return None
    within_var, between_var = _median(within), _median(between)
    best = None
    if within_var is not None and between_var is not None and slice_s:
        best = optimal_slices_per_start(
            within_var, between_var, statistics.median(slice_s), start_cost_s
        )
    return RunNoise(
        cells=judged,
        slice_cv_pct=None if within_var is None else cv_pct_from_log_var(within_var),
        start_cv_pct=None if between_var is None else cv_pct_from_log_var(between_var),
        slices=len(slice_s),
        other_cpu_median=_median(shares),
        other_cpu_max=max(shares) if shares else None,
        steal_max=max(steals) if steals else None,
        best_slices_per_start=best,
    )
