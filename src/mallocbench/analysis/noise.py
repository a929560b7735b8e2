"""How noisy this machine is, level by level, and what that buys in a given time.

Throughput varies at three levels (Kalibera & Jones, "Rigorous Benchmarking in
Reasonable Time", ISMM 2013): between seconds, between the measured slices of one server
start, and between server starts. Repeating at a cheap level (more slices) cannot shrink
the variance that lives at a dear one (each server start settles at a level of its own),
so a pilot measurement of each level's variance, with each level's cost, tells how many
starts and how many slices per start reach a target precision in the least time.

Everything here is on the log scale of throughput, as the run's relative values are (a
ratio is a difference of logs): a variance of 0.0004 is a coefficient of variation of
about 2%. Pure functions; numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mallocbench.analysis.stats import t_quantile

DEFAULT_LENGTHS = (1, 2, 5, 10, 20, 30, 60)
# More slices per start than this give nothing worth a start's cost on any host seen so
# far, and a start that lasts long lets drift in unpaired: the optimum is capped here.
MAX_SLICES_PER_START = 20


def cv_pct_from_log_var(variance: float) -> float:
    """CV (%) of a log-normal quantity whose log has this variance: 100 sqrt(e^v - 1).

    For the small variances met here it is 100 * sqrt(v) to within a fraction of a percent.
    """
    return 100.0 * math.sqrt(math.expm1(max(variance, 0.0)))


@dataclass(frozen=True)
class VarianceComponents:
    """Log-throughput variance within a start (slice to slice) and between starts."""

    within_var: float
    between_var: float | None  # None with one start: nothing to compare it with
    starts: int
    slices: int  # over all starts
    within_df: int  # slices - starts: the degrees of freedom of within_var
    mean_log: float  # grand mean of log throughput (of the slices)

    @property
    def slice_cv_pct(self) -> float:
        return cv_pct_from_log_var(self.within_var)

    @property
    def start_cv_pct(self) -> float | None:
        return None if self.between_var is None else cv_pct_from_log_var(self.between_var)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "slice_cv_pct": self.slice_cv_pct,
            "start_cv_pct": self.start_cv_pct,
        }


def _log_groups(starts: Sequence[Sequence[float]]) -> list[np.ndarray]:
    groups = [np.asarray(values, dtype=float) for values in starts if len(values)]
    if not groups:
        raise ValueError("no slices to estimate variance from")
    if any(not np.all(np.isfinite(g) & (g > 0)) for g in groups):
        raise ValueError("throughputs must be positive and finite")
    return [np.log(g) for g in groups]


def variance_components(starts: Sequence[Sequence[float]]) -> VarianceComponents:
    """One-way random-effects ANOVA of log slice throughput, grouped by server start.

    Model: log y_ij = mu + a_i + e_ij, with a_i ~ (0, between) the level of start i and
    e_ij ~ (0, within) slice j's deviation from it. Method of moments, which handles
    unequal slice counts per start:

        MSW = sum_ij (y_ij - ybar_i)^2 / (N - a)
        MSB = sum_i n_i (ybar_i - ybar)^2 / (a - 1)
        n0  = (N - sum_i n_i^2 / N) / (a - 1)      (n0 = n when every start has n slices)
        within = MSW,  between = max(0, (MSB - MSW) / n0)

    E[MSB] = within + n0 * between, hence the estimate; it can come out negative when
    starts differ less than their slices predict, and a variance cannot, so it is clamped
    at 0. A start with one slice adds to the between part only.
    """
    return _components_of_logs(_log_groups(starts))


def _components_of_logs(groups: list[np.ndarray]) -> VarianceComponents:
    """variance_components of groups already on the log scale."""
    sizes = np.array([len(g) for g in groups], dtype=float)
    n_total, a = int(sizes.sum()), len(groups)
    if n_total == a:
        raise ValueError("within-start variance needs a start with at least 2 slices")
    means = np.array([g.mean() for g in groups])
    grand = float(np.concatenate(groups).mean())
    msw = float(sum(((g - g.mean()) ** 2).sum() for g in groups)) / (n_total - a)
    between: float | None = None
    if a > 1:
        msb = float((sizes * (means - grand) ** 2).sum()) / (a - 1)
        n0 = (n_total - float((sizes**2).sum()) / n_total) / (a - 1)
        between = max(0.0, (msb - msw) / n0)
    return VarianceComponents(
        within_var=msw,
        between_var=between,
        starts=a,
        slices=n_total,
        within_df=n_total - a,
        mean_log=grand,
    )


@dataclass(frozen=True)
class SharedStart:
    """The between-start variance several designs measured on the same starts share,
    and whether their starts' levels agree well enough to share one."""

    variance: float
    # Of the designs' per-start levels agreeing within their noise (chi-square); None
    # with one design. Small: a design's starts differ in a way of its own.
    agreement_p: float | None


# Below this agreement, a design keeps its own between-start variance.
SHARED_START_MIN_P = 0.05


def shared_start_var(designs: Sequence[Sequence[Sequence[float]]]) -> SharedStart | None:
    """The between-start variance of a level every design shares, from several designs
    measured on the same starts: `designs[d][g]` is design d's series in group g (a
    server start, or one copy's ratio series within it), the groups in the same order
    in every design.

    Model: log y_gjd = mu_d + a_g + e_gjd, with a_g ~ (0, shared) the group's level in
    every design and e_gjd ~ (0, within_d) design d's own scatter. Each design's group
    mean, less the design's grand mean, estimates a_g with variance v_gd = within_d /
    n_gd; weighting the designs by 1 / v_gd gives one estimate m_g per group whose noise
    is v_g = 1 / sum_d (1 / v_gd), hence by the method of moments

        shared = max(0, var(m_g) - mean(v_g)).

    One design alone gives its own between-start variance (variance_components, for
    equal slice counts). Pooled, a design that measures the start's level precisely
    (runs: long slices) lends that precision to one that measures it poorly (turns:
    many short, scattered turns), whose own estimate from a few starts is often 0 though
    the starts differ.

    The model holds only if the designs see the same level per start. Under it, each
    design's group mean differs from their weighted mean m_g by noise alone, so
    sum_gd (its deviation)^2 / v_gd, less the group effect, is chi-square with
    (designs - 1) (groups - 1) degrees of freedom; `agreement_p` is its tail. None with
    fewer than 2 groups, when the designs' groups do not line up, or when a design has
    no group of 2 values (no within variance).
    """
    if not designs or len({len(groups) for groups in designs}) != 1 or len(designs[0]) < 2:
        return None
    weights, levels = [], []
    for groups in designs:
        logs = _log_groups(groups)
        sizes = np.array([len(g) for g in logs], dtype=float)
        if len(logs) != len(groups) or sizes.sum() <= len(logs):
            return None
        own = _components_of_logs(logs)
        # Within 0 (identical values) would weigh infinitely: floor it far below any
        # machine's scatter.
        weights.append(sizes / max(own.within_var, 1e-12))
        levels.append(np.array([g.mean() for g in logs]) - own.mean_log)
    weight = np.sum(weights, axis=0)
    combined = np.sum([w * m for w, m in zip(weights, levels, strict=True)], axis=0) / weight
    variance = max(0.0, float(combined.var(ddof=1) - np.mean(1.0 / weight)))
    if len(designs) < 2:
        return SharedStart(variance, None)
    deviations = sum(
        float((w * (m - combined) ** 2).sum()) for w, m in zip(weights, levels, strict=True)
    )
    df = (len(designs) - 1) * (len(combined) - 1)
    # Imported here: scipy.special loads in a fraction of scipy.stats' time (stats.py).
    from scipy.special import chdtrc

    return SharedStart(variance, float(chdtrc(df, deviations)))


def pooled_aggregation_curve(
    series: Sequence[Sequence[float]], lengths: Sequence[int] = DEFAULT_LENGTHS
) -> list[tuple[int, float]]:
    """CV (%) of non-overlapping means of k consecutive seconds, pooled over series.

    Each series (the seconds of one server start) is cut into blocks of k seconds (a
    trailing partial block is dropped); each block mean is taken relative to its series'
    mean, so the levels of different starts do not count, and the squared deviations are
    pooled over all series with (blocks - 1) degrees of freedom each. One series gives
    exactly its sample sd / mean. Lengths that leave no series 2 blocks are left out.
    White noise falls as 1/sqrt(k); drift and level shifts stay, which is what the curve
    is for: it shows how much longer slices can still buy.
    """
    curve = []
    for k in lengths:
        squares, df = 0.0, 0
        for values in series:
            blocks = len(values) // k
            if blocks < 2:
                continue
            block_means = np.asarray(values[: blocks * k], dtype=float).reshape(blocks, k).mean(1)
            level = block_means.mean()
            if level <= 0:
                continue
            squares += float(((block_means / level - 1.0) ** 2).sum())
            df += blocks - 1
        if df >= 1:
            curve.append((k, 100.0 * math.sqrt(squares / df)))
    return curve


def aggregation_curve(
    seconds: Sequence[float], lengths: Sequence[int] = DEFAULT_LENGTHS
) -> list[tuple[int, float]]:
    """CV (%) of the means of k consecutive seconds of one series, for each k in lengths."""
    return pooled_aggregation_curve([seconds], lengths)


def second_cv_pct(seconds: Sequence[float]) -> float:
    """CV (%) of one second's throughput: sample sd / mean; nan with fewer than 2 seconds."""
    curve = aggregation_curve(seconds, (1,))
    return curve[0][1] if curve else math.nan


def optimal_slices_per_start(
    within_var: float,
    between_var: float,
    slice_cost_s: float,
    start_cost_s: float,
    max_slices: int = MAX_SLICES_PER_START,
) -> int:
    """Slices per start that give the narrowest interval for the time (Kalibera & Jones).

    With s starts of n slices, Var(mean) = (between + within / n) / s and the time is
    s * (c_start + n * c_slice). Their product, which a fixed budget minimises, is least at

        n = sqrt(c_start * within / (c_slice * between)).

    Dear starts or noisy slices ask for more slices per start; a large between-start
    variance asks for more starts instead. The nearer integer neighbour by that product
    is returned, at least 1 and at most `max_slices`; with no between-start variance
    more slices always help, so the cap is returned.
    """
    if within_var <= 0:
        return 1
    if between_var <= 0:
        return max_slices
    best = math.sqrt(start_cost_s * within_var / (slice_cost_s * between_var))

    def cost(n: int) -> float:
        return (start_cost_s + n * slice_cost_s) * (between_var + within_var / n)

    candidates = {min(max_slices, max(1, n)) for n in (math.floor(best), math.ceil(best))}
    return min(sorted(candidates), key=cost)


def between_variance(components: VarianceComponents) -> float:
    if components.between_var is None:
        raise ValueError("the between-start variance is unknown: measure at least 2 starts")
    return components.between_var


def resolvable_effect_pct(
    components: VarianceComponents,
    setups: int,
    slices_per_start: int,
    starts: int,
    confidence: float = 0.95,
    paired: bool = False,
) -> float:
    """Expected full width (percentage points) of the interval of a ratio setup / base.

    Each setup's block mean averages `slices_per_start` slices of one start, so its log
    has variance between + within / slices; a ratio to the base in the same block is a
    difference of two such means, and averaging over the starts divides by their count:

        Var(log ratio) = 2 * (between + within / slices) / starts

    The 2 holds when the two means are independent: one setup's components, measured
    start after start, are what the sequential design compares. In a blocked design the
    time effects a block shares cancel in the difference, by an amount only a paired
    measurement shows: `paired` components are those of the log-ratio itself (two
    copies of a setup up at once, calibrate's pairs), and then

        Var(log ratio) = (between + within / slices) / starts.

    The interval's t has the degrees of freedom of the
    block design's pooled residual, (setups - 1) * (starts - 1), and the interval of the
    ratio, exp(+-t * se) around it, is 100 * (e^(t se) - e^(-t se)) points wide (about
    2 t se). Infinite with fewer than 2 starts: one start per setup has no interval.

    This is the width at the true standard error. A run estimates it from its residual,
    so its widths scatter around this value; with few degrees of freedom the typical
    (median) one is narrower, by sqrt(median(chi2_df) / df): 0.83 at 2 df, 0.89 at 3,
    0.97 at 10, and half of the runs get a wider one.
    """
    if setups < 2:
        raise ValueError("a ratio needs at least 2 setups")
    if starts < 2:
        return math.inf
    factor = 1.0 if paired else 2.0
    variance = (
        factor * (between_variance(components) + components.within_var / slices_per_start) / starts
    )
    se = math.sqrt(variance)
    t = t_quantile(confidence, (setups - 1) * (starts - 1))
    return 100.0 * (math.exp(t * se) - math.exp(-t * se))


def starts_for_width(
    components: VarianceComponents,
    setups: int,
    slices_per_start: int,
    target_width_pct: float,
    max_starts: int = 10_000,
    paired: bool = False,
) -> int | None:
    """The fewest starts (2 or more) whose expected width is at most the target; None
    when even `max_starts` do not reach it.

    The limit is high on purpose: on a noisy host the honest answer to "how long for 3
    points" may be hours, and saying so beats "more than N". The width only shrinks as
    starts are added (t and the standard error both fall), so a bisection finds it.
    """

    def reaches(starts: int) -> bool:
        width = resolvable_effect_pct(components, setups, slices_per_start, starts, paired=paired)
        return width <= target_width_pct

    if not reaches(max_starts):
        return None
    low, high = 2, max_starts  # reaches(high) holds throughout
    while low < high:
        middle = (low + high) // 2
        if reaches(middle):
            high = middle
        else:
            low = middle + 1
    return high


def time_for_starts(
    starts: int,
    setups: int,
    slices_per_start: int,
    slice_s: float,
    start_cost_s: float,
    warmup_s: float,
) -> float:
    """Wall seconds of a blocked run: per start the setups' servers start together
    (`start_cost_s` once), each is warmed (`warmup_s` each), then setups * slices slices
    of `slice_s` run, interleaved between the servers."""
    return starts * (start_cost_s + setups * warmup_s + setups * slices_per_start * slice_s)


def starts_within(
    budget_s: float,
    setups: int,
    slices_per_start: int,
    slice_s: float,
    start_cost_s: float,
    warmup_s: float,
) -> int:
    """How many whole starts of `time_for_starts` fit in the budget (0 when none)."""
    one = time_for_starts(1, setups, slices_per_start, slice_s, start_cost_s, warmup_s)
    return int(budget_s // one) if one > 0 else 0


__all__ = [
    "VarianceComponents",
    "aggregation_curve",
    "cv_pct_from_log_var",
    "optimal_slices_per_start",
    "pooled_aggregation_curve",
    "resolvable_effect_pct",
    "second_cv_pct",
    "SHARED_START_MIN_P",
    "SharedStart",
    "shared_start_var",
    "starts_for_width",
    "starts_within",
    "time_for_starts",
    "variance_components",
]
