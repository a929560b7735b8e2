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
from dataclasses import asdict, dataclass, field
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
    # The two variances as coefficients of variation, set once the value is made.
    slice_cv_pct: float = field(init=False)
    start_cv_pct: float | None = field(init=False)

    def __post_init__(self) -> None:
        between = self.between_var
        object.__setattr__(self, "slice_cv_pct", cv_pct_from_log_var(self.within_var))
        start = None if between is None else cv_pct_from_log_var(between)
        object.__setattr__(self, "start_cv_pct", start)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _between(components: VarianceComponents) -> float:
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
    variance = factor * (_between(components) + components.within_var / slices_per_start) / starts
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


# How a run's setups share the machine (experiment.design and experiment.alternate).
RUNS_DESIGN = "runs"  # interleaved, each slice a sysbench run of its own
TURNS_DESIGN = "turns"  # interleaved, clients taking turns
SEQUENTIAL_DESIGN = "sequential"  # one server at a time


@dataclass
class Costs:
    """What each level of a run costs, in seconds (medians over the starts and slices)."""

    start_s: float  # copy the datadir, start the server, warm its cache
    warmup_s: float  # the step's warmup until steady
    slice_wall_s: float  # a slice's sysbench run, dropped second and start-up included
    turn_s: float = 0.0  # a turn of one setup, its share of the lead and settle turns included
    stop_s: float = 0.0  # stop a server and remove its datadir (0: not measured)


@dataclass(frozen=True)
class Plan:
    """What to ask of a run, from the measured noise and costs."""

    setups: int  # in the comparison (at least 2: a setup and its base)
    slices_per_start: int
    budget_s: float
    budget_starts: int
    budget_width_pct: float | None  # None: the budget does not fit 2 starts
    target_width_pct: float
    target_starts: int | None  # None: out of reach (more than starts_for_width looks at)
    target_s: float | None
    design: str = RUNS_DESIGN
    # The components are of the paired log-ratio (copies measured together), so the
    # ratio's variance is theirs; otherwise twice one setup's (independent starts).
    paired: bool = False
    target_slices_per_start: int | None = None  # of the target's plan, when in reach
    # Where the budget's width may lie, given the starts and slices the components came
    # from (width_range_pct); None when it does not fit or cannot be said.
    budget_width_range_pct: tuple[float, float] | None = None
    # The degrees of freedom the budget width's variance is known with (width_df).
    budget_width_df: float | None = None


def block_costs(design: str, costs: Costs, setups: int) -> tuple[float, float]:
    """A block's fixed seconds and its seconds per slice (or turn) of every setup.

    Every design starts, warms and stops each setup's server once per block, one after
    another (interleaved too: the runner starts a block's servers in turn).
    Sequential's slices are one continuous sysbench run per setup (a second of start-up,
    nothing dropped between them); interleaved, each slice is a sysbench run of its own,
    or each turn a turn of connected clients after a settle turn.
    """
    per_server = costs.start_s + costs.warmup_s + costs.stop_s
    if design == SEQUENTIAL_DESIGN:
        fixed = setups * (per_server + 1.0)
        return fixed, setups * max(costs.slice_wall_s - 1.0, 1.0)
    fixed = setups * per_server
    if design == TURNS_DESIGN:
        return fixed + setups * costs.turn_s, setups * costs.turn_s  # a settle turn each
    return fixed, setups * costs.slice_wall_s


@dataclass(frozen=True)
class Shape:
    """One design's run in a wall-clock budget: slices (or turns) per start, the starts
    that fit, the seconds they take and the interval width they are expected to give."""

    design: str
    slices_per_start: int
    starts: int
    wall_s: float
    width_pct: float  # math.inf: fewer than 2 starts (or no slice) fit the budget

    @property
    def fits(self) -> bool:
        return math.isfinite(self.width_pct)


def _shape(
    components: VarianceComponents,
    setups: int,
    design: str,
    block: tuple[float, float],
    slices: int,
    starts: int,
    paired: bool,
) -> Shape:
    fixed_s, per_slice_s = block
    width = (
        resolvable_effect_pct(components, setups, slices, starts, paired=paired)
        if starts >= 2 and slices >= 1
        else math.inf
    )
    return Shape(design, slices, starts, starts * (fixed_s + slices * per_slice_s), width)


# Floating-point slack when a budget is exactly the time of a shape (auto's default
# budget is the experiment's own time as runs): that shape must still fit.
_FIT_SLACK = 1e-9
# Share of a given budget left unplanned: a run's own work between the priced parts
# (saving cells, sampling, the runner's hand-over between servers) made 4-setup blocks
# take 6% longer than priced on the busy host, and a budget's stop that cuts the last
# block throws away all of that block. Applies to a budget the user gives, not to the
# equal-time comparison at a run's own repeats, where every design bears it alike.
BUDGET_MARGIN = 0.08


def shape_in_budget(
    components: VarianceComponents,
    costs: Costs,
    design: str,
    setups: int,
    budget_s: float,
    paired: bool = False,
    starts: int | None = None,
) -> Shape:
    """The narrowest interval a design reaches in `budget_s` of wall time (block_costs).

    With `starts` given (a run's repeats) every start gets as many slices as the budget
    leaves it; otherwise every slices-per-start count up to MAX_SLICES_PER_START is
    tried, each with the whole starts that then fit in the budget less BUDGET_MARGIN,
    and the narrowest kept (on a tie the one with more starts, whose interval estimate
    is steadier). Kalibera and Jones' optimum alone ignores the budget: where starts
    differ little it asks for so many slices that fewer than 2 starts fit, and no
    interval at all.
    """
    block = block_costs(design, costs, setups)
    fixed_s, per_slice_s = block
    if per_slice_s <= 0:
        raise ValueError("a slice's cost must be positive")
    if starts is not None:
        room = budget_s / starts - fixed_s if starts > 0 else 0.0
        slices = max(0, math.floor(room / per_slice_s + _FIT_SLACK))
        return _shape(components, setups, design, block, slices, starts, paired)
    planned_s = budget_s * (1.0 - BUDGET_MARGIN)
    tried = []
    for slices in range(1, MAX_SLICES_PER_START + 1):
        fitting = math.floor(planned_s / (fixed_s + slices * per_slice_s) + _FIT_SLACK)
        tried.append(_shape(components, setups, design, block, slices, fitting, paired))
    return min(tried, key=lambda s: (s.width_pct, -s.starts))


def time_for_width(
    components: VarianceComponents,
    costs: Costs,
    design: str,
    setups: int,
    target_width_pct: float,
    paired: bool = False,
) -> tuple[int, int, float] | None:
    """The least wall time reaching the target width: (slices per start, starts,
    seconds), trying every slices-per-start count as shape_in_budget does; None when
    no count reaches it within starts_for_width's limit."""
    fixed_s, per_slice_s = block_costs(design, costs, setups)
    best: tuple[int, int, float] | None = None
    for slices in range(1, MAX_SLICES_PER_START + 1):
        needed = starts_for_width(components, setups, slices, target_width_pct, paired=paired)
        if needed is None:
            continue
        seconds = needed * (fixed_s + slices * per_slice_s)
        if best is None or seconds < best[2]:
            best = (slices, needed, seconds)
    return best


def width_df(
    components: VarianceComponents, slices_per_start: int, series_per_start: int = 1
) -> float | None:
    """The degrees of freedom of the block variance a width is made of (Satterthwaite,
    as width_range_pct explains); None when a mean square has none."""
    if slices_per_start < 1:
        return None
    groups = components.starts
    starts_df = groups * 2 / (series_per_start + 1) - 1
    within_df = components.within_df
    if starts_df < 1 or within_df < 1:
        return None
    per_group = components.slices / groups  # n0 when every start has as many slices
    msw = components.within_var
    msb = msw + per_group * _between(components)
    weights = (1.0 / per_group, 1.0 / slices_per_start - 1.0 / per_group)
    variance = weights[0] * msb + weights[1] * msw
    spread = (weights[0] * msb) ** 2 / starts_df + (weights[1] * msw) ** 2 / within_df
    if variance <= 0 or spread <= 0:
        return None
    return variance**2 / spread


def width_range_pct(
    components: VarianceComponents,
    slices_per_start: int,
    width_pct: float,
    confidence: float = 0.95,
    series_per_start: int = 1,
) -> tuple[float, float] | None:
    """The range an expected width may lie in, given how well the calibration knows the
    block variance it is made of, between_var + within_var / slices. That estimate is a
    sum of the two mean squares of variance_components (between starts, MSB, and
    within, MSW): (MSB - MSW) / n0 + MSW / slices, with n0 slices a start. Satterthwaite
    gives it degrees of freedom from theirs (starts - 1 and within_df), and a width grows
    as the square root of the variance, so its range is the chi-square interval of the
    variance, square-rooted. With 5 starts of a two-copy calibration MSB has 4 degrees
    of freedom, and a width of 14 points may truly be 9 or 32: a run that reaches 18
    has not shown the model wrong. None when the width is not finite or a mean square
    has no degrees of freedom. Paired or not, the factor of a ratio's variance cancels.

    With several series per start (copy a over each of three other copies), the series
    share copy a's level: two of them correlate by a half when every copy's level
    varies alike, so m series of a start count as about 2m / (m + 1) independent ones in
    MSB's degrees of freedom (1.5 for three), not m.
    """
    return _width_range(
        width_pct, width_df(components, slices_per_start, series_per_start), confidence
    )


def _width_range(
    width_pct: float, df: float | None, confidence: float = 0.95
) -> tuple[float, float] | None:
    """width_range_pct from the width's degrees of freedom (width_df)."""
    if not math.isfinite(width_pct) or df is None:
        return None
    # Imported here, as analysis.stats imports its t quantile: scipy loads slowly.
    from scipy.special import chdtri

    tail = (1.0 - confidence) / 2
    return (
        width_pct * math.sqrt(df / float(chdtri(df, tail))),
        width_pct * math.sqrt(df / float(chdtri(df, 1.0 - tail))),
    )


def plan_run(
    components: VarianceComponents,
    costs: Costs,
    setups: int,
    budget_s: float,
    target_width_pct: float,
    design: str = RUNS_DESIGN,
    paired: bool = False,
    series_per_start: int = 1,
) -> Plan:
    """One design's plan: the narrowest width the budget buys (shape_in_budget), the
    range the calibration leaves it (width_range_pct, `series_per_start` as there) and the
    least time the target width costs (time_for_width), by the same block arithmetic."""
    shape = shape_in_budget(components, costs, design, setups, budget_s, paired)
    needed = time_for_width(components, costs, design, setups, target_width_pct, paired)
    df = width_df(components, shape.slices_per_start, series_per_start) if shape.fits else None
    return Plan(
        setups=setups,
        slices_per_start=shape.slices_per_start,
        budget_s=budget_s,
        budget_starts=shape.starts,
        budget_width_pct=shape.width_pct if shape.fits else None,
        target_width_pct=target_width_pct,
        target_starts=needed[1] if needed else None,
        target_s=needed[2] if needed else None,
        design=design,
        paired=paired,
        target_slices_per_start=needed[0] if needed else None,
        budget_width_range_pct=_width_range(shape.width_pct, df),
        budget_width_df=df,
    )


DESIGNS = (RUNS_DESIGN, TURNS_DESIGN, SEQUENTIAL_DESIGN)  # the default first: it wins ties

WidthRange = tuple[float, float] | None
# A width and the degrees of freedom its variance is known with (width_df).
WidthEstimate = tuple[float, float | None]
# A design is ranked narrower than another only at this level (one-sided F test).
RANKED_MAX_P = 0.05


def series_per_start(design: str, setups: int) -> int:
    """The ratio series one start of a calibration gives a design (width_range_pct): one
    per setup compared with the base for the paired designs, one for sequential."""
    return 1 if design == SEQUENTIAL_DESIGN else max(1, setups - 1)


def unranked_beside(best: str, estimates: dict[str, WidthEstimate]) -> tuple[str, ...]:
    """The designs a calibration cannot rank against `best`: `estimates` holds each
    fitting design's expected width and its degrees of freedom (width_df).

    A width is the square root of a block variance known with some degrees of freedom,
    so the square of two widths' ratio is an F ratio. `best` is ranked narrower than a
    design only when that ratio is too large for equal variances (one-sided, p <
    RANKED_MAX_P); with unknown degrees of freedom it is not. The designs are measured on
    the same starts, which makes their estimates move together and the test cautious.
    In a time-to-verdict bench on this 2-core host two designs predicted 1.5% and 15%
    wider than the best came out narrower: from 10 to 15 starts, that is noise."""
    from scipy.special import fdtrc  # scipy loads slowly (see width_range_pct)

    width, df = estimates[best]

    def ranked(other: float, other_df: float | None) -> bool:
        if df is None or other_df is None or width <= 0:
            return False
        return float(fdtrc(other_df, df, (other / width) ** 2)) < RANKED_MAX_P

    return tuple(
        design
        for design, (other, other_df) in estimates.items()
        if design != best and not ranked(other, other_df)
    )


@dataclass(frozen=True)
class DesignChoice:
    """design = "auto"'s choice: each design's shape in one wall-clock budget, and the
    design whose expected interval is the narrowest there.

    `ranges` says where each fitting design's width may lie, given the calibration's
    few starts (width_range_pct), and `unranked` names the designs it cannot rank
    against the chosen one (unranked_beside): the choice among those is the
    calibration's best guess, not a ranking it supports."""

    design: str
    budget_s: float
    budget_given: bool  # the experiment's own budget; else its wall time as runs
    setups: int
    shapes: dict[str, Shape]
    ranges: dict[str, WidthRange] = field(default_factory=dict)
    unranked: tuple[str, ...] = ()

    @property
    def widths(self) -> dict[str, float | None]:
        """Each design's expected width in points; None where nothing fits (JSON-safe)."""
        return {d: s.width_pct if s.fits else None for d, s in self.shapes.items()}


def choose_at_equal_time(
    components: dict[str, VarianceComponents],
    costs: Costs,
    setups: int,
    budget_s: float,
    starts: int | None = None,
) -> DesignChoice:
    """The design with the narrowest expected interval in `budget_s` of wall time.

    `components` maps each design to what calibrate measured for it: one setup start
    after start for sequential (its ratio's variance is twice theirs), the paired
    log-ratio of copies for runs and turns. Each design gets the same wall time,
    priced by block_costs, so a design that spends less on starts and dropped seconds
    measures more in it. With `starts` (the run's repeats) each design keeps them and
    fills the time with slices; without, each takes its own best shape. Exact ties
    keep the first in DESIGNS (runs, the default), and so does a budget in which no
    design fits 2 starts.
    """
    shapes = {
        design: shape_in_budget(
            components[design],
            costs,
            design,
            setups,
            budget_s,
            paired=design != SEQUENTIAL_DESIGN,
            starts=starts,
        )
        for design in DESIGNS
        if design in components
    }
    best = min(shapes.values(), key=lambda s: s.width_pct)
    estimates = {
        d: (s.width_pct, width_df(components[d], s.slices_per_start, series_per_start(d, setups)))
        for d, s in shapes.items()
        if s.fits
    }
    ranges = {d: _width_range(width, df) for d, (width, df) in estimates.items()}
    return DesignChoice(
        design=best.design if best.fits else RUNS_DESIGN,
        budget_s=budget_s,
        budget_given=starts is None,
        setups=setups,
        shapes=shapes,
        ranges=ranges,
        unranked=unranked_beside(best.design, estimates) if best.fits else (),
    )


def best_design(plans: list[Plan]) -> Plan | None:
    """The design with the narrowest interval in the budget (None: none fits 2 starts)."""
    fitting = [p for p in plans if p.budget_width_pct is not None]
    return min(fitting, key=lambda p: p.budget_width_pct or math.inf, default=None)


__all__ = [
    "RANKED_MAX_P",
    "RUNS_DESIGN",
    "SEQUENTIAL_DESIGN",
    "TURNS_DESIGN",
    "Costs",
    "Plan",
    "best_design",
    "choose_at_equal_time",
    "DESIGNS",
    "DesignChoice",
    "block_costs",
    "plan_run",
    "Shape",
    "series_per_start",
    "shape_in_budget",
    "time_for_width",
    "unranked_beside",
    "WidthEstimate",
    "WidthRange",
    "width_df",
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
