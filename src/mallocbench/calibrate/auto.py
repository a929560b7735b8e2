"""`design = "auto"`: pick runs, turns or sequential from a calibration of this host.

The choice is the design whose expected interval width is the narrowest in the same
wall time (analysis.designs.choose_at_equal_time): the experiment's `budget`, or else the
time the experiment itself takes as runs (the default) at its repeats and measured
seconds, priced with the calibration's costs (server start, warmup, slice, turn). The
widths come from the variance components `mallocbench calibrate` measures: one setup
start after start (sequential) and copies of it compared as runs and as turns. The
chosen design gets the shape it was priced at: with a budget, its own repeats and cell
length; without, the experiment's repeats and the cell length that fills the time. A
calibration is stored per host and experiment shape (calibrate writes it), and a stored
one younger than store.STORED_MAX_AGE_S is used; otherwise a short one runs first.
Ties keep the default, runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from mallocbench.analysis import designs
from mallocbench.analysis.designs import RUNS_DESIGN, SEQUENTIAL_DESIGN, TURNS_DESIGN, DesignChoice
from mallocbench.calibrate.measure import calibrate
from mallocbench.calibrate.store import calibration_key, load_calibration, store_calibration
from mallocbench.calibrate.summary import CalibrationSummary, compared_setups
from mallocbench.calibrate.target import pick_target
from mallocbench.errors import MallocbenchError
from mallocbench.run import experiment as experiment_mod
from mallocbench.run.experiment import Experiment
from mallocbench.store import open_store

# How the caller words a choice (report.calibrate.design_choice_text): from the choice
# and whether it came from a stored calibration. calibrate keeps the values; the words,
# which the run keeps as its design's why, are report/'s.
Wording = Callable[[DesignChoice, bool], str]

# The short calibration at the start of a run: enough for the three designs' components,
# with starts before slices, as calibrate's defaults (commands/calibrate.py) say why.
SHORT = {"starts": 3, "slices": 2, "pairs": True, "turns": 6, "turn_s": 1.0}


def _piece_s(design: str, record: dict[str, Any]) -> float:
    """The length of the slices (or turns) the calibration measured for a design."""
    return float(record["turn_s"] if design == TURNS_DESIGN else record["slice_s"])


def choose(experiment: Experiment, record: dict[str, Any]) -> DesignChoice:
    """Every design's shape and expected width in the same wall time, and the narrowest."""
    # A stored calibration's turns are priced with the settle this run will have.
    costs = dataclasses.replace(record["costs"], settle_rounds=experiment.settle_rounds)
    setups = compared_setups(experiment)
    components = record["components"]
    if experiment.budget_s is not None:
        return designs.choose_at_equal_time(components, costs, setups, experiment.budget_s)
    # The experiment's own time as runs: its repeats of its cells cut into the slices
    # the calibration measured.
    slices = max(1, round(experiment.duration_s / _piece_s(RUNS_DESIGN, record)))
    fixed_s, per_slice_s = designs.block_costs(RUNS_DESIGN, costs, setups)
    budget_s = experiment.repeats * (fixed_s + slices * per_slice_s)
    return designs.choose_at_equal_time(
        components, costs, setups, budget_s, starts=experiment.repeats
    )


def apply(experiment: Experiment, design: str, record: dict[str, Any], why: str) -> Experiment:
    """The experiment with the chosen design in place of "auto"."""
    if design == SEQUENTIAL_DESIGN:
        return dataclasses.replace(experiment, design=experiment_mod.SEQUENTIAL, design_why=why)
    turns = design == TURNS_DESIGN
    slice_s = _piece_s(design, record)
    return dataclasses.replace(
        experiment,
        design=experiment_mod.INTERLEAVED,
        alternate=experiment_mod.TURNS if turns else experiment_mod.RUNS,
        slice_s=min(slice_s, experiment.duration_s),
        design_why=why,
    )


def apply_choice(
    experiment: Experiment, choice: DesignChoice, record: dict[str, Any], why: str
) -> Experiment:
    """The experiment with the chosen design, in the shape it was priced at: its repeats
    and cell length (unchanged when it is the experiment's own shape, or nothing fits:
    the run then says so in `why`)."""
    shape = choice.shapes.get(choice.design)
    own_time = not choice.budget_given and choice.design == RUNS_DESIGN  # as it was asked
    if shape is not None and shape.fits and not own_time:
        experiment = dataclasses.replace(
            experiment,
            repeats=shape.starts,
            duration_s=shape.slices_per_start * _piece_s(choice.design, record),
        )
    chosen = apply(experiment, choice.design, record, why)
    return dataclasses.replace(
        chosen,
        design_widths=choice.widths,
        design_budget_s=choice.budget_s,
        design_unranked=list(choice.unranked),
    )


def stored_choice(experiment: Experiment, word: Wording) -> Experiment | None:
    """The experiment with the design a stored calibration favours, its why in `word`'s
    words; None without one."""
    target = pick_target(experiment, None, None, None, None)
    record = load_calibration(calibration_key(experiment, target))
    if record is None:
        return None
    choice = choose(experiment, record)
    return apply_choice(experiment, choice, record, word(choice, True))


def resumed_choice(
    experiment: Experiment, store_at: str | Path, run_id: str | None
) -> Experiment | None:
    """The design the run being resumed chose, so its cells all share one; None when no
    such run is found (the resume itself then says why) or it did not choose by auto."""
    try:
        store = open_store(store_at, readonly=True)
    except MallocbenchError:
        return None
    try:
        if run_id is None:
            runs = [r for r in store.list_runs() if r["experiment"] == experiment.name]
            run_id = str(runs[-1]["run_id"]) if runs else None
        header = store.load_run_header(run_id) if run_id is not None else None
    finally:
        store.close()
    design = header.metadata.design if header is not None else None
    if header is None or design is None or design.asked != experiment_mod.AUTO or not design.why:
        return None
    chosen = (
        TURNS_DESIGN
        if design.alternate == experiment_mod.TURNS
        else (SEQUENTIAL_DESIGN if design.used == experiment_mod.SEQUENTIAL else RUNS_DESIGN)
    )
    lengths = {"slice_s": design.slice_s or experiment.slice_s, "turn_s": design.slice_s or 1.0}
    # auto gave the run its repeats and cell length too: the resumed cells keep them.
    metadata = header.metadata
    step_s = metadata.durations.step_s if metadata.durations is not None else None
    experiment = dataclasses.replace(
        experiment,
        repeats=metadata.repeats or experiment.repeats,
        duration_s=step_s or experiment.duration_s,
        design_widths=design.widths,
        design_unranked=design.unranked,
        design_budget_s=design.budget_s,
    )
    return apply(experiment, chosen, lengths, design.why)


def resolve(experiment: Experiment, out_dir: Path, console: Console, word: Wording) -> Experiment:
    """The experiment with its design chosen, when it asks for "auto"; else unchanged."""
    if experiment.design != experiment_mod.AUTO:
        return experiment
    target = pick_target(experiment, None, None, None, None)
    key = calibration_key(experiment, target)
    record = load_calibration(key)
    stored = record is not None
    if record is None:
        options = {
            **SHORT,
            "slice_s": max(experiment_mod.MIN_RUN_SLICE_S, experiment.slice_s),
            "budget_s": 300.0,
            "target_ci_pct": 3.0,
        }
        console.print(
            f"design auto: calibrating {target.describe()} first ({SHORT['starts']} starts "
            f"of {compared_setups(experiment)} copies)"
        )
        interleaved = dataclasses.replace(experiment, design=experiment_mod.INTERLEAVED)
        summary = calibrate(interleaved, target, out_dir, options, console)
        store_calibration(summary, key)
        record = load_calibration(key) or _record_of(summary)
    choice = choose(experiment, record)
    why = word(choice, stored)
    console.print(f"design {why}")
    return apply_choice(experiment, choice, record, why)


def _record_of(summary: CalibrationSummary) -> dict[str, Any]:
    """What load() returns, straight from a summary (when the cache cannot be written)."""
    if summary.runs_ratio is None or summary.turns_ratio is None:
        raise ValueError("a calibration for auto measures pairs")
    return {
        "slice_s": summary.slice_s,
        "turn_s": summary.turn_s,
        "costs": summary.costs,
        "components": {
            "sequential": summary.components,
            "runs": summary.runs_ratio,
            "turns": summary.turns_ratio,
        },
    }


__all__ = ["apply", "apply_choice", "choose", "resolve", "resumed_choice", "stored_choice"]
