"""A calibration's statistics, from what it measured as plain numbers: the noise at each
level, the paired designs' ratio components (their between-start variance floored by the
level both designs share, when their starts agree), a plan per design, and the design
with the narrowest interval in the budget with those it cannot be ranked against.

calibrate/ measures and hands the numbers over; every estimate is made here, once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mallocbench.analysis import designs, noise
from mallocbench.analysis.designs import RUNS_DESIGN, SEQUENTIAL_DESIGN, TURNS_DESIGN, Costs, Plan
from mallocbench.analysis.noise import SharedStart, VarianceComponents


@dataclass(frozen=True)
class Measured:
    """What a calibration measured, as numbers: per start its slices' QPS and its
    per-second QPS; the ratio series of copy a to each other copy, as runs and as turns
    (one series per start and copy); what each level costs; the plan's setting."""

    slice_qps: list[list[float]]
    seconds: list[list[float]]
    run_series: list[list[float]]
    turn_series: list[list[float]]
    costs: Costs
    setups: int  # the setups a block compares
    copies: int  # copies up at once per start
    budget_s: float
    target_ci_pct: float


@dataclass
class CalibrationAnalysis:
    second_cv_pct: float | None  # None: no series long enough
    aggregation_curve: list[tuple[int, float]]  # (k seconds, CV % of their means)
    components: VarianceComponents  # one setup, start after start
    plan: Plan  # the default design's, from its paired components when measured
    # Of the log-ratio copy a / another copy, per slice (or turn) and per start; None
    # without pairs.
    runs_ratio: VarianceComponents | None = None
    turns_ratio: VarianceComponents | None = None
    # Each paired design's own between-start variance, and the pooled level they share
    # (None unless both designs were measured and the test of agreement could be made).
    own_start_var: dict[str, float | None] = field(default_factory=dict)
    shared: SharedStart | None = None
    designs: list[Plan] = field(default_factory=list)
    # Per design planned: the CV of a ratio per slice (or turn) and per start.
    ratio_cvs: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    best: str | None = None  # the design with the narrowest interval in the budget
    unranked: list[str] = field(default_factory=list)  # not reliably wider than best


def _ratio_components(ratios: list[list[float]]) -> VarianceComponents | None:
    if len(ratios) < 2 or not any(len(r) >= 2 for r in ratios):
        return None
    return noise.variance_components(ratios)


def shared_start(
    runs: VarianceComponents | None,
    turns: VarianceComponents | None,
    run_series: list[list[float]],
    turn_series: list[list[float]],
) -> tuple[VarianceComponents | None, VarianceComponents | None, SharedStart | None]:
    """Runs and turns with a between-start variance no lower than the one pooled over
    both, when both were measured and their starts' levels agree; the pooled estimate
    and its agreement test (None without both designs).

    Both designs measure the same copies on the same starts, and a start's level mostly
    shows in both alike (their per-start means agreed on this host, e.g. -0.21 and
    -0.12 on the log scale for the start both put lowest). Turns alone, 10 short and
    scattered turns per start, called it 0 from 3 starts where 20 turns A/A runs found
    a CV of 10%, and a plan on 0 promised turns an interval 1.5 times narrower than they
    reached: the pooled level raises such an estimate. But a design's starts can also
    vary in a way of their own on top of the shared level (a start whose turns ran copy
    a at 0.64 of copy b while its runs put them level), so the pooled level is a floor,
    never a replacement: one calibration's turns alone gave 0.0053 beside a pooled
    0.0009 (their runs alone 0.0001), and a plan on the pooled value would have
    promised turns a 12.5-point interval where their own gave 16.9. When the starts'
    levels disagree outright, each design keeps its own.
    """
    if runs is None or turns is None:
        return runs, turns, None
    shared = noise.shared_start_var([run_series, turn_series])
    if shared is None or shared.agreement_p is None:
        return runs, turns, None
    if shared.agreement_p < noise.SHARED_START_MIN_P:
        return runs, turns, shared

    def floored(own: VarianceComponents) -> VarianceComponents:
        return dataclasses.replace(own, between_var=max(own.between_var or 0.0, shared.variance))

    return floored(runs), floored(turns), shared


def starts_agree(shared: SharedStart) -> bool:
    """Whether the designs' starts agreed, so each is planned with the pooled floor."""
    return (shared.agreement_p or 0.0) >= noise.SHARED_START_MIN_P


def design_plans(found: CalibrationAnalysis, m: Measured) -> list[Plan]:
    """A plan per design: sequential from one setup's components (its starts are
    independent), runs and turns from the paired ratio components when measured."""
    plans = [
        designs.plan_run(
            found.components, m.costs, m.setups, m.budget_s, m.target_ci_pct, SEQUENTIAL_DESIGN
        )
    ]
    for design, ratio in ((RUNS_DESIGN, found.runs_ratio), (TURNS_DESIGN, found.turns_ratio)):
        if ratio is not None:
            plans.append(
                designs.plan_run(
                    ratio,
                    m.costs,
                    m.setups,
                    m.budget_s,
                    m.target_ci_pct,
                    design,
                    paired=True,
                    series_per_start=max(1, m.copies - 1),
                )  # fmt: skip
            )
    return plans


def ratio_cv_pct(found: CalibrationAnalysis, plan: Plan) -> tuple[float, float | None] | None:
    """The CV of a ratio setup / base under the plan's design, per slice (or turn) and
    per start; None when that design was not measured."""
    components = {
        SEQUENTIAL_DESIGN: found.components,
        RUNS_DESIGN: found.runs_ratio,
        TURNS_DESIGN: found.turns_ratio,
    }[plan.design]
    if components is None:
        return None
    scale = 1.0 if plan.paired else 2.0  # the ratio's variance, not one setup's
    start = components.between_var
    return (
        noise.cv_pct_from_log_var(scale * components.within_var),
        None if start is None else noise.cv_pct_from_log_var(scale * start),
    )


def cv_pct(variance: float | None) -> float | None:
    """A log-scale variance as the CV it means, in percent."""
    return None if variance is None else noise.cv_pct_from_log_var(variance)


def analyze_calibration(m: Measured) -> CalibrationAnalysis:
    components = noise.variance_components(m.slice_qps)
    # Each copy's series is a draw of what a setup's ratio to its base sees in a block;
    # they share copy a, so their degrees of freedom overstate what they hold a little.
    runs_own, turns_own = _ratio_components(m.run_series), _ratio_components(m.turn_series)
    runs_ratio, turns_ratio, shared = shared_start(runs_own, turns_own, m.run_series, m.turn_series)
    # With the runs design's own paired components, the plan needs no guess of how much
    # of the noise a block shares.
    plan = designs.plan_run(
        runs_ratio or components, m.costs, m.setups, m.budget_s, m.target_ci_pct,
        paired=runs_ratio is not None,
    )  # fmt: skip
    found = CalibrationAnalysis(
        second_cv_pct=next(iter(noise.pooled_aggregation_curve(m.seconds, (1,))), (1, None))[1],
        aggregation_curve=noise.pooled_aggregation_curve(m.seconds),
        components=components,
        plan=plan,
        runs_ratio=runs_ratio,
        turns_ratio=turns_ratio,
    )
    if shared is not None and runs_own is not None and turns_own is not None:
        found.own_start_var = {
            RUNS_DESIGN: runs_own.between_var,
            TURNS_DESIGN: turns_own.between_var,
        }
        found.shared = shared
    found.designs = design_plans(found, m)
    found.ratio_cvs = {p.design: cvs for p in found.designs if (cvs := ratio_cv_pct(found, p))}
    best = designs.best_design(found.designs)
    found.best = best.design if best is not None and len(found.designs) > 1 else None
    if found.best is not None:
        estimates = {
            p.design: (p.budget_width_pct, p.budget_width_df)
            for p in found.designs
            if p.budget_width_pct is not None
        }
        found.unranked = list(designs.unranked_beside(found.best, estimates))
    return found


__all__ = [
    "CalibrationAnalysis",
    "Measured",
    "analyze_calibration",
    "cv_pct",
    "design_plans",
    "ratio_cv_pct",
    "shared_start",
    "starts_agree",
]
