"""`mallocbench calibrate` end to end on a real server, and the interference probe."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cli_runner import experiment_text, run_cli
from mallocbench.probes.system import CpuSnapshot, cpu_snapshot, interference
from mallocbench.report.calibrate import design_choice_text, note_lines

# One table of 2,000 rows: the shape of the other run tests, one golden datadir for all.
TINY = experiment_text(
    "tiny", base="glibc", threads=2, cache="64M", warmup="1", step=None,
    extra="max_warmup = 3", setups=(("glibc", "glibc"),),
)  # fmt: skip


def _tiny(directory: Path) -> Path:
    path = directory / "tiny.toml"
    path.write_text(TINY)
    return path


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.alone(strict=True)  # any other test's CPU, even idle-priority, would be the burner
def test_interference_sees_a_cpu_burner_unless_it_is_ours() -> None:
    before_cpu = _children_cpu_s()
    before = cpu_snapshot()
    # A second of CPU time, however long a busy machine takes to give it.
    burner = "import time\nwhile time.process_time() < 1.0: pass\n"
    subprocess.run([sys.executable, "-c", burner], check=True)
    after = cpu_snapshot()
    burnt_s = _children_cpu_s() - before_cpu
    capacity_s = (after.total - before.total) / os.sysconf("SC_CLK_TCK")
    assert burnt_s >= 1.0 and capacity_s >= burnt_s

    strangers = interference(before, after, own_cpu_s=0.0)
    ours = interference(before, after, own_cpu_s=burnt_s)
    # Someone else's burner is interference; the same burner counted as ours is not.
    assert strangers["other_cpu_share"] >= 0.8 * burnt_s / capacity_s
    assert ours["other_cpu_share"] <= strangers["other_cpu_share"] - 0.8 * burnt_s / capacity_s
    assert 0.0 <= ours["other_cpu_share"] <= 1.0
    assert 0.0 <= strangers["steal_share"] <= 1.0
    assert strangers["load_avg_1m"] >= 0.0


def test_interference_arithmetic_and_clamping() -> None:
    hz = os.sysconf("SC_CLK_TCK")
    zero = dict.fromkeys(("user", "nice", "system", "idle", "iowait", "irq", "softirq"), 0)
    before = CpuSnapshot({**zero, "steal": 0}, t=0.0)
    # 4 s of CPU time in all: 1 s user, 0.4 s stolen, the rest idle.
    after = CpuSnapshot({**zero, "user": hz, "idle": int(2.6 * hz), "steal": int(0.4 * hz)}, 1.0)
    found = interference(before, after, own_cpu_s=0.5)
    assert found["other_cpu_share"] == pytest.approx(0.5 / 4, abs=0.01)
    assert found["steal_share"] == pytest.approx(0.1, abs=0.01)
    assert found["idle_share"] == pytest.approx(0.65, abs=0.01)
    assert interference(before, after, own_cpu_s=3.0)["other_cpu_share"] == 0.0
    # Capacity as CPUs x wall time when given: 2 CPUs over 1 s.
    assert interference(before, after, 0.0, cpus=2)["other_cpu_share"] == pytest.approx(0.5)


def _servers_under(directory: Path) -> list[int]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] in ("mariadbd", "mysqld") and str(directory) in cmdline:
            found.append(proc.pid)
    return found


@pytest.mark.server
def test_calibrate_measures_noise_and_leaves_nothing_running(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = tmp_path / "out.json"
    started = time.monotonic()
    # The experiment's turns settle for one round, not the default 4: the turns phase
    # measures the same 3 rounds, 6 s sooner a start; settle is priced as given.
    experiment = tmp_path / "turns.toml"
    experiment.write_text(
        TINY.replace("threads = [2]", 'threads = [2]\nalternate = "turns"').replace(
            "max_warmup = 3", "max_warmup = 3\nsettle = 1"
        )
    )
    result = run_cli(
        "calibrate",
        str(experiment),
        "--starts", "2", "--slices", "2", "--slice", "3", "--turns", "3",
        "--out", str(out), "--json", str(report),
        timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert time.monotonic() - started < 240  # about 65 s idle; 163 s at load 30
    data = json.loads(report.read_text())
    components = data["components"]
    assert components["starts"] == 2 and components["slices"] == 4
    assert components["within_var"] >= 0 and components["between_var"] >= 0
    assert components["slice_cv_pct"] is not None and components["start_cv_pct"] is not None
    assert len(data["starts"]) == 2
    for start in data["starts"]:
        assert start["start_s"] > 0 and len(start["slices"]) == 2
        for piece in start["slices"]:
            assert piece["qps"] > 0 and len(piece["seconds"]) >= 1
            assert 0 <= piece["interference"]["other_cpu_share"] <= 1
            assert 0 <= piece["interference"]["steal_share"] <= 1
            assert 0 <= piece["interference"]["harness_cpu_share"] <= 1
    assert data["interference"]["max_other_cpu_share"] is not None
    assert data["plan"]["slices_per_start"] >= 1 and data["plan"]["setups"] == 2
    assert "Noise by level" in result.stdout and "Interference per slice" in result.stdout
    assert "resolves an interval width" in result.stdout or "does not fit" in result.stdout

    # Each start is of two copies (the experiment has one setup, a run compares at
    # least two), compared as runs and as turns: one series of a ratio per round.
    assert len(data["pairs"]) == 2
    kept_runs = kept_turns = 0
    for pair in data["pairs"]:
        (runs,), (turns,) = pair["run_ratios"], pair["turn_ratios"]
        # A slice or turn that completed nothing (a stall on a loaded host: CI saw one)
        # has no ratio and is left out, never counted as zero or as infinity.
        assert 1 <= len(runs) <= 2 and 1 <= len(turns) <= 3, pair
        kept_runs, kept_turns = kept_runs + len(runs), kept_turns + len(turns)
        assert len(pair["warmups_s"]) == 2  # both copies' warmups price a block's
        # Positive and finite; not bounded above: a clean-clone CI run, its tests in
        # parallel, had one copy near-stalled for whole slices and turns (ratios 0.06 in
        # runs, 183 in a turn), which is noise this host made, not a wrong ratio.
        assert all(0 < r < math.inf for r in runs + turns), pair
    assert data["runs_ratio"]["starts"] == 2 and data["runs_ratio"]["slices"] == kept_runs
    assert data["turns_ratio"]["starts"] == 2 and data["turns_ratio"]["slices"] == kept_turns
    assert data["costs"]["turn_s"] >= 1.0 and data["costs"]["stop_s"] > 0
    designs = {p["design"]: p for p in data["designs"]}
    assert set(designs) == {"sequential", "runs", "turns"}
    assert designs["runs"]["paired"] and not designs["sequential"]["paired"]
    # The plan of the experiment's design uses the paired components, not twice one setup's.
    assert data["plan"]["paired"]
    assert data["best"] in designs
    assert "Designs for 2 setups" in result.stdout
    # From 2 starts the designs can seldom be ranked: then the best is named a guess.
    if data["unranked"]:
        assert "Narrowest design here" in result.stdout and "not a finding" in result.stdout
    else:
        assert "Best design here" in result.stdout

    assert not _servers_under(tmp_path)
    assert not list(out.glob("calibrate/*/data")), "a datadir was left behind"
    assert not (out / "results.sqlite").exists()


def test_as_many_copies_as_setups_each_give_a_ratio_series(tmp_path: Path) -> None:
    """Copies b, c and d each give copy a / that copy per round: every series is a
    group of the ratio's components (the level of copy c against a moves a block ratio
    as b's does), and a turn's cost is the turns phase over every copy's turns."""
    from mallocbench.calibrate.summary import PairResult, SliceResult, StartResult, summarize
    from mallocbench.calibrate.target import pick_target
    from mallocbench.run import loading as loading_mod

    path = tmp_path / "four.toml"
    path.write_text(
        TINY + "".join(f'[[setup]]\nname = "g{i}"\nallocator = "glibc"\n' for i in (2, 3, 4))
    )
    experiment = loading_mod.load(path)
    target = pick_target(experiment, None, None, None, None)
    levels = ([1.0, 1.2, 0.9], [1.1, 1.0, 0.8])  # copy a over b, c, d: per start
    starts, pairs = [], []
    for level in levels:
        piece = SliceResult(1000.0, [1000.0], 6.0, {})
        starts.append(StartResult(2.0, 5.0, True, [piece, piece]))
        pairs.append(
            PairResult(
                8.0,
                run_ratios=[[x, x * 1.01] for x in level],
                turn_ratios=[[x, x * 0.99, x] for x in level],
                turns_wall_s=4 * (3 + 4) * 1.25,  # 4 copies x (3 rounds + 4 settle rounds)
                warmups_s=[5.0] * 4,
            )
        )
    options = {"turns": 3, "turn_s": 1.0, "budget_s": 300.0, "target_ci_pct": 3.0, "slice_s": 5}
    summary = summarize(experiment, target, starts, options, pairs)
    assert summary.runs_ratio is not None and summary.turns_ratio is not None
    assert summary.runs_ratio.starts == 6 and summary.runs_ratio.slices == 12
    assert summary.turns_ratio.starts == 6 and summary.turns_ratio.slices == 18
    assert summary.costs.turn_s == pytest.approx(1.25)
    assert summary.costs.settle_rounds == experiment.settle_rounds == 4
    assert summary.runs_ratio.between_var is not None and summary.runs_ratio.between_var > 0.005
    assert summary.plan.setups == 4


def test_copies_take_the_places_a_runs_blocks_give_their_setups(tmp_path: Path) -> None:
    """Start k starts, warms and turns its copies in the order block k of a run has its
    setups (reversed on odd repeats), so an advantage of one place in that order is
    between-start variance in the calibration as in the run, not a fixed offset of copy
    a that the prediction would leave out."""
    from mallocbench.calibrate.measure import copy_order
    from mallocbench.run import loading as loading_mod
    from mallocbench.run import planning as planning_mod

    for count in (2, 3, 4):
        path = tmp_path / f"n{count}.toml"
        path.write_text(
            TINY
            + "".join(
                f'[[setup]]\nname = "g{i}"\nallocator = "glibc"\n' for i in range(2, count + 1)
            )
        )
        experiment = dataclasses.replace(loading_mod.load(path), repeats=4)
        names = [s.name for s in experiment.setups]
        for repeat in range(4):
            block = [
                session.setup
                for session in planning_mod.plan(experiment)
                if session.repeat == repeat
            ]
            assert copy_order(count, repeat) == [names.index(n) for n in block]
    assert copy_order(2, 1) == [1, 0]


def test_two_copies_get_the_starts_four_get_in_ratio_series() -> None:
    """One series of copy a over another copy per start with two copies, three with four:
    the default starts give both about as many series, and never fewer than 5 starts."""
    from mallocbench.calibrate.summary import DEFAULT_STARTS, default_starts

    assert default_starts(1) == DEFAULT_STARTS == 5
    assert default_starts(2) == 10
    assert default_starts(3) == 5 and default_starts(4) == 5
    assert all(default_starts(n) * (n - 1) >= 10 for n in range(2, 8))


def test_runs_and_turns_are_planned_with_the_start_level_both_saw(tmp_path: Path) -> None:
    """Three starts whose level runs measure precisely and turns drown in their scatter:
    turns alone call the start-to-start variance 0; pooled over both designs, as they
    measure the same starts, the plans of both carry it, and the note says so."""
    from mallocbench.analysis.noise import SHARED_START_MIN_P
    from mallocbench.calibrate.summary import PairResult, SliceResult, StartResult, summarize
    from mallocbench.calibrate.target import pick_target
    from mallocbench.run import loading as loading_mod

    experiment = loading_mod.load(_tiny(tmp_path))
    target = pick_target(experiment, None, None, None, None)
    scatter = [1.3, 0.75, 1.25, 0.8, 1.2, 0.85]  # turn to turn, far above the levels' spread
    starts, pairs = [], []
    for level in (1.0, 1.1, 0.9):
        piece = SliceResult(1000.0, [1000.0], 6.0, {})
        starts.append(StartResult(2.0, 5.0, True, [piece, piece]))
        pairs.append(
            PairResult(
                8.0,
                run_ratios=[[level * 1.01, level / 1.01, level]],
                turn_ratios=[[level * s for s in scatter]],
                turns_wall_s=2 * 7 * 1.1,
                warmups_s=[5.0, 5.0],
            )
        )
    options = {"turns": 6, "turn_s": 1.0, "budget_s": 300.0, "target_ci_pct": 3.0, "slice_s": 5}
    summary = summarize(experiment, target, starts, options, pairs)
    assert summary.own_start_var["turns"] == 0.0
    own_runs = summary.own_start_var["runs"]
    assert own_runs is not None and own_runs > 0.005
    assert summary.runs_ratio is not None and summary.turns_ratio is not None
    shared = summary.turns_ratio.between_var
    assert shared is not None
    assert shared == pytest.approx(own_runs, rel=0.05)  # runs measure the levels precisely
    assert summary.runs_ratio.between_var == max(own_runs, shared)
    assert any("pooled over both" in note for note in note_lines(summary))
    data = summary.to_dict()
    assert data["turns_ratio"]["between_var"] == shared and data["own_start_var"]["turns"] == 0.0
    assert data["start_agreement_p"] > SHARED_START_MIN_P

    # A start whose turns put copy a far below b while its runs put them level: turns'
    # starts vary in a way of their own, and each design keeps its own estimate.
    pairs[1].turn_ratios = [[0.6 * s for s in scatter]]
    summary = summarize(experiment, target, starts, options, pairs)
    assert summary.runs_ratio is not None and summary.turns_ratio is not None
    assert summary.runs_ratio.between_var == pytest.approx(own_runs)
    own_turns = summary.own_start_var["turns"]
    assert own_turns is not None and own_turns > 0.05
    assert summary.turns_ratio.between_var == own_turns
    assert any("keep their own" in note for note in note_lines(summary))
    p = summary.start_agreement_p
    assert p is not None and p < SHARED_START_MIN_P


# One calibration of two glibc copies here (10 starts, stop 45): copy a / copy b per
# start, its 3 runs and its 6 turns.
RUNS_SEEN = [
    [0.9907, 0.9425, 1.2348],
    [0.9495, 1.0115, 1.1348],
    [0.9153, 0.9273, 1.0506],
    [0.8261, 0.9143, 0.8968],
    [1.0983, 0.9146, 0.9718],
    [0.9366, 0.8879, 1.1150],
    [1.1591, 0.9315, 1.0441],
    [0.8625, 0.9499, 0.8939],
    [0.9401, 0.8745, 1.1454],
    [1.0069, 0.9227, 1.0152],
]
TURNS_SEEN = [
    [0.9044, 1.2027, 1.1511, 1.1340, 0.9027, 0.8767],
    [1.0071, 0.9881, 0.9736, 0.5317, 0.9471, 0.8229],
    [0.7625, 0.7811, 0.9897, 0.9083, 0.9229, 0.8195],
    [0.8501, 0.6424, 1.0916, 0.9684, 1.0851, 0.9349],
    [1.2894, 1.1580, 0.9420, 0.9342, 0.9334, 0.9107],
    [1.2141, 1.0935, 1.1088, 1.0935, 1.0134, 1.2219],
    [1.0079, 0.9828, 0.9178, 0.8218, 0.8548, 0.9735],
    [1.0975, 0.7560, 0.8786, 0.8951, 1.0038, 1.5486],
    [1.2984, 0.9847, 0.7638, 0.9108, 1.0301, 0.9264],
    [1.1330, 1.6419, 1.1521, 1.0392, 0.9181, 1.1651],
]


def test_the_pooled_start_level_is_a_floor_not_a_replacement(tmp_path: Path) -> None:
    """Runs that put the starts level (0.0001) and turns whose starts spread (0.0053),
    not enough apart for the agreement test to reject one shared level (p about 0.1):
    the pooled 0.0009 raises runs' estimate and leaves turns' own, so turns are not
    promised an interval their own starts say they will not reach."""
    from mallocbench.analysis.designs import TURNS_DESIGN
    from mallocbench.analysis.noise import SHARED_START_MIN_P
    from mallocbench.calibrate.summary import PairResult, SliceResult, StartResult, summarize
    from mallocbench.calibrate.target import pick_target
    from mallocbench.report.calibrate import design_lines
    from mallocbench.run import loading as loading_mod

    experiment = loading_mod.load(_tiny(tmp_path))
    target = pick_target(experiment, None, None, None, None)
    piece = SliceResult(1000.0, [1000.0], 6.0, {})
    starts = [StartResult(0.6, 8.0, True, [piece, piece, piece]) for _ in RUNS_SEEN]
    pairs = [
        PairResult(1.2, run_ratios=[runs], turn_ratios=[turns], turns_wall_s=15.5, warmups_s=[8, 8])
        for runs, turns in zip(RUNS_SEEN, TURNS_SEEN, strict=True)
    ]
    options = {"turns": 6, "turn_s": 1.0, "budget_s": 300.0, "target_ci_pct": 3.0, "slice_s": 5}
    summary = summarize(experiment, target, starts, options, pairs)
    own_runs, own_turns = summary.own_start_var["runs"], summary.own_start_var["turns"]
    assert own_runs is not None and own_turns is not None and own_runs < 0.0005 < own_turns
    p = summary.start_agreement_p
    assert p is not None and SHARED_START_MIN_P < p < 0.2
    assert summary.runs_ratio is not None and summary.turns_ratio is not None
    pooled = summary.runs_ratio.between_var
    assert pooled is not None and own_runs < pooled < own_turns
    assert summary.turns_ratio.between_var == own_turns
    turns = next(plan for plan in summary.designs if plan.design == TURNS_DESIGN)
    assert turns.budget_width_pct is not None and turns.budget_width_pct > 15
    # Runs are predicted a little narrower than turns, by less than 10 starts can tell:
    # the calibration names runs its best guess and says it cannot rank the two.
    # (This test's sequential starts are all alike: whatever it says of them is no news.)
    assert summary.best == "runs" and "turns" in summary.unranked
    assert summary.to_dict()["unranked"] == summary.unranked
    (line,) = design_lines(summary)
    assert line.startswith("Narrowest design here for 2 setups in 5 min: runs (about ")
    assert "turns at " in line and "not reliably wider" in line and "not a finding" in line


def test_a_copy_that_nearly_stopped_is_named_and_kept(tmp_path: Path) -> None:
    """Ten starts as calibrated on a quiet host give no note; the same with one runs
    slice of copy b nearly stopped (a / b = 16, as a busy CI host once gave) name the
    start, the design and the ratio, and the ratio stays in the components."""
    from mallocbench.calibrate.summary import (
        CalibrationSummary,
        PairResult,
        SliceResult,
        StartResult,
        summarize,
    )
    from mallocbench.calibrate.target import pick_target
    from mallocbench.run import loading as loading_mod

    experiment = loading_mod.load(_tiny(tmp_path))
    target = pick_target(experiment, None, None, None, None)
    piece = SliceResult(1000.0, [1000.0], 6.0, {})
    starts = [StartResult(0.6, 8.0, True, [piece, piece, piece]) for _ in RUNS_SEEN]
    options = {"turns": 6, "turn_s": 1.0, "budget_s": 300.0, "target_ci_pct": 3.0, "slice_s": 5}

    def summary_of(runs_seen: list[list[float]]) -> CalibrationSummary:
        pairs = [
            PairResult(1.2, [runs], [turns], turns_wall_s=15.5, warmups_s=[8, 8])
            for runs, turns in zip(runs_seen, TURNS_SEEN, strict=True)
        ]
        return summarize(experiment, target, starts, options, pairs)

    quiet = summary_of(RUNS_SEEN)
    assert not any("nearly stopped" in note for note in note_lines(quiet))
    stalled_runs = [list(r) for r in RUNS_SEEN]
    stalled_runs[3][1] = 16.0
    stalled = summary_of(stalled_runs)
    (note,) = [n for n in note_lines(stalled) if "nearly stopped" in n]
    assert note.startswith("a copy nearly stopped: in start 4, copy a ran at 16 times copy b")
    assert "in a slice" in note and "calibrate again when it is quiet" in note
    assert stalled.runs_ratio is not None and quiet.runs_ratio is not None
    assert stalled.runs_ratio.within_var > 2 * quiet.runs_ratio.within_var


def test_unknown_setup_is_one_clean_error_line(tmp_path: Path) -> None:
    result = run_cli("calibrate", str(_tiny(tmp_path)), "--setup", "nope", "--out", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("mallocbench: error: no setup 'nope'") and "glibc" in lines[0]
    assert "Traceback" not in result.stderr


def test_a_slice_shorter_than_a_runs_is_refused(tmp_path: Path) -> None:
    """calibrate's slices are sysbench runs of their own, whose first second is dropped."""
    result = run_cli("calibrate", str(_tiny(tmp_path)), "--slice", "2", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "--slice" in result.stderr and "2<=" not in result.stderr
    assert "Traceback" not in result.stderr


def _store_calibration(cache: Path, experiment_file: Path, turns_within: float) -> None:
    """A stored calibration for this host and shape, as `calibrate` keeps one."""
    from mallocbench.calibrate.store import calibration_key
    from mallocbench.calibrate.target import pick_target
    from mallocbench.run import loading as loading_mod

    experiment = loading_mod.load(experiment_file)
    target = pick_target(experiment, None, None, None, None)

    def parts(within: float, between: float) -> dict[str, float | int]:
        return {"within_var": within, "between_var": between, "starts": 2, "slices": 6}

    record = {
        "saved_at": time.time(),
        "slice_s": 5.0,
        "turn_s": 1.0,
        "sequential": parts(4e-3, 4e-3) | {"within_df": 4, "mean_log": 8.0},
        "runs": parts(4e-3, 2e-3) | {"within_df": 4, "mean_log": 0.0},
        "turns": parts(turns_within, 1e-5) | {"within_df": 4, "mean_log": 0.0},
        "costs": {"start_s": 3.0, "warmup_s": 6.0, "slice_wall_s": 6.0, "turn_s": 1.1},
    }
    key = calibration_key(experiment, target)
    path = cache / "calibrations" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_auto_design_takes_the_narrowest_from_a_stored_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mallocbench.calibrate import auto as autodesign
    from mallocbench.run import loading as loading_mod

    path = tmp_path / "auto.toml"
    path.write_text(TINY.replace("threads = [2]", 'threads = [2]\ndesign = "auto"\nrepeats = 3'))
    monkeypatch.setenv("MALLOCBENCH_CACHE", str(tmp_path / "cache"))
    experiment = loading_mod.load(path)
    assert experiment.design == "auto"
    assert (
        autodesign.stored_choice(experiment, design_choice_text) is None
    )  # nothing stored: it would calibrate
    result = run_cli("run", str(path), "--dry-run", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no calibration of this host and shape is stored" in result.stdout

    # Quiet turns win; noisy turns lose to runs, and a tie keeps runs.
    _store_calibration(tmp_path / "cache", path, turns_within=1e-4)
    chosen = autodesign.stored_choice(experiment, design_choice_text)
    assert chosen is not None and chosen.design == "interleaved" and chosen.alternate == "turns"
    assert chosen.slice_s == 1.0 and chosen.design_why and "auto: turns" in chosen.design_why
    # The wall time of 3 repeats of two 5 s runs slices (3 x 42 s at the stored costs)
    # holds 6 turns per start after the block's 4 settle rounds (8.8 s of 1.1 s turns):
    # turns get the time runs would take, not runs' seconds.
    assert chosen.repeats == 3 and chosen.duration_s == 6.0
    assert chosen.design_budget_s == pytest.approx(126.0)
    result = run_cli("run", str(path), "--dry-run", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        "design auto: turns, 3 repeats of 6 turns, the narrowest expected interval in the "
        "same 2.1 min of wall time (the experiment's own as runs)" in result.stdout
    )
    assert "6 turn(s) of 1 s" in result.stdout

    # A cluster's hosts are not this machine: refused in one line, nothing started.
    result = run_cli(
        "run", str(path), "--dry-run", "--cluster", "127.0.0.1:9", "--insecure",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert 'design = "auto" calibrates this machine' in result.stderr

    _store_calibration(tmp_path / "cache", path, turns_within=0.5)
    chosen = autodesign.stored_choice(experiment, design_choice_text)
    assert chosen is not None and chosen.alternate == "runs" and chosen.design == "interleaved"
    assert chosen.slice_s == 5.0 and chosen.duration_s == 10.0 and chosen.repeats == 3
    # Nothing stored to resume: the stored calibration decides, not a run that is not there.
    assert autodesign.resumed_choice(experiment, tmp_path / "out" / "results.sqlite", None) is None


def test_a_calibration_kept_by_the_code_that_keeps_it_is_what_a_later_run_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache round trip: a summary of what calibrate measured, kept by
    store_calibration as calibrate keeps it, reads back whole, and a later auto run's dry
    run chooses from it (not "nothing stored") the design the record gives; stale, unused."""
    from mallocbench.calibrate import auto as autodesign
    from mallocbench.calibrate.store import (
        STORED_MAX_AGE_S,
        calibration_key,
        load_calibration,
        store_calibration,
    )
    from mallocbench.calibrate.summary import PairResult, SliceResult, StartResult, summarize
    from mallocbench.calibrate.target import pick_target
    from mallocbench.run import loading as loading_mod

    path = tmp_path / "auto.toml"
    path.write_text(
        TINY.replace("threads = [2]", 'threads = [2]\ndesign = "auto"\nrepeats = 3')
        + '[[setup]]\nname = "g2"\nallocator = "glibc"\n'
    )
    monkeypatch.setenv("MALLOCBENCH_CACHE", str(tmp_path / "cache"))
    experiment = loading_mod.load(path)
    target = pick_target(experiment, None, None, None, None)
    starts, pairs = [], []
    for level in (1.0, 1.05, 0.97):
        slices = [SliceResult(q, [q], 6.0, {}) for q in (1000.0 * level, 1010.0 * level)]
        starts.append(StartResult(2.0, 5.0, True, slices))
        pairs.append(
            PairResult(
                8.0,
                run_ratios=[[level, level * 1.01]],
                turn_ratios=[[level * 0.99, level, level * 1.02]],
                turns_wall_s=2 * 7 * 1.1,
                warmups_s=[5.0, 5.0],
            )
        )
    options = {"turns": 3, "turn_s": 1.0, "budget_s": 300.0, "target_ci_pct": 3.0, "slice_s": 5}
    summary = summarize(experiment, target, starts, options, pairs)
    key = calibration_key(experiment, target)
    kept = store_calibration(summary, key)
    assert kept is not None and kept.parent == tmp_path / "cache" / "calibrations"

    record = load_calibration(key)
    assert record is not None
    assert record["components"] == {
        "sequential": summary.components,
        "runs": summary.runs_ratio,
        "turns": summary.turns_ratio,
    }
    assert record["costs"] == summary.costs
    assert (record["slice_s"], record["turn_s"]) == (summary.slice_s, summary.turn_s)
    assert load_calibration(key, now=record["saved_at"] + STORED_MAX_AGE_S + 1) is None

    said = design_choice_text(autodesign.choose(experiment, record), True)
    result = run_cli("run", str(path), "--dry-run", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"design {said}" in result.stdout
    assert "no calibration of this host and shape is stored" not in result.stdout
