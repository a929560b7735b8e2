"""`design = "auto"`: pick runs, turns or sequential from a calibration of this host.

The choice is the design whose expected interval width, at the run's own repeats and
measured seconds, is the narrowest (analysis.noise.design_widths), from the variance
components `mallocbench calibrate` measures: one setup start after start (sequential)
and two copies of it compared as runs and as turns. A calibration is stored per host and
experiment shape (calibrate writes it), and a stored one younger than store.STORED_MAX_AGE_S
is used; otherwise a short one runs first. Ties keep the default, runs.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from rich.console import Console

from mallocbench import experiment as experiment_mod
from mallocbench.analysis import noise
from mallocbench.analysis.noise import RUNS_DESIGN, SEQUENTIAL_DESIGN, TURNS_DESIGN
from mallocbench.calibrate.measure import calibrate
from mallocbench.calibrate.store import calibration_key, load_calibration, store_calibration
from mallocbench.calibrate.summary import CalibrationSummary
from mallocbench.calibrate.target import pick_target
from mallocbench.errors import MallocbenchError
from mallocbench.experiment import Experiment
from mallocbench.store import open_store

# The short calibration at the start of a run: enough for the three designs' components.
SHORT = {"starts": 2, "slices": 3, "pairs": True, "turns": 8, "turn_s": 1.0}
DESIGNS = (RUNS_DESIGN, TURNS_DESIGN, SEQUENTIAL_DESIGN)


def choose(
    experiment: Experiment, record: dict[str, Any], source: str
) -> tuple[str, dict[str, float], str]:
    """The design, every design's expected width, and why, in words."""
    components = record["components"]
    slice_s, turn_s = float(record["slice_s"]), float(record["turn_s"])
    pieces = {
        SEQUENTIAL_DESIGN: round(experiment.duration_s / slice_s),
        RUNS_DESIGN: round(experiment.duration_s / slice_s),
        TURNS_DESIGN: round(experiment.duration_s / turn_s),
    }
    widths = noise.design_widths(
        components["sequential"],
        {d: components[d] for d in (RUNS_DESIGN, TURNS_DESIGN)},
        max(2, len(experiment.setups)),
        experiment.repeats,
        pieces,
    )
    # min() keeps the first of equals: runs, the default, unless another is narrower.
    best = min(DESIGNS, key=lambda d: widths[d])
    shown = ", ".join(
        f"{d} {widths[d]:.1f}" if math.isfinite(widths[d]) else f"{d} -" for d in DESIGNS
    )
    why = (
        f"auto: {best}, the narrowest expected interval for {experiment.repeats} repeats of "
        f"{experiment.duration_s:g} s by {source} (points: {shown})"
    )
    if not math.isfinite(widths[best]):
        best = RUNS_DESIGN
        why = f"auto: {best} (one repeat gives no interval under any design; {source})"
    return best, widths, why


def apply(experiment: Experiment, design: str, record: dict[str, Any], why: str) -> Experiment:
    """The experiment with the chosen design in place of "auto"."""
    if design == SEQUENTIAL_DESIGN:
        return dataclasses.replace(experiment, design=experiment_mod.SEQUENTIAL, design_why=why)
    turns = design == TURNS_DESIGN
    slice_s = float(record["turn_s"] if turns else record["slice_s"])
    return dataclasses.replace(
        experiment,
        design=experiment_mod.INTERLEAVED,
        alternate=experiment_mod.TURNS if turns else experiment_mod.RUNS,
        slice_s=min(slice_s, experiment.duration_s),
        design_why=why,
    )


def stored_choice(experiment: Experiment) -> Experiment | None:
    """The experiment with the design a stored calibration favours; None without one."""
    target = pick_target(experiment, None, None, None, None)
    record = load_calibration(calibration_key(experiment, target))
    if record is None:
        return None
    design, _, why = choose(experiment, record, "a stored calibration of this host")
    return apply(experiment, design, record, why)


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
    if design is None or design.asked != experiment_mod.AUTO or design.why is None:
        return None
    chosen = (
        TURNS_DESIGN
        if design.alternate == experiment_mod.TURNS
        else (SEQUENTIAL_DESIGN if design.used == experiment_mod.SEQUENTIAL else RUNS_DESIGN)
    )
    lengths = {"slice_s": design.slice_s or experiment.slice_s, "turn_s": design.slice_s or 1.0}
    return apply(experiment, chosen, lengths, design.why)


def resolve(experiment: Experiment, out_dir: Path, console: Console) -> Experiment:
    """The experiment with its design chosen, when it asks for "auto"; else unchanged."""
    if experiment.design != experiment_mod.AUTO:
        return experiment
    target = pick_target(experiment, None, None, None, None)
    key = calibration_key(experiment, target)
    record = load_calibration(key)
    source = "a stored calibration of this host"
    if record is None:
        options = {
            **SHORT,
            "slice_s": max(experiment_mod.MIN_RUN_SLICE_S, experiment.slice_s),
            "budget_s": 300.0,
            "target_ci_pct": 3.0,
        }
        console.print(
            f"design auto: calibrating {target.describe()} first ({SHORT['starts']} starts "
            "of two copies)"
        )
        interleaved = dataclasses.replace(experiment, design=experiment_mod.INTERLEAVED)
        summary = calibrate(interleaved, target, out_dir, options, console)
        store_calibration(summary, key)
        record = load_calibration(key) or _record_of(summary)
        source = "a calibration at the start of this run"
    design, _, why = choose(experiment, record, source)
    console.print(f"design {why}")
    return apply(experiment, design, record, why)


def _record_of(summary: CalibrationSummary) -> dict[str, Any]:
    """What load() returns, straight from a summary (when the cache cannot be written)."""
    if summary.runs_ratio is None or summary.turns_ratio is None:
        raise ValueError("a calibration for auto measures pairs")
    return {
        "slice_s": summary.slice_s,
        "turn_s": summary.turn_s,
        "components": {
            "sequential": summary.components,
            "runs": summary.runs_ratio,
            "turns": summary.turns_ratio,
        },
    }


__all__ = ["apply", "choose", "resolve", "resumed_choice", "stored_choice"]
