"""What a calibration measured, and what follows from it: the noise at each level, the
costs, the interference met and a plan per design (analysis.calibration does the
statistics), and which notes apply, with their numbers (report/calibrate.py words them).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from mallocbench.analysis.calibration import Measured, analyze_calibration, cv_pct, starts_agree
from mallocbench.analysis.designs import RUNS_DESIGN, TURNS_DESIGN, Costs, Plan
from mallocbench.analysis.noise import VarianceComponents
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


@dataclass(frozen=True)
class BusyNote:
    """Other processes used this share of the machine's CPU (median per slice)."""

    other_cpu_share: float


@dataclass(frozen=True)
class NoStartVarianceNote:
    """The starts differed no more than their slices predict: between-start variance 0."""


@dataclass(frozen=True)
class OneSetupNote:
    """The experiment has one setup; the plan assumes two."""


@dataclass(frozen=True)
class UnsteadyNote:
    """Warmups that reached max_warmup without a steady state."""

    unsteady: int
    starts: int


@dataclass(frozen=True)
class SharedStartNote:
    """How runs and turns were planned per start: each with its own CV, or the larger of
    its own and the one pooled over both (when their starts' levels agreed)."""

    agreed: bool
    agreement_p: float
    runs_cv_pct: float | None  # each design's own, alone
    turns_cv_pct: float | None
    pooled_cv_pct: float | None


@dataclass(frozen=True)
class StallNote:
    """A copy nearly stopped: the ratio furthest from 1 beyond STALL_RATIO, where it was,
    and how many such ratios there were."""

    start: int  # from 1
    design: str
    copy: str
    ratio: float
    count: int


CalibrationNote = (
    BusyNote | NoStartVarianceNote | OneSetupNote | UnsteadyNote | SharedStartNote | StallNote
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
    components: VarianceComponents
    costs: Costs
    interference: InterferenceSummary
    plan: Plan
    starts: list[StartResult]
    notes: list[CalibrationNote] = field(default_factory=list)
    pairs: list[PairResult] = field(default_factory=list)
    # Of the log-ratio copy a / another copy, per slice (or turn) and per start; None
    # without pairs.
    runs_ratio: VarianceComponents | None = None
    turns_ratio: VarianceComponents | None = None
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
    # Per design planned: the CV of a ratio per slice (or turn) and per start.
    ratio_cvs: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    # What the servers' sessions said while measuring, in their own words.
    session_notes: list[str] = field(default_factory=list)

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


def summarize(
    experiment: Experiment,
    target: Target,
    starts: list[StartResult],
    options: dict[str, Any],
    pairs: list[PairResult] | None = None,
) -> CalibrationSummary:
    """Everything the terminal table and --json show."""
    pairs = pairs or []
    settle = experiment.settle_rounds  # the turns phase's settle rounds, then its rounds
    rounds = options.get("turns", 0) + settle
    costs = Costs(
        start_s=_median([s.start_s for s in starts]),
        # Every copy warms as a block's server does: twice the samples of a noisy cost.
        warmup_s=_median([w for p in pairs for w in p.warmups_s] or [s.warmup_s for s in starts]),
        slice_wall_s=_median([sl.wall_s for s in starts for sl in s.slices]),
        turn_s=_median([p.turns_wall_s / (p.copies * rounds) for p in pairs]) if pairs else 0.0,
        stop_s=_median([s.stop_s for s in starts]),
        settle_rounds=settle,
    )
    found = analyze_calibration(
        Measured(
            slice_qps=[[s.qps for s in start.slices] for start in starts],
            seconds=[start.seconds for start in starts],
            run_series=[r for p in pairs for r in p.run_ratios],
            turn_series=[r for p in pairs for r in p.turn_ratios],
            costs=costs,
            setups=compared_setups(experiment),
            copies=max((p.copies for p in pairs), default=2),
            budget_s=options["budget_s"],
            target_ci_pct=options["target_ci_pct"],
        )
    )
    interference = _interference_summary(starts)
    summary = CalibrationSummary(
        experiment=experiment.name,
        setup=target.setup.name,
        engine=target.engine.name,
        step=target.step.label,
        threads=target.threads,
        slice_s=options["slice_s"],
        second_cv_pct=found.second_cv_pct,
        aggregation_curve=found.aggregation_curve,
        components=found.components,
        costs=costs,
        interference=interference,
        plan=found.plan,
        starts=starts,
        notes=_notes(experiment, starts, interference, found.components),
        pairs=pairs,
        runs_ratio=found.runs_ratio,
        turns_ratio=found.turns_ratio,
        turn_s=options.get("turn_s") if pairs else None,
        designs=found.designs,
        best=found.best,
        unranked=found.unranked,
        own_start_var=found.own_start_var,
        start_agreement_p=found.shared.agreement_p if found.shared is not None else None,
        ratio_cvs=found.ratio_cvs,
    )
    if found.shared is not None:
        own = found.own_start_var
        summary.notes.append(
            SharedStartNote(
                agreed=starts_agree(found.shared),
                agreement_p=found.shared.agreement_p or 0.0,
                runs_cv_pct=cv_pct(own[RUNS_DESIGN]),
                turns_cv_pct=cv_pct(own[TURNS_DESIGN]),
                pooled_cv_pct=cv_pct(found.shared.variance),
            )
        )
    stalled = _stall_note(pairs)
    if stalled is not None:
        summary.notes.append(stalled)
    return summary


def _stall_note(pairs: list[PairResult]) -> StallNote | None:
    """Where a copy nearly stopped (a ratio beyond STALL_RATIO either way): those ratios
    stay in the components, as a run's stalled block stays in its interval, and widen
    every prediction; None when no copy did."""
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
    return StallNote(start, design, copy, ratio, len(found))


def _notes(
    experiment: Experiment,
    starts: list[StartResult],
    interference: InterferenceSummary,
    components: VarianceComponents,
) -> list[CalibrationNote]:
    notes: list[CalibrationNote] = []
    busy = interference.median_other_cpu_share
    if busy is not None and busy > BUSY_SHARE:
        notes.append(BusyNote(busy))
    if components.between_var == 0:
        notes.append(NoStartVarianceNote())
    if len(experiment.setups) < 2:
        notes.append(OneSetupNote())
    unsteady = sum(1 for s in starts if not s.steady)
    if unsteady and experiment.warmup_s > 0:
        notes.append(UnsteadyNote(unsteady, len(starts)))
    return notes


__all__ = [
    "BusyNote",
    "CalibrationNote",
    "CalibrationSummary",
    "InterferenceSummary",
    "PairResult",
    "SliceResult",
    "StartResult",
    "compared_setups",
    "copy_name",
    "NoStartVarianceNote",
    "OneSetupNote",
    "SharedStartNote",
    "StallNote",
    "summarize",
    "UnsteadyNote",
]
