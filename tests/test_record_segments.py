"""Long recordings: a trace in segments (a directory at --out) replays joined with the
totals of the same program recorded in one file, each segment replays alone, and a disk
budget (--max-size) stops the recording while the program runs on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import native_programs
from mallocbench.native import shim_path
from mallocbench.patterns.experiment import make_setup
from mallocbench.replay import control, runner
from mallocbench.replay import trace as tracemod


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_programs.build("phases", tmp_path_factory.mktemp("phases"))


def record(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", "record", *args],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def program_calls(stdout: str) -> int:
    line = next(line for line in stdout.splitlines() if line.startswith("{"))
    return int(json.loads(line)["calls"])


def totals(info: tracemod.TraceInfo) -> tuple[int, int, int, int]:
    d = info.data
    return d["calls_present"], d["header_events"], d["ideal_peak_live"], d["final_live"]


def test_segments_replay_joined_as_one_file_does_and_each_alone(
    phases: Path, tmp_path: Path
) -> None:
    one, whole = tmp_path / "one.mbt", tmp_path / "set.mbt"
    for out, extra in ((one, []), (whole, ["--segment-seconds", "0.25"])):
        done = record(*extra, "--out", str(out), "--", str(phases), "12", "100")
        assert done.returncode == 0, done.stderr
    assert one.is_file() and whole.is_dir()
    assert "segments (the program's whole run)" in done.stdout
    parts = tracemod.segments(whole)
    assert [p.name for p in parts][:2] == ["0001.mbt", "0002.mbt"] and len(parts) >= 3
    # The same calls in the same order: every total of the set is the single file's.
    joined, single = tracemod.check(whole), tracemod.check(one)
    assert joined.segments == len(parts) and joined.complete
    assert totals(joined) == totals(single), (totals(joined), totals(single))
    assert joined.data["calls_present"] >= program_calls(done.stdout)
    # Rotated by size (at the first frame past it), the same.
    by_size = tmp_path / "by-size.mbt"
    env = dict(os.environ, LD_PRELOAD=str(shim_path()), MBRECORD_ARMED="1",
               MBRECORD_OUT=str(by_size), MBRECORD_CONTROL=str(tmp_path / "ctl"),
               MBRECORD_SEGMENT="100K")  # fmt: skip
    subprocess.run([str(phases), "12", "100"], env=env, check=True, capture_output=True)
    assert len(tracemod.segments(by_size)) >= 2
    assert totals(tracemod.check(by_size)) == totals(single)
    # Each segment is a trace of its own, timed from its cut, whose calls add up.
    alone = [tracemod.check(p) for p in parts]
    assert sum(a.data["calls_present"] for a in alone) == joined.data["calls_present"]
    for a in alone:
        assert a.data["calls_present"] == a.data["header_events"] > 0
        assert a.data["duration_s"] < joined.data["duration_s"] / 2
    later = alone[2]
    assert later.data["snapshot_blocks"] >= 800  # the blocks kept by the phases before it
    assert any("replayed alone" in w for w in later.warnings())
    run = runner.run_once(make_setup("glibc", "glibc", "glibc"), parts[2], "none", 1.0, 0, 60)
    assert run.status == "ok", run.error
    assert (run.value("replay_peak_live") or 0) >= later.data["snapshot_live"]
    shown = subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", "replay", str(whole), "--repeats", "1",
         "--timing", "none"], capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    said = f"replay of {whole} ({len(parts)} segments): {totals(single)[0]:,} calls"
    assert said in " ".join(shown.stdout.split())
    # A process killed as it began a segment leaves a header cut short: record's cut
    # to whole frames removes it, and the set replays as before.
    (whole / f"{len(parts) + 1:04d}.mbt").write_bytes(parts[0].read_bytes()[:100])
    tracemod.cut_to_whole_frames(whole)
    assert tracemod.segments(whole) == parts and totals(tracemod.check(whole)) == totals(single)
    # One missing from the middle: joined, its blocks would be leaks and skipped frees.
    parts[1].rename(tmp_path / "aside.mbt")
    with pytest.raises(tracemod.TraceError, match="segment 2 is missing between 0001"):
        tracemod.check(whole)


def test_max_size_stops_the_recording_and_the_program_runs_on(phases: Path, tmp_path: Path) -> None:
    out = tmp_path / "budget.mbt"
    done = record("--segment-seconds", "0.25", "--max-size", "1M", "--out", str(out), "--",
                  str(phases), "30", "100")  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = [ln for ln in done.stdout.splitlines() if ln.startswith(f"{out}: ")]
    assert len(said) == 1 and "where the trace reached --max-size" in said[0], done.stdout
    assert "the process runs on" in said[0]
    assert program_calls(done.stdout) == 30 * 7600  # it ran to its end
    assert 0 < tracemod.trace_bytes(out) <= 1 << 20
    info = tracemod.check(out)
    assert info.status.startswith("stopped: the disk budget of 1.0 MiB"), info.status
    assert info.cut_short() is None  # what the header counts is all there
    assert 0 < info.data["calls_present"] < program_calls(done.stdout)
    run = runner.run_once(make_setup("glibc", "glibc", "glibc"), out, "none", 1.0, 0, 60)
    assert run.status == "ok", run.error


def test_a_running_process_is_recorded_in_segments_at_out(tmp_path: Path) -> None:
    """--pid: the shim writes the directory beside --out, and it is moved there whole."""
    busy = native_programs.busy_under_shim(tmp_path / "ctl")
    try:
        out = tmp_path / "kept" / "busy.mbt"
        long = control.Segmenting(size=256 << 20, seconds=0.3)
        outcome = control.record(busy.pid, 1.5, out, long=long)
        assert outcome.ended == "window" and outcome.kept == out
        assert len(tracemod.segments(out)) >= 3
        assert [p.name for p in out.parent.iterdir()] == ["busy.mbt"]  # no working copy
        info = tracemod.check(out)
        assert info.complete and info.data["calls_present"] > 0
        assert busy.poll() is None
    finally:
        busy.kill()
        busy.wait()


def test_a_full_disk_stops_the_segment_it_fills_and_the_earlier_ones_stay_whole(
    phases: Path, segments_disk: Path, tmp_path: Path
) -> None:
    trace = segments_disk / "full.mbt"
    env = dict(os.environ, LD_PRELOAD=str(shim_path()), MBRECORD_ARMED="1",
               MBRECORD_OUT=str(trace), MBRECORD_CONTROL=str(tmp_path / "ctl"),
               MBRECORD_SEGMENT_SECONDS="0.25")  # fmt: skip
    done = subprocess.run([str(phases), "12", "100"], env=env, capture_output=True, text=True,
                          check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0 and program_calls(done.stdout) == 12 * 7600
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("mbrecord:")]
    assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
    *whole, last = tracemod.segments(trace)
    assert whole and all(tracemod.check(p).complete for p in whole)
    assert tracemod.header_status(last).startswith("stopped: writing a frame: No space left")
    info = tracemod.check(trace)  # the set, up to the last whole frame
    assert info.status.startswith("stopped:") and info.data["calls_present"] > 0
    assert (
        sum(tracemod.check(p).data["calls_present"] for p in whole) <= (info.data["calls_present"])
    )


def test_record_pid_stops_at_max_size_in_one_line(tmp_path: Path) -> None:
    """--pid: the budget is passed in the control file's "on" line; reaching it ends the
    window at once, as asked (exit 0), and the server runs on."""
    busy = native_programs.busy_under_shim(tmp_path / "ctl")
    try:
        out = tmp_path / "capped.mbt"
        began = time.monotonic()
        done = record("--pid", str(busy.pid), "--seconds", "60", "--max-size", "1M",
                      "--segment-seconds", "0.5", "--out", str(out))  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - began < 30  # not the window's 60 s
        said = [ln for ln in done.stdout.splitlines() if ln.startswith(f"{out}: ")]
        assert len(said) == 1 and "where the trace reached --max-size" in said[0], done.stdout
        assert out.is_dir() and 0 < tracemod.trace_bytes(out) <= 1 << 20
        assert tracemod.check(out).status.startswith("stopped: the disk budget")
        assert busy.poll() is None
    finally:
        busy.kill()
        busy.wait()
