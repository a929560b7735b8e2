"""auto judged over runs (bench/bench_time_to_verdict.py): widths pooled per design and
shape over runs and over several invocations' output, on made-up widths."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_time_to_verdict as ttv  # noqa: E402

SHAPES = {
    "runs": ("interleaved", None, 3, 5.0),
    "turns": ("interleaved", "turns", 30, 1.0),
    "sequential": ("sequential", None, 1, 60.0),
}


def record(design: str, width: float, df: int, chose: str | None = None) -> dict[str, Any]:
    """One run's line as the bench prints it; auto's carries the design it chose."""
    used, alternate, slices, slice_s = SHAPES[chose or design]
    return {
        "setups": 2,
        "design": design,
        "width_mean": width,
        "df": df,
        "chosen": {
            "used": used,
            "alternate": alternate,
            "slices_per_cell": slices,
            "slice_s": slice_s,
        },
    }


def test_a_pooled_width_weighs_each_runs_square_by_its_degrees_of_freedom() -> None:
    runs = [record("runs", 10.0, 4), record("runs", 20.0, 12), record("runs", math.inf, 0)]
    width, df = ttv.pooled_width(runs)
    assert df == 16
    assert width == pytest.approx(math.sqrt((100 * 4 + 400 * 12) / 16))
    assert ttv.pooled_width([record("runs", math.inf, 0)]) == (math.inf, 0)


def test_auto_is_judged_by_the_pooled_width_of_what_it_chose() -> None:
    records = [
        record("runs", 12.0, 8),
        record("runs", 14.0, 8),
        record("turns", 9.0, 10),
        record("turns", 11.0, 10),
        record("sequential", 20.0, 4),
        record("auto", 10.0, 10, chose="turns"),
        record("auto", 13.0, 8, chose="runs"),
    ]
    found = ttv.pooled_judgement(records, 2)
    turns = math.sqrt((81 * 10 + 121 * 10 + 100 * 10) / 30)  # auto's turns run pooled in
    runs = math.sqrt((144 * 8 + 196 * 8 + 169 * 8) / 24)
    assert found["pooled_best_fixed"] == "turns"
    assert found["pooled_fixed"]["turns"]["width"] == pytest.approx(turns)
    assert found["pooled_fixed"]["runs"]["df"] == 24
    assert found["pooled_auto_chose"] == ["turns", "runs"]
    # One auto run chose the best design, one did not: its expected width is the mean.
    assert found["pooled_auto_width"] == pytest.approx((turns + runs) / 2)
    assert found["pooled_auto_over_best_fixed"] == pytest.approx((turns + runs) / 2 / turns)
    assert found["pooled_target_met"] is ((turns + runs) / 2 / turns <= 1.1)
    assert found["pooled_auto_df"] == 54 and not found["pooled_auto_same_as_best"]
    low, high = found["pooled_auto_over_best_fixed_95"]
    assert low < found["pooled_auto_over_best_fixed"] < high
    assert found["p_pooled_within_target_if_designs_tie"] == pytest.approx(
        scipy_stats.f.cdf(1.1**2, 54, 30)
    )
    assert found["pooled_runs"] == {"runs": 2, "turns": 2, "sequential": 1, "auto": 2}


def test_auto_that_always_chose_the_best_shape_meets_the_target_by_construction() -> None:
    records = [
        record("turns", 9.0, 10),
        record("runs", 14.0, 8),
        record("auto", 12.0, 10, chose="turns"),
    ]
    found = ttv.pooled_judgement(records, 2)
    assert found["pooled_auto_same_as_best"] and found["pooled_auto_over_best_fixed"] == 1.0
    assert found["pooled_auto_over_best_fixed_95"] == (1.0, 1.0)
    # Without an auto run there is nothing to judge, and it says why.
    alone = ttv.pooled_judgement(records[:2], 2)
    assert "pooled_auto_over_best_fixed" not in alone and alone["pooled_reason"]


def test_invocations_output_is_pooled_across_files(tmp_path: Path) -> None:
    lines = [
        [record("turns", 9.0, 10), record("auto", 14.0, 8, chose="runs")],
        [record("runs", 12.0, 8), record("auto", 11.0, 10, chose="turns")],
        [record("turns", 10.0, 10), record("runs", 13.0, 8)],
    ]
    paths = []
    for index, found in enumerate(lines):
        path = tmp_path / f"ttv{index}.jsonl"
        # Each invocation also prints its plans and verdicts so far: not runs.
        text = [json.dumps({"setups": 2, "plans": {}}), *map(json.dumps, found)]
        path.write_text("\n".join([*text, json.dumps({"pooled": {}}), "not json"]) + "\n")
        paths.append(path)
    records = ttv.read_records(paths)
    assert len(records) == 6
    pooled = ttv.pooled_judgement(records, 2)
    assert pooled["pooled_runs"] == {"runs": 2, "turns": 2, "sequential": 0, "auto": 2}
    turns = math.sqrt((81 * 10 + 100 * 10 + 121 * 10) / 30)
    assert pooled["pooled_fixed"]["turns"]["width"] == pytest.approx(turns)
    assert ttv.pooled_judgement(records, 4)["pooled_runs"]["auto"] == 0
