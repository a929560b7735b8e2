"""The recording shim's buffer cap: a writer that falls behind stops the recording at a
consistent cut instead of letting its buffers grow in the recorded process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import native_programs
from mallocbench import allocators
from mallocbench.native import shim_path
from mallocbench.patterns.experiment import make_setup
from mallocbench.replay import preload, runner
from mallocbench.replay import trace as tracemod

MIB = 1 << 20
CHUNK = 64 << 10  # the shim's per-thread buffer


@pytest.fixture(scope="module")
def churn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_programs.build("churn", tmp_path_factory.mktemp("churn"))


def run_churn(
    exe: Path, workdir: Path, cap: str, threads: int, drop_kib: int, seconds: float = 1.0
) -> Any:
    """Churn under the shim, armed from the start; its own account, stderr and trace."""
    ctl, trace = workdir / "ctl", workdir / "churn.mbt"
    env = dict(
        os.environ,
        LD_PRELOAD=str(shim_path()),
        MBRECORD_ARMED="1",
        MBRECORD_OUT=str(trace),
        MBRECORD_CONTROL=str(ctl),
        MBRECORD_MAX_BUFFER=cap,
    )
    proc = subprocess.run(
        [str(exe), f"{ctl}.status", str(threads), str(seconds), str(drop_kib)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr, trace, (ctl.parent / "ctl.status").read_text()


def test_a_writer_that_falls_behind_stops_at_the_cap_with_a_whole_trace(
    churn: Path, tmp_path: Path
) -> None:
    """Three threads call malloc faster than one writer compresses: under an 8 MiB cap the
    recording stops, its buffers stay near the cap and go back to the system, and the trace
    up to the cut has every free of its blocks (a lost one would be a leak in the replay)."""
    cap, threads = 8 * MIB, 3
    truth, stderr, trace, answer = run_churn(churn, tmp_path, "8M", threads, 4 * 1024)
    lines = [ln for ln in stderr.splitlines() if ln.startswith("mbrecord:")]
    assert len(lines) == 1 and "the writer fell behind" in lines[0], stderr
    assert answer.startswith(f"stopped {trace}: the writer fell behind"), answer
    info = tracemod.check(trace)
    d, end = info.data, info.data["end"]
    assert info.status.startswith("stopped: the writer fell behind; buffers reached "), info.status
    assert "(cap 8.0 MiB)" in info.status
    assert any("stopped" in w for w in info.warnings())
    assert int(end["max_buffer"]) == cap
    # at most one chunk past the cap for each thread whose call was under way
    assert cap - 2 * CHUNK <= int(end["buffer_peak"]) <= cap + (threads + 1) * CHUNK, end
    assert 0 < d["events"] < truth["calls"]  # cut early, not complete
    assert int(end["dropped"]) == 0
    # A consistent cut: every block freed or reallocated was made in the trace, and no
    # block's address is reused before the trace frees it.
    assert d["skipped_frees"] == 0 and d["unknown_reallocs"] == 0, d
    assert d["implicit_frees"] == 0, d
    assert d["duration_s"] <= float(end["cut_s"]) + 1e-6
    # the buffers went back: chunks, frame buffers and zstd's context (the live-block table
    # stays, it is kept between windows)
    assert truth["rss_peak_kb"] - truth["rss_after_kb"] >= 4 * 1024, truth
    # Replayed, the blocks live at the cut stay live to the end, as at a window's end.
    run = runner.run_once(make_setup("test", "glibc", "glibc"), trace, "none", 1.0, 0, 120)
    assert run.status == "ok", run.error
    assert run.data["malloc_failures"] == 0
    assert run.data["samples"][-1][2] == d["final_live"] > 0


def test_a_bad_cap_in_the_environment_keeps_the_default(churn: Path, tmp_path: Path) -> None:
    """A typo must not lift the cap; the shim says so once and records under 64 MiB."""
    _, stderr, trace, _ = run_churn(churn, tmp_path, "lots", 1, 0, seconds=0.1)
    assert "MBRECORD_MAX_BUFFER=lots is not a size" in stderr, stderr
    assert int(tracemod.check(trace).data["end"]["max_buffer"]) == 64 * MIB


def test_record_refuses_a_cap_it_cannot_work_under() -> None:
    for value, words in (("lots", "is not a size"), ("512K", "is below 1M")):
        proc = subprocess.run(
            [sys.executable, "-m", "mallocbench.cli", "record", "--pid", "1", "--max-buffer",
             value],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode != 0 and len(lines) == 1 and words in lines[0], proc.stderr


@pytest.mark.server
def test_a_server_recorded_under_a_tiny_cap_stops_recording_and_serves_on(
    build: Any, tmp_path: Path
) -> None:
    from mallocbench.servers import engines
    from mallocbench.servers.mariadb import ServerConfig, running

    shim = allocators.get(str(shim_path()))
    config = ServerConfig(engine=engines.get("innodb"), cache_bytes=64 << 20, allocator=shim)
    trace = tmp_path / "server.mbt"
    with running(build, tmp_path / "srv", config) as server:
        server.query("CREATE DATABASE IF NOT EXISTS test")
        server.query("CREATE TABLE test.t (id INT PRIMARY KEY, v VARCHAR(200))")
        stop = threading.Event()
        rows = [0, 0]

        def load(k: int) -> None:
            i = k
            while not stop.is_set():
                server.query("INSERT INTO test.t VALUES (%s, REPEAT('x', 150))", (i,))
                server.query("SELECT v FROM test.t ORDER BY v DESC LIMIT 50")
                rows[k] += 1
                i += 2

        workers = [threading.Thread(target=load, args=(k,)) for k in range(2)]
        for worker in workers:
            worker.start()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "mallocbench.cli", "record", "--pid", str(server.pid),
                 "--seconds", "20", "--out", str(trace), "--max-buffer", "1M"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
        finally:
            stop.set()
            for worker in workers:
                worker.join()
        assert proc.returncode == 3, proc.stderr  # the window ended early, its trace kept
        # the cap ended the window early: `record` did not wait out its 20 s
        assert "the writer fell behind" in proc.stdout, proc.stdout
        assert "usable up to that point" in proc.stderr and "--max-buffer" in proc.stderr
        assert server.alive()
        assert server.query("SELECT COUNT(*) FROM test.t") == [(sum(rows),)]  # still serving
        # the shim answered: record leaves neither its control file nor the status behind
        ctl = preload.in_process(server.pid, preload.control_path(server.pid))
        assert not ctl.exists() and not ctl.with_name(ctl.name + ".status").exists(), ctl
        logs = [server.error_log, server.stdout_log]
        text = "".join(p.read_text(errors="replace") for p in logs if p.is_file())
    assert text.count("mbrecord:") == 1 and "the writer fell behind" in text, text[-2000:]
    info = tracemod.check(trace)
    end = info.data["end"]
    assert info.status.startswith("stopped: the writer fell behind"), info.status
    assert int(end["max_buffer"]) == MIB
    assert int(end["buffer_peak"]) <= 2 * MIB, end  # near the cap, not growing with the load
    assert info.data["skipped_frees"] < 0.01 * info.data["calls"]["free"] + 10
    run = runner.run_once(make_setup("test", "glibc", "glibc"), trace, "none", 1.0, 0, 120)
    assert run.status == "ok" and run.data["malloc_failures"] == 0, run.error


def test_runs_marks_a_replay_of_a_trace_that_stopped_early() -> None:
    from mallocbench.model.metadata import ReplayRecord
    from mallocbench.report.replay import listing

    setups = [{"name": "glibc"}, {"name": "jemalloc"}]
    runs = [{"status": "ok"}] * 4
    for status, marked in (
        ("stopped: the writer fell behind; buffers reached 64.1 MiB (cap 64.0 MiB)", True),
        ("stopped: writing a frame: No space left on device at byte offset 9", True),
        ("complete (disarmed) events=10 dropped=0", False),
    ):
        rec = ReplayRecord(
            trace_path="t.mbt", trace={"status": status}, repeats=2, setups=setups, runs=runs
        )
        line = listing(rec)
        assert ("(recording stopped early)" in line) == marked, line
        assert line.endswith("2 repeats, 4/4 replays ok"), line
