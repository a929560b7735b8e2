"""What a calibration measured, and what follows from it: the noise at each level, the
costs, the interference met and a plan per design (analysis.noise does the statistics).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from mallocbench.analysis import designs, noise
from mallocbench.analysis.designs import (
    RUNS_DESIGN,
    SEQUENTIAL_DESIGN,
    TURNS_DESIGN,
    Costs,
    Plan,
    best_design,
    plan_run,
)
from mallocbench.calibrate.target import Target
from mallocbench.run.experiment import Experiment

# Above this median share of the CPU used by other processes, the numbers measure the
# interference as much as the machine: said in words beside them.
BUSY_SHARE = 0.10
# A ratio of two copies of one setup this far from 1 is a copy that nearly stopped: with
# the tests running in parallel, one copy's slice ran at 0.06 of the other's and a turn
# at 183 times. Two copies on a quiet host stayed within 0.5-1.7 per turn.
STALL_RATIO = 4.0


@dataclass
class SliceResult:
    qps: float  # queries / seconds over the kept seconds
    seconds: list[float]  # per-second QPS, the first (connection start-up) dropped
    wall_s: float  # the whole sysbench run, dropped second and start-up included
    interference: dict[str, float]


@dataclass
class StartResult:
    start_s: float  # copy the datadir, start the server, warm its cache
    warmup_s: float  # the step's warmup until steady
    steady: bool
    slices: list[SliceResult] = field(default_factory=list)
    stop_s: float = 0.0  # stop the server, remove its datadir

    @property
    def seconds(self) -> list[float]:
        return [qps for s in self.slices for qps in s.seconds]


@dataclass
class PairResult:
    """Copies of the setup up at once (two, or as many as the experiment has setups),
    compared with themselves: the ratio of copy a to each other copy per round, with
    slices as separate sysbench runs (design runs) and then with their clients taking
    turns (design turns). No change at all, so every spread of these ratios is noise as
    the blocked designs see it, with as many servers sharing the machine as a block has."""

    start_s: float  # every copy started, caches warmed
    # One series per copy after a: copy a / that copy, a value per round.
    run_ratios: list[list[float]] = field(default_factory=list)
    turn_ratios: list[list[float]] = field(default_factory=list)
    turns_wall_s: float = 0.0  # the turns phase, lead and settle turns included
    warmups_s: list[float] = field(default_factory=list)  # each copy's step warmup

    @property
    def copies(self) -> int:
        return len(self.warmups_s)


def compared_setups(experiment: Experiment) -> int:
    """The setups a block of the experiment compares: its own, at least two (a base and
    one other), so one-setup calibrations plan for a comparison too. Calibrate starts
    this many copies at once."""
    return max(2, len(experiment.setups))


DEFAULT_STARTS = 5
START_SERIES = 10  # ratio series (starts x copies after a) a calibration with pairs aims at


def default_starts(copies: int) -> int:
    """Starts for a calibration of `copies` copies up at once (1: no pairs): enough for
    START_SERIES series of copy a over another copy, and never fewer than DEFAULT_STARTS."""
    if copies < 2:
        return DEFAULT_STARTS
    return max(DEFAULT_STARTS, -(-START_SERIES // (copies - 1)))


def copy_name(index: int) -> str:
    """Copy 0 is a, the base's stand-in; the others b, c, ..."""
    return chr(ord("a") + index)


def _median(values: list[float]) -> float:
    # Never empty: at least 2 starts of at least 2 slices each are measured.
    return float(statistics.median(values))


@dataclass
class InterferenceSummary:
    """Median and maximum over the slices of each interference measure (None: never
    measured). Shares are of the machine's CPU time, from 0 to 1."""

    median_other_cpu_share: float | None
    max_other_cpu_share: float | None
    median_harness_cpu_share: float | None
    max_harness_cpu_share: float | None
    median_steal_share: float | None
    max_steal_share: float | None
    median_load_avg_1m: float | None
    max_load_avg_1m: float | None


def _interference_summary(starts: list[StartResult]) -> InterferenceSummary:
    per_slice = [s.interference for start in starts for s in start.slices]

    def spread(key: str) -> tuple[float | None, float | None]:
        found = [i[key] for i in per_slice if key in i]
        return (_median(found), max(found)) if found else (None, None)

    other, harness, steal, load = (
        spread(key)
        for key in ("other_cpu_share", "harness_cpu_share", "steal_share", "load_avg_1m")
    )
    return InterferenceSummary(
        median_other_cpu_share=other[0],
        max_other_cpu_share=other[1],
        median_harness_cpu_share=harness[0],
        max_harness_cpu_share=harness[1],
        median_steal_share=steal[0],
        max_steal_share=steal[1],
        median_load_avg_1m=load[0],
        max_load_avg_1m=load[1],
    )


@dataclass
class CalibrationSummary:
    """Everything the terminal table and --json show: what was calibrated, the noise at
    each level, what each level costs, the interference met and the plan that follows."""

    experiment: str
    setup: str
    engine: str
    step: str  # its label
    threads: int
    slice_s: float
    second_cv_pct: float | None  # None: no series long enough
    aggregation_curve: list[tuple[int, float]]  # (k seconds, CV % of their means)
    components: noise.VarianceComponents
    costs: Costs
    interference: InterferenceSummary
    plan: Plan
    starts: list[StartResult]
    notes: list[str] = field(default_factory=list)
    pairs: list[PairResult] = field(default_factory=list)
    # Of the log-ratio copy a / another copy, per slice (or turn) and per start; None
    # without pairs.
    runs_ratio: noise.VarianceComponents | None = None
    turns_ratio: noise.VarianceComponents | None = None
    turn_s: float | None = None
    designs: list[Plan] = field(default_factory=list)  # one per design, for `setups`
    best: str | None = None  # the design with the narrowest interval in the budget
    # The designs this calibration cannot rank against best (designs.unranked_beside).
    unranked: list[str] = field(default_factory=list)
    # Each paired design's own between-start variance, beside the one runs_ratio and
    # turns_ratio carry (pooled over both by shared_start_var when their starts agree).
    own_start_var: dict[str, float | None] = field(default_factory=dict)
    # Of runs' and turns' per-start levels agreeing (noise.SharedStart); None unmeasured.
    start_agreement_p: float | None = None
    # Per design planned: the CV of a ratio per slice (or turn) and per start (ratio_cv_pct).
    ratio_cvs: dict[str, tuple[float, float | None]] = field(default_factory=dict)

    @property
    def copies(self) -> int:
        """Copies up at once per start (2 without pairs: what a comparison has)."""
        return max((p.copies for p in self.pairs), default=2)

    def to_dict(self) -> dict[str, Any]:
        # The components' CVs are properties, which asdict leaves out.
        return {
            **asdict(self),
            "components": self.components.to_dict(),
            "runs_ratio": self.runs_ratio.to_dict() if self.runs_ratio else None,
            "turns_ratio": self.turns_ratio.to_dict() if self.turns_ratio else None,
        }

    def ratio_cv_pct(self, plan: Plan) -> tuple[float, float | None] | None:
        """The CV of a ratio setup / base under the plan's design, per slice (or turn)
        and per start; None when that design was not measured. Summarize keeps each
        design's in ratio_cvs, which the reports read."""
        components = {
            SEQUENTIAL_DESIGN: self.components,
            RUNS_DESIGN: self.runs_ratio,
            TURNS_DESIGN: self.turns_ratio,
        }[plan.design]
        if components is None:
            return None
        scale = 1.0 if plan.paired else 2.0  # the ratio's variance, not one setup's
        start = components.between_var
        return (
            noise.cv_pct_from_log_var(scale * components.within_var),
            None if start is None else noise.cv_pct_from_log_var(scale * start),
        )


def _ratio_components(ratios: list[list[float]]) -> noise.VarianceComponents | None:
    if len(ratios) < 2 or not any(len(r) >= 2 for r in ratios):
        return None
    return noise.variance_components(ratios)


def _shared_start(
    runs: noise.VarianceComponents | None,
    turns: noise.VarianceComponents | None,
    run_series: list[list[float]],
    turn_series: list[list[float]],
) -> tuple[
    noise.VarianceComponents | None, noise.VarianceComponents | None, noise.SharedStart | None
]:
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

    def floored(own: noise.VarianceComponents) -> noise.VarianceComponents:
        return dataclasses.replace(own, between_var=max(own.between_var or 0.0, shared.variance))

    return floored(runs), floored(turns), shared


def _shared_note(own: dict[str, float | None], shared: noise.SharedStart) -> str:
    def cv(variance: float | None) -> str:
        return "n/a" if variance is None else f"{noise.cv_pct_from_log_var(variance):.1f}%"

    p = shared.agreement_p or 0.0
    alone = f"alone, runs gave {cv(own[RUNS_DESIGN])} and turns {cv(own[TURNS_DESIGN])}"
    if p < noise.SHARED_START_MIN_P:
        return (
            f"per start, runs and turns keep their own CVs ({alone}): their starts' levels "
            f"differed more than their noise allows (p = {p:.3f}), so turns' starts vary "
            "in a way of their own on this host"
        )
    return (
        f"per start, runs and turns are planned with their own CVs or the one pooled over "
        f"both ({cv(shared.variance)}), whichever is larger, as they measure the same "
        f"starts and their levels agreed (p = {p:.2f}); {alone}"
    )


def design_plans(
    summary: CalibrationSummary, budget_s: float, target_width_pct: float
) -> list[Plan]:
    """A plan per design: sequential from one setup's components (its starts are
    independent), runs and turns from the paired ratio components when measured."""
    setups, costs = summary.plan.setups, summary.costs
    plans = [
        plan_run(summary.components, costs, setups, budget_s, target_width_pct, SEQUENTIAL_DESIGN)
    ]
    for design, ratio in ((RUNS_DESIGN, summary.runs_ratio), (TURNS_DESIGN, summary.turns_ratio)):
        if ratio is not None:
            plans.append(
                plan_run(
                    ratio,
                    costs,
                    setups,
                    budget_s,
                    target_width_pct,
                    design,
                    paired=True,
                    series_per_start=max(1, summary.copies - 1),
                )
            )
    return plans


def summarize(
    experiment: Experiment,
    target: Target,
    starts: list[StartResult],
    options: dict[str, Any],
    pairs: list[PairResult] | None = None,
) -> CalibrationSummary:
    """Everything the terminal table and --json show."""
    components = noise.variance_components([[s.qps for s in start.slices] for start in starts])
    pairs = pairs or []
    rounds = options.get("turns", 0) + 1  # a settle turn each, then the rounds
    costs = Costs(
        start_s=_median([s.start_s for s in starts]),
        # Every copy warms as a block's server does: twice the samples of a noisy cost.
        warmup_s=_median([w for p in pairs for w in p.warmups_s] or [s.warmup_s for s in starts]),
        slice_wall_s=_median([sl.wall_s for s in starts for sl in s.slices]),
        turn_s=_median([p.turns_wall_s / (p.copies * rounds) for p in pairs]) if pairs else 0.0,
        stop_s=_median([s.stop_s for s in starts]),
    )
    # Each copy's series is a draw of what a setup's ratio to its base sees in a block;
    # they share copy a, so their degrees of freedom overstate what they hold a little.
    run_series = [r for p in pairs for r in p.run_ratios]
    turn_series = [r for p in pairs for r in p.turn_ratios]
    runs_own, turns_own = _ratio_components(run_series), _ratio_components(turn_series)
    runs_ratio, turns_ratio, shared = _shared_start(runs_own, turns_own, run_series, turn_series)
    summary = _summary(experiment, target, starts, options, components, costs, runs_ratio)
    summary.pairs = pairs
    summary.runs_ratio = runs_ratio
    summary.turns_ratio = turns_ratio
    if shared is not None and runs_own is not None and turns_own is not None:
        summary.own_start_var = {
            RUNS_DESIGN: runs_own.between_var,
            TURNS_DESIGN: turns_own.between_var,
        }
        summary.start_agreement_p = shared.agreement_p
        summary.notes.append(_shared_note(summary.own_start_var, shared))
    stalled = _stall_note(pairs)
    if stalled is not None:
        summary.notes.append(stalled)
    summary.turn_s = options.get("turn_s") if pairs else None
    summary.designs = design_plans(summary, options["budget_s"], options["target_ci_pct"])
    summary.ratio_cvs = {
        plan.design: cvs for plan in summary.designs if (cvs := summary.ratio_cv_pct(plan))
    }
    best = best_design(summary.designs)
    summary.best = best.design if best is not None and len(summary.designs) > 1 else None
    if summary.best is not None:
        estimates = {
            p.design: (p.budget_width_pct, p.budget_width_df)
            for p in summary.designs
            if p.budget_width_pct is not None
        }
        summary.unranked = list(designs.unranked_beside(summary.best, estimates))
    return summary


def _summary(
    experiment: Experiment,
    target: Target,
    starts: list[StartResult],
    options: dict[str, Any],
    components: noise.VarianceComponents,
    costs: Costs,
    runs_ratio: noise.VarianceComponents | None,
) -> CalibrationSummary:
    series = [start.seconds for start in starts]
    setups = compared_setups(experiment)
    interference = _interference_summary(starts)
    # With the runs design's own paired components, the plan needs no guess of how much
    # of the noise a block shares.
    plan_components = runs_ratio or components
    return CalibrationSummary(
        experiment=experiment.name,
        setup=target.setup.name,
        engine=target.engine.name,
        step=target.step.label,
        threads=target.threads,
        slice_s=options["slice_s"],
        second_cv_pct=next(iter(noise.pooled_aggregation_curve(series, (1,))), (1, None))[1],
        aggregation_curve=noise.pooled_aggregation_curve(series),
        components=components,
        costs=costs,
        interference=interference,
        plan=plan_run(
            plan_components,
            costs,
            setups,
            options["budget_s"],
            options["target_ci_pct"],
            paired=runs_ratio is not None,
        ),
        starts=starts,
        notes=_notes(experiment, starts, interference, components),
    )


def _stall_note(pairs: list[PairResult]) -> str | None:
    """Says where a copy nearly stopped (a ratio beyond STALL_RATIO either way): those
    ratios stay in the components, as a run's stalled block stays in its interval, and
    widen every prediction; None when no copy did."""
    found = [
        (start, design, copy_name(k + 1), ratio)
        for start, pair in enumerate(pairs, 1)
        for design, series in ((RUNS_DESIGN, pair.run_ratios), (TURNS_DESIGN, pair.turn_ratios))
        for k, ratios in enumerate(series)
        for ratio in ratios
        if not 1 / STALL_RATIO <= ratio <= STALL_RATIO
    ]
    if not found:
        return None
    start, design, copy, ratio = max(found, key=lambda f: abs(math.log(f[3])))
    piece = "slice" if design == RUNS_DESIGN else "turn"
    more = f" ({len(found)} such ratios in all)" if len(found) > 1 else ""
    return (
        f"a copy nearly stopped: in start {start}, copy a ran at {ratio:.3g} times copy "
        f"{copy} in a {piece}{more}. Those ratios are kept in the components, which widens "
        "every predicted width; another load on this machine (a test suite, a build) is "
        "the usual cause: calibrate again when it is quiet"
    )


def _notes(
    experiment: Experiment,
    starts: list[StartResult],
    interference: InterferenceSummary,
    components: noise.VarianceComponents,
) -> list[str]:
    notes = []
    busy = interference.median_other_cpu_share
    if busy is not None and busy > BUSY_SHARE:
        notes.append(
            f"other processes used {100 * busy:.0f}% of the machine's CPU time (median per "
            "slice) while measuring: these numbers include that interference; calibrate "
            "again on a quiet machine to see its own noise"
        )
    if components.between_var == 0:
        notes.append(
            "the starts differed no more than their slices predict: the between-start "
            "variance is estimated as 0, and more starts would refine that"
        )
    if len(experiment.setups) < 2:
        notes.append("the experiment has one setup: the plan assumes two (a setup and its base)")
    unsteady = sum(1 for s in starts if not s.steady)
    if unsteady and experiment.warmup_s > 0:
        notes.append(
            f"{unsteady} of {len(starts)} warmups reached max_warmup without a steady state: "
            "the slices may still include the ramp"
        )
    return notes


__all__ = [
    "CalibrationSummary",
    "InterferenceSummary",
    "PairResult",
    "SliceResult",
    "StartResult",
    "compared_setups",
    "copy_name",
    "design_plans",
    "summarize",
]
