"""Steady state: warm until the throughput stops trending, and say when a measurement did not hold.

The ramps in fixtures/ramps.json are per-second QPS of real runs on this project's 2-core
machines (see the file's "recorded" note): first cells after a server start with no
warmup, which show the ramp, and later cells of the same sessions, which are warm.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from cli_runner import small_experiment
from mallocbench.analysis.steady import (
    WINDOW_S,
    Held,
    WarmupDetector,
    check_stability,
    first_second_check,
    trend,
)
from mallocbench.errors import MallocbenchError
from mallocbench.executors.real import RealExecutor
from mallocbench.model.results import Cell, RunResult, SessionInfo
from mallocbench.report.words import warmup_text
from mallocbench.run.loading import from_dict, load
from mallocbench.run.measure import stability_reason
from mallocbench.run.runner import Pipeline, RunOptions, RunOutcome
from mallocbench.store.sqlite import Store

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "ramps.json").read_text())
RAMPS = [s for s in FIXTURE["series"] if s["ramp"]]
# Warm: later cells of a session, and first cells whose cache was read after the start.
WARM = [s for s in FIXTURE["series"] if not s["first_after_start"] or s["cache_warmed"]]


def warmup_stop(qps: list[float], min_s: float = 2, max_s: float = 30) -> tuple[int, bool]:
    """Seconds fed to the detector before it ended warming, and whether it was steady."""
    detector = WarmupDetector(min_s, max_s)
    for n, value in enumerate(qps, start=1):
        if detector.add(value):
            return n, detector.steady
    return len(qps), False


def flat_from(qps: list[float]) -> int:
    """The first second from which three seconds average 90% of the later plateau."""
    plateau = statistics.median(qps[len(qps) // 2 :])
    return next(i for i in range(len(qps) - 2) if statistics.fmean(qps[i : i + 3]) >= 0.9 * plateau)


def noisy(n: int, cv: float, rng: random.Random, level: float = 40_000.0) -> list[float]:
    return [rng.gauss(level, cv * level) for _ in range(n)]


# --- the online detector on recorded ramps --------------------------------------------------


def test_the_fixture_holds_real_ramps() -> None:
    # Guards the tests below against a fixture that lost what it was recorded for: ramps
    # over within the first seconds (as the issue describes), later steps up, warm series.
    assert len(RAMPS) >= 5 and len(WARM) >= 8
    ends = [flat_from(s["qps"]) for s in RAMPS]
    assert sum(e <= WINDOW_S for e in ends) >= 3 and sum(e > WINDOW_S for e in ends) >= 3
    for series in RAMPS:
        qps = series["qps"]
        assert qps[0] < 0.8 * statistics.median(qps[len(qps) // 2 :])


@pytest.mark.parametrize("series", RAMPS, ids=lambda s: s["name"])
def test_a_ramp_is_waited_out_or_reported(series: dict[str, Any]) -> None:
    qps = series["qps"]
    stop, steady = warmup_stop(qps)
    end = flat_from(qps)
    assert steady
    # Measuring starts at index `stop`.
    if end <= WINDOW_S:
        # A ramp over within the first seconds, as after most starts: waited out.
        assert stop >= end, (stop, qps[:stop])
        assert stop <= end + WINDOW_S + 3
    else:
        # A step up after a flat stretch (MyRocks filling its block cache, the host): no
        # window of past seconds foresees it, so the measured part must say so.
        assert stop >= end or not check_stability(qps[stop:]).stable


@pytest.mark.parametrize("series", WARM, ids=lambda s: s["name"])
def test_a_warm_series_is_called_steady_within_a_few_seconds(series: dict[str, Any]) -> None:
    stop, steady = warmup_stop(series["qps"])
    assert steady and stop <= WINDOW_S + 4


def test_warming_brings_the_first_second_within_the_noise() -> None:
    """The issue's acceptance criterion, on every recorded ramp that fails it unwarmed."""
    failing = [s["qps"] for s in RAMPS if not first_second_check(s["qps"]).within]
    assert len(failing) >= 3
    for qps in failing:
        stop, _ = warmup_stop(qps)
        assert first_second_check(qps[stop:]).within, qps


def test_the_minimum_and_the_maximum_bound_warming() -> None:
    flat = [40_000.0] * 40
    assert warmup_stop(flat, min_s=9)[0] == 9
    ramp = [10_000.0 * (1 + 0.1 * i) for i in range(40)]  # never flattens
    assert warmup_stop(ramp, min_s=2, max_s=12) == (12, False)


def test_a_detector_says_why_it_stopped() -> None:
    detector = WarmupDetector(2, 6)
    for i in range(6):
        detector.add(10_000.0 * (1 + 0.2 * i))
    assert detector.done and not detector.steady
    assert warmup_text(detector) == "no steady state within 6 s (last 5 s still trend +12.5%/s)"


def test_no_throughput_is_not_a_steady_state() -> None:
    assert warmup_stop([0.0] * 20, max_s=10) == (10, False)


def test_the_detector_rarely_misses_a_flat_series() -> None:
    rng = random.Random(7)
    stops = [warmup_stop(noisy(30, 0.03, rng))[0] for _ in range(300)]
    assert statistics.median(stops) == WINDOW_S
    assert sum(s <= WINDOW_S + 3 for s in stops) / len(stops) > 0.9


# --- the offline check of measured series ---------------------------------------------------


def test_a_flat_noisy_series_is_stable() -> None:
    verdict = check_stability(noisy(30, 0.03, random.Random(1)))
    assert verdict.stable and verdict.judged and verdict.held is Held.LEVEL
    assert stability_reason(verdict) == "no trend or level shift"


def test_a_level_shift_is_unstable_and_named() -> None:
    values = noisy(30, 0.03, random.Random(2))
    shifted = values[:18] + [v * 0.85 for v in values[18:]]
    verdict = check_stability(shifted)
    assert not verdict.stable and stability_reason(verdict).startswith("level shift -1")
    assert verdict.shift_at_s is not None and 16 <= verdict.shift_at_s <= 20


def test_a_trend_is_unstable_and_named() -> None:
    values = [v * (1 + 0.006 * i) for i, v in enumerate(noisy(30, 0.03, random.Random(3)))]
    verdict = check_stability(values)
    assert not verdict.stable and stability_reason(verdict).startswith("trend +0.")
    assert verdict.slope_pct_per_s is not None and 0.3 < verdict.slope_pct_per_s < 0.9


def test_a_small_drift_on_a_long_series_is_not_unstable() -> None:
    # 0.5% over 60 s: significant with so many seconds, but too small to matter.
    values = [40_000.0 * (1 + 0.005 * i / 59) + (-1) ** i * 40 for i in range(60)]
    assert trend(values).p_value < 0.01
    assert check_stability(values).stable


def test_a_one_second_dip_is_not_a_level_shift() -> None:
    values = noisy(20, 0.02, random.Random(4))
    values[9] *= 0.4
    assert check_stability(values).stable


@pytest.mark.parametrize(("n", "cv"), [(10, 0.03), (30, 0.03), (60, 0.03), (30, 0.10)])
def test_false_alarms_on_flat_noisy_series_are_rare(n: int, cv: float) -> None:
    rng = random.Random(n * 100 + int(cv * 100))
    alarms = sum(not check_stability(noisy(n, cv, rng)).stable for _ in range(400))
    assert alarms / 400 < 0.05


@pytest.mark.parametrize(("n", "cv"), [(10, 0.03), (30, 0.03), (30, 0.10)])
def test_real_level_shifts_are_found(n: int, cv: float) -> None:
    # The other side of the false-alarm rate: a 25% drop for the last third is caught.
    rng = random.Random(n + int(cv * 1000))
    found = 0
    for _ in range(200):
        values = noisy(n, cv, rng)
        cut = n - n // 3
        found += not check_stability(values[:cut] + [v * 0.75 for v in values[cut:]]).stable
    assert found / 200 > 0.9


def test_short_series_are_not_judged() -> None:
    verdict = check_stability([1.0, 2.0, 3.0])
    assert verdict.stable and not verdict.judged
    assert stability_reason(verdict) == "too short to judge (3 s)"
    assert stability_reason(check_stability([0.0] * 20)) == "no throughput to judge"


def test_a_verdict_is_stored_with_its_reason_second() -> None:
    verdict = check_stability(noisy(30, 0.03, random.Random(5)))
    stored = json.loads(json.dumps(verdict.to_dict(stability_reason(verdict))))
    assert list(stored)[:3] == ["stable", "reason", "n"] and "held" not in stored
    assert stored["reason"] == "no trend or level shift" and stored["n"] == verdict.n


# --- the acceptance criterion --------------------------------------------------------------


def test_first_second_check_against_the_noise() -> None:
    rng = random.Random(6)
    warm = noisy(12, 0.03, rng)
    assert first_second_check(warm).within
    check = first_second_check([0.8 * 40_000.0, *warm[1:]])
    assert not check.within and check.deviation > 3


def test_first_second_check_needs_enough_seconds() -> None:
    with pytest.raises(ValueError, match="at least 6 seconds"):
        first_second_check([1.0] * 5)


# --- the experiment file and the result model ----------------------------------------------

EXPERIMENT = {
    "name": "t",
    "engines": ["innodb"],
    "steps": ["point-query"],
    "setup": [{"name": "glibc", "allocator": "glibc"}],
}


def durations(**values: object) -> dict[str, Any]:
    return {**EXPERIMENT, "durations": values}


def test_max_warmup_bounds_warming_and_defaults_sensibly() -> None:
    exp = from_dict(durations(warmup=3, max_warmup=20))
    assert (exp.warmup_s, exp.max_warmup_s) == (3.0, 20.0)
    assert from_dict(durations(warmup=2)).max_warmup_s == 30.0
    # A minimum above the default maximum is a fixed warmup, as it was before.
    assert from_dict(durations(warmup=45)).max_warmup_s == 45.0
    assert from_dict(durations(warmup=0)).warmup_s == 0.0


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"warmup": 5, "max_warmup": 3}, "durations.max_warmup = 3 is below durations.warmup = 5"),
        ({"warmup": 0, "max_warmup": 10}, "warmup = 0 turns warming off"),
        ({"warmup": 2, "max_warmup": float("nan")}, "durations.max_warmup = nan is out of range"),
        (
            {"warmup": 2, "max_warmup": "30 sec!"},
            "durations.max_warmup = '30 sec!' is not a duration",
        ),
        ({"warmup": 2, "max_warmup": 10**9}, "durations.max_warmup = 1000000000 is out of range"),
    ],
)
def test_bad_max_warmup_is_refused(values: dict[str, object], needle: str) -> None:
    with pytest.raises(MallocbenchError, match=needle.replace("(", r"\(")):
        from_dict(durations(**values))


def test_cells_from_before_warmup_detection_still_load() -> None:
    old = json.loads((Path(__file__).parent / "fixtures" / "results-small.json").read_text())
    assert all("stability" not in c for c in old["cells"])
    cells = RunResult.from_dict(old).cells
    assert cells and all(not c.unstable and c.stability_note == "" for c in cells)


def test_warmup_and_stability_flow_through_the_store(tmp_path: Path) -> None:
    cell = Cell("glibc", "innodb", "point-query range=100", 8, 0, qps=1.0, session="s")
    cell.warmup_s, cell.warmup_steady = 7.0, True
    verdict = check_stability([40_000.0] * 10 + [30_000.0 + (-1) ** i * 100 for i in range(10)])
    cell.stability = verdict.to_dict(stability_reason(verdict))
    store = Store(tmp_path / "results.sqlite")
    try:
        store.create_run(RunResult("r", "t", "glibc"))
        store.save_cell("r", cell)
        loaded = store.load_run("r").cells[0]
    finally:
        store.close()
    assert (loaded.warmup_s, loaded.warmup_steady) == (7.0, True)
    assert loaded.unstable
    assert loaded.stability_note == "warmed 7 s (steady); unstable: level shift -25% after 10 s"


# --- a real server ---------------------------------------------------------------------------


def run_real(tmp_path: Path, warmup: float, max_warmup: float, step: int) -> RunOutcome:
    path = small_experiment(
        tmp_path, file="steady.toml", name="steady", threads=8, warmup=str(warmup), step=step,
        extra=f"max_warmup = {max_warmup}", setups=(("glibc", "glibc"),), setup_extra=None,
    )  # fmt: skip
    return Pipeline(
        load(path), RunOptions(out_dir=tmp_path / "out"), executor=RealExecutor()
    ).execute()


@pytest.mark.server
def test_a_real_run_warms_until_steady_then_measures_warm(tmp_path: Path) -> None:
    max_warmup = 20
    # One more run when the acceptance check fails: on this 2-core host a co-running
    # load disturbs some single second in about one run in fifteen (the first measured
    # second then reads 2/3 of the rest), which says nothing about warming.
    for attempt in range(2):
        cell, session = real_cell(tmp_path / f"attempt{attempt}", max_warmup)
        qps = [s.qps for s in cell.samples if s.qps is not None]
        check = first_second_check(qps)
        if check.within:
            break
    assert check.within, (check, qps)
    assert session.cache_warm is not None and session.cache_warm.startswith(
        "read 2 indexes of 1 tables in"
    )
    assert cell.stability["n"] == len(qps) and cell.stability_note.startswith(
        f"warmed {cell.warmup_s:.0f} s"
    )


def real_cell(directory: Path, max_warmup: float) -> tuple[Cell, SessionInfo]:
    directory.mkdir()
    outcome = run_real(directory, warmup=1, max_warmup=max_warmup, step=8)
    assert outcome.aborted is None and not outcome.failures, outcome.failures
    (cell,) = outcome.result.cells
    (session,) = outcome.result.sessions
    assert cell.status == "ok"
    # Bounded by the maximum; a full detector window at least.
    assert cell.warmup_s is not None and WINDOW_S - 1 <= cell.warmup_s <= max_warmup + 1
    assert isinstance(cell.warmup_steady, bool)
    assert cell.started_at is not None and cell.samples
    if cell.warmup_steady:
        # Ended when the detector said so, and measuring began right then: the first
        # kept second comes about 2 s after the warmup here (a new sysbench connecting,
        # its first second dropped). The old bound, the maximum itself, failed in CI
        # when a warmup judged steady late (20.3 s in, under load 9.5).
        assert cell.warmup_s < max_warmup
        assert cell.samples[0].t - cell.started_at < cell.warmup_s + 5
    # 8 s measured as one slice, its first second (sysbench connecting) dropped.
    assert len(cell.samples) >= 6 and cell.slices and cell.slices[0]["seconds"] >= 6
    return cell, session


@pytest.mark.server
def test_a_warmup_stopped_at_its_maximum_is_no_failure(tmp_path: Path) -> None:
    # warmup = max_warmup is a fixed warmup: shorter than the detector's window, so the
    # run is always stopped at the maximum, never judged steady.
    outcome = run_real(tmp_path, warmup=3, max_warmup=3, step=3)
    assert outcome.aborted is None and not outcome.failures, outcome.failures
    (cell,) = outcome.result.cells
    assert cell.status == "ok" and cell.qps and cell.qps > 0
    assert cell.warmup_steady is False and cell.warmup_s is not None
    # Seconds as sysbench reported them: under a load average of 11 a 3 s run reported
    # only 2, its start-up taking the rest.
    assert 1.5 <= cell.warmup_s <= 3.5
    assert cell.stability_note.startswith(f"warmed {cell.warmup_s:.0f} s (not steady at the max")
