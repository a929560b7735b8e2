"""`mallocbench tune`: the search finds a known front, a resume loses no trial, noise
alone never beats the default, bad input is one line before anything runs, and a real
tune on a tiny recorded trace."""

from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import native_programs
from cli_runner import run_cli
from mallocbench import allocators
from mallocbench.allocators.base import Allocator
from mallocbench.analysis import choice
from mallocbench.deploy.launch import FORMS
from mallocbench.errors import MallocbenchError
from mallocbench.report import tune as tune_report
from mallocbench.run.loading import load
from mallocbench.tune import driver, evaluate, front, search
from mallocbench.tune.evaluate import EvaluationFailed, auto_portion
from mallocbench.tune.objectives import parse_constraints, parse_objectives
from mallocbench.tune.result import AllocatorTune, Deployed, Objective, Point, TuneDocument
from mallocbench.tune.space import build_space

OBJECTIVES = parse_objectives("rss,time")
RSS = OBJECTIVES[0].key  # the steady peak
GLIBC = allocators.get("glibc")
SPACE = build_space(GLIBC, [("arena_max", "1..64"), ("tcache_count", "0..64")])


def position(setting: Mapping[str, str]) -> tuple[float, float]:
    """(x, y) in [0, 1]^2 of a setting; the default sits at x = 1, y = 7/64."""
    arenas = float(setting.get("arena_max", 64))
    return math.log(arenas) / math.log(64), float(setting.get("tcache_count", 7)) / 64


def penalty(setting: Mapping[str, str]) -> float:
    """How far above the true front a setting lies: the front is y = 1/2."""
    return 4 * (position(setting)[1] - 0.5) ** 2


class Synthetic:
    """A known front: RSS = 1 + x, CPU = 1 + (1 - x)^2, both plus the penalty; `noise`
    is the relative spread of each measurement, `flat` takes every real effect away."""

    def __init__(self, noise: float = 0.0, flat: bool = False, seed: int = 7) -> None:
        self.noise = noise
        self.flat = flat
        self.rng = random.Random(seed)
        self.calls = 0

    def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        self.calls += 1
        x, _ = position(setting)
        p = 0.0 if self.flat else penalty(setting)
        rss, cpu = (1.0, 1.0) if self.flat else (1 + x + p, 1 + (1 - x) ** 2 + p)
        jitter = lambda: 1 + self.rng.gauss(0, self.noise)  # noqa: E731
        return {RSS: 100e6 * rss * jitter(), "cpu_s": cpu * jitter()}


def new_study(out: Path, seed: int = 3, constraints: str = "") -> Any:
    cons = parse_constraints([constraints] if constraints else [])
    settings = search.settings_for("synthetic", "synthetic", OBJECTIVES, cons, SPACE)
    return search.open_study(out, "glibc", OBJECTIVES, cons, settings, seed)


def test_the_search_finds_a_known_front_within_tolerance(tmp_path: Path) -> None:
    study = new_study(tmp_path)
    search.search(study, GLIBC, SPACE, OBJECTIVES, Synthetic(), search.Stop(40, None))
    observed = search.observed(study, SPACE, [])
    assert observed[0].default and observed[0].setting == {}
    found = [t for t in front.observed_front(observed, OBJECTIVES) if not t.default]
    assert len(found) >= 5
    # Tolerance: every point of the found front lies within 0.15 (15% of the smallest
    # RSS) above the true front, and its two ends reach within 0.2 of the front's ends.
    assert max(penalty(t.setting) for t in found) <= 0.15
    assert min(t.metrics[RSS] for t in found) <= 1.2 * 100e6
    assert min(t.metrics["cpu_s"] for t in found) <= 1.2


def test_a_constraint_keeps_infeasible_settings_off_the_front(tmp_path: Path) -> None:
    cons = parse_constraints(["time<=1.3"])
    study = new_study(tmp_path, constraints="time<=1.3")
    stop = search.Stop(14, None)
    search.search(study, GLIBC, SPACE, OBJECTIVES, Synthetic(), stop, None, cons)
    found = front.observed_front(search.observed(study, SPACE, cons), OBJECTIVES)
    assert found and all(t.metrics["cpu_s"] <= 1.3 for t in found)


class Interrupting(Synthetic):
    """Ctrl-C in the middle of the `at`-th evaluation."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        if self.calls + 1 == self.at:
            self.calls += 1
            raise KeyboardInterrupt
        return super().__call__(allocator, setting)


def test_resume_after_an_interruption_loses_no_trial(tmp_path: Path) -> None:
    study = new_study(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        search.search(study, GLIBC, SPACE, OBJECTIVES, Interrupting(6), search.Stop(12, None))
    before = {t.number: t.setting for t in search.observed(new_study(tmp_path), SPACE, [])}
    assert len(before) == 5
    resumed = new_study(tmp_path)  # the same settings: loads the study
    states = {t.state.name for t in resumed.get_trials()}
    assert "RUNNING" not in states  # the interrupted trial is closed, not left dangling
    search.search(resumed, GLIBC, SPACE, OBJECTIVES, Synthetic(), search.Stop(12, None))
    after = {t.number: t for t in search.observed(resumed, SPACE, [])}
    # 12 measured: the interrupted trial is no count of --trials, and its point is the
    # resume's first
    assert len(after) == 12
    cut = [t for t in resumed.get_trials() if t.user_attrs.get(search.INTERRUPTED_ATTR)]
    assert len(cut) == 1 and after[cut[0].number + 1].setting == cut[0].user_attrs["setting"]
    assert all(after[n].setting == setting for n, setting in before.items())
    assert sum(t.default for t in after.values()) == 1  # the default ran once, first


def test_a_resume_with_other_settings_is_refused(tmp_path: Path) -> None:
    new_study(tmp_path)
    with pytest.raises(Exception, match="give the same options to --resume"):
        new_study(tmp_path, constraints="rss<=1G")


def test_a_study_searched_by_an_older_replayer_is_not_resumed(tmp_path: Path) -> None:
    """Before the replayer wrote a byte a page it wrote every byte, and a trial's CPU
    figures moved with it: such a study (no `replayer` attribute) is refused, one line.
    A study measured on servers has no replayer: it resumes whatever the replayer."""

    def study(out: Path, replayed: bool) -> Any:
        out.mkdir(exist_ok=True)
        settings = search.settings_for("t.mbt", "synthetic", OBJECTIVES, [], SPACE, replayed)
        return search.open_study(out, "glibc", OBJECTIVES, [], settings, 3)

    study(tmp_path / "servers", replayed=False)
    study(tmp_path / "servers", replayed=False)
    assert "replayer" not in study(tmp_path / "servers", replayed=False).user_attrs
    assert study(tmp_path / "now", replayed=True).user_attrs["replayer"] == search.REPLAYER
    study(tmp_path / "now", replayed=True)
    study(tmp_path / "before", replayed=False)  # as a study from before the key was kept
    with pytest.raises(MallocbenchError, match=r"older replayer \(every byte .*another --out"):
        study(tmp_path / "before", replayed=True)


def test_a_resume_names_the_trace_however_it_is_spelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The study began with a relative path (as a study before absolute paths did); the
    same file named absolutely, or through a symlink, is the same study; another is not."""
    (tmp_path / "tiny.mbt").write_bytes(b"")
    (tmp_path / "other.mbt").write_bytes(b"")
    (tmp_path / "link.mbt").symlink_to(tmp_path / "tiny.mbt")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)

    def study(trace: str) -> Any:
        settings = search.settings_for(trace, "synthetic", OBJECTIVES, [], SPACE)
        return search.open_study(tmp_path / "out", "glibc", OBJECTIVES, [], settings, 3)

    study("tiny.mbt")
    study(str(tmp_path / "tiny.mbt"))
    study(str(tmp_path / "link.mbt"))
    with pytest.raises(Exception, match="searched tune-glibc with trace"):
        study(str(tmp_path / "other.mbt"))


def judged(evaluator: Synthetic, tmp_path: Path, trials: int = 20) -> list[Point]:
    study = new_study(tmp_path)
    search.search(study, GLIBC, SPACE, OBJECTIVES, evaluator, search.Stop(trials, None))
    chosen = front.candidates(search.observed(study, SPACE, []), OBJECTIVES, 8)
    points = front.measure(GLIBC, chosen, evaluator, 5)
    front.judge(points, OBJECTIVES, [], 0.02)
    return points


def plan_for(tmp_path: Path, **extra: Any) -> driver.Plan:
    fields: dict[str, Any] = dict(
        trace="synthetic", evaluator_name="synthetic", objectives=OBJECTIVES, constraints=[],
        spaces={"glibc": SPACE}, tuned=[GLIBC], out=tmp_path, resume=False, trials=14,
        budget_s=None, repeats=5, min_effect=0.02,
    )  # fmt: skip
    return driver.Plan(**{**fields, **extra})


@pytest.mark.parametrize("seed", [1, 2])
def test_noise_alone_never_beats_the_default(tmp_path: Path, seed: int) -> None:
    points = judged(Synthetic(noise=0.05, flat=True, seed=seed), tmp_path, trials=14)
    assert len(points) >= 4  # the noisy search found several "better" points
    assert not any(p.beats_default for p in points)
    picks = front.choose(points, OBJECTIVES)
    assert picks == {"memory": None, "speed": None}
    plan = plan_for(tmp_path)
    study = new_study(tmp_path)
    result = driver.result_for(plan, GLIBC, study, [], points, picks)
    doc = driver.document(plan, [result])
    assert "glibc: no setting beats the default" in tune_report.markdown(doc)
    assert not (tmp_path / "confirm.toml").exists()


def test_the_budget_leaves_the_repeats_their_share(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, budget_s=600.0, repeats=5)
    # 250 s left, one allocator, 10 s a replay, 5 repeats: 5 points, the default and 4
    assert driver.front_limit(plan, 350.0, 10.0) == 4
    # never fewer than the ends and the knee: the note says the budget was overrun
    assert driver.front_limit(plan, 450.0, 10.0) == driver.MIN_FRONT == 3
    assert driver.front_limit(plan_for(tmp_path), 1e6, 10.0) == driver.MAX_FRONT
    doc = driver.document(plan, [], elapsed_s=900.0)
    overrun = next(n for n in tune_report.note_lines(doc) if "against a budget of 10.0 min" in n)
    # the note, --help and the code name one share
    assert driver.repeats_share() == "2/5" and "the 2/5 of it left" in overrun
    assert "(3/5 search, 2/5 repeats)" in " ".join(run_cli("tune", "--help").stdout.split())


def test_the_space_uses_log_scales_and_offsets_where_apt() -> None:
    jemalloc = allocators.get("jemalloc")
    space = {d.knob.name: d for d in build_space(jemalloc, [])}
    decay = space["dirty_decay_ms"]
    assert decay.log and decay.param == "dirty_decay_ms+1" and (decay.low, decay.high) == (0, 60000)
    assert space["background_thread"].choices == ("false", "true")
    assert space["narenas"].log and not space["narenas"].offset
    sized = build_space(GLIBC, [("trim_threshold", "4K..64M"), ("arena_max", "2")])
    assert (sized[0].low, sized[0].high, sized[0].log) == (4096, 64 << 20, True)
    assert sized[1].choices == ("2",)
    assert build_space(GLIBC, [("tcache_count", "0..16")])[0].log is False


def test_a_real_difference_is_chosen_with_its_priority(tmp_path: Path) -> None:
    points = judged(Synthetic(noise=0.02), tmp_path, trials=20)
    picks = front.choose(points, OBJECTIVES)
    memory = picks["memory"]
    assert memory is not None and memory.versus_default["rss"].better
    # memory first: few arenas (x small); the default (64 arenas here) is the speed end
    assert position(memory.setting)[0] < 0.5


def test_a_failed_evaluation_is_a_failed_trial_and_the_search_goes_on(tmp_path: Path) -> None:
    class Crashing(Synthetic):
        def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
            if self.calls == 2:
                self.calls += 1
                raise EvaluationFailed("killed by SIGSEGV")
            return super().__call__(allocator, setting)

    study = new_study(tmp_path)
    search.search(study, GLIBC, SPACE, OBJECTIVES, Crashing(), search.Stop(5, None))
    failed = [t for t in study.get_trials() if t.state.name == "FAIL"]
    assert len(failed) == 1 and failed[0].user_attrs["error"] == "killed by SIGSEGV"
    assert len(search.observed(study, SPACE, [])) == 4


# --- the command line -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_tiny_trace(tmp_path_factory.mktemp("tunetrace"))


def record_tiny_trace(workdir: Path) -> Path:
    """The known pattern's allocations, recorded by the shim (as test_record_replay does)."""
    from test_record_replay import record_pattern

    exe = native_programs.build("known_pattern", workdir)
    trace = workdir / "kp.mbt"
    record_pattern(exe, workdir, trace)
    return trace


BAD_INPUT = [
    (["--objectives", "rss,latency"], "objective 'latency' is not measured"),
    (["--constraint", "p99<=3"], "constraint on 'p99' is not measured"),
    (["--constraint", "rss<2G"], "is not METRIC<=VALUE"),
    (["--space", "glibc:arena_max=0..8"], "knob arena_max = '0' is out of range"),
    (["--space", "glibc:arena_maxx=1..8"], "did you mean 'arena_max'"),
    (["--space", "tcmalloc:release_rate=1..2"], "'tcmalloc', which is not tuned"),
    (["--allocators", "jemaloc"], "jemalloc"),
    (["--on", "servers"], "--on servers measures an experiment, and"),
    (["--objectives", "rss,qps"], "objective 'qps' is not measured by a trace replay"),
    (["--workload", "nope.toml"], "experiment file nope.toml does not exist"),
    (["--portion", "soon"], "--portion = 'soon' is not a duration"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT)
def test_bad_input_is_one_line_before_anything_runs(
    tiny_trace: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "out"
    proc = run_cli("tune", str(tiny_trace), "--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not out.exists()


def test_the_portion_fits_the_budget_and_is_stated() -> None:
    # 15 min, 2 allocators, 30 trials each: 9 s of search a trial, 70% of it replaying is
    # 6.3 s, under the 12 s whose second half is past a replay's start (the steady peak)
    assert auto_portion(900 * driver.SEARCH_SHARE / 2 / 30, "recorded", 1.0, 121.0) == 12.0
    assert auto_portion(20.0, "recorded", 1.0, 121.0) == 14.0
    assert auto_portion(9.0, "recorded", 4.0, 121.0) == 25.2  # 4x faster: 4x the trace
    assert auto_portion(9.0, "recorded", 1.0, 6.0) is None  # the whole trace fits
    assert auto_portion(9.0, "none", 1.0, 121.0) is None  # its length is not the timing's
    assert auto_portion(0.5, "recorded", 1.0, 121.0) == evaluate.MIN_PORTION_S
    part = evaluate.ReplayEvaluator(Path("t.mbt"), "recorded", 2.0, 121.0, 20.0)
    assert (
        part.describe()
        == "replay of the first 20 s of the trace's 121 s, timing recorded, 2x speed "
        "(time-based knobs passed at 1/2 of their value, the trace's time); rss is the peak "
        "over each replay's second half"
    )
    whole = evaluate.ReplayEvaluator(Path("t.mbt"), "none", 2.0, 121.0, 200.0)
    assert whole.portion_s is None and whole.describe() == (
        "replay of the whole trace (121 s), timing none; rss is the peak over each "
        "replay's second half"
    )


def trace_facts(trace: Path, *args: str) -> dict[str, Any]:
    from mallocbench.native import replayer_path

    proc = subprocess.run(
        [str(replayer_path()), str(trace), "--check", *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    facts: dict[str, Any] = json.loads(proc.stdout)
    return facts


def test_the_replayer_replays_only_the_portion(tiny_trace: Path) -> None:
    whole = trace_facts(tiny_trace)
    half = whole["duration_s"] / 2
    part = trace_facts(tiny_trace, "--until", f"{half:.6f}")
    assert part["until_s"] == pytest.approx(half, abs=1e-5) and "until_s" not in whole
    # Against the cut the replayer was given: `half` printed to 6 decimals can round up.
    assert 0 < part["duration_s"] <= part["until_s"] < whole["duration_s"]
    assert 0 < part["events"] < whole["events"]
    assert part["snapshot_live"] == whole["snapshot_live"]  # the recorded start is kept
    from mallocbench.native import replayer_path

    bad = subprocess.run(
        [str(replayer_path()), str(tiny_trace), "--until", "-3"], capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "--until must be a positive" in bad.stderr


def test_an_unreadable_trace_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mbt"
    bad.write_bytes(b"not a trace at all" * 100)
    proc = run_cli("tune", str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()


def interrupt_after(command: list[str], line: str) -> subprocess.CompletedProcess[str]:
    """Run `command`, press Ctrl-C once stderr has shown `line`."""
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    seen = []
    for text in proc.stderr:
        seen.append(text)
        if line in text:
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(command, proc.returncode, out, "".join(seen) + err)


def test_a_real_tune_on_a_tiny_trace_ctrl_c_and_resume(tiny_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    portion = round(trace_facts(tiny_trace)["duration_s"] * 0.8, 3)
    common = ["--allocators", "glibc,jemalloc", "--timing", "none", "--repeats", "2",
              "--seed", "5", "--out", str(out), "--portion", f"{portion}s"]  # fmt: skip
    command = [sys.executable, "-m", "mallocbench.cli", "tune", str(tiny_trace), *common]
    stopped = interrupt_after([*command, "--trials", "40"], "glibc trial 3 done")
    assert stopped.returncode == 130, stopped.stderr
    assert "every finished trial is kept" in stopped.stderr and "--resume" in stopped.stderr
    assert not (out / "tune.json").exists()
    kept = {t.number: t.setting for t in search.observed(
        search.open_study(out, "glibc", OBJECTIVES, [], stored_settings(out)), [], [])}  # fmt: skip
    assert len(kept) >= 3
    again = run_cli("tune", str(tiny_trace), "--trials", "3", *common)
    assert again.returncode == 2 and "give --resume" in again.stderr
    resumed = run_cli("tune", str(tiny_trace), "--trials", "3", *common, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert doc["evaluation"]["portion_s"] == portion
    assert any(f"replay of the first {portion:g} s" in n for n in doc["notes"])
    assert [r["allocator"] for r in doc["allocators"]] == ["glibc", "jemalloc"]
    glibc, jemalloc = doc["allocators"]
    searched = {s["trial"]: s["setting"] for s in glibc["searched"]}
    assert all(searched[n] == setting for n, setting in kept.items())  # nothing lost
    assert jemalloc["trials"] == 3
    for result in doc["allocators"]:
        default = result["points"][0]
        assert default["label"] == "default" and default["setting"] == {}
        for point in result["points"]:
            assert len(point["samples"][RSS]) == 2
            # the steady peak, over each replay's second half, beside the whole one
            steady = point["estimates"][RSS]["mean"]
            assert 1 << 20 < steady <= max(point["samples"]["peak_heap_rss"])
        for priority, deploy in result["deploy"].items():
            assert result["chosen"][priority] == deploy["point"]
            assert "[Service]" in deploy["systemd"]
            # every form, as recommend gives them; the trace's process is gone: systemd
            assert list(deploy["forms"]) == list(FORMS)
            assert "malloc-lib=" in deploy["forms"]["mysqld_safe"]
    assert doc["deploy_form"]["form"] == "systemd"
    assert {p.name for p in out.iterdir()} >= {"tune.db", "tune.json", "tune.md", "tune.html"}
    if (out / "confirm.toml").exists():
        assert load(out / "confirm.toml").base


def stored_settings(out: Path) -> search.Settings:
    """The settings the command stored on its glibc study, so opening it checks equal."""
    import optuna

    study = optuna.load_study(study_name="tune-glibc", storage=search.open_storage(out))
    attrs = study.user_attrs
    return search.Settings(
        attrs["trace"], attrs["evaluator"], tuple(attrs["objectives"]),
        tuple(attrs["constraints"]), tuple(attrs["space"]),
    )  # fmt: skip


# --- the noise-aware choice -----------------------------------------------------------


def option(rss: float, rss_spread: float, cpu: float) -> choice.Option:
    return choice.Option(
        choice.Interval(rss, rss - rss_spread, rss + rss_spread),
        choice.Interval(cpu, cpu * 0.95, cpu * 1.05),
    )


def test_the_rule_never_buys_rss_inside_the_noise_with_cpu() -> None:
    """The issue's glibc front: 0.3 MiB of RSS inside the noise bought 8x the CPU."""
    costly, cheap, far = (
        option(0.900, 0.02, 7.25),
        option(0.904, 0.02, 1.02),
        option(0.97, 0.01, 0.9),
    )
    assert choice.noise_aware_pick([costly, cheap, far]) == 1
    assert choice.noise_aware_pick([costly, cheap, far], at_any_cost=True) == 0
    assert choice.noise_aware_pick([costly, far], max_cost=1.1) == 1
    assert choice.noise_aware_pick([costly], max_cost=1.1) is None
    # shown lower RSS (the intervals apart) is a finding: then the lowest is the choice
    assert choice.noise_aware_pick([option(0.80, 0.01, 3.0), option(0.90, 0.01, 1.0)]) == 0


@pytest.mark.parametrize("seed", range(5))
def test_on_random_fronts_a_2x_cpu_setting_is_never_chosen_near_a_cheap_one(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        options = [
            option(rng.uniform(0.8, 1.0), rng.uniform(0.002, 0.05), rng.choice([1.0, 1.1, 3, 8]))
            for _ in range(rng.randint(2, 8))
        ]
        picked = options[choice.noise_aware_pick(options) or 0]
        lowest = min(options, key=lambda o: o.goal.point)
        cheap_near = [o for o in options if o.goal.overlaps(lowest.goal) and o.cost.point <= 1.1]
        assert not (picked.cost.point > 2 and cheap_near)
        assert picked.goal.overlaps(lowest.goal)


def fixed(values: dict[str, tuple[float, float]], noise: float) -> Any:
    """An evaluator with a known value per arena_max: (RSS MiB, CPU s), with jitter."""
    rng = random.Random(11)

    def evaluate(allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        rss, cpu = values[setting.get("arena_max", "default")]
        return {
            RSS: rss * (1 << 20) * (1 + rng.gauss(0, noise)),
            "cpu_s": cpu * (1 + rng.gauss(0, noise)),
        }

    return evaluate


def observed(number: int, arena: str | None, rss: float, cpu: float) -> search.Observed:
    setting = {} if arena is None else {"arena_max": arena}
    metrics = {RSS: rss * (1 << 20), "cpu_s": cpu}
    return search.Observed(number, arena is None, setting, metrics, True)


def test_a_tight_budget_keeps_the_front_ends_and_knee_and_tune_chooses_by_the_rule() -> None:
    """The issue's glibc search: a one-point budget kept only the 66.8 MiB / 7.96 s end."""
    values = {"default": (74.0, 0.88), "1": (66.8, 7.96), "2": (67.1, 0.90), "3": (69.0, 0.89),
              "4": (71.0, 0.87), "5": (73.0, 0.86)}  # fmt: skip
    trials = [observed(0, None, *values["default"])]
    trials += [observed(int(a), a, *v) for a, v in values.items() if a != "default"]
    chosen = front.candidates(trials, OBJECTIVES, 1)
    labels = [t.setting.get("arena_max") for t in chosen]
    assert labels[0] is None and {"1", "2", "5"} <= set(labels[1:])  # ends and knee
    points = front.measure(GLIBC, chosen, fixed(values, 0.004), 5)
    front.judge(points, OBJECTIVES, [], 0.02)
    by_arena = {p.setting.get("arena_max"): p for p in points}
    assert front.choose(points, OBJECTIVES)["memory"] is by_arena["2"]
    assert front.choose(points, OBJECTIVES, memory_at_any_cost=True)["memory"] is by_arena["1"]
    # 1.02x is over a bound of 1.0x, and the rest save no RSS beyond min_effect
    assert front.choose(points, OBJECTIVES, max_cpu=1.0)["memory"] is None
    deployed = Deployed("#1", {"A": "1"}, "", "", {})
    result = AllocatorTune("glibc", None, None, [], 6, 0, [], points, {"memory": "#1"}, True,
                           {"memory": deployed})  # fmt: skip
    objectives = [Objective(m.name, m.key, m.unit, m.direction) for m in OBJECTIVES]
    doc = TuneDocument("t", "e", {}, None, objectives, [], 0.02, None, False, "systemd", "", 5,
                       "out", [result], [])  # fmt: skip
    # a costly choice (here made at any cost) states its CPU in the same line
    (line,) = tune_report.choice_lines(result, doc)
    assert "memory first: #1 (A=1): steady peak RSS 0.90x [" in line and "CPU time 9." in line
    assert line.endswith("higher")
    doc.max_cpu = 1.0
    result.chosen = {"memory": None}
    (line,) = tune_report.choice_lines(result, doc)
    assert line.endswith("on memory with CPU within 1x the default's (--max-cpu)")


def test_max_cpu_is_checked_before_anything_runs(tiny_trace: Path, tmp_path: Path) -> None:
    for args, message in (
        (["--max-cpu", "1.1", "--objectives", "rss"], "--max-cpu bounds the time objective"),
        (["--max-cpu", "1.1", "--memory-at-any-cost"], "give one of them"),
    ):
        proc = run_cli("tune", str(tiny_trace), "--out", str(tmp_path / "out"), *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert message in proc.stderr


def test_the_progress_line_gives_each_end_of_the_front_as_one_setting(tmp_path: Path) -> None:
    """RSS and CPU in one parenthesis are one setting's, not the best of each."""
    import re

    from rich.console import Console

    from mallocbench.tune.progress import SearchProgress

    study = new_study(tmp_path)
    search.search(study, GLIBC, SPACE, OBJECTIVES, Synthetic(), search.Stop(12, None))
    bar = SearchProgress(Console(), OBJECTIVES, [], {"glibc": SPACE}, 12)
    text = bar.front_text("glibc", study)
    ends = re.findall(r"best ([a-z, ]+) #(\d+) \(rss ([\d.]+) MiB, time ([\d.]+) s\)", text)
    assert len(ends) == 2, text  # the synthetic front has two distinct ends
    trials = {t.number: t.metrics for t in search.observed(study, SPACE, [])}
    for _, number, rss, cpu in ends:
        metrics = trials[int(number)]
        assert float(rss) == pytest.approx(metrics[RSS] / (1 << 20), abs=0.05)
        assert float(cpu) == pytest.approx(metrics["cpu_s"], abs=5e-4)
