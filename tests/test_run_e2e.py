"""End to end: a tiny real experiment through the CLI, resume, and a server killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import psutil
import pytest

from cli_runner import GLIBC_AND_JE, run_cli, small_experiment


def write_experiment(tmp_path: Path, steps: str = '["point-query"]', seconds: int = 2) -> Path:
    return small_experiment(
        tmp_path, file="tiny.toml", name="tiny", base="glibc", steps=steps, threads=2,
        cache="64M", step=seconds, extra=None, setups=GLIBC_AND_JE, setup_extra=None,
    )  # fmt: skip


@pytest.mark.server
def test_tiny_experiment_measures_real_qps_and_rss(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path)
    out = tmp_path / "out"
    # A relative --out, as `make demo` gives it: the servers must still find their datadirs.
    result = run_cli("run", exp.name, "--out", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]

    data = json.loads((out / "results.json").read_text())
    cells = data["cells"]
    assert {c["setup"] for c in cells} == {"glibc", "je"}
    for cell in cells:
        assert cell["status"] == "ok", cell
        assert cell["qps"] > 100 and cell["p95_ms"] > 0 and cell["p99_ms"] >= cell["p95_ms"]
        assert cell["peak_rss_bytes"] > 20 << 20 and cell["peak_vsz_bytes"] > cell["peak_rss_bytes"]
        assert cell["samples"] and all(s["rss_bytes"] > 0 for s in cell["samples"])
        assert cell["metrics"]["server_cpu_us_per_op"] > 0
    by_setup = {c["setup"]: c for c in cells}
    assert "libjemalloc" in by_setup["je"]["allocator_path"]
    assert "libc.so" in by_setup["glibc"]["allocator_path"]
    assert data["metadata"]["glibc"] and data["metadata"]["cpus"] >= 1

    db = sqlite3.connect(out / "results.sqlite")
    rows = db.execute("SELECT setup, status, qps, peak_rss_bytes FROM cells").fetchall()
    assert len(rows) == 2 and all(r[1] == "ok" and r[2] > 0 and r[3] > 0 for r in rows)
    assert db.execute("SELECT count(*) FROM samples").fetchone()[0] >= 2
    report = (out / "report.md").read_text()
    assert "Relative QPS: innodb, 2 client thread(s)" in report and "RSS/cache" in report

    again = run_cli("run", str(exp), "--out", str(out), "--resume", "-q")
    assert again.returncode == 0, again.stderr
    assert db.execute("SELECT count(*) FROM cells").fetchone()[0] == 2
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 1

    printed = run_cli("report", str(out), "--format", "relative-csv")
    assert printed.returncode == 0 and "point-query range=100,point,je," in printed.stdout


def _kill_server_under(directory: Path, after_s: float, done: threading.Event) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not done.is_set():
        for proc in psutil.process_iter(["name", "cmdline", "create_time"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.info["name"] == "mariadbd" and str(directory) in cmdline:
                time.sleep(after_s)
                os.kill(proc.pid, signal.SIGKILL)
                return
        time.sleep(0.2)


@pytest.mark.server
@pytest.mark.alone  # the kill, 2.5 s after the server appears, must land mid-cell
def test_server_killed_mid_run_is_a_result_and_the_run_goes_on(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, '["point-query", "update-nonindex"]', seconds=4)
    out = tmp_path / "out"
    done = threading.Event()
    killer = threading.Thread(
        target=_kill_server_under, args=(out / "servers" / "glibc.innodb.r0", 2.5, done)
    )
    killer.start()
    try:
        result = run_cli("run", str(exp), "--out", str(out), "-q")
    finally:
        done.set()
        killer.join()
    assert result.returncode == 0, result.stderr[-2000:]
    cells = json.loads((out / "results.json").read_text())["cells"]
    glibc = {c["step"]: c for c in cells if c["setup"] == "glibc"}
    crashed = glibc["point-query range=100"]
    assert crashed["status"] in ("crashed", "oom") and crashed["exit_signal"] == "SIGKILL"
    assert crashed["log_tail"] is not None
    # The next cell got a fresh server (a new session) and measured.
    after = glibc["update-nonindex range=100"]
    assert after["status"] == "ok" and after["qps"] > 0 and after["session"] != crashed["session"]
    assert all(c["status"] == "ok" for c in cells if c["setup"] == "je")
    assert "CRASHED" in (out / "report.md").read_text()
