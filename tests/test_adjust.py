"""analysis.adjust: block ratios adjusted for the other processes' CPU, on runs whose
slices carry a known dependence on it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mallocbench.analysis.adjust import adjust_for_other_cpu
from mallocbench.analysis.run_analysis import analyze
from mallocbench.analysis.summary import summarize_run
from mallocbench.model.results import Cell, RunResult
from mallocbench.report.tables import run_notes

STEP = "point-query range=100"
SLOPE = -1.5  # log-throughput per unit of the machine other processes take


def _run(seed: int, shift: float = 0.0, blocks: int = 5, slices: int = 10) -> RunResult:
    """glibc (base) and je taking turns, equal in truth: each turn's throughput falls with the other
    processes' share in it, which varies a lot from slice to slice; `shift` adds that
    much share to every je slice, as if je's own server left the others more CPU."""
    rng = np.random.default_rng(seed)
    cells = []
    for repeat in range(blocks):
        level = rng.normal(0, 0.02)  # the block's start level, shared
        for setup in ("glibc", "je"):
            start = rng.normal(0, 0.01)  # this server start's own level
            pieces = []
            for k in range(slices):
                share = float(rng.uniform(0.0, 0.4)) + (shift if setup == "je" else 0.0)
                log_qps = math.log(10_000) + level + start + SLOPE * share + rng.normal(0, 0.01)
                pieces.append({"t": float(k), "qps": math.exp(log_qps), "seconds": 1.0,
                               "other_cpu_share": share, "turn": 1.0})  # fmt: skip
            qps = float(np.mean([p["qps"] for p in pieces]))
            cells.append(Cell(setup, "innodb", STEP, 8, repeat, qps=qps, slices=pieces))
    return RunResult("r1", "adjust", "glibc", cells=cells)


def test_the_adjustment_recovers_the_slope_and_narrows_the_interval() -> None:
    run = _run(seed=3)
    (cell,) = adjust_for_other_cpu(run, summarize_run(run))
    assert cell.slope == pytest.approx(SLOPE, rel=0.1)
    assert cell.explained > 0.8 and cell.pairs == 5 * 10
    (je,) = cell.ratios
    assert je.adjusted is not None and not je.shifted
    raw_width = je.raw.high - je.raw.low
    assert je.adjusted.high - je.adjusted.low < raw_width / 2
    assert je.adjusted.low < 1.0 < je.adjusted.high  # equal in truth: still not different
    assert je.adjusted.df == je.raw.df  # the slope is from within blocks


def test_a_covariate_the_setup_may_cause_is_not_adjusted() -> None:
    run = _run(seed=4, shift=0.2)
    (cell,) = adjust_for_other_cpu(run, summarize_run(run))
    (je,) = cell.ratios
    assert je.shifted and je.adjusted is None and je.shift == pytest.approx(0.2, abs=0.05)
    notes = " ".join(run_notes(analyze(run)))
    assert "je not adjusted" in notes and f"{je.shift:+.0%} of the machine" in notes


def test_every_report_states_it_beside_the_raw_and_old_runs_have_none() -> None:
    run = _run(seed=3)
    (note,) = [n for n in run_notes(analyze(run)) if n.startswith("adjusted for other")]
    assert "innodb, point-query range=100 at 8 threads" in note
    assert "je 1.0" in note and "raw)" in note
    # Runs slices count the other setups' idle servers as other processes: not adjusted.
    for cell in run.cells:
        for piece in cell.slices:
            del piece["turn"]
    assert adjust_for_other_cpu(run, summarize_run(run)) == ()
    for cell in run.cells:
        for piece in cell.slices:
            piece["turn"] = 1.0
            del piece["other_cpu_share"]
    assert adjust_for_other_cpu(run, summarize_run(run)) == ()
