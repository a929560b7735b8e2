"""The growth reading of a replay: RSS and live bytes over the trace's time, with slopes
and intervals, read as the allocator retaining or the program holding more, and nothing
read where the intervals do not support it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import native_programs
from mallocbench.analysis.growth import (
    Line,
    Reading,
    SetupGrowth,
    Trend,
    analyze_growth,
    reading,
    setup_growth,
    trace_clock,
    trend,
)
from mallocbench.analysis.replay import analyze_replay
from mallocbench.analysis.soak import Slope
from mallocbench.model.metadata import ReplayRecord, ReplayRun
from mallocbench.native import replayer_path, shim_path
from mallocbench.report.growth import (
    NOT_ON_THE_TRACES_CLOCK,
    growth_lines,
    headline,
    other_line,
    rate_text,
    span_text,
)

MiB = 1 << 20


def mallocbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", *args],
        capture_output=True, text=True, check=False, timeout=180,
    )  # fmt: skip


@pytest.fixture(scope="module")
def growth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_programs.build("growth", tmp_path_factory.mktemp("growth"))


def recorded_and_replayed(exe: Path, mode: str, tmp: Path, allocators: str) -> dict[str, Any]:
    """`record -- growth MODE 4`, then `replay --json` of its trace (at its own pace: at
    --speed 2 the replay has half the samples, and on a loaded host its sampler may be
    starved of more: the interval then widens honestly, but a test would flicker)."""
    trace = tmp / f"{mode}.mbt"
    rec = mallocbench("record", "--out", str(trace), "--", str(exe), mode, "4")
    assert rec.returncode == 0, rec.stderr
    replay = mallocbench("replay", str(trace), "--allocators", allocators, "--repeats", "1",
                         "--min-effect", "0.05", "--json")  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    return dict(json.loads(replay.stdout)["replay_summary"])


def test_live_bytes_flat_while_glibc_rss_grows_reads_as_the_allocator_retaining(
    growth: Path, tmp_path: Path
) -> None:
    """A thread a third of a second, each in its own glibc arena, frees a 1 MiB burst
    under a block it keeps: a MiB more RSS each time, the same few live bytes."""
    doc = recorded_and_replayed(growth, "arenas", tmp_path, "glibc,jemalloc")
    glibc = doc["setups"][0]["growth"]
    assert glibc["rss_trend"] == "growing" and glibc["rss_mib_per_h_low"] > 0, glibc
    # Flat, or on a loaded host unclear: a sample that lands in a burst is a MiB of noise.
    assert glibc["live_trend"] != "growing", glibc
    assert glibc["growth_reading"] == "retains", glibc
    headline, *others, rule = doc["growth"]
    assert headline.startswith("Under glibc, RSS grows +"), headline
    assert "the allocator retains (fragmentation or caching)" in headline
    assert others and others[0].startswith("Under jemalloc the same calls hold ")
    assert "growth is read only where the interval excludes zero" in rule


def test_a_leak_reads_as_the_program_holding_more(growth: Path, tmp_path: Path) -> None:
    doc = recorded_and_replayed(growth, "leak", tmp_path, "glibc")
    glibc = doc["setups"][0]["growth"]
    assert glibc["live_trend"] == "growing" and glibc["retained_trend"] != "growing", glibc
    assert glibc["growth_reading"] == "holds more"
    # 64 KiB per 10 ms of the clock: 22,500 MiB/h; under load the recording may end
    # before a starved program made up what was due, never by half the span
    assert 11250 < glibc["live_mib_per_h"] <= 23000, glibc
    assert (
        "the program holds more (a leak or a growing cache), no allocator fixes it"
        in (doc["growth"][0])
    )


def samples(rss: np.ndarray, live: np.ndarray, seconds: float) -> list[list[float]]:
    t = np.linspace(0, seconds, len(rss))
    return [[float(a), float(b), float(c)] for a, b, c in zip(t, rss, live, strict=True)]


def test_what_the_intervals_do_not_support_is_not_read_as_growth() -> None:
    rng = np.random.default_rng(7)
    n = 2000
    live = np.full(n, 50.0 * MiB)
    # A slow wander (a random walk) with no trend: RSS moves, but not one way.
    wander = 100 * MiB + np.cumsum(rng.normal(0, 0.2 * MiB, n))
    g = setup_growth("glibc", samples(wander, live, 60), 1.0, 0.05)
    assert g is not None and g.reading in (Reading.UNCLEAR, Reading.FLAT), g
    assert g.rss.trend is not Trend.GROWING
    # A certain rise of 1% over the span: real, but below min_effect; flat it is.
    small = 100 * MiB + np.linspace(0, 1 * MiB, n) + rng.normal(0, 0.01 * MiB, n)
    g = setup_growth("glibc", samples(small, live, 60), 1.0, 0.05)
    assert g is not None and g.rss.trend is Trend.FLAT and g.reading is Reading.FLAT
    # The same rise past min_effect (20%) grows, and at 2x the trace's clock is twice the
    # replay's: the slope per trace-hour halves.
    big = 100 * MiB + np.linspace(0, 20 * MiB, n) + rng.normal(0, 0.01 * MiB, n)
    at1 = setup_growth("glibc", samples(big, live, 60), 1.0, 0.05)
    at2 = setup_growth("glibc", samples(big, live, 60), 2.0, 0.05)
    assert at1 is not None and at2 is not None and at1.reading is Reading.RETAINS
    assert at1.rss.slope is not None and at2.rss.slope is not None
    assert math.isclose(at1.rss.slope.per_s, 2 * at2.rss.slope.per_s)
    assert analyze_growth([("glibc", samples(big, live, 60))], "none", 1.0, 0.05) is None
    # A sampler catching up after a stall takes samples back to back: one instant, read once.
    clumped = samples(big, live, 60)
    clumped[-1:] = [clumped[-1]] * 200
    at1_clumped = setup_growth("glibc", clumped, 1.0, 0.05)
    assert at1_clumped is not None and at1_clumped.rss == at1.rss
    # A replay stored before the samples carried live bytes has nothing to read.
    assert setup_growth("glibc", [s[:2] for s in samples(big, live, 60)], 1.0, 0.05) is None


def test_rates_are_per_hour_with_their_interval() -> None:
    slope = Slope(MiB / 3600, -math.inf, math.inf, 0, 10, 100)
    assert rate_text(slope) == "+1.0 MiB/h [unbounded]"
    slope = Slope(2 * MiB / 3600, MiB / 3600, 3 * MiB / 3600, 0, 10, 100)
    assert rate_text(slope) == "+2.0 MiB/h [+1.0, +3.0]"


def test_the_words_follow_the_reading_and_the_clock() -> None:
    """Flat out, the replay's seconds are not the program's: nothing is read, and the
    report says why. On the trace's clock a retaining base is worded so, and another
    setup that is not shown to grow is said to be not distinguishable from flat."""
    n = 2000
    live = np.full(n, 50.0 * MiB)
    rng = np.random.default_rng(3)
    grows = samples(100 * MiB + np.linspace(0, 20 * MiB, n) + rng.normal(0, 0.01 * MiB, n),
                    live, 60)  # fmt: skip
    wanders = samples(100 * MiB + np.cumsum(rng.normal(0, 0.2 * MiB, n)), live, 60)
    run = [
        ReplayRun(name, 0, "ok", data={"samples": curve, "peak_heap_rss": 1.0})
        for name, curve in (("glibc", grows), ("jemalloc", wanders))
    ]
    setups = [
        {"name": "glibc", "allocator": "glibc"},
        {"name": "jemalloc", "allocator": "jemalloc"},
    ]

    def lines(timing: str) -> list[str]:
        record = ReplayRecord(
            trace_path="t.mbt", timing=timing, speed=1.0, repeats=1, setups=setups,
            runs=[r.to_dict() for r in run],
        )  # fmt: skip
        return growth_lines(analyze_replay(record, 0.05))

    assert lines("none") == [NOT_ON_THE_TRACES_CLOCK]
    headline, other, rule = lines("recorded")
    assert headline.startswith("Under glibc, RSS grows +") and "the allocator retains" in headline
    assert other.startswith("Under jemalloc the same calls hold ")
    assert other.endswith(": not distinguishable from flat.") or other.endswith(": flat.")
    assert "at least 5% of the setup's mean RSS" in rule


HOUR = 3600.0


def made_up(per_h: float, low_h: float, high_h: float) -> Slope:
    """A slope given in MiB per hour of the trace, as the bench page printed them."""
    return Slope(per_h * MiB / HOUR, low_h * MiB / HOUR, high_h * MiB / HOUR, 0, 180, 2000)


def line(per_h: float, low_h: float, high_h: float) -> Line:
    slope = made_up(per_h, low_h, high_h)
    # 180 s of a 100 MiB heap, min_effect 0: the interval alone decides
    return Line(slope, trend(slope, 180.0, 100 * MiB, 0.0))


def setup(name: str, rss: Line, live: Line, retained: Line) -> SetupGrowth:
    found = reading(rss.trend, live.trend, retained.trend)
    return SetupGrowth(name, rss, live, retained, found, 100 * MiB)


# The base's live bytes on the bench page (docs/bench/2026-11-29-long-record.md): shown to
# grow, and the same program's under every allocator.
LIVE = line(5.1, 3.3, 5.6)


def test_an_rss_slope_not_told_from_flat_is_never_read_as_growth() -> None:
    """The bench page's jemalloc and tcmalloc: live bytes grow, RSS's interval includes
    zero, RSS minus live not told from flat. That is no "grow with the live bytes": their
    RSS is not shown to grow at all."""
    for name, rss in (("jemalloc", line(3.8, -93.9, 20.0)), ("tcmalloc", line(17.5, -14.8, 52.7))):
        g = setup(name, rss, LIVE, line(-1.3, -97.0, 15.0))
        assert g.rss.trend is Trend.UNCLEAR and g.reading is Reading.UNCLEAR, g
        words = other_line(g)
        assert words.endswith(": not distinguishable from flat."), words
        assert "grow with the live bytes" not in words
        assert "not distinguishable from flat" in headline(g)
    # RSS minus live growing under an RSS not shown to grow (live falling faster than RSS)
    # is not "RSS grows ... the allocator retains" either.
    g = setup("jemalloc", line(3.8, -93.9, 20.0), line(-9.0, -12.0, -6.0), line(12.8, 2.0, 30.0))
    assert g.reading is Reading.UNCLEAR, g


def test_each_reading_of_growth_needs_rss_shown_to_grow() -> None:
    """Made-up slopes for every reading; only RSS's own interval opens a reading of growth,
    and the words say what the intervals show."""
    grows, flat_ish = line(6.0, 4.8, 7.2), line(1.0, -2.0, 4.0)
    retains = setup("glibc", grows, LIVE, line(1.0, 0.3, 2.6))
    assert retains.reading is Reading.RETAINS
    assert "the allocator retains (fragmentation or caching)" in headline(retains)
    assert other_line(retains).startswith("Under glibc the same calls hold +6.0 MiB/h [+4.8, +7.2]")
    holds = setup("glibc", grows, LIVE, flat_ish)
    assert holds.reading is Reading.HOLDS_MORE
    assert "the program holds more (a leak or a growing cache)" in headline(holds)
    assert other_line(holds).endswith(": they grow with the live bytes.")
    # RSS grows, but neither the live bytes nor RSS minus live is told from flat: growth,
    # with no word on who holds it.
    neither = setup("tcmalloc", grows, flat_ish, flat_ish)
    assert neither.reading is Reading.GROWS
    words = headline(neither)
    assert words.startswith("Under tcmalloc, RSS grows +6.0 MiB/h [+4.8, +7.2];"), words
    assert "the intervals do not tell" in words
    assert "retains" not in words and "holds more" not in words
    assert "neither the live bytes' share nor the allocator's told from flat" in other_line(neither)
    assert "grow with the live bytes" not in other_line(neither)
    falls = setup("glibc", line(-6.0, -7.2, -4.8), flat_ish, flat_ish)
    assert falls.reading is Reading.SHRINKS and other_line(falls).endswith(": falling.")
    # A whole interval within min_effect is flat (an equivalence), not "unclear".
    level = made_up(0.5, -1.0, 2.0)
    assert trend(level, 3600.0, 100 * MiB, 0.05) is Trend.FLAT
    assert reading(Trend.FLAT, Trend.GROWING, Trend.UNCLEAR) is Reading.FLAT


def test_a_replay_that_fell_behind_is_read_on_the_traces_clock() -> None:
    """A replay stored with the replay's seconds only, which took twice the trace's span:
    its slopes are per hour of the trace, and the span is the trace's, not wall x speed."""
    n, duration = 600, 60.0
    rng = np.random.default_rng(5)
    rss = 100 * MiB + np.linspace(0, 20 * MiB, n) + rng.normal(0, 0.01 * MiB, n)
    live = np.full(n, 50.0 * MiB)
    behind = samples(rss, live, 2 * duration)  # wall 120 s at --speed 1
    clock = trace_clock(behind, 1.0, duration)
    assert math.isclose(clock[-1], duration)
    on_wall = setup_growth("glibc", behind, 1.0, 0.05)
    on_trace = setup_growth("glibc", behind, 1.0, 0.05, duration)
    assert on_wall is not None and on_trace is not None
    assert on_wall.rss.slope is not None and on_trace.rss.slope is not None
    assert math.isclose(on_trace.rss.slope.per_s, 2 * on_wall.rss.slope.per_s)
    growth = analyze_growth([("glibc", behind)], "recorded", 1.0, 0.05, duration)
    assert growth is not None and growth.span_s == duration
    # A replay that kept up is on the same clock either way (its wall x speed is the span).
    kept_up = samples(rss, live, duration / 4)
    assert math.isclose(trace_clock(kept_up, 4.0, duration)[-1], duration)
    # The replayer's own trace time, where it gives it, is the clock: however late it ran.
    given = [[*s, t] for s, t in zip(behind, np.linspace(0, duration, n), strict=True)]
    assert trace_clock(given, 1.0, duration) == [float(t) for t in np.linspace(0, duration, n)]
    at_its_time = setup_growth("glibc", given, 1.0, 0.05, duration)
    assert at_its_time is not None and at_its_time.rss.slope is not None
    assert math.isclose(at_its_time.rss.slope.per_s, on_trace.rss.slope.per_s, rel_tol=1e-6)


def test_the_replayer_gives_each_sample_its_place_on_the_traces_clock(
    tmp_path: Path, native_build: Path
) -> None:
    """A trace replayed at a speed no host can keep up with: the samples' trace times stay
    within the trace's recorded span and reach its end, where wall x speed overshoots it
    many times; the report's span is the trace's."""
    exe = native_programs.build("steady", tmp_path)
    trace = tmp_path / "steady.mbt"
    env = dict(os.environ, LD_PRELOAD=str(shim_path()), MBRECORD_ARMED="1",
               MBRECORD_OUT=str(trace), MBRECORD_CONTROL=str(tmp_path / "ctl"))  # fmt: skip
    run = subprocess.run([str(exe), "2", "2", "20000", "256"], env=env, capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    speed = 2000.0
    proc = subprocess.run(
        [str(replayer_path()), str(trace), "--speed", str(speed), "--sample-ms", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    duration, wall, curve = doc["duration_s"], doc["wall_s"], doc["samples"]
    assert wall * speed > 5 * duration, (wall, duration)  # it fell far behind
    assert all(len(s) == 4 for s in curve)
    times = [s[3] for s in curve]
    assert times == sorted(times) and times[-1] <= duration + 1e-4
    assert times[-1] >= duration - 1e-3  # the last sample, after every call: the end
    record = ReplayRecord(
        trace_path=str(trace), timing="recorded", speed=speed, repeats=1,
        setups=[{"name": "glibc", "allocator": "glibc"}], trace={"duration_s": duration},
        runs=[ReplayRun("glibc", 0, "ok", data=doc).to_dict()],
    )  # fmt: skip
    analysis = analyze_replay(record, 0.05)
    assert analysis.clock("glibc") == tuple(times)
    assert analysis.growth is not None and analysis.growth.span_s == duration
    assert f"over its {span_text(duration)}," in growth_lines(analysis)[-1]
