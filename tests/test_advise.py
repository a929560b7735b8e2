"""`mallocbench advise TRACE` and savings in the server's terms: `record --pid` keeps the
server's RSS in the trace, `replay` and `advise` set a saving against it, and advise's
decision is recommend's rule on a real recorded trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runner import run_cli
from mallocbench.analysis.replay import Ratio, saving
from mallocbench.replay import control, serverrss
from mallocbench.replay import trace as tracemod
from mallocbench.replay.native import shim_path
from mallocbench.report.replay import saving_text

MIB = 1 << 20
# A process that allocates steadily, slowly enough for a small trace.
CHURN = (
    "import time\n"
    "keep = [bytearray(4096) for _ in range(2000)]\n"
    "while True:\n"
    "    keep[len(keep) // 2] = bytearray(70000)\n"
    "    [bytearray(200) for _ in range(50)]\n"
    "    time.sleep(0.002)\n"
)


@pytest.fixture(scope="module")
def pid_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A trace of a running process, recorded by `record --pid` as a DBA records a
    server; with the process's own VmRSS at the end of the window."""
    workdir = tmp_path_factory.mktemp("pidtrace")
    env = dict(os.environ, LD_PRELOAD=str(shim_path()), MBRECORD_CONTROL=str(workdir / "ctl"))
    busy = subprocess.Popen([sys.executable, "-c", CHURN], env=env)
    try:
        deadline = time.monotonic() + 10
        while control.shim_loaded(busy.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        trace = workdir / "busy.mbt"
        proc = run_cli("record", "--pid", str(busy.pid), "--seconds", "2", "--out", str(trace))
        assert proc.returncode == 0, proc.stderr
        rss = serverrss.sample(busy.pid)["rss"]
    finally:
        busy.kill()
        busy.wait()
    return trace, rss


def test_record_pid_keeps_the_servers_rss_in_the_trace(pid_trace: tuple[Path, int]) -> None:
    trace, rss_after = pid_trace
    info = tracemod.check(trace).header
    start, end = int(info[serverrss.RSS_START]), int(info[serverrss.RSS_END])
    assert 0.5 * rss_after <= end <= 2 * rss_after and 0.5 * end <= start <= 2 * end
    # the shim's own lines are still there, and the trace still checks whole
    assert info["live_table"] == "kept" and tracemod.check(trace).complete


def test_replay_puts_the_saving_in_the_servers_terms(pid_trace: tuple[Path, int]) -> None:
    trace, _ = pid_trace
    proc = run_cli("replay", str(trace), "--allocators", "glibc,jemalloc", "--repeats", "3",
                   "--timing", "none", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (found,) = doc["replay_summary"]["savings"]
    info = tracemod.check(trace).header
    server = (int(info[serverrss.RSS_START]) + int(info[serverrss.RSS_END])) / 2
    assert found["setup"] == "jemalloc" and found["of_server"] is True
    assert found["of_bytes"] == pytest.approx(server)
    assert found["low"] <= found["bytes"] <= found["high"]


def test_a_saving_is_worded_against_the_server_or_the_heap() -> None:
    ratio = Ratio(0.9, 0.85, 0.95, "slower")
    server = saving("jemalloc", ratio, 40 * MIB, 200 * MIB)
    assert server is not None
    assert saving_text(server) == (
        "saves about 4.0 MiB [2.0, 6.0] of the server's 200 MiB RSS (2.0% [1.0, 3.0])"
    )
    heap = saving("jemalloc", ratio, 40 * MIB, None)
    assert heap is not None and saving_text(heap).startswith(
        "saves about 4.0 MiB [2.0, 6.0] of the replay's 40 MiB heap (the trace holds no server RSS"
    )
    costly = saving("x", Ratio(1.1, 1.05, 1.15, "faster"), 40 * MIB, 200 * MIB)
    assert costly is not None and saving_text(costly).startswith("costs about 4.0 MiB [2.0, 6.0]")
    assert saving("x", Ratio(1.0, float("nan"), float("nan"), "no interval"), MIB, None) is None
