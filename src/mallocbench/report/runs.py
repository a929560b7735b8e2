"""What `run` says around its reports, and what `report`, `runs` and `steps` list: a dry
run's plan, the long-run warning, how a run ended (the files written, the notes, adaptive
repetition's outcome, an interruption or an abort), a stored run that is not finished,
the runs of a store and the step catalogue. The commands hand the values over through
report.formats; every sentence is here.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from mallocbench.analysis.criteria import DEFAULT_PRIORITIES
from mallocbench.analysis.designs import DEFAULT_SETTLE_ROUNDS
from mallocbench.model.metadata import Durations, ReplayRecord
from mallocbench.report.replay import listing
from mallocbench.report.words import wide_cell_text
from mallocbench.run import experiment as experiment_mod
from mallocbench.run import planning
from mallocbench.run.experiment import Decision, Experiment, PlannedSession
from mallocbench.run.options import RunOutcome
from mallocbench.units import durations, mib, percent
from mallocbench.workloads.catalogue import CATALOGUE, GROUPS, parse_steps

LONG_RUN_S = 3600


def duration_text(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= LONG_RUN_S else f"{seconds / 60:.1f} min"


def decision_text(decision: Decision) -> str:
    """The [decision] table as the recommendation will weigh it."""
    parts = [
        "priorities "
        + ", ".join(decision.priorities or DEFAULT_PRIORITIES)
        + ("" if decision.priorities else " (the default)")
    ]
    if decision.memory_budget_bytes is not None:
        parts.append(f"memory budget {mib(decision.memory_budget_bytes)}")
    parts += [f"max loss {name} {percent(f)}" for name, f in decision.max_loss.items()]
    return "; ".join(parts)


def design_line(experiment: Experiment) -> str:
    problem = planning.concurrency_problem(experiment)
    if experiment.design == experiment_mod.SEQUENTIAL:
        return "design sequential: one server at a time"
    if problem is not None:
        return f"design sequential (interleaved asked, but {problem})"
    slices = planning.slices_per_cell(experiment)
    kind = "turn" if experiment.alternate == experiment_mod.TURNS else "slice"
    settle = experiment.settle_rounds
    after = (
        f", after {settle} unmeasured rounds of turns"
        if kind == "turn" and settle != DEFAULT_SETTLE_ROUNDS
        else ""
    )
    return (
        f"design interleaved: {len(experiment.setups)} servers up at once per block; each "
        f"cell is {slices} {kind}(s) of {experiment.slice_s:g} s alternating between them"
        f"{after}"
    )


def memory_caps_line(experiment: Experiment) -> str | None:
    """The setups' memory caps, as a plan lists them (run's and soak's alike)."""
    capped = [s for s in experiment.setups if s.memory_limit_bytes is not None]
    if not capped:
        return None
    return "  memory caps (on each server's cgroup charge): " + ", ".join(
        f"{s.name} {mib(s.memory_limit_bytes)}" for s in capped
    )


@dataclass(frozen=True)
class Adaptive:
    """--target-ci as a run was given it: the most repeats, the width aimed at, the time."""

    max_repeats: int
    target_pct: float
    budget_s: float


@dataclass(frozen=True)
class Plan:
    """A dry run: the experiment, its sessions and each cell's cost; what a cluster
    would do with it (the dispatcher's own line), and what --target-ci adds."""

    experiment: Experiment
    sessions: list[PlannedSession]
    per_cell_s: float
    dispatch: str | None = None
    adaptive: Adaptive | None = None


def _step_lines(experiment: Experiment) -> list[str]:
    out = []
    for spec in experiment.step_specs:
        expanded = [step.label for step in parse_steps([spec])]
        if len(expanded) == 1 and expanded[0].split()[0] == spec.split()[0]:
            out.append(f"             {expanded[0]}")
        else:
            out.append(f"             {spec} -> {len(expanded)} steps: {', '.join(expanded)}")
    return out


def plan_text(plan: Plan) -> str:
    """The plan on one screen: what expands to what, and what it costs."""
    experiment = plan.experiment
    cells = sum(len(s.cells) for s in plan.sessions)
    seconds = cells * plan.per_cell_s
    setups = [s.name + (" (base)" if s.name == experiment.base else "") for s in experiment.setups]
    engines = ", ".join(e.name for e in experiment.engines)
    wording = durations(
        Durations(
            warmup_s=experiment.warmup_s,
            max_warmup_s=experiment.max_warmup_s,
            step_s=experiment.duration_s,
        )
    )
    lines = [
        f"{experiment.name}: {cells} cells in {len(plan.sessions)} server sessions, about "
        f"{duration_text(seconds)} of measuring (plus server starts)",
        f"  setups   {len(setups)}: {', '.join(setups)}",
        f"  engines  {len(experiment.engines)}: {engines}",
        f"  steps    {len(experiment.steps)}:",
        *_step_lines(experiment),
        f"  threads  {', '.join(str(t) for t in experiment.threads)}",
        f"  repeats  {experiment.repeats} (blocks: a server start of every setup each)",
        f"  cell     {wording}; about {plan.per_cell_s:.0f} s each",
        f"  {design_line(experiment)}",
    ]
    if experiment.decision is not None:
        lines.append(f"  decision {decision_text(experiment.decision)}")
    caps = memory_caps_line(experiment)
    if caps is not None:
        lines.append(caps)
    if seconds >= LONG_RUN_S:
        lines.append(
            "note: more than an hour; fewer steps or thread counts, or --set "
            "durations.step=N, shorten it"
        )
    if plan.dispatch is not None:
        lines.append(plan.dispatch)
    if plan.adaptive is not None:
        a = plan.adaptive
        lines.append(
            f"then up to {a.max_repeats} repeats of the cells whose relative QPS interval is "
            f"wider than {a.target_pct:g}%, within {a.budget_s / 60:g} min in all"
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Start:
    """A run about to start: its size, for the banner and the long-run warning."""

    experiment: str
    cells: int
    sessions: int
    per_cell_s: float
    out_dir: Path

    @property
    def seconds(self) -> float:
        return self.cells * self.per_cell_s


def print_start(start: Start, console: Console) -> None:
    """A run that plans an hour or more says so, with how to shorten it."""
    if start.seconds >= LONG_RUN_S:
        console.print(
            f"[yellow]note[/]: this run plans about {duration_text(start.seconds)} of "
            "measuring; --dry-run shows where it goes, --set steps=[...] or --set "
            "durations.step=N shortens it"
        )


def banner(start: Start) -> str:
    return (
        f"[bold]{start.experiment}[/]: {start.cells} cells in {start.sessions} sessions, "
        f"about {start.seconds / 60:.1f} min; results in {start.out_dir}"
    )


@dataclass
class End:
    """How a run ended, for standard error: the files written (none: no cell measured),
    adaptive repetition's outcome, the notes to repeat there, and what stopped it."""

    outcome: RunOutcome
    store_label: str
    written: list[Path] = field(default_factory=list)
    target_pct: float | None = None
    # The notes went to standard output with the report already when both streams are
    # one place: not said twice.
    notes_shown: bool = True

    @property
    def cells(self) -> int:
        return len(self.outcome.result.cells)


def print_end(end: End, console: Console) -> None:
    outcome = end.outcome
    if not outcome.result.cells:
        # Empty reports would read like a finished comparison.
        console.print("no cell was measured: no report written")
    elif end.written:
        console.print("wrote " + ", ".join(str(p) for p in end.written))
    if outcome.adaptive_stop is not None:
        _print_adaptive(console, outcome, end.target_pct)
    if end.notes_shown:
        for note in outcome.notes:
            if note != outcome.aborted:  # said once, as the error
                console.print(f"[yellow]note[/]: {note}")
    if outcome.aborted == "interrupted":
        console.print(
            f"[yellow]interrupted[/]: {end.cells} cells kept in {end.store_label}; continue "
            "with --resume"
        )


def abort_text(end: End) -> str:
    """What stopped the run, as `mallocbench: error:` and its details, with what is kept."""
    reason = (end.outcome.aborted or "").splitlines()
    lines = [f"mallocbench: error: {reason[0]}", *(f"  {line}" for line in reason[1:6])]
    lines.append(f"  ({end.cells} cells measured so far are kept in {end.store_label})")
    return "\n".join(lines) + "\n"


def _print_adaptive(console: Console, outcome: RunOutcome, target_pct: float | None) -> None:
    adaptive = outcome.result.metadata.adaptive
    rounds = adaptive.rounds if adaptive is not None else None
    if outcome.adaptive_stop == "converged":
        console.print(
            f"[green]converged[/]: every relative QPS interval is narrower than {target_pct:g}% "
            f"after {rounds} repeats"
        )
        return
    console.print(
        f"[yellow]not converged[/] ({outcome.adaptive_stop}) after {rounds} repeats: "
        f"{len(outcome.not_converged)} intervals still wider than {target_pct:g}%"
    )
    for wide in outcome.not_converged[:12]:
        console.print(f"  {wide_cell_text(wide)}")
    if len(outcome.not_converged) > 12:
        console.print(f"  ... and {len(outcome.not_converged) - 12} more (see report.md)")


@dataclass(frozen=True)
class Unfinished:
    """A stored run that is not finished: its status, how much of it was measured, and
    the command that measures the rest (None: it is still running)."""

    run_id: str
    status: str
    done: int
    planned: int
    what: str  # "cells" or "replays"
    go_on: str | None = None


def print_unfinished(run: Unfinished, console: Console) -> None:
    """A run still being measured shows MISSING cells that are only still to come; one
    that died, was interrupted or failed shows ones that never will without a resume."""
    if run.go_on is None:
        console.print(
            f"[yellow]run {run.run_id} is still {run.status}[/]: {run.done} of about "
            f"{run.planned} {run.what} measured so far; MISSING cells are not measured yet"
        )
        return
    # died (its harness was killed), interrupted or failed: the words before the reason
    ended = run.status.split(" (")[0]
    console.print(
        f"[yellow]run {run.run_id} did not finish[/] ({ended}): "
        + escape(f"{run.done} of about {run.planned} {run.what} measured; {run.go_on}")
    )


def go_on_text(replay: bool, where: str, experiment_file: str | None, run_id: str = "") -> str:
    """The command that measures what an unfinished run is missing."""
    if replay and where.startswith("--out "):
        return (
            "the missing replays were not run: continue with "
            f"`mallocbench replay --resume {run_id} {where}`"
        )
    if replay:
        return (
            "the missing replays were not run: copy the run into a store under a replay's "
            "--out (mallocbench store copy) and resume it there with `mallocbench replay --resume`"
        )
    experiment = experiment_file or "EXPERIMENT.toml"
    return (
        "MISSING cells were not measured: continue with "
        f"`mallocbench run {experiment} {where} --resume`"
    )


@dataclass(frozen=True)
class Listed:
    """One run of a store as `runs` lists it; a replay's record when it has no cells."""

    run_id: str
    cells: int
    experiment: str
    status: str
    replay: ReplayRecord | None = None
    patterns: bool = False  # a `patterns` run: `cells` counts its results


def runs_text(rows: list[Listed]) -> str:
    """`runs`: one line a run."""
    out = []
    for r in rows:
        what = f"{r.cells:>4} cells  {r.experiment}"
        if r.patterns:
            what = f"{r.cells:>4} pattern results  {r.experiment} (mallocbench patterns)"
        elif not r.cells and r.replay is not None:
            what = listing(r.replay)
        out.append(f"{r.run_id}  {what}  {r.status}\n")
    return "".join(out)


@dataclass(frozen=True)
class DesignChosen:
    """design = "auto"'s outcome for this run: its why (report.calibrate's words, kept
    with the run), whether the run being resumed chose it, or None: nothing is stored
    and a dry run would calibrate first."""

    why: str | None
    resumed: bool = False


def design_text(chosen: DesignChosen) -> str:
    if chosen.why is None:
        return (
            "design auto: no calibration of this host and shape is stored, so a short one "
            "(about 2 min) runs first; the plan below is for interleaved runs\n"
        )
    return (
        f"design {chosen.why}"
        + (" (as the run being resumed chose)" if chosen.resumed else "")
        + "\n"
    )


def steps_text() -> str:
    """`steps`: the catalogue by group, each step's ranges, kind and SQL."""
    lines = []
    for group, title in GROUPS.items():
        lines.append(f"{group}: {title}")
        for step in CATALOGUE:
            if step.group == group:
                ranges = "/".join(str(r) for r in step.ranges) if step.takes_range else "-"
                kind = "write" if step.writes else "read"
                lines.append(f"  {step.name:<22} range={ranges:<14} {kind:<5}  {step.sql}")
    return "\n".join(lines) + "\n"


# What the first Ctrl-C (or SIGTERM) does to the work under way, by the command's code.
DROPPED = "dropped"  # the cell or segment under way is dropped
TRIAL = "trial"  # tune: the trial under way is kept if it ends
NO_DECISION = "no-decision"  # advise: nothing is decided


@dataclass(frozen=True)
class Stopping:
    """A first signal's answer: which signal, what is under way and becomes of it, and
    whether the line is plain (a live search display beside it) or coloured."""

    signum: int
    under_way: str = DROPPED
    dropped: str = "cell"
    plain: bool = False


def stopping_text(s: Stopping) -> str:
    if s.under_way == TRIAL:
        under_way = (
            "the trial under way is kept if it ends, measured again by --resume if the signal "
            "cut it short; finished trials are kept"
        )
    elif s.under_way == NO_DECISION:
        under_way = "advise stops without a decision"
    else:
        under_way = f"the {s.dropped} under way is dropped, finished {s.dropped}s are kept"
    name = signal.Signals(s.signum).name
    return f"{name}: stopping; {under_way} (Ctrl-C again to abort at once)"


def print_stopping(s: Stopping, console: Console) -> None:
    if s.plain:
        console.print(stopping_text(s), markup=False)
    else:
        console.print(f"[yellow]{stopping_text(s)}[/]")


def print_plain(text: str, console: Console) -> None:
    """A line another package worded (a tune's first dataset load), as it is."""
    console.print(text, markup=False, highlight=False)


@dataclass(frozen=True)
class Wrote:
    """The files a replay or an advise wrote in `out` (on standard error: --json keeps
    standard output for the document alone), and notes after them."""

    names: list[str]
    out: Path
    notes: list[str] = field(default_factory=list)


def print_wrote(w: Wrote, console: Console) -> None:
    console.print(
        f"wrote {', '.join(w.names)} in {w.out}", markup=False, highlight=False, soft_wrap=True
    )
    for note in w.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


def print_aside(text: str, console: Console) -> None:
    """A line another package worded beside the progress (a cluster's dispatch), dimmed."""
    console.print(f"[dim]{text}[/]")
