"""Block ratios adjusted for the other processes' CPU: a covariate the host supplies.

On a busy host much of the spread of a paired slice (or turn) ratio is how much more
of the machine other processes took during one setup's slice than during its base's
(69% of the within-block variance of the turns' log-ratio in the A/A bench). Every
slice records that share (probes.system.interference), so the spread can be taken out
by regression adjustment: per engine, step and thread count, the log-ratio of each
setup's k-th turn to the base's k-th turn of the same block (the two ran in the same
round) is regressed on the difference of their other-CPU shares, within blocks (each
block's pairs centred on their own means, so the per-start level is left alone) and
pooled over setups and blocks, for one slope. A setup's block value is then moved by
minus the slope times its block's mean difference, and the blocked ratios are computed
again from the adjusted blocks, beside the raw ones.

Only turns are adjusted: there every setup's server and client count as the run's own
CPU, so what is left is the host's; a runs slice counts the other setups' idle servers
as other processes, and those run other allocators. The slope comes from within-block
deviations, which are orthogonal to the block means
the interval is made of, so the interval keeps its degrees of freedom. A covariate
adjustment is only fair when the treatment does not cause the covariate: other
processes' CPU is the host's, but on a saturated machine a setup whose server burns
more CPU leaves the others less. So a setup whose own share differs from its base's
across blocks (the 95% interval of the mean block difference excludes 0) is not
adjusted: there the covariate may be the allocator's doing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mallocbench.analysis import stats
from mallocbench.analysis.summary import CellSummary
from mallocbench.model.results import STATUS_OK, Cell, RunResult

SHARE = "other_cpu_share"
CellKey = tuple[str, str, int]  # engine, step, threads


@dataclass(frozen=True)
class AdjustedRatio:
    """One setup's ratio to the base, raw and adjusted for the other processes' CPU."""

    setup: str
    raw: stats.BlockedRatio
    adjusted: stats.BlockedRatio | None  # None: the covariate differs by setup (below)
    # Mean over blocks of the setup's other-CPU share minus the base's, with its 95%
    # interval; excluding 0, the allocator may be causing it, and nothing is adjusted.
    shift: float
    shift_low: float
    shift_high: float
    shifted: bool  # that interval excludes 0: the share moved with the allocator


@dataclass(frozen=True)
class CpuAdjustment:
    """The adjustment of one engine x step x threads cell of the verdict."""

    engine: str
    step: str
    threads: int
    slope: float  # change of the log-ratio per unit (1.0 = the whole machine) of share
    explained: float  # share of the within-block variance of the paired log-ratios
    pairs: int  # paired slices the slope comes from
    ratios: tuple[AdjustedRatio, ...]


def _usable(piece: dict[str, float]) -> bool:
    # Only turns: there every setup's server and client count as the run's own CPU
    # (measure._taken), so the share is the host's. A runs slice counts the other
    # setups' idle servers as other processes, and their allocators could move it.
    return bool(piece.get("turn")) and piece.get("qps", 0) > 0 and SHARE in piece


def _paired(base: Cell, other: Cell) -> list[tuple[float, float]]:
    """(log-ratio, share difference) of the k-th turns of two cells of one block."""
    out = []
    for b, o in zip(base.slices, other.slices, strict=False):
        if _usable(b) and _usable(o):
            out.append((math.log(o["qps"] / b["qps"]), float(o[SHARE]) - float(b[SHARE])))
    return out


def within_group_slope(
    groups: list[list[tuple[float, float]]],
) -> tuple[float, float, int] | None:
    """Least-squares slope of y on x within groups (each group's means taken out, so the
    per-start level is left alone), the share of variance it explains, and the pairs;
    None when there is no variation to fit."""
    ys = [np.array([y for y, _ in g]) for g in groups if len(g) >= 2]
    xs = [np.array([x for _, x in g]) for g in groups if len(g) >= 2]
    if not ys:
        return None
    y = np.concatenate([v - v.mean() for v in ys])
    x = np.concatenate([v - v.mean() for v in xs])
    sxx, syy = float((x**2).sum()), float((y**2).sum())
    if sxx <= 0 or syy <= 0:
        return None
    slope = float((x * y).sum()) / sxx
    return slope, 1.0 - float(((y - slope * x) ** 2).sum()) / syy, len(y)


def _shift(differences: list[float]) -> tuple[float, float, float]:
    """Mean block difference of the shares with its 95% t interval (nan with < 2)."""
    mean = float(np.mean(differences))
    if len(differences) < 2:
        return mean, math.nan, math.nan
    half = (
        stats.t_quantile(0.95, len(differences) - 1)
        * float(np.std(differences, ddof=1))
        / math.sqrt(len(differences))
    )
    return mean, mean - half, mean + half


def _adjust_cell(
    key: CellKey,
    base: dict[int, Cell],
    others: dict[str, dict[int, Cell]],
    summaries: Mapping[tuple[str, str, str, int], CellSummary],
    base_name: str,
) -> CpuAdjustment | None:
    engine, step, threads = key
    pairs = {
        name: {b: _paired(base[b], cells[b]) for b in cells if b in base}
        for name, cells in others.items()
    }
    fitted = within_group_slope([p for blocks in pairs.values() for p in blocks.values()])
    base_summary = summaries.get((base_name, engine, step, threads))
    if fitted is None or base_summary is None:
        return None
    slope, explained, count = fitted
    raw, moved, shifts = {}, {}, {}
    for name, blocks in pairs.items():
        summary = summaries.get((name, engine, step, threads))
        if summary is None:
            continue
        means = {b: float(np.mean([x for _, x in p])) for b, p in blocks.items() if p}
        raw[name] = summary.by_repeat
        moved[name] = {
            b: q * math.exp(-slope * means[b]) for b, q in summary.by_repeat.items() if b in means
        }
        shifts[name] = _shift(list(means.values())) if means else (math.nan,) * 3
    raw_ratios = stats.blocked_ratios(base_summary.by_repeat, raw)
    adjusted = stats.blocked_ratios(base_summary.by_repeat, moved)
    ratios = []
    for name in raw:
        shift = shifts[name]
        shifted = stats.significant(shift[1], shift[2], null=0.0)
        chosen = None if shifted else adjusted[name]
        ratios.append(AdjustedRatio(name, raw_ratios[name], chosen, *shift, shifted))
    return CpuAdjustment(engine, step, threads, slope, explained, count, tuple(ratios))


def adjust_for_other_cpu(
    result: RunResult, summaries: Mapping[tuple[str, str, str, int], CellSummary]
) -> tuple[CpuAdjustment, ...]:
    """Every verdict cell whose turns recorded the other processes' CPU, adjusted; ()
    when no cell has paired turns with the share (runs slices, sequential cells, older
    runs)."""
    by_key: dict[CellKey, dict[str, dict[int, Cell]]] = defaultdict(lambda: defaultdict(dict))
    for cell in result.cells:
        if cell.status == STATUS_OK and cell.slices:
            by_key[(cell.engine, cell.step, cell.threads)][cell.setup][cell.repeat] = cell
    found = []
    for key, setups in by_key.items():
        base = setups.get(result.base_setup)
        others = {name: cells for name, cells in setups.items() if name != result.base_setup}
        if base is None or not others:
            continue
        adjusted = _adjust_cell(key, base, others, summaries, result.base_setup)
        if adjusted is not None:
            found.append(adjusted)
    return tuple(found)


__all__ = ["AdjustedRatio", "CpuAdjustment", "adjust_for_other_cpu", "within_group_slope"]
