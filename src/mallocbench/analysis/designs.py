"""Which design and shape reach an interval's width in the time a run has.

A run's setups share the machine one of three ways (experiment.design): interleaved as
runs of their own, interleaved as clients taking turns, or one server at a time. From
a pilot's variance components (analysis.noise) and each design's costs, this prices the
blocks, starts and slices a target width needs, fits a shape into a budget, and picks
the design that gives the narrowest interval at equal time, when the pilot can tell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mallocbench.analysis.noise import (
    MAX_SLICES_PER_START,
    VarianceComponents,
    between_variance,
    resolvable_effect_pct,
    starts_for_width,
)

# Turns open every block with this many rounds of unmeasured turns ([durations] settle):
# with one, the base's measured turns still fell through the block, and the block
# variance of the log-ratio was 2.8 times that with four, F test p = 0.012 over 5 runs
# a side (docs/bench/2026-11-29-settle.md).
DEFAULT_SETTLE_ROUNDS = 4

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
    # The rounds of settle turns a turns block opens with: the planned run's, not a cost
    # measured, but what prices them (a calibration stored without it: the default).
    settle_rounds: int = DEFAULT_SETTLE_ROUNDS


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
    or each turn a turn of connected clients after `costs.settle_rounds` rounds of
    settle turns, one turn of every setup a round.
    """
    per_server = costs.start_s + costs.warmup_s + costs.stop_s
    if design == SEQUENTIAL_DESIGN:
        fixed = setups * (per_server + 1.0)
        return fixed, setups * max(costs.slice_wall_s - 1.0, 1.0)
    fixed = setups * per_server
    if design == TURNS_DESIGN:
        settle = costs.settle_rounds * setups * costs.turn_s
        return fixed + settle, setups * costs.turn_s
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
    msb = msw + per_group * between_variance(components)
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
]
