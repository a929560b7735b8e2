"""Soak runs: the arithmetic on recorded RSS series (slope and its interval under
autocorrelated noise, plateau, time to the cap), the soak's plan and report, and one real
short soak that is interrupted and resumed."""

from __future__ import annotations

import json
import math
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from scipy.signal import lfilter

from cli_runner import run_cli
from mallocbench.analysis.run_analysis import analyze as analyze_run
from mallocbench.analysis.soak import (
    Slope,
    analyze,
    find_plateau,
    fit_slope,
    soak_setups,
    time_to_cap,
)
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import RunMetadata, SoakRecord
from mallocbench.model.results import Cell, RunResult, Sample, SessionInfo, SetupInfo
from mallocbench.report import soak as soak_report
from mallocbench.report.charts import Chart
from mallocbench.run import loading as loading_mod
from mallocbench.soak.runner import SoakSpec, plan_soak, soak_experiment, soak_spec

MiB = float(1 << 20)
HOUR = 3600.0

# --- synthetic series -----------------------------------------------------------------------


def ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """Stationary AR(1) noise with standard deviation `sd` and memory 1/(1 - phi) seconds."""
    shocks = rng.normal(0.0, sd * math.sqrt(1 - phi**2), n)
    shocks[0] = rng.normal(0.0, sd)
    return lfilter([1.0], [1.0, -phi], shocks)


def series(t: np.ndarray, values: np.ndarray) -> list[tuple[float, float]]:
    return list(zip(t.tolist(), values.tolist(), strict=True))


def naive_interval(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Per-second OLS, every second an independent point: the interval the soak must not use."""
    tc = t - t.mean()
    slope = float(tc @ (y - y.mean())) / float(tc @ tc)
    resid = y - y.mean() - slope * tc
    se = math.sqrt(float(resid @ resid) / (len(t) - 2) / float(tc @ tc))
    half = float(stats.t.ppf(0.975, len(t) - 2)) * se
    return slope - half, slope + half


def coverage(noise: str, seconds: int, runs: int = 200) -> tuple[float, float, float]:
    """How often the 95% interval holds the true slope, how often the naive one does, and
    how often the interval tells growth (its whole range above zero)."""
    rng = np.random.default_rng(20240617)
    true = 50 * MiB / HOUR  # 50 MiB/h
    t = np.arange(seconds, dtype=float)
    held = naive_held = told = 0
    for _ in range(runs):
        if noise == "ar1":
            wander = ar1(rng, seconds, 0.99, 8 * MiB)  # a 100 s memory
        else:  # a fast and a slow memory together (10 s and 500 s)
            wander = ar1(rng, seconds, 0.9, 4 * MiB) + ar1(rng, seconds, 0.998, 6 * MiB)
        y = 400 * MiB + true * t + wander
        slope = fit_slope(series(t, y))
        assert slope is not None
        held += slope.low <= true <= slope.high
        told += slope.growing
        low, high = naive_interval(t, y)
        naive_held += low <= true <= high
    return held / runs, naive_held / runs, told / runs


def test_slope_interval_covers_the_true_slope_under_autocorrelated_noise() -> None:
    held, naive, told = coverage("ar1", 3600)
    # 200 runs: a method that really covers 95% falls below 90% about once in 1,500 tries;
    # per-minute means alone cover about 70% here, and per-second OLS far less.
    assert held >= 0.90, held
    assert naive <= 0.5, naive
    # Not by being uselessly wide: 50 MiB/h stands out of the noise in most hours.
    assert told >= 0.6, told


def test_slope_interval_covers_a_mixture_of_fast_and_slow_noise() -> None:
    held, naive, told = coverage("mixture", 7200)
    assert held >= 0.90, held
    assert naive <= 0.5, naive
    assert told >= 0.6, told


def test_a_straight_line_has_its_exact_slope_and_no_width() -> None:
    t = np.arange(0.0, 600.0)
    slope = fit_slope(series(t, 100 * MiB + 2 * MiB * t / 60))
    assert slope is not None
    point, low, high = slope.mib_per_hour()
    assert point == pytest.approx(120.0)
    assert low == pytest.approx(120.0) and high == pytest.approx(120.0)
    assert slope.growing and slope.bounded
    assert fit_slope([(0.0, 1.0), (0.0, 2.0)]) is None  # one instant: no slope
    assert fit_slope([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]) is None  # too short for 3 bins


def ramp_then_flat(seed: int, ramp_s: int = 1200, total_s: int = 3600) -> list[tuple[float, float]]:
    """RSS rising 200 MiB over `ramp_s`, then level, with AR(1) noise on top."""
    rng = np.random.default_rng(seed)
    t = np.arange(total_s, dtype=float)
    level = 300 * MiB + 200 * MiB * np.minimum(t, ramp_s) / ramp_s
    return series(t, level + ar1(rng, total_s, 0.98, 3 * MiB))


def test_plateau_is_found_where_growth_stopped() -> None:
    found = [find_plateau(ramp_then_flat(seed)) for seed in range(20)]
    near = [p for p in found if p is not None and abs(p - 1200) <= 60]
    # Growth ends at 20 min. The part after the break must bound its growth below 5% of
    # RSS with 95% confidence, so now and then the noise's slow wander keeps it from doing
    # so (1 of these 20 seeds, 3 of 30).
    assert len(near) >= 18, found


def test_no_plateau_while_rss_keeps_growing_and_flat_from_the_start() -> None:
    rng = np.random.default_rng(7)
    t = np.arange(3600, dtype=float)
    growing = 300 * MiB + 100 * MiB * t / HOUR + ar1(rng, 3600, 0.98, 2 * MiB)
    assert find_plateau(series(t, growing)) is None
    flat = 300 * MiB + ar1(rng, 3600, 0.98, 2 * MiB)
    fit = analyze(series(t, flat))
    assert fit.plateau_s == 0.0 and fit.flat_from_start
    assert fit.slope is not None and not fit.slope.growing
    assert find_plateau([(0.0, 1.0), (60.0, 2.0)]) is None  # too short to tell


def test_time_to_cap_follows_the_slope_and_its_interval() -> None:
    per_s = 100 * MiB / HOUR
    slope = Slope(per_s, per_s / 2, per_s * 2, 0.0, HOUR, 3600)
    projection = time_to_cap(500 * MiB, slope, 1000 * MiB)
    assert projection.seconds == pytest.approx(5 * HOUR)
    assert projection.low == pytest.approx(2.5 * HOUR)
    assert projection.high == pytest.approx(10 * HOUR)
    # The slope's interval reaches zero: at that end the cap is never reached.
    unsure = time_to_cap(500 * MiB, Slope(per_s, -per_s, 2 * per_s, 0, HOUR, 3600), 1000 * MiB)
    assert unsure.seconds == pytest.approx(5 * HOUR) and math.isinf(unsure.high)
    shrinking = time_to_cap(500 * MiB, Slope(-per_s, -2 * per_s, 0.0, 0, HOUR, 3600), 1000 * MiB)
    assert math.isinf(shrinking.seconds) and math.isinf(shrinking.low)
    assert time_to_cap(1200 * MiB, slope, 1000 * MiB).seconds == 0.0


def test_analyze_observes_the_cap_and_projects_only_a_living_server() -> None:
    t = np.arange(0.0, 1200.0)
    rising = series(t, 200 * MiB + 0.5 * MiB * t)  # 30 MiB a minute
    reached = analyze(rising, cap_bytes=500 * MiB)
    assert reached.reached_cap_s == pytest.approx(600.0) and reached.projection is None
    ahead = analyze(rising, cap_bytes=2000 * MiB)
    assert ahead.reached_cap_s is None and ahead.projection is not None
    # From the last minute's mean (784.5 MiB, at 30 MiB a minute): 40.5 more minutes.
    assert ahead.projection.seconds / 60 == pytest.approx((2000 - 784.5) / 30)
    killed = analyze(rising, cap_bytes=2000 * MiB, ended=True)
    assert killed.projection is None
    assert analyze(rising).projection is None  # no cap, nothing to reach


# --- a recorded soak ---------------------------------------------------------------------------

START = 1_700_000_000.0


def _cell(setup: str, session: str, segment: int, start: float, rss: list[float], **kw) -> Cell:
    samples = [Sample(t=start + i, rss_bytes=int(v * MiB)) for i, v in enumerate(rss)]
    return Cell(
        setup, "innodb", "point-query range=100", 8, segment, session=session,
        started_at=start, cache_bytes=int(64 * MiB), samples=samples, qps=1000.0,
        metrics={"rss_unaccounted_bytes": 10 * MiB * (segment + 1),
                 "rss_accounted_bytes": 150 * MiB},
        **kw,
    )  # fmt: skip


def recorded_soak() -> RunResult:
    """ "grow" killed at its cap in its second segment; "flat" interrupted after one
    segment of 600 s and resumed for two more on a new server."""
    ramp = [200 + i * 0.2 for i in range(600)]
    cells = [
        _cell("grow", "grow.innodb.r0", 0, START + 5, ramp),
        _cell("grow", "grow.innodb.r0", 1, START + 606, [320 + i * 0.2 for i in range(300)],
              status="oom", error="OOM-killed"),
        _cell("flat", "flat.innodb.r0", 0, START + 2005, [250.0] * 600),
        _cell("flat", "flat.innodb.r0.2", 1, START + 4005, [240.0] * 600),
        _cell("flat", "flat.innodb.r0.2", 2, START + 4606, [240.0] * 600),
    ]  # fmt: skip
    sessions = [
        SessionInfo("grow.innodb.r0", "grow", "innodb", 0, started_at=START, status="oom"),
        SessionInfo("flat.innodb.r0", "flat", "innodb", 0, started_at=START + 2000),
        SessionInfo("flat.innodb.r0.2", "flat", "innodb", 0, started_at=START + 4000),
    ]
    return RunResult(
        run_id="soak-1",
        experiment="soak",
        base_setup="grow",
        metadata=RunMetadata(soak=SoakRecord(duration_s=1800, segment_s=600, segments=3,
                                             step="point-query range=100", threads=8)),
        setups=[SetupInfo("grow", "glibc", memory_limit_bytes=int(380 * MiB)),
                SetupInfo("flat", "jemalloc", memory_limit_bytes=int(380 * MiB))],
        sessions=sessions,
        cells=cells,
    )  # fmt: skip


def test_lifetimes_are_kept_apart_and_the_longest_gives_the_figures() -> None:
    soaks = {s.setup: s for s in soak_setups(recorded_soak())}
    grow, flat = soaks["grow"], soaks["flat"]
    assert [life.session for life in flat.lifetimes] == ["flat.innodb.r0", "flat.innodb.r0.2"]
    main = flat.main
    assert main is not None and main.session == "flat.innodb.r0.2"
    # Times count from each server's own start, not from the first lifetime's.
    assert main.series[0][0] == pytest.approx(5.0)
    assert main.fit is not None and main.fit.flat_from_start
    assert main.fit.projection is not None and math.isinf(main.fit.projection.seconds)
    killed = grow.killed
    assert killed is not None and killed.end_s == pytest.approx(905.0)
    assert grow.peak_bytes == pytest.approx(379.8 * MiB)
    assert grow.main is not None and grow.main.fit is not None
    assert grow.main.fit.projection is None  # the kill was observed, nothing to project
    assert [v / MiB for _, v in grow.main.unaccounted] == [10.0, 20.0]


def test_the_soak_table_notes_and_chart() -> None:
    run = recorded_soak()
    header, rows = soak_report.soak_table(analyze_run(run))
    table = {row[1]: dict(zip(header, row, strict=True)) for row in rows}
    assert table["grow"]["OOM / time to the cap"] == "OOM-killed at 15.1 min"
    assert table["grow"]["cap (MiB)"] == "380" and table["grow"]["peak RSS (MiB)"] == "380"
    assert table["grow"]["peak RSS/cache"] == "5.93"
    assert table["flat"]["OOM / time to the cap"] == "not reached; not growing"
    assert table["flat"]["plateau"] == "flat from the start, 240 MiB"
    assert table["flat"]["ran"] == "30.1 min (2 lifetimes)"
    assert table["flat"]["RSS slope (MiB/h, 95%)"].startswith("+0 [+0, +0] from ")
    notes = " ".join(soak_report.soak_notes(analyze_run(run)))
    assert "back to back" in notes and "2 server lifetimes" in notes
    assert "flat.innodb.r0 (10.1 min): slope +0 [+0, +0] from 5 s" in notes
    md = "\n".join(soak_report.markdown_lines(analyze_run(run)))
    assert md.startswith("## Soak: RSS over time") and "| innodb | grow |" in md
    (spec,) = soak_report.soak_charts(analyze_run(run), {"grow": "#111", "flat": "#222"})
    chart = Chart(**spec)
    assert chart.id == "chart-soak-innodb" and chart.wide
    assert [s["y0"] for s in chart.layout["shapes"]] == [380.0, 380.0]
    events = next(d for d in chart.data if d["name"] == "grow events")
    assert events["marker"]["symbol"] == ["x"] and "OOM-killed" in events["text"][0]
    spec = chart.spec()
    json.dumps(spec, allow_nan=False)
    # A run that is no soak has no soak section at all.
    run.metadata = RunMetadata()
    assert (
        soak_report.soak_table(analyze_run(run))[1] == []
        and soak_report.markdown_lines(analyze_run(run)) == []
    )
    assert (
        soak_report.soak_charts(analyze_run(run), {}) == []
        and soak_report.soak_notes(analyze_run(run)) == []
    )


# --- the plan -------------------------------------------------------------------------------------

SMALL = """
name = "{name}"
engines = ["innodb"]
steps = {steps}
threads = {threads}
[dataset]
tables = 1
rows = {rows}
cache = "32M"
[[setup]]
name = "a"
allocator = "glibc"
[[setup]]
name = "b"
allocator = "glibc"
{extra}
"""


def small(tmp_path: Path, steps: str = '["point-query"]', threads: str = "[2]", **kw) -> Path:
    values = {"name": "soak", "rows": 2000, "extra": "", **kw}
    path = tmp_path / "soak.toml"
    path.write_text(SMALL.format(steps=steps, threads=threads, **values))
    return path


def test_a_soak_plans_one_session_per_setup_with_segments_as_repeats(tmp_path: Path) -> None:
    experiment = soak_experiment(loading_mod.load(small(tmp_path)), SoakSpec(125.0, 30.0))
    assert experiment.repeats == 5 and experiment.duration_s == 30.0
    assert experiment.warmup_s == 0 and experiment.design == "sequential"
    assert experiment.text.rstrip().endswith("# mallocbench soak: duration=125s segment=30s")
    sessions = plan_soak(experiment)
    assert [(s.setup, s.repeat) for s in sessions] == [("a", 0), ("b", 0)]
    assert [c.repeat for c in sessions[0].cells] == [0, 1, 2, 3, 4]
    assert {c.step.label for s in sessions for c in s.cells} == {"point-query range=100"}


def test_a_soak_takes_its_length_from_the_flags_the_file_or_two_hours(tmp_path: Path) -> None:
    path = small(tmp_path)
    plain = loading_mod.load(path)
    assert soak_spec(plain, None, None) == SoakSpec(7200.0, 600.0)
    assert soak_spec(plain, "30m", None) == SoakSpec(1800.0, 600.0)
    assert soak_spec(plain, "5m", None) == SoakSpec(300.0, 300.0)  # a segment fits the soak
    assert soak_spec(plain, None, "1m") == SoakSpec(7200.0, 60.0)
    # --set durations.step gives the soak's length as the file's key would.
    stepped = loading_mod.load(path, ["durations.step=15m"])
    assert soak_spec(stepped, None, None, ["durations.step=15m"]) == SoakSpec(900.0, 600.0)
    durations = '[durations]\nstep = "7m"\nslice = "1m"\n\n[[setup]]'
    path.write_text(path.read_text().replace("[[setup]]", durations, 1))
    sized = loading_mod.load(path)
    assert soak_spec(sized, None, None) == SoakSpec(420.0, 60.0)
    assert soak_spec(sized, "1h", None) == SoakSpec(3600.0, 60.0)


def test_the_example_plans_three_capped_soaks_of_six_minutes() -> None:
    from mallocbench.servers.cgroup.parents import capping_problem

    if capping_problem() is not None:
        pytest.skip(f"no writable memory cgroup: {capping_problem()}")
    example = Path(__file__).parent.parent / "examples" / "myrocks-oom.toml"
    loaded = loading_mod.load(example)
    spec = soak_spec(loaded, None, None)
    assert spec == SoakSpec(360.0, 60.0)
    experiment = soak_experiment(loaded, spec)
    sessions = plan_soak(experiment)
    assert [s.setup for s in sessions] == ["glibc", "jemalloc", "tcmalloc"]
    assert {len(s.cells) for s in sessions} == {6}
    assert {s.memory_limit_bytes for s in experiment.setups} == {224 << 20}
    # The data (about 200 bytes a row in MyRocks) is several times the block cache, so
    # reads go to storage: 398 MiB of RocksDB files were measured against 64 MiB.
    data = experiment.dataset
    assert data.tables * data.rows * 200 > 5 * data.cache_bytes


@pytest.mark.parametrize(
    ("kwargs", "spec", "message"),
    [
        ({"steps": '["point-query", "update-nonindex"]'}, (60, 30), "--set 'steps=["),
        ({"threads": "[1, 8]"}, (60, 30), "--set threads=[8]"),
        ({"steps": '["l.i0"]'}, (60, 30), "ends by itself"),
        ({}, (60, 120), "longer than --duration"),
        ({}, (60, 5), "too short"),
    ],
)
def test_a_soak_refuses_what_it_cannot_hold_in_one_line(
    tmp_path: Path, kwargs: dict[str, str], spec: tuple[float, float], message: str
) -> None:
    with pytest.raises(MallocbenchError) as info:
        soak_experiment(loading_mod.load(small(tmp_path, **kwargs)), SoakSpec(*spec))
    assert message in str(info.value) and "\n" not in str(info.value)


# --- a real soak: segments committed, interrupted, resumed ------------------------------------

# The soak command is registered in cli.py's list; this adds it where it is not yet.
MAIN = (
    "from mallocbench.cli import main; from mallocbench.commands.soak import soak_cmd; "
    "'soak' in main.commands or main.add_command(soak_cmd); main()"
)
# "capped" fills its query cache past its cap within seconds (see test_memory_cap): its
# server is OOM-killed in its first segment, which ends its soak.
CAPPED = """
[[setup]]
name = "capped"
allocator = "glibc"
memory_limit = "384M"
config = { query_cache_type = "ON", query_cache_size = "2G", query_cache_limit = "4M" }
"""


def soak_cli(*args: str) -> list[str]:
    return [sys.executable, "-c", MAIN, "soak", *args]


def segments_in(store: Path) -> list[tuple[str, int, str, str]]:
    if not store.exists():
        return []
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute(
            "SELECT setup, repeat, status, json_extract(data, '$.session') FROM cells"
            " ORDER BY setup, repeat"
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()
    return [(str(s), int(r), str(st), str(se)) for s, r, st, se in rows]


def sigterm_after(command: list[str], store: Path, segments: int) -> tuple[int, str, str]:
    """Start a soak, SIGTERM it once `segments` are committed; its status and output."""
    harness = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while len(segments_in(store)) < segments and harness.poll() is None:
            assert time.monotonic() < deadline, f"no {segments} segments committed in 4 minutes"
            time.sleep(0.3)
        harness.send_signal(signal.SIGTERM)
        stdout, stderr = harness.communicate(timeout=120)
    finally:
        harness.kill()
    return harness.returncode, stdout, stderr


@pytest.mark.server
@pytest.mark.alone  # the capped server must outgrow its cap within the first segment
def test_a_real_soak_commits_segments_survives_sigterm_and_resumes(
    tmp_path: Path, integrity_figures
) -> None:
    from mallocbench.servers.cgroup.parents import capping_problem

    if capping_problem() is not None:
        pytest.skip(f"no writable memory cgroup: {capping_problem()}")
    exp = small(
        tmp_path,
        steps='["read-only-order range=1000"]',
        threads="[2]",
        rows=20000,
        extra=CAPPED,
    )
    # Setup "b" is not wanted: two setups are enough to show the resume and the kill.
    exp.write_text(exp.read_text().replace('[[setup]]\nname = "b"\nallocator = "glibc"\n', ""))
    out = tmp_path / "out"
    args = (str(exp), "--duration", "40s", "--segment", "10s", "--out", str(out), "-q")
    store = out / "results.sqlite"
    integrity_figures.add("faults injected")
    returncode, stdout, stderr = sigterm_after(soak_cli(*args), store, segments=2)
    integrity_figures.check_output(stdout + stderr)
    assert returncode == 128 + signal.SIGTERM, stderr[-2000:]
    kept = segments_in(store)
    # Each segment was committed as it ended; the one under way was dropped.
    assert [(s, r, st) for s, r, st, _ in kept] == [("a", 0, "ok"), ("a", 1, "ok")], kept
    assert "segments kept" in stderr

    resumed = subprocess.run(
        soak_cli(*args, "--resume"), capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    integrity_figures.check_output(resumed.stdout + resumed.stderr)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    done = segments_in(store)
    a = [(r, st, se) for s, r, st, se in done if s == "a"]
    # The resumed soak went on with the segments left, on a server of its own.
    assert a == [
        (0, "ok", "a.innodb.r0"),
        (1, "ok", "a.innodb.r0"),
        (2, "ok", "a.innodb.r0.2"),
        (3, "ok", "a.innodb.r0.2"),
    ], a
    capped = [(r, st) for s, r, st, _ in done if s == "capped"]
    integrity_figures.add("faults injected")
    # Killed in its first segment; the kill ended its soak, no segment ran after it.
    assert capped == [(0, "oom")], capped

    shown = run_cli("report", str(out), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    run = RunResult.from_dict(json.loads(shown.stdout))
    soak, design = run.metadata.soak, run.metadata.design
    assert soak is not None and soak.segments == 4
    assert design is not None and design.used == "sequential"
    soaks = {s.setup: s for s in soak_setups(run)}
    assert len(soaks["a"].lifetimes) == 2 and soaks["capped"].killed is not None
    # The server's full account moves RSS itself: a soak takes it after its last segment.
    accounted = [c.repeat for c in run.cells if "rss_unaccounted_bytes" in c.metrics]
    assert accounted == [3], accounted
    assert "OOM-killed at" in soak_report.cap_text(soaks["capped"])
    summary = (out / "soak.md").read_text()
    assert "| innodb | capped |" in summary and "OOM-killed at" in summary
    assert "2 server lifetimes" in summary
    assert "Soak: RSS over time" in resumed.stdout
    # Nothing left to do: a second resume measures nothing and ends at once.
    again = subprocess.run(
        soak_cli(*args, "--resume"), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert segments_in(store) == done


def consistent_soak(segments: int = 6) -> RunResult:
    """Two setups soaked side by side, "je" 8% faster and 20% leaner in every segment.

    Segments of one server lifetime agree with each other far better than server starts
    do; paired as if they were blocks they would give a tight, false interval.
    """
    rng = np.random.default_rng(7)
    cells, sessions = [], []
    for setup, qps, rss in (("glibc", 1000.0, 300.0), ("je", 1080.0, 240.0)):
        session = f"{setup}.innodb.r0"
        sessions.append(
            SessionInfo(session, setup, "innodb", 0, started_at=START,
                        peak_rss_bytes=int(rss * MiB))
        )  # fmt: skip
        for segment in range(segments):
            cell = _cell(setup, session, segment, START + 5 + 600 * segment, [rss] * 10)
            cell.qps = qps * (1 + rng.normal(0, 0.002))
            cell.peak_rss_bytes = int(rss * MiB)
            cells.append(cell)
    return RunResult(
        run_id="soak-2",
        experiment="soak",
        base_setup="glibc",
        metadata=RunMetadata(
            soak=SoakRecord(duration_s=600 * segments, segment_s=600, segments=segments,
                            step="point-query range=100", threads=8),
            repeats=segments,
        ),
        setups=[SetupInfo("glibc", "glibc"), SetupInfo("je", "jemalloc")],
        sessions=sessions,
        cells=cells,
    )  # fmt: skip


def test_soak_segments_are_never_paired_as_blocks_into_a_finding() -> None:
    from mallocbench.analysis.recommend import recommend
    from mallocbench.analysis.summary import (
        Exploratory,
        exploratory,
        relative_tables,
        rss_ratio_cells,
    )
    from mallocbench.report.words import cell_class, exploratory_note

    run = consistent_soak()
    (table,) = relative_tables(run)
    cell = table.rows[0].cells["je"]
    # The ratio is shown, but with no interval it is neither coloured nor a finding.
    assert cell.ratio == pytest.approx(1.08, rel=0.01)
    assert not cell.has_interval and not cell.significant and cell_class(cell) == "none"
    rss = rss_ratio_cells(run)[("innodb", "je")]
    assert rss.ratio == pytest.approx(0.8, rel=0.01)
    assert not rss.has_interval and not rss.significant
    assert exploratory(run) is Exploratory.SOAK
    note = exploratory_note(exploratory(run))
    assert note is not None and "one server lifetime" in note
    (engine,) = recommend(run).engines
    assert engine.choice is None
