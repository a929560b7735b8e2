"""Record with the mbrecord shim, replay with mbreplay: fidelity, bad traces, a full disk,
a real private server."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import native_programs
from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.native import replayer_path, shim_path
from mallocbench.patterns.experiment import make_setup
from mallocbench.replay import control, preload, runner
from mallocbench.replay import trace as tracemod

HERE = Path(__file__).resolve().parent
HEADER = 1024
FRAME = struct.Struct("<IIII")


def mallocbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def known_pattern(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_programs.build("known_pattern", tmp_path_factory.mktemp("kp"))


def record_pattern(exe: Path, workdir: Path, trace: Path) -> tuple[dict[str, Any], str]:
    """Run the known pattern under the shim; its own account of what it did, and stderr."""
    ctl = workdir / "ctl"
    env = dict(
        os.environ,
        LD_PRELOAD=str(shim_path()),
        MBRECORD_CONTROL=str(ctl),
        MBRECORD_SERVER_VERSION="10.11.6-test",
    )
    proc = subprocess.run(
        [str(exe), str(ctl), str(trace)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


@pytest.fixture(scope="module")
def pattern_trace(known_pattern: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("kptrace")
    trace = workdir / "kp.mbt"
    truth, _ = record_pattern(known_pattern, workdir, trace)
    return trace, truth


def frame_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    offsets, at = [], HEADER
    while at < len(data):
        offsets.append(at)
        _, _, comp_len, _ = FRAME.unpack_from(data, at)
        at += FRAME.size + comp_len
    return offsets


def test_known_pattern_replays_to_the_programs_live_bytes(pattern_trace: Any) -> None:
    trace, truth = pattern_trace
    info = tracemod.check(trace)
    d = info.data
    assert info.complete, info.status
    for kind in ("malloc", "calloc", "realloc", "free", "memalign"):
        assert d["calls"][kind] == truth["calls"][kind], kind
    assert d["threads"] == 4
    assert d["skipped_frees"] == 0 and d["unknown_reallocs"] == 0
    # the snapshot holds the program's 500 pre-window blocks plus what libc had live
    other = d["snapshot_live"] - truth["old_live"]
    assert 0 <= other < 64 * 1024
    assert d["ideal_peak_live"] - other == truth["peak_live"]
    assert d["final_live"] - other == truth["phases"][-1]
    # the shim's own mappings (table, buffers, zstd's) are in the end frame, so a live
    # process's heap can be measured without them
    assert 1 << 20 < int(d["end"]["shim_mapped_peak"]) < 256 << 20
    installed = [a for a in ("glibc", "jemalloc", "tcmalloc") if allocators.get(a, False).available]
    for name in installed:
        setup = make_setup("test", name, name)
        for timing in ("none", "recorded"):
            run = runner.run_once(setup, trace, timing, 1.0, 0, 120)
            assert run.status == "ok", run.error
            r = run.data
            assert r["malloc_failures"] == 0
            # the replayer's own live count at the end, summed over its threads
            assert r["samples"][-1][2] == d["final_live"], (name, timing)
            assert r["peak_heap_rss"] > 0.5 * truth["peak_live"]
            assert r["rss_over_live"] > 0.5


@pytest.mark.parametrize("name", ["glibc", "jemalloc", "tcmalloc"])
def test_cxx_operators_are_recorded_under_an_allocator_that_defines_them(
    name: str, tmp_path: Path
) -> None:
    """jemalloc and tcmalloc export operator new/delete; preloaded behind the shim, theirs
    would serve a C++ program directly and the trace would miss every block (a MyRocks
    server recorded under jemalloc showed half its live bytes)."""
    allocator = allocators.get(name, require_available=False)
    if not allocator.available:
        pytest.skip(f"{name} is not installed")
    exe = tmp_path / "cxx_new"
    subprocess.run(
        ["c++", "-O0", "-std=c++17", "-o", str(exe), str(HERE / "native" / "cxx_new.cc")],
        check=True,
    )
    trace = tmp_path / "cxx.mbt"
    preload = f"{shim_path()} {allocator.preload() or ''}".strip()
    env = dict(os.environ, LD_PRELOAD=preload, MBRECORD_ARMED="1", MBRECORD_OUT=str(trace))
    subprocess.run([str(exe)], env=env, check=True, timeout=60)
    calls = tracemod.check(trace).data["calls"]
    # new[], new, nothrow new[]: malloc; the over-aligned new: memalign; four deletes
    assert calls["malloc"] >= 3000 and calls["memalign"] >= 1000, calls
    assert calls["free"] >= 4000, calls


@pytest.mark.alone  # a replay starved at idle priority beside another test peaked 11% higher
def test_the_recorded_order_makes_an_interleaving_sensitive_peak_steady(pattern_trace: Any) -> None:
    """tcmalloc's layout depends on how the replay threads interleave; one call at a time
    in the recorded order gives it the same calls in the same order every replay."""
    trace, _ = pattern_trace
    if not allocators.get("tcmalloc", False).available:
        pytest.skip("tcmalloc is not installed")
    setup = make_setup("test", "tcmalloc", "tcmalloc")
    for order in ("recorded", "threads"):
        run = runner.run_once(setup, trace, "none", 1.0, 0, 120, order)
        assert run.status == "ok" and run.data["order"] == order, run.error
        assert run.data["samples"][-1][2] == tracemod.check(trace).data["final_live"]
    peaks = [
        runner.run_once(setup, trace, "none", 1.0, r, 120, "recorded").data["peak_heap_rss"]
        for r in range(6)
    ]
    # Most replays agree within 2% (free-running: 15.0 to 17.6 MB here). Not all: in a
    # full `make test` two of four replays have peaked 2 MB (11%) above the other two,
    # on a host where alone they agree to 0.5% in twelve; the cause is not known yet.
    middle = sorted(peaks)[len(peaks) // 2]
    assert sum(abs(p / middle - 1) < 0.02 for p in peaks) >= 4, peaks


# The setups both knob forms below give: MALLOC_CONF's comma kept, glibc's two knobs split.
_CONF = "narenas:1,dirty_decay_ms:0"
_KNOBBED = {
    "glibc": {},
    f"jemalloc[MALLOC_CONF={_CONF}]": {"MALLOC_CONF": _CONF},
    "glibc[MALLOC_ARENA_MAX=1,MALLOC_TOP_PAD_=0]": {
        "MALLOC_ARENA_MAX": "1",
        "MALLOC_TOP_PAD_": "0",
    },
}


def test_replay_set_keeps_a_values_commas_and_splits_between_knobs(pattern_trace: Any) -> None:
    """A comma starts another knob only before KNOB=: MALLOC_CONF's options stay one
    value, as jemalloc reads it; each --set is one setup; a bad one is one line."""
    if not allocators.get("jemalloc", False).available:
        pytest.skip("jemalloc is not installed: `make setup` installs it")
    trace, _ = pattern_trace
    conf = _CONF
    out = mallocbench(
        "replay", str(trace), "--allocators", "glibc", "--set", f"jemalloc:MALLOC_CONF={conf}",
        "--set", "glibc:MALLOC_ARENA_MAX=1,MALLOC_TOP_PAD_=0", "--repeats", "1",
        "--timing", "none", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    knobs = {s["name"]: s["knobs"] for s in doc["setups"]}
    assert knobs == _KNOBBED
    assert all(r["failed"] == 0 for r in doc["replay_summary"]["setups"])
    for bad, why in [
        ("glibc:=2", "--set 'glibc:=2': knobs look like NAME:KNOB=VALUE[,KNOB=VALUE]"),
        ("glibc:MALLOC_ARENA_MAX=1,MALLOC_ARENA_MAX=2", "knob MALLOC_ARENA_MAX is given twice"),
        ("jemalloc:MALLOC_CONF", "--set 'jemalloc:MALLOC_CONF': knobs look like NAME:KNOB=VALUE"),
    ]:
        refused = mallocbench("replay", str(trace), "--set", bad)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith("mallocbench: error: ") and why in refused.stderr


def test_allocators_keeps_a_knobs_commas_as_set_does(pattern_trace: Any, tmp_path: Path) -> None:
    """--allocators takes --set's knob form: after a knob, a comma starts another setup
    only before an allocator's name; tune, which sets the knobs itself, refuses a knob."""
    if not allocators.get("jemalloc", False).available:
        pytest.skip("jemalloc is not installed: `make setup` installs it")
    trace, _ = pattern_trace
    conf = _CONF
    listed = f"glibc,jemalloc:MALLOC_CONF={conf},glibc:MALLOC_ARENA_MAX=1,MALLOC_TOP_PAD_=0"
    out = mallocbench(
        "replay", str(trace), "--allocators", listed, "--repeats", "1", "--timing", "none",
        "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    knobs = {s["name"]: s["knobs"] for s in json.loads(out.stdout)["setups"]}
    assert knobs == _KNOBBED
    for argv, why in [
        (["replay", str(trace), "--allocators", "glibc,jemaloc"], "unknown allocator 'jemaloc'"),
        (
            ["tune", str(trace), "--allocators", f"glibc,jemalloc:MALLOC_CONF={conf}"],
            f"--allocators 'jemalloc:MALLOC_CONF={conf}': the search sets each allocator's",
        ),
    ]:
        refused = mallocbench(*argv, "--out", str(tmp_path / "refused"))
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith("mallocbench: error: ") and why in refused.stderr


def test_replay_locks_its_out_as_run_does(pattern_trace: Any, tmp_path: Path) -> None:
    """A new replay, under way, holds its run (`runs` says running, not died) and its
    --out: a second replay into it, new or resumed, is refused in run's one line."""
    trace, _ = pattern_trace
    out = tmp_path / "out"
    span = tracemod.check(trace).data["duration_s"]
    # As slow as --speed goes (just above 0.001: 23 s of this trace), stopped once three
    # commands (each an interpreter's start, on a host that may be busy) have run
    slowest = f"{max(span / 60, 0.00101):g}"
    slow = ["replay", str(trace), "--repeats", "1", "--speed", slowest, "--out", str(out)]
    replaying = subprocess.Popen(
        [sys.executable, "-m", "mallocbench.cli", *slow],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        listed = ""
        while "replay-" not in listed and time.monotonic() < deadline:
            time.sleep(0.2)
            listed = mallocbench("runs", str(out)).stdout
        assert f"running (PID {replaying.pid})" in listed, listed
        run_id = listed.split()[0]
        again = mallocbench("replay", str(trace), "--timing", "none", "--out", str(out))
        resumed = mallocbench("replay", "--resume", run_id, "--out", str(out))
        assert replaying.poll() is None, "the replay ended before the checks: make it slower"
    finally:
        replaying.send_signal(signal.SIGINT)
        assert replaying.wait(timeout=120) == 128 + signal.SIGINT
    for proc in (again, resumed):
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"the output directory {out} is in use by another mallocbench run" in proc.stderr
    # stopped, the lock given back: the run is listed as interrupted, not running or died
    listed = mallocbench("runs", str(out)).stdout
    assert len(listed.splitlines()) == 1 and listed.rstrip().endswith("interrupted"), listed


def test_replay_command_compares_allocators_with_intervals(
    pattern_trace: Any, tmp_path: Path
) -> None:
    trace, _ = pattern_trace
    out = mallocbench(
        "replay", str(trace), "--allocators", "glibc,jemalloc", "--set",
        "glibc:MALLOC_ARENA_MAX=1", "--repeats", "2", "--timing", "none", "--json",
        "--expect-server-version", "11.4.2",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)["replay_summary"]
    names = [s["setup"] for s in doc["setups"]]
    assert names == ["glibc", "jemalloc", "glibc[MALLOC_ARENA_MAX=1]"]
    assert doc["setups"][0]["ratios"] == {}
    ratio = doc["setups"][1]["ratios"]["peak_heap_rss"]
    assert ratio["low"] is not None and ratio["low"] <= ratio["ratio"] <= ratio["high"]
    assert doc["setups"][1]["runs"] == 2 and doc["setups"][1]["failed"] == 0
    assert doc["trace"]["info"]["server_version"] == "10.11.6-test"
    assert any("recorded under server 10.11.6-test" in w for w in doc["warnings"])
    out_dir = tmp_path / "replayed"
    table = mallocbench(
        "replay", str(trace), "--allocators", "glibc,jemalloc", "--repeats", "2",
        "--out", str(out_dir),
    )  # fmt: skip
    assert table.returncode == 0 and "relative to glibc" in table.stdout, table.stderr
    # through a pipe: the trace's reading, one line per replay with its count, where it wrote
    log = table.stderr.splitlines()
    assert log[0].startswith(f"read {trace} in ") and log[0].endswith("; 4 replays to run")
    assert log[1].startswith("1/4 glibc repeat 1: peak RSS ") and " ETA " in log[1]
    assert log[4].startswith("4/4 jemalloc repeat 2: peak RSS ")
    assert log[-1].startswith("wrote results.json, report.md, replay.csv") and log[-1].endswith(
        f" in {out_dir}"
    )
    # a replay has no cells: no CSV of cells that would hold a header alone
    assert not any((out_dir / n).exists() for n in ("cells.csv", "summary.csv", "relative.csv"))
    # A replay kept with --out is a run: in the store, read back by `report` in any format.
    for name in ("results.sqlite", "results.json", "report.md", "report.html"):
        assert (out_dir / name).is_file(), name
    again = mallocbench("report", str(out_dir), "--format", "markdown")
    assert again.returncode == 0, again.stderr
    assert "## Replay of a recorded trace" in again.stdout and "| jemalloc | 2/2 |" in again.stdout
    assert "Replay: heap RSS over time" in (out_dir / "report.html").read_text()
    stored = json.loads(mallocbench("report", str(out_dir), "--format", "json").stdout)
    runs = stored["metadata"]["replay"]["runs"]
    assert [(r["setup"], r["status"]) for r in runs] == [
        ("glibc", "ok"), ("jemalloc", "ok"), ("glibc", "ok"), ("jemalloc", "ok")
    ]  # fmt: skip
    # CSV: replay.csv beside the reports, and `report --format csv` of a replay is its rows
    rows = list(csv.DictReader(io.StringIO((out_dir / "replay.csv").read_text())))
    assert [(r["setup"], r["runs"], r["failed"]) for r in rows] == [
        ("glibc", "2", "0"), ("jemalloc", "2", "0")
    ]  # fmt: skip
    assert rows[0]["peak_heap_rss_ratio"] == "" and float(rows[1]["peak_heap_rss_ratio"]) > 0
    assert rows[1]["peak_heap_rss_verdict"] in ("higher", "lower", "not significant")
    again_csv = mallocbench("report", str(out_dir), "--format", "csv")
    assert again_csv.returncode == 0 and again_csv.stdout == (out_dir / "replay.csv").read_text()
    # `runs` says what a replay run is instead of "0 cells"
    listed = mallocbench("runs", str(out_dir))
    assert listed.returncode == 0, listed.stderr
    assert f"replay of {trace}  glibc, jemalloc  2 repeats, 4/4 replays ok" in listed.stdout
    assert "0 cells" not in listed.stdout


def test_the_steady_peak_leaves_out_a_peak_at_the_replays_start(tmp_path: Path) -> None:
    """A program that makes and frees 32 MiB first, then churns about 1 MiB: the whole
    peak is the start's, the steady one (over each replay's second half) the churn's."""
    exe = native_programs.build("early_peak", tmp_path)
    record_pattern(exe, tmp_path, tmp_path / "ep.mbt")
    out = mallocbench("replay", str(tmp_path / "ep.mbt"), "--repeats", "2", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (glibc,) = doc["replay_summary"]["setups"]
    assert glibc["metrics"]["peak_heap_rss"]["mean"] > 30 << 20
    assert 0 < glibc["metrics"]["peak_heap_rss_steady"]["mean"] < 4 << 20
    (run, _) = doc["metadata"]["replay"]["runs"]
    assert run["data"]["steady_from_s"] == pytest.approx(run["data"]["wall_s"] / 2, rel=0.01)


def test_replay_at_speed_passes_time_based_knobs_in_the_traces_time() -> None:
    """As tune: at 4x, jemalloc's decays (its 10 s default too) at a quarter; no other
    knob, no other timing, and never down to 0 ("at once")."""
    je = make_setup("replay", "je", "jemalloc", {"MALLOC_CONF": "dirty_decay_ms:8000"})
    assert runner.passed_knobs(je, "recorded", 4.0) == {"MALLOC_CONF": "dirty_decay_ms:2000"}
    default = make_setup("replay", "je", "jemalloc")
    assert runner.passed_knobs(default, "recorded", 4.0) == {"MALLOC_CONF": "dirty_decay_ms:2500"}
    assert runner.passed_knobs(default, "recorded", 1e6) == {"MALLOC_CONF": "dirty_decay_ms:1"}
    assert runner.passed_knobs(default, "recorded", 1.0) == {}
    assert runner.passed_knobs(je, "none", 4.0) == je.knobs
    glibc = make_setup("replay", "g", "glibc", {"MALLOC_ARENA_MAX": "2"})
    assert runner.passed_knobs(glibc, "recorded", 4.0) == {"MALLOC_ARENA_MAX": "2"}
    off = make_setup("replay", "je", "jemalloc", {"MALLOC_CONF": "dirty_decay_ms:0"})
    assert runner.passed_knobs(off, "recorded", 4.0) == {"MALLOC_CONF": "dirty_decay_ms:0"}


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_truncated_trace_names_the_byte_offset(pattern_trace: Any, tmp_path: Path) -> None:
    trace, _ = pattern_trace
    cut = tmp_path / "cut.mbt"
    data = trace.read_bytes()
    last = frame_offsets(trace)[-2]  # cut inside the events frame before the end frame
    cut.write_bytes(data[: last + 40])
    line = one_error_line(mallocbench("replay", str(cut)))
    assert f"truncated at byte offset {last}" in line


def test_corrupt_trace_names_the_byte_offset(pattern_trace: Any, tmp_path: Path) -> None:
    trace, _ = pattern_trace
    bad = tmp_path / "bad.mbt"
    data = bytearray(trace.read_bytes())
    frame = frame_offsets(trace)[-2]
    middle = frame + FRAME.size + FRAME.unpack_from(data, frame)[2] // 2
    data[middle : middle + 8] = b"\xff" * 8
    bad.write_bytes(bytes(data))
    line = one_error_line(mallocbench("replay", str(bad)))
    assert f"corrupt frame at byte offset {frame}" in line


def test_newer_format_and_foreign_files_are_refused(pattern_trace: Any, tmp_path: Path) -> None:
    trace, _ = pattern_trace
    newer = tmp_path / "newer.mbt"
    data = bytearray(trace.read_bytes())
    data[8:12] = struct.pack("<I", 2)
    newer.write_bytes(bytes(data))
    assert "newer" in one_error_line(mallocbench("replay", str(newer)))
    foreign = tmp_path / "foreign.mbt"
    foreign.write_bytes(b"hello world, not a trace at all\n")
    assert "not a mallocbench trace" in one_error_line(mallocbench("replay", str(foreign)))
    missing = one_error_line(mallocbench("replay", str(tmp_path / "nope.mbt")))
    assert "no trace at" in missing


def test_full_disk_stops_recording_and_the_process_runs_on(
    known_pattern: Path, small_disk: Path, tmp_path: Path
) -> None:
    trace = small_disk / "kp.mbt"
    truth, stderr = record_pattern(known_pattern, tmp_path, trace)
    assert truth["calls"]["free"] > 0  # it ran to the end and reported
    lines = [ln for ln in stderr.splitlines() if ln.startswith("mbrecord:")]
    assert len(lines) == 1 and "No space left on device" in lines[0], stderr
    status = tracemod.header_status(trace)
    assert status.startswith("stopped: writing a frame: No space left on device"), status
    offset = int(status.split("byte offset ")[1].split()[0])
    assert offset == trace.stat().st_size  # cut back to its last whole frame
    # The disk filled before the first events frame: a readable trace with no call in it,
    # refused at replay in one line that gives the reason it stopped.
    with pytest.raises(tracemod.TraceError, match="no calls to replay") as caught:
        tracemod.check(trace)
    assert status in str(caught.value)


def test_record_refuses_a_process_without_the_shim() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.2)
        with pytest.raises(MallocbenchError) as caught:
            control.record(sleeper.pid, 1, Path("/nonexistent/x.mbt"))
        message = str(caught.value)
        assert "does not have the recording shim loaded" in message
        assert f"LD_PRELOAD={shim_path()}" in message and "\n" not in message
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_start_the_shim_never_answered_is_taken_back(tmp_path: Path) -> None:
    """A shim that misses the 5 s answer (here: its process stopped) must not arm on the
    "on" later, when nobody is left to stop its recording."""
    ctl, trace = tmp_path / "ctl", tmp_path / "late.mbt"
    env = dict(os.environ, LD_PRELOAD=str(shim_path()), MBRECORD_CONTROL=str(ctl))
    sleeper = subprocess.Popen(["sleep", "60"], env=env)
    try:
        deadline = time.monotonic() + 10
        while preload.shim_loaded(sleeper.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        sleeper.send_signal(signal.SIGSTOP)
        with pytest.raises(MallocbenchError, match="no answer in 5 s"):
            control.start(sleeper.pid, str(trace))
        sleeper.send_signal(signal.SIGCONT)
        time.sleep(1.0)  # ten of the shim's control polls
        assert not trace.exists()
        assert (
            not Path(f"{ctl}.status").exists()
            or "recording" not in Path(f"{ctl}.status").read_text()
        )
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_interrupted_recording_keeps_its_trace_and_leaves_no_files(tmp_path: Path) -> None:
    """Ctrl-C during `record`: the shim is disarmed, the trace so far lands where --out
    said, whole and checkable, and neither it nor the control and status files stay
    beside the control file (the server's /tmp); the process runs on."""
    busy = native_programs.busy_under_shim(tmp_path / "ctl")
    try:
        out = tmp_path / "kept" / "so-far.mbt"

        def interrupted() -> None:
            time.sleep(0.5)
            raise KeyboardInterrupt

        with pytest.raises(control.RecordingInterrupted) as caught:
            control.record(busy.pid, 30, out, started=interrupted)
        assert caught.value.kept == out and out.stat().st_size > HEADER
        # the header says why the window ended, and when
        assert tracemod.header_status(out).startswith("complete (interrupted by SIGINT at ")
        assert "of a 30 s window) events=" in tracemod.header_status(out)
        assert tracemod.check(out).complete
        assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]
        assert busy.poll() is None

        # The command says where the trace went, and exits as an interruption does.
        cli_out = tmp_path / "cli.mbt"
        command = [sys.executable, "-m", "mallocbench.cli", "record", "--pid", str(busy.pid)]
        recorder = subprocess.Popen(
            [*command, "--seconds", "30", "--out", str(cli_out)],
            stderr=subprocess.PIPE,
            text=True,
            # A shell that started the tests in the background left SIGINT ignored, and
            # Python keeps an ignored SIGINT ignored: give the recorder the default back.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert recorder.stderr is not None
        assert "recording process" in recorder.stderr.readline()
        recorder.send_signal(signal.SIGINT)
        stderr = recorder.stderr.read()
        assert recorder.wait(timeout=30) == 130, stderr
        assert f"{cli_out}: " in stderr and "the trace up to the interruption" in stderr
        assert tracemod.header_status(cli_out).startswith("complete")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.mbt", "kept"]
        assert busy.poll() is None
    finally:
        busy.kill()
        busy.wait()


def test_dropin_preloads_the_shim_in_front_of_the_allocator() -> None:
    out = mallocbench("record", "--print-dropin", "--service", "mariadb")
    assert out.returncode == 0, out.stderr
    assert "[Service]" in out.stdout and f"LD_PRELOAD={shim_path()}" in out.stdout


def test_record_help_lists_how_a_window_can_end() -> None:
    from mallocbench import exitcodes

    out = mallocbench("record", "--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for code, words in exitcodes.RECORD_POLICY:
        assert f"{code} {' '.join(words.split())}" in text, words


@pytest.mark.server
def test_private_server_recorded_and_replayed(build: Any, tmp_path: Path) -> None:
    from mallocbench.servers import engines
    from mallocbench.servers.mariadb import ServerConfig, running

    shim = allocators.get(str(shim_path()))
    config = ServerConfig(engine=engines.get("innodb"), cache_bytes=64 << 20, allocator=shim)
    trace = tmp_path / "server.mbt"
    with running(build, tmp_path / "srv", config) as server:
        server.query("CREATE DATABASE IF NOT EXISTS test")
        server.query("CREATE TABLE test.t (id INT PRIMARY KEY, v VARCHAR(200))")
        stop = threading.Event()
        served = []

        def load() -> None:
            i = 0
            while not stop.is_set():
                server.query("INSERT INTO test.t VALUES (%s, REPEAT('x', 150))", (i,))
                served.append(server.query("SELECT v FROM test.t ORDER BY v DESC LIMIT 50"))
                i += 1

        worker = threading.Thread(target=load)
        worker.start()
        try:
            closing = control.record(server.pid, 3.0, trace).closing
        finally:
            stop.set()
            worker.join()
        assert closing.startswith("complete"), closing
        count = len(served)
        assert server.query("SELECT COUNT(*) FROM test.t")[0][0] == count
    info = tracemod.check(trace)
    d = info.data
    # Every query allocates; how many a loaded host serves in 3 s varies tenfold.
    assert info.complete and d["events"] > 200 and d["threads"] >= 2
    assert d["snapshot_blocks"] > 100  # the server's heap before the window
    assert d["skipped_frees"] < 0.01 * d["calls"]["free"] + 10
    assert d["info"]["exe"].endswith(("mariadbd", "mysqld"))
    run = runner.run_once(make_setup("test", "glibc", "glibc"), trace, "none", 1.0, 0, 300)
    assert run.status == "ok", run.error
    assert run.data["malloc_failures"] == 0 and run.data["peak_heap_rss"] > 0
    assert run.data["samples"][-1][2] == d["final_live"]


def test_replayer_is_built() -> None:
    assert replayer_path().is_file() and os.access(replayer_path(), os.X_OK)


def test_a_ratio_is_a_finding_only_beyond_min_effect_with_its_interval() -> None:
    from mallocbench.analysis.replay import summarize

    def runs(setup: str, peaks: list[float]) -> list[runner.ReplayRun]:
        return [
            runner.ReplayRun(setup, i, "ok", {"peak_heap_rss": p, "cpu_s": 1.0 + i / 100})
            for i, p in enumerate(peaks)
        ]

    data = [
        *runs("glibc", [100.0, 101.0, 99.0]),
        *runs("jemalloc", [80.0, 81.0, 79.0]),  # 20% lower, tight: a finding
        *runs("tcmalloc", [98.0, 99.0, 97.0]),  # 2% lower, tight: real but under 5%
        runner.ReplayRun("tcmalloc", 3, "crashed", error="killed by SIGSEGV"),
    ]
    setups: list[tuple[str, str, dict[str, str]]] = [
        ("glibc", "glibc", {}),
        ("jemalloc", "jemalloc", {}),
        ("tcmalloc", "tcmalloc", {}),
    ]
    base, je, tc = summarize(data, setups, min_effect=0.05)
    assert base.ratios == {} and base.metrics["peak_heap_rss"].mean == pytest.approx(100.0)
    assert je.ratios["peak_heap_rss"].finding and je.ratios["peak_heap_rss"].ratio < 0.85
    assert not tc.ratios["peak_heap_rss"].finding
    assert tc.runs == 4 and tc.failed == 1 and tc.errors == ["killed by SIGSEGV"]
    assert not je.ratios["cpu_s"].finding  # the same CPU in both: never a finding


def test_forked_children_stop_recording_and_the_parent_trace_stays_whole(tmp_path: Path) -> None:
    trace = tmp_path / "fork.mbt"
    program = (
        "import os, threading\n"
        "def churn():\n"
        "    for _ in range(2000): bytearray(5000)\n"
        "t = threading.Thread(target=churn); t.start()\n"
        "for _ in range(20):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        [bytearray(3000) for _ in range(500)]\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "t.join(); print('done')\n"
    )
    env = dict(
        os.environ,
        LD_PRELOAD=str(shim_path()),
        MBRECORD_ARMED="1",
        MBRECORD_OUT=str(trace),
        MBRECORD_CONTROL=str(tmp_path / "ctl"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    info = tracemod.check(trace)
    assert info.complete, info.status
    # the children's 20 x 500 blocks of 3000 bytes are not in the parent's trace, and
    # no child wrote a trace of its own
    assert info.data["calls"]["malloc"] < 20 * 500, info.data["calls"]
    assert sorted(p.name for p in tmp_path.glob("*.mbt")) == ["fork.mbt"]
    run = runner.run_once(make_setup("test", "glibc", "glibc"), trace, "none", 1.0, 0, 120)
    assert run.status == "ok" and run.data["malloc_failures"] == 0


@pytest.mark.server
def test_full_disk_while_a_server_records_and_it_keeps_serving(
    build: Any, small_disk: Path, tmp_path: Path
) -> None:
    from mallocbench.servers import engines
    from mallocbench.servers.mariadb import ServerConfig, running

    shim = allocators.get(str(shim_path()))
    config = ServerConfig(engine=engines.get("innodb"), cache_bytes=64 << 20, allocator=shim)
    with running(build, tmp_path / "srv", config) as server:
        server.query("CREATE DATABASE IF NOT EXISTS test")
        server.query("CREATE TABLE test.t (id INT PRIMARY KEY, v TEXT)")
        window = control.start(server.pid, str(small_disk / "server.mbt"))
        rows = 0
        while rows < 2000 and not window.status.read_text().startswith("error"):
            server.query("INSERT INTO test.t VALUES (%s, REPEAT('y', 2000))", (rows,))
            server.query("SELECT LENGTH(v) FROM test.t WHERE id = %s", (rows // 2,))
            rows += 1
        for extra in range(20):  # and after the disk filled
            server.query("INSERT INTO test.t VALUES (%s, REPEAT('y', 2000))", (rows + extra,))
        closing = control.stop(window, tmp_path / "server.mbt")
        assert closing.startswith("error"), closing
        assert server.query("SELECT COUNT(*) FROM test.t") == [(rows + 20,)]  # still serving
        assert server.alive()
        # Read while the server runs: as root its live error log is in its runtime
        # directory, which goes when it stops.
        logs = [server.error_log, server.stdout_log]
        text = "".join(p.read_text(errors="replace") for p in logs if p.is_file())
    info = tracemod.check(tmp_path / "server.mbt")
    assert info.status.startswith("stopped: writing a frame: No space left on device")
    assert "byte offset" in info.status
    assert text.count("mbrecord:") == 1, text[-2000:]


def test_a_trace_cut_at_a_frame_boundary_replays_only_with_a_warning(
    pattern_trace: Any, tmp_path: Path, integrity_figures: Any
) -> None:
    """Cut where a frame ends, a trace reads cleanly: without its END frame it once
    replayed as if whole. Now the replay says how much is there, beside its results; cut
    before its events, it has nothing to replay and is refused."""
    trace, _ = pattern_trace
    offsets = frame_offsets(trace)
    counted = tracemod.check(trace).data["events"]
    cut = tmp_path / "cut.mbt"
    cut.write_bytes(trace.read_bytes()[: offsets[-1]])  # the END frame is the last
    info = tracemod.check(cut)
    assert info.data["end_frame"] is False and info.data["header_events"] == counted
    assert info.data["calls_present"] == counted
    result = mallocbench("replay", str(cut), "--allocators", "glibc", "--repeats", "1",
                         "--timing", "none", "--json")  # fmt: skip
    integrity_figures.add("faults injected")
    integrity_figures.check_output(result.stderr)
    assert result.returncode == 0, result.stderr
    warnings = json.loads(result.stdout)["replay_summary"]["warnings"]
    said = (
        f"the trace has no END frame (it was cut short): it holds {counted:,} calls of "
        f"the {counted:,} its header counts"
    )
    assert any(said in w for w in warnings), warnings
    # before its one events frame: the snapshot alone
    cut.write_bytes(trace.read_bytes()[: offsets[-2]])
    integrity_figures.add("faults injected")
    line = one_error_line(mallocbench("replay", str(cut)))
    assert "no calls to replay (the recorded window caught none" in line, line


def test_a_header_only_trace_is_refused(
    pattern_trace: Any, tmp_path: Path, integrity_figures: Any
) -> None:
    trace, _ = pattern_trace
    bare = tmp_path / "bare.mbt"
    bare.write_bytes(trace.read_bytes()[:HEADER])
    integrity_figures.add("faults injected")
    line = one_error_line(mallocbench("replay", str(bare)))
    assert "header only, no calls to replay" in line and line.startswith("mallocbench: error:")


# ---------------------------------------------------------------- record never loses a trace


@pytest.fixture(scope="module")
def linger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_programs.build("linger", tmp_path_factory.mktemp("linger"))


def start_linger(exe: Path, workdir: Path, seconds: float) -> subprocess.Popen[str]:
    """`linger` under the shim, unarmed, its control file in `workdir`: what `record`
    leaves there after the window is what it would leave in a server's /tmp."""
    ctl = workdir / "ctl"
    env = dict(os.environ, LD_PRELOAD=str(shim_path()), MBRECORD_CONTROL=str(ctl))
    proc = subprocess.Popen(
        [str(exe), f"{ctl}.status", str(seconds)], env=env, stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 10
    while preload.shim_loaded(proc.pid) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def start_record(
    pid: int, out: Path, seconds: float = 30, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    recorder = subprocess.Popen(
        [sys.executable, "-m", "mallocbench.cli", "record", "--pid", str(pid), "--seconds",
         str(seconds), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert recorder.stderr is not None
    assert "recording process" in recorder.stderr.readline()
    return recorder


def finished(recorder: subprocess.Popen[str], figures: Any) -> tuple[int, str, str]:
    out, err = recorder.communicate(timeout=120)
    figures.add("faults injected")
    figures.check_output(err)
    return recorder.returncode, out, err


@pytest.mark.parametrize("ending", ["exits", "killed"])
def test_a_process_that_ends_during_the_window_leaves_its_trace_at_out(
    linger: Path, tmp_path: Path, integrity_figures: Any, ending: str
) -> None:
    """Once a FileNotFoundError traceback, --out never written, the trace left in the
    process's /tmp. Now the trace is at --out, its header says why the window ended,
    the exit status is 3, and nothing stays beside the control file."""
    work = tmp_path / "proc"
    work.mkdir()
    proc = start_linger(linger, work, 1.5 if ending == "exits" else 60)
    out = tmp_path / "kept" / "trace.mbt"
    began = time.monotonic()
    recorder = start_record(proc.pid, out)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "armed"
    if ending == "killed":
        time.sleep(2.5)  # the shim writes a frame a second
        proc.kill()
    proc.wait(timeout=30)
    code, stdout, stderr = finished(recorder, integrity_figures)
    assert code == 3, stderr
    assert time.monotonic() - began < 25  # it did not wait out its 30 s window
    assert f"process {proc.pid} " in stderr and "during the window" in stderr, stderr
    status = tracemod.header_status(out)
    info = tracemod.check(out)
    assert info.data["calls_present"] > 100, info.data
    if ending == "exits":
        assert status.startswith(f"complete (process {proc.pid} exited at "), status
        assert "of a 30 s window) events=" in status and info.cut_short() is None
    else:
        assert status.startswith(f"stopped: process {proc.pid} ended at about "), status
        assert f"whole frames up to byte offset {out.stat().st_size}" in status, status
        assert info.data["end_frame"] is False and info.cut_short() is not None
    assert [p.name for p in work.iterdir()] == [], list(work.iterdir())
    run = runner.run_once(make_setup("test", "glibc", "glibc"), out, "none", 1.0, 0, 120)
    assert run.status == "ok", run.error


def fill(disk: Path) -> None:
    """Leave no byte free on `disk` (a file named filler takes it all)."""
    filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    with contextlib.suppress(OSError):
        while os.write(filler, b"\0" * 4096):
            pass
    os.close(filler)


def test_a_full_disk_at_out_keeps_the_trace_and_names_it(
    linger: Path, small_disk: Path, tmp_path: Path, integrity_figures: Any
) -> None:
    """Once an ENOSPC traceback and a 0-byte file at --out: now --out is untouched and
    one line says where the trace is kept and how to move it, exit status 4."""
    fill(small_disk)
    proc = start_linger(linger, tmp_path, 60)
    try:
        out = small_disk / "trace.mbt"
        recorder = start_record(proc.pid, out, seconds=1)
        code, _, stderr = finished(recorder, integrity_figures)
    finally:
        proc.kill()
        proc.wait()
    lines = stderr.strip().splitlines()
    assert code == 4 and len(lines) == 1, stderr
    assert lines[0].startswith(f"mallocbench: error: cannot write {out}: No space left"), lines
    assert not out.exists() and sorted(p.name for p in small_disk.iterdir()) == ["filler"]
    kept = Path(lines[0].split("the trace is kept at ")[1].split(":")[0])
    assert kept.parent == tmp_path and f"mv {kept} {out}" in lines[0], lines[0]
    assert tracemod.check(kept).complete
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name]  # no control files


def test_a_second_record_of_one_process_is_refused_with_the_first_s_pid(
    linger: Path, tmp_path: Path, integrity_figures: Any
) -> None:
    """Once the second re-armed the shim and closed the first's trace early, and the
    first waited 60 s and exited 2 with its trace named by a /proc path."""
    proc = start_linger(linger, tmp_path, 60)
    try:
        first_out, second_out = tmp_path / "first.mbt", tmp_path / "second.mbt"
        first = start_record(proc.pid, first_out, seconds=3)
        second = mallocbench("record", "--pid", str(proc.pid), "--seconds", "1", "--out",
                             str(second_out))  # fmt: skip
        integrity_figures.add("faults injected")
        line = one_error_line(second)
        said = f"process {proc.pid} is already being recorded by mallocbench (pid {first.pid})"
        assert said in line and f"kill -INT {first.pid}" in line, line
        assert not second_out.exists()
        code, stdout, stderr = finished(first, integrity_figures)
        assert code == 0, stderr
        assert "(complete " in stdout and tracemod.header_status(first_out).startswith(
            "complete (disarmed)"
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["first.mbt"]  # lock gone too
        # a recorder that died without a word leaves a lock that is not obeyed
        (tmp_path / "ctl.lock").write_text("999999999\n")
        outcome = control.record(proc.pid, 0.5, tmp_path / "third.mbt")
        assert outcome.ended == "window" and outcome.kept == tmp_path / "third.mbt"
    finally:
        proc.kill()
        proc.wait()


def test_ctrl_c_while_the_shim_cannot_answer_names_where_the_trace_stays(
    linger: Path, tmp_path: Path, integrity_figures: Any
) -> None:
    """A stopped process cannot close its trace in the 5 s an interrupted record waits:
    the trace is not copied half-written; one line says where it is, exit status 4."""
    proc = start_linger(linger, tmp_path, 60)
    try:
        out = tmp_path / "out" / "trace.mbt"
        recorder = start_record(proc.pid, out)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "armed"
        proc.send_signal(signal.SIGSTOP)
        recorder.send_signal(signal.SIGINT)
        code, _, stderr = finished(recorder, integrity_figures)
        lines = stderr.strip().splitlines()
        assert code == 4 and len(lines) == 1, stderr
        assert f"the shim in process {proc.pid} left no closed trace within 5 s" in lines[0]
        kept = preload.in_process(proc.pid, str(tmp_path / "mbrecord-"))
        assert f"the trace is kept at {kept}" in lines[0] and "mv " in lines[0], lines[0]
        assert not out.exists()
        proc.send_signal(signal.SIGCONT)  # it reads the "off" and closes the trace
        (trace,) = tmp_path.glob("mbrecord-*.mbt")  # the shim created it when armed
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and tracemod.header_status(trace) == "recording":
            time.sleep(0.1)
        assert tracemod.header_status(trace).startswith("complete (disarmed)")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("out_disk", ["room", "full"])
def test_a_killed_process_with_a_private_tmp_leaves_its_trace_outside_it(
    linger: Path, small_disk: Path, tmp_path: Path, integrity_figures: Any, out_disk: str
) -> None:
    """A server with its own /tmp (systemd's PrivateTmp: a mount only its namespace sees)
    is killed during the window: its /tmp goes with it, so the trace is copied out through
    the descriptors record holds. When --out is full, it goes to record's own temporary
    directory, never only to the /tmp that is about to vanish."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is needed for a private mount namespace")
    private = tmp_path / "private-tmp"
    private.mkdir()
    ctl = private / "ctl"
    script = (
        f"mount -t tmpfs -o size=64m tmpfs {private} && exec env LD_PRELOAD={shim_path()} "
        f"MBRECORD_CONTROL={ctl} {linger} {ctl}.status 60"
    )
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while preload.shim_loaded(proc.pid) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if preload.shim_loaded(proc.pid) is None:
        proc.kill()
        proc.wait()
        pytest.skip("cannot mount a private tmpfs in a new mount namespace here")
    if out_disk == "full":
        fill(small_disk)
    out = (small_disk if out_disk == "full" else tmp_path) / "trace.mbt"
    rescue = tmp_path / "rescue"
    rescue.mkdir()
    recorder = start_record(proc.pid, out, env=dict(os.environ, TMPDIR=str(rescue)))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "armed"
        time.sleep(2.5)  # the shim writes a frame a second
    finally:
        proc.kill()
        proc.wait()
    code, _, stderr = finished(recorder, integrity_figures)
    assert list(private.iterdir()) == []  # the host never saw the process's /tmp
    if out_disk == "room":
        assert code == 3, stderr
        kept = out
    else:
        lines = stderr.strip().splitlines()
        assert code == 4 and len(lines) == 1, stderr
        (kept,) = rescue.glob("mbrecord-*.mbt")
        assert f"the trace is kept at {kept}: move it with mv {kept} {out}" in lines[0]
        assert not out.exists()
    status = tracemod.header_status(kept)
    assert status.startswith(f"stopped: process {proc.pid} ended at about "), status
    assert tracemod.check(kept).data["calls_present"] > 100


def test_sigterm_ends_the_window_as_ctrl_c_does(
    linger: Path, tmp_path: Path, integrity_figures: Any
) -> None:
    """By default SIGTERM (a `timeout`, a service stop) killed record at once: the server
    kept recording with nobody to stop it, its trace in the server's /tmp."""
    work = tmp_path / "proc"
    work.mkdir()
    proc = start_linger(linger, work, 60)
    try:
        out = tmp_path / "trace.mbt"
        recorder = start_record(proc.pid, out)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "armed"
        time.sleep(0.5)
        recorder.send_signal(signal.SIGTERM)
        code, _, stderr = finished(recorder, integrity_figures)
        assert code == 143, stderr
        assert stderr.strip().endswith("mallocbench: interrupted by SIGTERM"), stderr
        assert "the trace up to the interruption" in stderr
        status = tracemod.header_status(out)
        assert status.startswith("complete (interrupted by SIGTERM at "), status
        assert [p.name for p in work.iterdir()] == []  # disarmed, nothing left behind
        time.sleep(0.5)
        assert not list(work.iterdir()) and proc.poll() is None  # and it runs on
    finally:
        proc.kill()
        proc.wait()
