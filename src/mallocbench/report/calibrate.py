"""`mallocbench calibrate`'s words: the noise, interference and design tables, the plan
in sentences, and the JSON of everything measured."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mallocbench.analysis.designs import (
    RANKED_MAX_P,
    RUNS_DESIGN,
    SEQUENTIAL_DESIGN,
    TURNS_DESIGN,
    DesignChoice,
    Plan,
)
from mallocbench.calibrate.summary import (
    BusyNote,
    CalibrationNote,
    CalibrationSummary,
    NoStartVarianceNote,
    OneSetupNote,
    SharedStartNote,
    StallNote,
    UnsteadyNote,
    copy_name,
)


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}%"


def _levels_table(summary: CalibrationSummary) -> Table:
    components, costs = summary.components, summary.costs
    table = Table(title="Noise by level (coefficient of variation of throughput)")
    table.add_column("level")
    table.add_column("CV", justify="right")
    table.add_column("from")
    table.add_row("one second", _pct(summary.second_cv_pct), "seconds within each start")
    table.add_row(
        f"one slice ({summary.slice_s:g} s)",
        _pct(components.slice_cv_pct),
        f"{components.slices} slices, {components.within_df} df within starts",
    )
    table.add_row(
        "one server start",
        _pct(components.start_cv_pct),
        f"{components.starts} starts (variance component, clamped at 0)",
    )
    table.add_section()
    table.add_row("cost of a start", f"{costs.start_s:.1f} s", "copy datadir, start, warm cache")
    table.add_row("cost of a stop", f"{costs.stop_s:.1f} s", "stop, remove datadir")
    table.add_row("step warmup", f"{costs.warmup_s:.1f} s", "until steady")
    table.add_row("cost of a slice", f"{costs.slice_wall_s:.1f} s", "wall, start-up included")
    return table


def _curve_table(summary: CalibrationSummary) -> Table:
    """Measured CV of k-second means beside what white noise would give (CV_1 / sqrt(k))."""
    table = Table(title="Averaging seconds: CV of the mean of k consecutive seconds")
    for column in ("k (s)", "measured", "white noise"):
        table.add_column(column, justify="right")
    first = summary.second_cv_pct
    for k, cv in summary.aggregation_curve:
        white = first / math.sqrt(k) if first is not None else None
        table.add_row(str(k), _pct(cv, 2), _pct(white, 2))
    return table


def _interference_table(summary: CalibrationSummary) -> Table:
    found = summary.interference
    table = Table(title="Interference per slice")
    for column in ("", "median", "max"):
        table.add_column(column, justify="right" if column else "left")
    for label, median, top in (
        ("other processes' CPU", found.median_other_cpu_share, found.max_other_cpu_share),
        ("  of which mallocbench's", found.median_harness_cpu_share, found.max_harness_cpu_share),
        ("steal", found.median_steal_share, found.max_steal_share),
    ):
        table.add_row(
            label,
            _pct(None if median is None else 100 * median),
            _pct(None if top is None else 100 * top),
        )
    median, top = found.median_load_avg_1m, found.max_load_avg_1m
    table.add_row(
        "load average (1 min)",
        "-" if median is None else f"{median:.2f}",
        "-" if top is None else f"{top:.2f}",
    )
    return table


def _designs_table(summary: CalibrationSummary) -> Table:
    """Per design: the noise its ratio is made of, and what the budget buys with it."""
    budget = f"width in {summary.plan.budget_s / 60:g} min"
    target = f"time for {summary.plan.target_width_pct:g} points"
    table = Table(
        title=f"Designs for {summary.plan.setups} setups: the noise of a ratio setup / base"
    )
    for column in (
        "design",
        "per slice/turn",
        "per start",
        "from",
        "slices or turns per start",
        budget,
        target,
    ):
        table.add_column(column, justify="left" if column in ("design", "from") else "right")
    copies = summary.copies
    others = "copy b" if copies == 2 else f"copies b-{copy_name(copies - 1)}"
    origins = {
        SEQUENTIAL_DESIGN: "2 x one setup's, starts independent",
        RUNS_DESIGN: f"copy a / {others}, runs",
        TURNS_DESIGN: f"copy a / {others}, turns",
    }
    for plan in summary.designs:
        cvs = summary.ratio_cvs.get(plan.design)
        if cvs is None:
            continue
        name = plan.design
        if plan.design == summary.best:
            name += " (best guess)" if summary.unranked else " (best)"
        table.add_row(
            name,
            _pct(cvs[0]),
            _pct(cvs[1]),
            origins[plan.design],
            f"{plan.slices_per_start}",
            _budget_width(plan),
            _wall(plan.target_s) if plan.target_s is not None else "out of reach",
        )
    return table


def _budget_width(plan: Plan) -> str:
    """The width the budget buys, with the range the calibration's own few starts leave
    it (designs.width_range_pct)."""
    if plan.budget_width_pct is None:
        return "does not fit"
    text = f"{plan.budget_width_pct:.1f} pts"
    if plan.budget_width_range_pct is not None:
        low, high = plan.budget_width_range_pct
        text += f" ({_width_words(low)}-{_width_words(high)})"
    return text


def _range_words(plan: Plan) -> str:
    if plan.budget_width_range_pct is None:
        return ""
    low, high = plan.budget_width_range_pct
    return f", {_width_words(low)} to {_width_words(high)} as far as this calibration can tell"


def design_lines(summary: CalibrationSummary) -> list[str]:
    """The design to choose, in words; nothing without pairs."""
    if summary.best is None:
        return []
    best = next(p for p in summary.designs if p.design == summary.best)
    setting = {
        SEQUENTIAL_DESIGN: 'design = "sequential"',
        RUNS_DESIGN: 'alternate = "runs" (the default)',
        TURNS_DESIGN: 'alternate = "turns"',
    }[summary.best]
    where = f"for {summary.plan.setups} setups in {summary.plan.budget_s / 60:g} min"
    about = f"about {best.budget_width_pct:.1f} points{_range_words(best)}"
    if not summary.unranked:
        return [f"Best design here {where}: {summary.best} ({about}): {setting}."]
    rivals = [p for p in summary.designs if p.design in summary.unranked]
    return [
        f"Narrowest design here {where}: {summary.best} ({about}), but "
        + _and(f"{p.design} at {_budget_width(p).replace(' pts', ' points')}" for p in rivals)
        + f" {'is' if len(rivals) == 1 else 'are'} not reliably wider: this calibration "
        f"cannot rank them (F test, p >= {RANKED_MAX_P:g}). {summary.best.capitalize()} is "
        f"its best guess, not a finding: {setting}. More --starts narrow the ranges."
    ]


def _and(items: Iterable[str]) -> str:
    listed = list(items)
    return listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]


def plan_lines(summary: CalibrationSummary) -> list[str]:
    """The verdict in words: slices per start, what the budget buys, what the target costs."""
    plan = summary.plan
    budget = f"{plan.budget_s / 60:g} min"
    lines = [
        f"In {budget}, {_slices(plan.slices_per_start)} of {summary.slice_s:g} s per server "
        "start give the narrowest interval for this noise and these costs."
    ]
    if plan.budget_width_pct is None:
        lines.append(
            f"With {plan.setups} setups, a budget of {budget} does not fit the 2 starts an "
            "interval needs (per cell)."
        )
    else:
        lines.append(
            f"With {plan.setups} setups, a budget of {budget} ({plan.budget_starts} starts) "
            f"resolves an interval width of about {plan.budget_width_pct:.1f} points (per cell"
            f"{_range_words(plan)})."
        )
    if plan.target_starts is None or plan.target_s is None:
        lines.append(
            f"A width of {plan.target_width_pct:g} points is out of reach at this noise: "
            "quiet the machine or accept a wider interval."
        )
    else:
        lines.append(
            f"A width of {plan.target_width_pct:g} points needs about {plan.target_starts} "
            f"starts of {_slices(plan.target_slices_per_start or 1)} and {_wall(plan.target_s)}"
            + (": quiet the machine or accept a wider interval." if plan.target_s > 3600 else ".")
        )
    start_cv = summary.components.start_cv_pct
    if start_cv is not None and start_cv > 0:
        lines.append(
            f"Two starts of one setup typically differ by {start_cv * math.sqrt(2):.1f}% with no "
            "change at all: a comparison needs several server starts per setup, which is "
            "why a run's repeats restart the servers."
        )
    return lines


def _slices(count: int) -> str:
    return f"{count} slice" + ("" if count == 1 else "s")


def _wall(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.1f} minutes"


def print_calibration(summary: CalibrationSummary, console: Console) -> None:
    console.print(
        f"[bold]{summary.experiment}[/]: {summary.setup} on {summary.engine}, "
        f"{summary.step} at {summary.threads} threads"
    )
    console.print(_levels_table(summary))
    console.print(_curve_table(summary))
    console.print(_interference_table(summary))
    if summary.pairs:
        console.print(_designs_table(summary))
    for line in plan_lines(summary) + design_lines(summary):
        console.print(line)
    for note in note_lines(summary):
        console.print(f"[yellow]note[/]: {note}")


def note_lines(summary: CalibrationSummary) -> list[str]:
    """The calibration's notes in words, then what the servers' sessions said."""
    return [note_text(n) for n in summary.notes] + summary.session_notes


def note_text(note: CalibrationNote) -> str:
    if isinstance(note, BusyNote):
        return (
            f"other processes used {100 * note.other_cpu_share:.0f}% of the machine's CPU "
            "time (median per slice) while measuring: these numbers include that "
            "interference; calibrate again on a quiet machine to see its own noise"
        )
    if isinstance(note, NoStartVarianceNote):
        return (
            "the starts differed no more than their slices predict: the between-start "
            "variance is estimated as 0, and more starts would refine that"
        )
    if isinstance(note, OneSetupNote):
        return "the experiment has one setup: the plan assumes two (a setup and its base)"
    if isinstance(note, UnsteadyNote):
        return (
            f"{note.unsteady} of {note.starts} warmups reached max_warmup without a steady "
            "state: the slices may still include the ramp"
        )
    if isinstance(note, SharedStartNote):
        return _shared_text(note)
    return _stall_text(note)


def _shared_text(note: SharedStartNote) -> str:
    def cv(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}%"

    p = note.agreement_p
    alone = f"alone, runs gave {cv(note.runs_cv_pct)} and turns {cv(note.turns_cv_pct)}"
    if not note.agreed:
        return (
            f"per start, runs and turns keep their own CVs ({alone}): their starts' levels "
            f"differed more than their noise allows (p = {p:.3f}), so turns' starts vary "
            "in a way of their own on this host"
        )
    return (
        f"per start, runs and turns are planned with their own CVs or the one pooled over "
        f"both ({cv(note.pooled_cv_pct)}), whichever is larger, as they measure the same "
        f"starts and their levels agreed (p = {p:.2f}); {alone}"
    )


def _stall_text(note: StallNote) -> str:
    piece = "slice" if note.design == RUNS_DESIGN else "turn"
    more = f" ({note.count} such ratios in all)" if note.count > 1 else ""
    return (
        f"a copy nearly stopped: in start {note.start}, copy a ran at {note.ratio:.3g} times "
        f"copy {note.copy} in a {piece}{more}. Those ratios are kept in the components, "
        "which widens every predicted width; another load on this machine (a test suite, "
        "a build) is the usual cause: calibrate again when it is quiet"
    )


# A predicted interval wider than this says nothing a run could act on; numbers past it
# (tens of thousands of points at 2 repeats) read as measurements, so they are capped.
WIDEST_SHOWN_PCT = 100


def _width_words(width: float | None) -> str:
    if width is None or not math.isfinite(width):
        return "-"
    return f"over {WIDEST_SHOWN_PCT}" if width > WIDEST_SHOWN_PCT else f"{width:.1f}"


def design_choice_text(choice: DesignChoice, stored: bool) -> str:
    """design = "auto"'s choice in one line: the design, the shape it gets, the wall
    time the designs were compared in and every design's expected width there."""
    source = (
        "a stored calibration of this host" if stored else "a calibration at the start of this run"
    )
    budget = f"{choice.budget_s / 60:.1f} min"
    whose = "the experiment's budget" if choice.budget_given else "the experiment's own as runs"
    widths = ", ".join(f"{d} {_width_words(w)}" for d, w in choice.widths.items())
    shape = choice.shapes.get(choice.design)
    if shape is None or not shape.fits:
        return (
            f"auto: {choice.design} (no design fits the 2 repeats an interval needs in "
            f"{budget} of wall time, {whose}; by {source})"
        )
    piece = "turns" if choice.design == TURNS_DESIGN else "slices"
    text = (
        f"auto: {choice.design}, {shape.starts} repeats of {shape.slices_per_start} {piece}, "
        f"the narrowest expected interval in the same {budget} of wall time ({whose}) by "
        f"{source} (points: {widths})"
    )
    if choice.unranked:
        ranges = ", ".join(
            f"{d} {_range_text(choice.ranges.get(d))}" for d in (choice.design, *choice.unranked)
        )
        verb = "is" if len(choice.unranked) == 1 else "are"
        text += (
            f"; {_and(choice.unranked)} {verb} not reliably wider ({ranges}): the "
            "calibration cannot rank them, so this choice is its best guess, not a finding"
        )
    return text


def _range_text(width_range: tuple[float, float] | None) -> str:
    if width_range is None:
        return "range unknown"
    return f"{_width_words(width_range[0])}-{_width_words(width_range[1])}"


def calibration_json(summary: CalibrationSummary) -> str:
    data = summary.to_dict()
    # The notes as --json has always given them: sentences, the sessions' after them.
    data["notes"] = note_lines(summary)
    del data["session_notes"]
    return json.dumps(data, indent=1) + "\n"


__all__ = [
    "WIDEST_SHOWN_PCT",
    "calibration_json",
    "design_choice_text",
    "design_lines",
    "note_lines",
    "note_text",
    "plan_lines",
    "print_calibration",
]


# --- what `calibrate` says around its tables -------------------------------------------------


@dataclass(frozen=True)
class Calibrating:
    """A calibration about to start: its target (described), starts, slices of `slice_s`,
    and with `copies` (pairs), the copies per start and the turns of `turn_s`."""

    target: str
    starts: int
    slices: int
    slice_s: float | str
    copies: int | None = None
    turns: int = 0
    turn_s: float | str = 0


def print_calibrating(c: Calibrating, console: Console) -> None:
    console.print(
        f"calibrating {c.target}: {c.starts} starts x {c.slices} slices of {c.slice_s} s"
        + (
            f", of {c.copies} copies each (copy a compared with the "
            f"others as runs, then as {c.turns} turns of {c.turn_s} s)"
            if c.copies is not None
            else ""
        )
    )


def print_kept(stored: object, console: Console) -> None:
    console.print(f'kept for design = "auto" runs of this shape: {stored}')


def print_wrote(path: Path, console: Console) -> None:
    console.print(f"wrote {path}")
