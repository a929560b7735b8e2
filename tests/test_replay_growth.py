"""The growth reading of a replay: RSS and live bytes over the trace's time, with slopes
and intervals, read as the allocator retaining or the program holding more, and nothing
read where the intervals do not support it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import native_programs
from mallocbench.analysis.growth import Reading, Trend, analyze_growth, setup_growth
from mallocbench.analysis.replay import analyze_replay
from mallocbench.analysis.soak import Slope
from mallocbench.model.metadata import ReplayRecord, ReplayRun
from mallocbench.report.growth import NOT_ON_THE_TRACES_CLOCK, growth_lines, rate_text

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
    # 64 KiB every 10 ms at most: 22,500 MiB/h at the program's own pace, less under load
    assert 0 < glibc["live_mib_per_h"] <= 23000, glibc
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
