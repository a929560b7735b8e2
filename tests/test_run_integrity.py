"""Runs nobody can corrupt: one run per directory, no orphans, a status that tells the truth.

Each test injects one fault into a real run (a second run into the same directory, a
SIGKILL of the harness, a SIGTERM, a bug mid-run) and checks that nothing measured is
lost and nothing is left running.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from cli_runner import run_cli, small_experiment
from conftest import IntegrityFigures
from mallocbench import allocators
from mallocbench import experiment as experiment_mod
from mallocbench.allocators.elf import defined_functions
from mallocbench.results import RunResult
from mallocbench.runner import Pipeline, RunOptions
from mallocbench.servers.orphans import stop_orphans
from mallocbench.store import Store
from mallocbench.store.base import damaged_store
from mallocbench.store.locks import run_holder

EXPERIMENT = """
name = "integrity"
base = "glibc"
engines = ["innodb"]
steps = {steps}
threads = [2]
repeats = {repeats}
[dataset]
tables = 1
rows = 2000
cache = "32M"
[durations]
warmup = 0
step = {seconds}
[[setup]]
name = "glibc"
allocator = "glibc"
[[setup]]
name = "glibc-b"
allocator = "glibc"
"""


def write_experiment(
    tmp_path: Path, repeats: int = 1, seconds: int = 2, steps: str = '["point-query"]'
) -> Path:
    path = tmp_path / "integrity.toml"
    path.write_text(EXPERIMENT.format(repeats=repeats, seconds=seconds, steps=steps))
    return path


def start_run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mallocbench.cli", "run", "--quiet", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def wait_for(
    condition: Callable[[], object],
    what: str,
    timeout: float = 240,
    harness: subprocess.Popen[str] | None = None,
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if harness is not None and harness.poll() is not None:
            # A harness that died will never get there: say why now, not in 4 minutes.
            _, stderr = harness.communicate()
            raise AssertionError(f"the run exited ({harness.returncode}) before {what}: {stderr}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def server_records(out: Path) -> list[dict[str, object]]:
    records = []
    for path in (out / "servers").glob("*/server.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being written right now
    return records


def processes_under(out: Path) -> list[psutil.Process]:
    """mariadbd and sysbench processes working for a run in `out` (their paths say so)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] in ("mariadbd", "mysqld", "sysbench") and str(out) in cmdline:
            found.append(proc)
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan waits for init to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cells_in(out: Path) -> list[tuple[str, str, float | None]]:
    db = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT setup, status, qps FROM cells").fetchall()
    finally:
        db.close()


def cells_so_far(out: Path) -> list[tuple[str, str, float | None]]:
    """The stored cells while a run is under way: none yet while the store file exists
    but the run has not created its tables (a moment the poll can land in)."""
    if not (out / "results.sqlite").exists():
        return []
    try:
        return cells_in(out)
    except sqlite3.OperationalError:
        return []


def run_status(out: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT run_id, status FROM runs ORDER BY started_at").fetchall()
    finally:
        db.close()


@pytest.mark.server
def test_second_run_into_the_same_directory_is_refused(tmp_path: Path, integrity_figures) -> None:
    exp = write_experiment(tmp_path, seconds=3)
    out = tmp_path / "out"
    first = start_run(str(exp), "--out", str(out))
    try:
        wait_for(lambda: server_records(out), "the first run's server", harness=first)
        integrity_figures.add("faults injected")
        second = run_cli("run", str(exp), "--out", str(out))
        integrity_figures.check_output(second.stdout + second.stderr)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("mallocbench: error:")
        assert f"in use by another mallocbench run (PID {first.pid}" in lines[0]
        # The same, for a --resume that would take over the run's server directory.
        resume = run_cli("run", str(exp), "--out", str(out), "--resume")
        assert resume.returncode == 2 and f"PID {first.pid}" in resume.stderr
    finally:
        stdout, stderr = first.communicate(timeout=600)
    integrity_figures.check_output(stdout + stderr)
    assert first.returncode == 0, stderr[-2000:]
    cells = cells_in(out)
    integrity_figures.add("cells lost", 2 - sum(1 for _, s, _ in cells if s == "ok"))
    assert sorted(s for s, _, _ in cells) == ["glibc", "glibc-b"]
    assert all(status == "ok" and qps and qps > 100 for _, status, qps in cells)
    assert [status for _, status in run_status(out)] == ["finished"]


@pytest.mark.server
def test_sigkill_of_the_harness_then_resume_leaves_no_server_behind(
    tmp_path: Path, integrity_figures
) -> None:
    exp = write_experiment(tmp_path, seconds=3)
    out = tmp_path / "out"
    harness = start_run(str(exp), "--out", str(out))
    try:
        records = wait_for(lambda: server_records(out), "a running server", harness=harness)
        assert isinstance(records, list)
        wait_for(lambda: any(p.name() == "sysbench" for p in processes_under(out)), "sysbench")
        orphan_pid = int(records[0]["pid"])  # type: ignore[call-overload]
        socket_dir = Path(str(records[0]["socket"])).parent
        integrity_figures.add("faults injected")
        harness.kill()
        harness.communicate(timeout=30)

        # sysbench dies with its harness; the server (it changed user, so no parent-death
        # signal reaches it) is left running and recorded.
        wait_for(
            lambda: not any(p.name() == "sysbench" for p in processes_under(out)),
            "sysbench to exit",
        )
        assert psutil.pid_exists(orphan_pid)
        [(run_id, status)] = run_status(out)
        assert status == "running" and run_holder(out / "results.sqlite", run_id) is None
        listed = run_cli("runs", str(out))
        assert "died" in listed.stdout, listed.stdout

        resumed = run_cli("run", str(exp), "--out", str(out), "--resume")
        integrity_figures.check_output(resumed.stdout + resumed.stderr)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        # Says what it stopped (the interleaved design had every setup's server up).
        stopped = re.search(r"PID ([\d, ]+)", " ".join(resumed.stderr.split()))
        assert stopped and str(orphan_pid) in stopped.group(1).split(", ")
        leftovers = processes_under(out)
        integrity_figures.add("orphans", len(leftovers) + int(running(orphan_pid)))
        assert not running(orphan_pid)
        # Its socket's private temp dir (deep run directories need one) went with it.
        assert socket_dir == out / "servers" / "glibc.innodb.r0" or not socket_dir.exists()
        assert leftovers == []
        assert [s for _, s in run_status(out)] == ["finished"]
        assert sorted(s for s, st, _ in cells_in(out) if st == "ok") == ["glibc", "glibc-b"]
    finally:
        # A failing assertion must not leave this test's server running for the next.
        harness.kill()
        stop_orphans(out / "servers")


@pytest.mark.server
def test_sigterm_stops_like_ctrl_c_and_keeps_finished_cells(
    tmp_path: Path, integrity_figures
) -> None:
    exp = write_experiment(tmp_path, repeats=2, seconds=3)
    out = tmp_path / "out"
    harness = start_run(str(exp), "--out", str(out))
    wait_for(
        lambda: cells_so_far(out),
        "the first cell",
        harness=harness,
    )
    integrity_figures.add("faults injected")
    harness.send_signal(signal.SIGTERM)
    stdout, stderr = harness.communicate(timeout=120)
    integrity_figures.check_output(stdout + stderr)
    assert harness.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "cells kept" in stderr
    kept = cells_in(out)
    assert kept and all(status == "ok" for _, status, _ in kept)
    assert [s for _, s in run_status(out)] == ["interrupted"]
    results = json.loads((out / "results.json").read_text())
    assert len(results["cells"]) == len(kept)  # the reports hold what the store holds
    assert (out / "report.md").is_file()
    leftovers = processes_under(out)
    integrity_figures.add("orphans", len(leftovers))
    assert leftovers == []


def test_a_bug_mid_run_leaves_the_run_failed_not_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, integrity_figures
) -> None:
    experiment = experiment_mod.load(write_experiment(tmp_path))

    def boom(*args: object, **kwargs: object) -> None:
        raise ValueError("injected")

    integrity_figures.add("faults injected")
    monkeypatch.setattr(Pipeline, "_run_sessions", boom)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="injected"):
        Pipeline(experiment, RunOptions(out_dir=out)).execute()
    assert [s for _, s in run_status(out)] == ["failed"]
    # The locks went with the failed run: the next run in the directory may start.
    assert run_holder(out / "results.sqlite", run_status(out)[0][0]) is None
    assert os.path.exists(out / ".mallocbench.lock")


# --- faults of the environment and of inputs: each ends in one line, nothing is lost --------

FIXTURE = Path(__file__).parent / "fixtures" / "results-small.json"


def one_error_line(
    result: subprocess.CompletedProcess[str], figures: IntegrityFigures, status: int
) -> str:
    """The command exited `status` with exactly one `mallocbench: error:` line and no
    traceback; that line."""
    figures.add("faults injected")
    figures.check_output(result.stdout + result.stderr)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    assert result.returncode == status, result.stdout[-1000:] + result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("mallocbench: error: "), result.stderr
    return errors[0]


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (root only), for a disk that fills up."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0711", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs (the tests run as root): {mounted.stderr}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=False)


def fill(filesystem: Path) -> Path:
    """Write zeros into `filesystem` until it is full; the filler, to free it again."""
    filler = filesystem / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def saved_store(path: Path, *run_ids: str) -> Path:
    """A results store holding the fixture's run under each of `run_ids`."""
    store = Store(path)
    try:
        for run_id in run_ids:
            run = RunResult.from_dict(json.loads(FIXTURE.read_text()))
            run.run_id = run_id
            store.save_run(run)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    return path


def damage(path: Path) -> None:
    """Random bytes over every page after the first (which names the tables): the 4 KiB
    of the issue wherever the readers look."""
    size = path.stat().st_size
    assert size > 3 * 4096
    with open(path, "r+b") as handle:
        handle.seek(4096)
        handle.write(random.Random(33).randbytes(size - 4096))


READERS = (
    ("runs", "{store}"),
    ("report", "{store}"),
    ("report", "{store}", "--format", "json"),
    ("compare", "{store}", "{good}"),
    ("compare", "{good}", "{store}"),
    ("recommend", "{store}"),
    ("store", "info", "{store}"),
    ("store", "copy", "{store}", "{copy}"),
    ("patterns", "--report", "--out", "{dir}"),
)


@pytest.mark.parametrize("reader", READERS, ids=lambda r: " ".join(r[:2]).strip())
def test_every_reader_gives_one_line_for_a_damaged_store(
    tmp_path: Path, integrity_figures: IntegrityFigures, reader: tuple[str, ...]
) -> None:
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    store = saved_store(damaged / "results.sqlite", "a", "b")
    good = saved_store(tmp_path / "good.sqlite", "g")
    if reader[0] == "patterns":
        # A patterns store: the same file with the pattern tables, damaged the same way.
        from mallocbench.patterns.store import open_pattern_store

        open_pattern_store(str(store)).close()
    damage(store)
    values = {"store": store, "good": good, "copy": tmp_path / "copy.sqlite", "dir": damaged}
    result = run_cli(*(arg.format(**values) for arg in reader))
    line = one_error_line(result, integrity_figures, 2)
    assert (
        line
        == f"mallocbench: error: {damaged_store(str(store), 'database disk image is malformed')}"
    )


@pytest.mark.parametrize("source", ["/dev/zero", "big"])
def test_an_endless_or_huge_experiment_file_ends_quickly_in_one_line(
    tmp_path: Path, integrity_figures: IntegrityFigures, source: str
) -> None:
    path = Path(source)
    if source == "big":
        path = tmp_path / "big.toml"
        with open(path, "wb") as handle:
            handle.truncate(100 * 1024**2)  # 100 MB (sparse: the disk stays free)
    started = time.monotonic()
    # Capped well below what reading it whole would take; it used 24 GiB before.
    limit = 3 * 1024**3
    result = subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", "run", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    line = one_error_line(result, integrity_figures, 2)
    assert f"experiment file {path} is larger than 1 MiB" in line
    assert time.monotonic() - started < 30


def test_a_library_that_is_no_allocator_is_refused_before_anything_starts(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    libz = next(
        (
            p
            for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1")
            if Path(p).is_file()
        ),
        None,
    )
    assert libz is not None, "zlib is part of every Debian system"
    exp = small_experiment(tmp_path, allocator=libz)
    out = tmp_path / "out"
    for args in (("--dry-run",), ("--out", str(out))):
        line = one_error_line(run_cli("run", str(exp), *args), integrity_figures, 2)
        assert f"allocator library {libz} is not an allocator" in line
        assert "malloc, free, calloc, realloc" in line
    assert not (out / "servers").exists()  # refused before a server was started
    not_elf = tmp_path / "libnot.so"
    not_elf.write_text("not a library\n")
    exp = small_experiment(tmp_path, allocator=str(not_elf))
    line = one_error_line(run_cli("run", str(exp), "--dry-run"), integrity_figures, 2)
    assert "is not an ELF shared object" in line


@pytest.mark.parametrize("name", ["jemalloc", "tcmalloc", "tcmalloc_minimal", "mimalloc"])
def test_every_installed_allocator_library_passes_the_check(tmp_path: Path, name: str) -> None:
    library = allocators.get(name, require_available=False).path
    if library is None:
        pytest.skip(f"{name} is not installed")
    assert defined_functions(library) == {"malloc", "free", "calloc", "realloc"}
    result = run_cli("run", str(small_experiment(tmp_path, allocator=library)), "--dry-run")
    assert result.returncode == 0, result.stderr


def test_reports_on_a_full_disk_leave_no_partial_file(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    store = saved_store(tmp_path / "results.sqlite", "a")
    # Room for the small reports, not for plotly.js (4.8 MB): it fails half-written.
    with small_filesystem(tmp_path / "fs", "1M") as fs:
        result = run_cli("report", str(store), "--out", str(fs / "out"))
        line = one_error_line(result, integrity_figures, 3)
        assert f"cannot write the reports into {fs / 'out'}: No space left on device" in line
        left = sorted(p.name for p in (fs / "out").iterdir())
        assert not [name for name in left if name.endswith(".tmp")], left
        assert not [name for name in left if name.startswith("plotly")], left
        html_page = run_cli("compare", str(store), str(store), "--html", str(fs / "c.html"))
        assert "No space left on device" in one_error_line(html_page, integrity_figures, 3)
        assert sorted(p.name for p in fs.iterdir()) == ["out"]
    # The store was never touched, and reads as before.
    assert run_cli("report", str(store)).returncode == 0
