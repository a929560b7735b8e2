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
import pwd
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
from typing import Any

import psutil
import pytest

from cli_runner import run_cli, small_experiment
from conftest import IntegrityFigures
from mallocbench import allocators
from mallocbench.allocators.elf import defined_functions
from mallocbench.executors.real import RealExecutor
from mallocbench.model.results import RunResult
from mallocbench.run import loading as loading_mod
from mallocbench.run.options import RunOptions
from mallocbench.run.runner import Pipeline
from mallocbench.servers.orphans import stop_orphans
from mallocbench.store import Store
from mallocbench.store.base import damaged_store
from mallocbench.store.locks import run_holder


def write_experiment(
    tmp_path: Path,
    repeats: int = 1,
    seconds: int = 2,
    steps: str = '["point-query"]',
    warmup: str = "0",
) -> Path:
    return small_experiment(
        tmp_path, file="integrity.toml", name="integrity", base="glibc", steps=steps,
        threads=2, top=f"repeats = {repeats}", warmup=warmup, step=seconds, extra=None,
        setups=(("glibc", "glibc"), ("glibc-b", "glibc")), setup_extra=None,
    )  # fmt: skip


def start_run(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mallocbench.cli", "run", "--quiet", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
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
    # Long enough that both refused commands (a few seconds each to start on a busy
    # host) run while the first still measures: at 3 s the --resume came after its end.
    exp = write_experiment(tmp_path, seconds=12)
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
    tmp_path: Path, passable_dir: Path, integrity_figures
) -> None:
    exp = write_experiment(tmp_path, seconds=3)
    out = tmp_path / "out"
    # Runtime directories of their own (as root): in the shared root, any run another
    # test starts meanwhile sweeps the dead harness's directory and stops its servers
    # itself, as it should, and the resume would find some or none of them left to stop.
    private_runtime = {"MALLOCBENCH_RUNTIME": str(passable_dir / "run")}
    harness = start_run(str(exp), "--out", str(out), env=private_runtime)
    try:
        records = wait_for(lambda: server_records(out), "a running server", harness=harness)
        assert isinstance(records, list)
        wait_for(lambda: any(p.name() == "sysbench" for p in processes_under(out)), "sysbench")
        orphan_pid = int(records[0]["pid"])
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
        # report says so too: how far it got, and the command that goes on
        reported = " ".join(run_cli("report", str(out)).stderr.split())
        assert f"run {run_id} did not finish (died): " in reported, reported
        assert f"continue with `mallocbench run {exp} --out {out} --resume`" in reported

        resumed = run_cli("run", str(exp), "--out", str(out), "--resume", env=private_runtime)
        integrity_figures.check_output(resumed.stdout + resumed.stderr)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        # Says what it stopped (the interleaved design had every setup's server up).
        stopped = re.search(r"PID ([\d, ]+)", " ".join(resumed.stderr.split()))
        assert stopped and str(orphan_pid) in stopped.group(1).split(", ")
        leftovers = processes_under(out)
        integrity_figures.add("orphans", len(leftovers) + int(running(orphan_pid)))
        assert not running(orphan_pid)
        # Its socket's private temp dir (deep run directories need one) went with it, and
        # so did the dead harness's runtime directory (run as root).
        assert socket_dir == out / "servers" / "glibc.innodb.r0" or not socket_dir.exists()
        statedir = Path(str(records[0].get("statedir")))
        assert statedir == out / "servers" / "glibc.innodb.r0" or not statedir.parent.exists()
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
    experiment = loading_mod.load(write_experiment(tmp_path))

    def boom(*args: object, **kwargs: object) -> None:
        raise ValueError("injected")

    integrity_figures.add("faults injected")
    monkeypatch.setattr(Pipeline, "_run_sessions", boom)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="injected"):
        Pipeline(experiment, RunOptions(out_dir=out), executor=RealExecutor()).execute()
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


@pytest.fixture
def passable_dir() -> Iterator[Path]:
    """A directory of the test's own that other users may pass (0711), outside pytest's
    0700 tree: a server's user (mysql, postgres) must reach a small filesystem in it."""
    import shutil
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="mb-passable-", dir="/tmp"))
    where.chmod(0o711)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


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
    damage(store)
    values = {"store": store, "good": good, "copy": tmp_path / "copy.sqlite", "dir": damaged}
    result = run_cli(*(arg.format(**values) for arg in reader))
    line = one_error_line(result, integrity_figures, 2)
    assert (
        line
        == f"mallocbench: error: {damaged_store(str(store), 'database disk image is malformed')}"
    )


@pytest.mark.parametrize(
    ("command", "source", "what"),
    [
        (("run", "--dry-run"), "/dev/zero", "experiment file {} is larger than 1 MiB"),
        (("run", "--dry-run"), "big", "experiment file {} is larger than 1 MiB"),
        (("patterns", "--dry-run"), "/dev/zero", "experiment file {} is larger than 1 MiB"),
        (("report",), "/dev/zero", "results file {} is larger than 512 MiB"),
    ],
)
def test_an_endless_or_huge_input_file_ends_quickly_in_one_line(
    tmp_path: Path,
    integrity_figures: IntegrityFigures,
    command: tuple[str, ...],
    source: str,
    what: str,
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
        [sys.executable, "-m", "mallocbench.cli", command[0], str(path), *command[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    line = one_error_line(result, integrity_figures, 2)
    assert what.format(path) in line
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


def stored_cells(store: Path) -> list[tuple[str, str, int]]:
    """(setup, status, samples) of every cell, read as `report` reads: read-only."""
    if not store.exists():
        return []
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return db.execute(
            "SELECT setup, status, (SELECT count(*) FROM samples s WHERE s.cell_id = c.id)"
            " FROM cells c"
        ).fetchall()
    except sqlite3.OperationalError:
        return []  # the run has not created its tables yet
    finally:
        db.close()


@pytest.mark.server
def test_a_full_disk_under_the_dataset_copy_names_the_copy(
    tmp_path: Path, passable_dir: Path, integrity_figures: IntegrityFigures
) -> None:
    exp = write_experiment(tmp_path)
    out = tmp_path / "out"
    # As root the datadirs are copied into the runtime directories, so that is the disk
    # that fills; not as root, into the sessions' directories under --out.
    as_root = os.geteuid() == 0
    # The golden dataset first, on a disk with room: then the copy is what fills the disk.
    warm = run_cli("run", str(exp), "--out", str(tmp_path / "warm"), "--quiet")
    assert warm.returncode == 0, warm.stderr
    with small_filesystem(passable_dir / "fs", "3M") as fs:
        if not as_root:
            out = fs / "out"
        env = {"MALLOCBENCH_RUNTIME": str(fs / "run")} if as_root else None
        result = run_cli("run", str(exp), "--out", str(out), "--quiet", env=env)
        line = one_error_line(result, integrity_figures, 3)
        assert "copying the dataset into" in line and "No space left on device" in line
        assert "reports" not in line  # what failed was the copy, not the reports
        # The partial copy and the partial reports are gone: the disk is free again.
        assert not list(fs.glob("**/data")) and not list(out.glob("servers/*/data"))
        assert not list(out.glob("**/*.tmp"))
        assert [s for _, s in run_status(out)] == ["failed"]
        leftovers = processes_under(out) + processes_under(fs)
        integrity_figures.add("orphans", len(leftovers))
        assert leftovers == []


@pytest.mark.server
def test_a_full_disk_while_a_cell_is_saved_aborts_and_keeps_the_saved_cells(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    # Two steps on the same servers: the first step's cells are saved, then the disk
    # under the store fills up while the second step is measured.
    exp = write_experiment(tmp_path, seconds=3, steps='["point-query", "read-only-order"]')
    out = tmp_path / "out"
    with small_filesystem(tmp_path / "fs", "2M") as fs:
        store = fs / "results.sqlite"
        harness = start_run(str(exp), "--out", str(out), "--store", str(store))
        try:
            wait_for(lambda: len(stored_cells(store)) >= 2, "the first cells", harness=harness)
            filler = fill(fs)
            stdout, stderr = harness.communicate(timeout=300)
        finally:
            harness.kill()
            stop_orphans(out / "servers")
        result = subprocess.CompletedProcess(harness.args, harness.returncode, stdout, stderr)
        line = one_error_line(result, integrity_figures, 3)
        assert "read-only-order" in line and "was measured but could not be saved" in line
        assert f"no space left for the results store {store}" in line
        # The saved cells, with their per-second samples, read back on the full disk.
        saved = stored_cells(store)
        integrity_figures.add("cells lost", 2 - sum(1 for _, s, n in saved if s == "ok" and n))
        assert len(saved) == 2 and all(s == "ok" and n > 0 for _, s, n in saved)
        listed = run_cli("report", str(store), "--format", "json")
        assert listed.returncode == 0 and len(json.loads(listed.stdout)["cells"]) == 2
        leftovers = processes_under(out)
        integrity_figures.add("orphans", len(leftovers))
        assert leftovers == []
        # With space again, --resume measures what is missing.
        filler.unlink()
        resumed = run_cli("run", str(exp), "--out", str(out), "--store", str(store), "--resume")
        integrity_figures.check_output(resumed.stdout + resumed.stderr)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert len([c for c in stored_cells(store) if c[1] == "ok"]) == 4


@pytest.mark.server
def test_a_full_disk_during_a_soak_keeps_its_segments(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    exp = write_experiment(tmp_path)
    out = tmp_path / "out"
    with small_filesystem(tmp_path / "fs", "2M") as fs:
        store = fs / "results.sqlite"
        harness = subprocess.Popen(
            [sys.executable, "-m", "mallocbench.cli", "soak", str(exp), "--quiet",
             "--duration", "40s", "--segment", "10s", "--out", str(out), "--store", str(store)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            wait_for(lambda: stored_cells(store), "the first segment", harness=harness)
            fill(fs)
            stdout, stderr = harness.communicate(timeout=300)
        finally:
            harness.kill()
            stop_orphans(out / "servers")
        result = subprocess.CompletedProcess(harness.args, harness.returncode, stdout, stderr)
        line = one_error_line(result, integrity_figures, 3)
        assert f"no space left for the results store {store}" in line
        saved = stored_cells(store)
        assert saved and all(status == "ok" for _, status, _ in saved)
        leftovers = processes_under(out)
        integrity_figures.add("orphans", len(leftovers))
        assert leftovers == []


def run_json(out: Path) -> dict[str, Any]:
    shown = run_cli("report", str(out), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


@pytest.mark.server
def test_a_server_stopped_while_measured_is_recorded_with_its_cell(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    exp = write_experiment(tmp_path, seconds=12)
    out = tmp_path / "out"
    harness = start_run(str(exp), "--out", str(out))
    try:
        wait_for(
            lambda: any(p.name() == "sysbench" for p in processes_under(out)),
            "sysbench",
            harness=harness,
        )
        time.sleep(1.5)
        # Every server of the run: whichever is being measured now stalls.
        servers = [p for p in processes_under(out) if p.name() != "sysbench"]
        assert servers
        integrity_figures.add("faults injected")
        for server in servers:
            server.suspend()
        time.sleep(6)
        for server in servers:
            server.resume()
        stdout, stderr = harness.communicate(timeout=300)
    finally:
        harness.kill()
        stop_orphans(out / "servers")
    integrity_figures.check_output(stdout + stderr)
    assert harness.returncode == 0, stderr[-2000:]
    doc = run_json(out)
    stalled = [c for c in doc["cells"] if c["metrics"].get("stalled_s", 0) >= 3]
    # Nothing measured is lost, and no stalled cell passes for a clean one.
    integrity_figures.add("cells lost", 2 - len(doc["cells"]))
    assert stalled, [(c["setup"], c["status"], c["metrics"].get("stalled_s")) for c in doc["cells"]]
    for cell in stalled:
        assert "no query completed for" in cell["error"]
        assert cell["stability"]["stable"] is False
    assert any("no query completed for" in n for n in doc["metadata"]["notes"])
    assert "no query completed for" in " ".join(stderr.split())
    leftovers = processes_under(out)
    integrity_figures.add("orphans", len(leftovers))
    assert leftovers == []


@pytest.mark.server
@pytest.mark.alone  # the 6 s stop must fall in the measured window, not a slow warmup
def test_a_client_stopped_while_measured_is_recorded_with_its_cell(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    exp = write_experiment(tmp_path, seconds=12)
    # Sequential: each cell one 12 s sysbench run, so the 6 s stop lands inside it; the
    # interleaved default cuts a cell into 5 s slices, a sysbench run each, and a stop
    # begun 1.5 s into one outlasted it once (the next slice measured, no stall seen).
    exp.write_text(
        exp.read_text().replace('base = "glibc"', 'base = "glibc"\ndesign = "sequential"')
    )
    out = tmp_path / "out"
    harness = start_run(str(exp), "--out", str(out))
    try:
        found = wait_for(
            lambda: [p for p in processes_under(out) if p.name() == "sysbench"],
            "sysbench",
            harness=harness,
        )
        assert isinstance(found, list)
        time.sleep(1.5)
        integrity_figures.add("faults injected")
        found[0].suspend()
        time.sleep(6)
        found[0].resume()
        stdout, stderr = harness.communicate(timeout=300)
    finally:
        harness.kill()
        stop_orphans(out / "servers")
    integrity_figures.check_output(stdout + stderr)
    assert harness.returncode == 0, stderr[-2000:]
    doc = run_json(out)
    integrity_figures.add("cells lost", 2 - len(doc["cells"]))
    stalled = [c for c in doc["cells"] if c["metrics"].get("stalled_s", 0) >= 3]
    assert len(stalled) == 1, [(c["setup"], c["metrics"].get("stalled_s")) for c in doc["cells"]]
    assert "no query completed for" in stalled[0]["error"]
    leftovers = processes_under(out)
    integrity_figures.add("orphans", len(leftovers))
    assert leftovers == []


@pytest.mark.server
def test_a_load_generator_killed_mid_cell_is_named_with_its_signal(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    exp = write_experiment(tmp_path, seconds=2, warmup='"8s"\nmax_warmup = 20')
    out = tmp_path / "out"
    harness = start_run(str(exp), "--out", str(out))
    try:
        found = wait_for(
            lambda: [p for p in processes_under(out) if p.name() == "sysbench"],
            "sysbench warming up",
            harness=harness,
        )
        assert isinstance(found, list)
        time.sleep(1)
        integrity_figures.add("faults injected")
        found[0].send_signal(signal.SIGKILL)
        stdout, stderr = harness.communicate(timeout=300)
    finally:
        harness.kill()
        stop_orphans(out / "servers")
    integrity_figures.check_output(stdout + stderr)
    doc = run_json(out)
    failed = [c for c in doc["cells"] if c["status"] != "ok"]
    assert len(failed) == 1, [(c["setup"], c["status"], c["error"]) for c in doc["cells"]]
    assert failed[0]["error"] == "sysbench was killed by SIGKILL (signal 9) during warmup"
    assert "Threads started" not in stdout + stderr
    # The other setup's cell was measured and kept.
    integrity_figures.add("cells lost", 1 - sum(c["status"] == "ok" for c in doc["cells"]))
    leftovers = processes_under(out)
    integrity_figures.add("orphans", len(leftovers))
    assert leftovers == []


def test_dry_run_refuses_what_a_real_run_refuses(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    nowhere = small_experiment(tmp_path, setup_extra=f'basedir = "{tmp_path / "nowhere"}"')
    line = one_error_line(run_cli("run", str(nowhere), "--dry-run"), integrity_figures, 2)
    assert f"server basedir '{tmp_path / 'nowhere'}' does not exist" in line
    (tmp_path / "empty").mkdir()
    empty = small_experiment(tmp_path, setup_extra=f'basedir = "{tmp_path / "empty"}"')
    line = one_error_line(run_cli("run", str(empty), "--dry-run"), integrity_figures, 2)
    assert "no mariadbd or mysqld in" in line
    # --resume: a store whose run of this experiment was made from another text.
    exp = write_experiment(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    run = RunResult.from_dict(json.loads(FIXTURE.read_text()))
    run.experiment, run.experiment_text = "integrity", exp.read_text()
    store = Store(out / "results.sqlite")
    store.save_run(run)
    store.close()
    same = run_cli("run", str(exp), "--out", str(out), "--resume", "--dry-run")
    assert same.returncode == 0, same.stderr
    exp.write_text(exp.read_text().replace("rows = 2000", "rows = 3000"))
    changed = run_cli("run", str(exp), "--out", str(out), "--resume", "--dry-run")
    line = one_error_line(changed, integrity_figures, 2)
    assert f"cannot resume {run.run_id}: the experiment file changed since" in line
    nothing = run_cli("run", str(exp), "--out", str(tmp_path / "new"), "--resume", "--dry-run")
    assert "nothing to resume" in one_error_line(nothing, integrity_figures, 2)


def fixture_run(
    run_id: str, keep: Callable[[dict[str, Any]], bool] = lambda c: True
) -> dict[str, Any]:
    data = json.loads(FIXTURE.read_text())
    data["run_id"] = run_id
    data["cells"] = [c for c in data["cells"] if keep(c)]
    return data


def test_compare_and_recommend_say_what_they_leave_out(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    a, b, innodb = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "innodb.json"
    a.write_text(json.dumps(fixture_run("a")))
    b.write_text(json.dumps(fixture_run("b", lambda c: not c["step"].startswith("update"))))
    innodb.write_text(json.dumps(fixture_run("i", lambda c: c["engine"] == "innodb")))
    itself = run_cli("compare", str(a), str(a))
    assert itself.returncode == 0, itself.stderr
    assert "A and B are the same run (a): it is compared with itself" in itself.stderr
    assert "same run" not in run_cli("compare", str(a), str(b)).stderr
    # Steps in one run only are named like setups in one run only.
    shown = run_cli("compare", str(a), str(b), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    unmatched = json.loads(shown.stdout)["unmatched"]
    assert unmatched == [
        f"{engine}/update-index range=100 @{threads} threads (only in A)"
        for engine in ("innodb", "myrocks")
        for threads in (1, 2)
    ]
    terminal = run_cli("compare", str(a), str(b))
    assert "innodb/update-index range=100 @1 threads (only in A)" in terminal.stdout
    # --engine on a run that did not measure it: refused, not answered for another.
    refused = run_cli("recommend", str(innodb), "--engine", "myrocks")
    line = one_error_line(refused, integrity_figures, 2)
    assert "engine 'myrocks' is not in run i: it measured innodb" in line


def test_a_full_disk_under_the_postgresql_store(
    postgres: Any, tmp_path: Path, passable_dir: Path, integrity_figures: IntegrityFigures
) -> None:
    from postgres_server import _server_user

    source = saved_store(tmp_path / "source.sqlite", "kept", "more")
    name = f"full_{os.getpid()}"
    # The database lives in a tablespace on a small filesystem: room for its catalogs
    # and one run, until the filler takes the rest.
    with small_filesystem(passable_dir / "pg", "40M") as fs:
        space = fs / "space"
        space.mkdir(mode=0o700)
        user = _server_user()
        if user is not None:
            os.chown(space, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
        with postgres.admin() as conn:
            conn.execute(f"CREATE TABLESPACE {name} LOCATION '{space}'")
            conn.execute(f'CREATE DATABASE "{name}" TABLESPACE {name}')
        try:
            url = postgres.url(name)
            first = run_cli("store", "copy", str(source), url, "--run", "kept")
            assert first.returncode == 0, first.stderr
            fill(fs)
            full = run_cli("store", "copy", str(source), url, "--run", "more")
            line = one_error_line(full, integrity_figures, 3)
            assert f"no space left for the results store {url}" in line, line
            kept = run_cli("report", url, "--run", "kept", "--format", "json")
            assert kept.returncode == 0, kept.stderr
            integrity_figures.add("cells lost", 48 - len(json.loads(kept.stdout)["cells"]))
        finally:
            with postgres.admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f"DROP TABLESPACE IF EXISTS {name}")


def test_a_stall_is_seconds_without_a_query_where_seconds_usually_have_many() -> None:
    from mallocbench.model.results import Cell, Sample
    from mallocbench.run.cellends import STALL_S, longest_stall, note_stall

    def cell(rates: list[float], turns: bool = False) -> Cell:
        made = Cell("a", "innodb", "point-query", 2, 0)
        made.samples = [Sample(t=float(i), qps=q) for i, q in enumerate(rates)]
        made.slices = [{"t": 0.0, "qps": 1.0, "turn": 1.0}] if turns else [{"t": 0.0}]
        return made

    stopped = cell([900, 950, 0, 0, 0, 0, 0, 880, 910])
    assert longest_stall(stopped) == 5
    note_stall(stopped)
    assert stopped.status == "ok" and stopped.unstable and stopped.metrics["stalled_s"] == 5
    assert stopped.error is not None and "no query completed for 5 s" in stopped.error
    # A flush's pause, a step of slow statements, turns: no stall.
    # A client that stopped reporting: the wait between two reports counts.
    silent = cell([900, 910, 905])
    note_stall(silent, report_gap_s=6.2)
    assert silent.metrics["stalled_s"] == 5 and silent.unstable
    calm_cells = [cell([900, 0, 0, 910]), cell([2, 0, 0, 0, 0, 1, 2]), cell([900, 0, 0, 0], True)]
    for calm in calm_cells:
        assert longest_stall(calm) < STALL_S
        note_stall(calm)
        assert calm.error is None and not calm.unstable


def test_memory_watch_on_a_full_disk_ends_in_one_line(
    tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    from types import SimpleNamespace

    from mallocbench.errors import MallocbenchError
    from mallocbench.memory import watch

    taken: Any = SimpleNamespace(
        process_summary=None, breakdown=None, allocator=None, server=None, taken_at=time.time()
    )
    with small_filesystem(tmp_path / "fs", "64k") as fs:
        fill(fs)
        integrity_figures.add("faults injected")
        with pytest.raises(MallocbenchError, match=r"m\.csv after 1 samples: No space left"):
            watch.watch(lambda: taken, 0.01, fs / "m.csv", lambda rows: None, count=3)
        assert not list(fs.glob("*.tmp")) and not list(fs.glob(".*.tmp"))
