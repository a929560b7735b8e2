"""The auto dry-run line: a design whose predicted interval is out of reach says so."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli_runner import experiment_text
from mallocbench.analysis import designs, noise
from mallocbench.cli import main
from mallocbench.errors import MallocbenchError
from mallocbench.report.calibrate import WIDEST_SHOWN_PCT, design_choice_text

AUTO = experiment_text(
    "auto", base="glibc", top='design = "auto"\nrepeats = 2', threads=2, cache="64M",
    warmup="1", step=None, extra="max_warmup = 3",
    setups=(("glibc", "glibc"), ("glibc-b", "glibc")),
)  # fmt: skip


def _shape(design: str, width: float) -> designs.Shape:
    return designs.Shape(design, 3, 2, 100.0, width)


def _choice(design: str, widths: dict[str, float]) -> designs.DesignChoice:
    """A choice in a given 5-minute budget for 2 setups, of shapes of 2 repeats of 3."""
    shapes = {d: _shape(d, w) for d, w in widths.items()}
    return designs.DesignChoice(design, budget_s=300.0, budget_given=True, setups=2, shapes=shapes)


def test_widths_past_the_cap_are_worded_and_the_rest_kept() -> None:
    choice = _choice("turns", {"runs": 51963.04, "turns": 12.54, "sequential": math.inf})
    assert choice.widths == {"runs": 51963.04, "turns": 12.54, "sequential": None}
    assert design_choice_text(choice, stored=True) == (
        "auto: turns, 2 repeats of 3 turns, the narrowest expected interval in the same "
        "5.0 min of wall time (the experiment's budget) by a stored calibration of this host "
        f"(points: runs over {WIDEST_SHOWN_PCT}, turns 12.5, sequential -)"
    )
    nothing = dataclasses.replace(
        choice, design="runs", shapes={"runs": _shape("runs", math.inf)}, budget_given=False
    )
    assert design_choice_text(nothing, stored=False) == (
        "auto: runs (no design fits the 2 repeats an interval needs in 5.0 min of wall time, "
        "the experiment's own as runs; by a calibration at the start of this run)"
    )


def test_a_budget_goes_with_auto_and_fits_the_shape_to_it(tmp_path: Path) -> None:
    from mallocbench.calibrate import auto as autodesign
    from mallocbench.run import loading as loading_mod

    path = tmp_path / "auto.toml"
    path.write_text(AUTO.replace("repeats = 2", 'repeats = 2\nbudget = "5m"'))
    experiment = loading_mod.load(path)
    assert experiment.budget_s == 300.0
    costs = designs.Costs(start_s=1.2, warmup_s=9.0, slice_wall_s=5.1, turn_s=1.07)
    record = {
        "slice_s": 5.0,
        "turn_s": 1.0,
        "costs": costs,
        "components": {
            "sequential": _components(0.3, 0.01),
            "runs": _components(0.3, 0.0),
            "turns": _components(0.3, 0.0),
        },
    }
    choice = autodesign.choose(experiment, record)
    assert choice.budget_given and choice.budget_s == 300.0
    shape = choice.shapes[choice.design]
    chosen = autodesign.apply_choice(experiment, choice, record, "why")
    # The budget, not the experiment's 2 repeats, sets how many blocks run and how long.
    assert chosen.repeats == shape.starts >= 2 and shape.wall_s <= 300.0
    assert chosen.duration_s == shape.slices_per_start * (1.0 if choice.design == "turns" else 5.0)
    assert chosen.design_widths == choice.widths and chosen.design_budget_s == 300.0
    assert chosen.design_unranked == list(choice.unranked)

    path.write_text(AUTO.replace('design = "auto"', 'budget = "5m"'))
    with pytest.raises(MallocbenchError) as refused:
        loading_mod.load(path)
    assert 'add design = "auto"' in str(refused.value)
    assert len(str(refused.value).strip().splitlines()) == 1


def _components(within: float, between: float) -> noise.VarianceComponents:
    return noise.VarianceComponents(within, between, starts=2, slices=6, within_df=4, mean_log=0)


def test_the_dry_run_line_shows_no_runaway_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two repeats of two setups leave 1 degree of freedom (t = 12.7): a noisy design's
    width comes out in the tens of thousands of points, and the line must not print it."""
    from mallocbench.calibrate import auto as autodesign
    from mallocbench.calibrate.store import calibration_key
    from mallocbench.calibrate.target import pick_target
    from mallocbench.run import loading as loading_mod

    path = tmp_path / "auto.toml"
    path.write_text(AUTO)
    cache = tmp_path / "cache"
    monkeypatch.setenv("MALLOCBENCH_CACHE", str(cache))
    experiment = loading_mod.load(path)
    target = pick_target(experiment, None, None, None, None)

    def parts(within: float, between: float, mean_log: float) -> dict[str, float | int]:
        return {
            "within_var": within,
            "between_var": between,
            "starts": 2,
            "slices": 6,
            "within_df": 4,
            "mean_log": mean_log,
        }

    record = {
        "saved_at": time.time(),
        "slice_s": 5.0,
        "turn_s": 1.0,
        "sequential": parts(0.5, 0.3, 8.0),
        "runs": parts(0.4, 0.2, 0.0),
        "turns": parts(1e-4, 1e-5, 0.0),
        "costs": {"start_s": 3.0, "warmup_s": 6.0, "slice_wall_s": 6.0, "turn_s": 1.1},
    }
    stored = cache / "calibrations" / f"{calibration_key(experiment, target)}.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps(record))
    chosen = autodesign.stored_choice(experiment, design_choice_text)
    assert chosen is not None and chosen.design_why
    widths = chosen.design_widths or {}
    assert (widths["runs"] or 0) > 1000  # what the line would say uncapped

    result = CliRunner().invoke(main, ["run", str(path), "--dry-run", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output[-2000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("design auto:")]
    assert f"runs over {WIDEST_SHOWN_PCT}" in line and f"sequential over {WIDEST_SHOWN_PCT}" in line
    assert re.search(r"turns \d+\.\d", line)  # a width within reach is still shown
    assert not re.search(r"\d{4,}", line.replace(",", ""))


def test_a_choice_the_calibration_cannot_rank_is_worded_as_a_guess() -> None:
    ranked = dataclasses.replace(
        _choice("runs", {"runs": 16.9, "turns": 19.4}),
        ranges={"runs": (11.6, 30.8), "turns": (14.1, 31.2)},
    )
    assert "guess" not in design_choice_text(ranked, stored=True)
    guessed = dataclasses.replace(ranked, unranked=("turns",))
    assert design_choice_text(guessed, stored=True).endswith(
        "(points: runs 16.9, turns 19.4); turns is not reliably wider (runs 11.6-30.8, "
        "turns 14.1-31.2): the calibration cannot rank them, so this choice is its best "
        "guess, not a finding"
    )
