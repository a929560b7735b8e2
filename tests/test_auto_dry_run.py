"""The auto dry-run line: a design whose predicted interval is out of reach says so."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mallocbench.cli import main
from mallocbench.commands.run import WIDEST_SHOWN_PCT, _capped_widths

AUTO = """
name = "auto"
base = "glibc"
design = "auto"
repeats = 2
engines = ["innodb"]
steps = ["point-query"]
threads = [2]

[dataset]
tables = 1
rows = 2000
cache = "64M"

[durations]
warmup = 1
max_warmup = 3

[[setup]]
name = "glibc"
allocator = "glibc"

[[setup]]
name = "glibc-b"
allocator = "glibc"
"""


def test_widths_past_the_cap_are_worded_and_the_rest_kept() -> None:
    why = "auto: turns, the narrowest (points: runs 51963.0, turns 12.5, sequential -)"
    assert _capped_widths(why) == (
        f"auto: turns, the narrowest (points: runs over {WIDEST_SHOWN_PCT}, turns 12.5, "
        "sequential -)"
    )
    assert _capped_widths("auto: runs (one repeat gives no interval)") == (
        "auto: runs (one repeat gives no interval)"
    )


def test_the_dry_run_line_shows_no_runaway_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two repeats of two setups leave 1 degree of freedom (t = 12.7): a noisy design's
    width comes out in the tens of thousands of points, and the line must not print it."""
    from mallocbench import experiment as experiment_mod
    from mallocbench.calibrate import auto as autodesign
    from mallocbench.calibrate.store import calibration_key
    from mallocbench.calibrate.target import pick_target

    path = tmp_path / "auto.toml"
    path.write_text(AUTO)
    cache = tmp_path / "cache"
    monkeypatch.setenv("MALLOCBENCH_CACHE", str(cache))
    experiment = experiment_mod.load(path)
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
    }
    stored = cache / "calibrations" / f"{calibration_key(experiment, target)}.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps(record))
    chosen = autodesign.stored_choice(experiment)
    assert chosen is not None and chosen.design_why
    runaway = re.search(r"runs (\d+\.\d)", chosen.design_why)
    assert runaway and float(runaway[1]) > 1000  # what the line would have said

    result = CliRunner().invoke(main, ["run", str(path), "--dry-run", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output[-2000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("design auto:")]
    assert f"runs over {WIDEST_SHOWN_PCT}" in line and f"sequential over {WIDEST_SHOWN_PCT}" in line
    assert re.search(r"turns \d+\.\d", line)  # a width within reach is still shown
    assert not re.search(r"\d{4,}", line.replace(",", ""))
