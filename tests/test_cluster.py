"""Scale out: blocks dispatched to benchmark hosts through Dask, a host killed mid-run.

The hosts here are two workers on this one machine, told apart by their names.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from cli_runner import run_cli
from mallocbench import experiment as experiment_mod
from mallocbench.cluster import (
    Unit,
    experiment_from_run,
    host_differences,
    share_note,
    units_of,
)
from mallocbench.errors import MallocbenchError
from mallocbench.experiment import blocks, plan
from mallocbench.metadata import HostFacts, HostRecord
from mallocbench.results import RunResult
from mallocbench.servers.orphans import stop_orphans
from mallocbench.store import open_store

EXPERIMENT = """
name = "spread"
base = "glibc"
engines = ["innodb"]
steps = ["point-query", "update-nonindex"]
threads = [1]
repeats = {repeats}
design = "{design}"
[dataset]
tables = 1
rows = 2000
cache = "64M"
[durations]
warmup = 0
step = 3
[[setup]]
name = "glibc"
allocator = "glibc"
[[setup]]
name = "je"
allocator = "jemalloc"
"""


def write_experiment(directory: Path, repeats: int = 4, design: str = "interleaved") -> Path:
    path = directory / "spread.toml"
    path.write_text(EXPERIMENT.format(repeats=repeats, design=design))
    return path


# --- without servers -----------------------------------------------------------------------


@pytest.mark.parametrize("design", ["interleaved", "sequential"])
def test_a_unit_is_a_block_on_one_host(tmp_path: Path, design: str) -> None:
    experiment = experiment_mod.load(write_experiment(tmp_path, repeats=3, design=design))
    sessions = plan(experiment)
    units = units_of(sessions, set())
    assert [(u.engine, u.repeat) for u in units] == [("innodb", r) for r in range(3)]
    for unit, block in zip(units, blocks(sessions), strict=True):
        # Every setup's sessions of the block travel together, in the block's order.
        assert {s for s, _, _ in unit.cells} == {"glibc", "je"}
        assert unit.sessions(experiment) == block
        assert Unit.from_dict(unit.to_dict()) == unit
    # A finished block is not dispatched; a half-finished one is, whole: the host skips
    # what the store already holds.
    done = {c.key for s in blocks(sessions)[0] for c in s.cells}
    done.add(blocks(sessions)[1][0].cells[0].key)
    assert [u.repeat for u in units_of(sessions, done)] == [1, 2]
    assert len(units_of(sessions, done)[0].cells) == 4


def test_the_experiment_is_rebuilt_from_the_stored_text(tmp_path: Path) -> None:
    path = write_experiment(tmp_path)
    overrides = ["durations.step=4", "threads=[2, 4]", "setup.je.knobs.MALLOC_CONF=narenas:2"]
    loaded = experiment_mod.load(path, overrides)
    stored = RunResult(
        run_id="spread-1", experiment=loaded.name, base_setup="glibc", experiment_text=loaded.text
    )
    rebuilt = experiment_from_run(stored)
    assert rebuilt.text == loaded.text  # so --resume's "file changed" check agrees
    assert rebuilt.duration_s == 4 and rebuilt.threads == [2, 4]
    assert rebuilt.setup("je").knobs == {"MALLOC_CONF": "narenas:2"}
    assert plan(rebuilt) == plan(loaded)
    # A file without `name` ran under its file name; the stored run says which.
    text = path.read_text().replace('name = "spread"\n', "", 1)
    nameless = RunResult(run_id="x", experiment="myfile", base_setup="glibc", experiment_text=text)
    assert experiment_from_run(nameless).name == "myfile"


def test_host_differences_and_the_share_note() -> None:
    same = HostRecord(
        host=HostFacts(kernel="6.1.0", memory_bytes=8_000_000_000), allocators={"je": "5.3"}
    )
    other = copy.deepcopy(same)
    assert other.host is not None
    other.host.kernel, other.host.memory_bytes = "6.5.0", 8_100_000_000
    notes = host_differences({"host-a": same, "host-b": other})
    assert len(notes) == 1 and "host.kernel: host-a 6.1.0, host-b 6.5.0" in notes[0]
    assert host_differences({"host-a": same, "host-b": copy.deepcopy(same)}) == []
    note = share_note([0.002, 0.004, 0.003])
    assert note is not None and note.startswith("Dask worker used 0.30% of a CPU")
    assert share_note([]) is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "mallocbench.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {log}: {log.read_text(errors='replace')[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass
class Cluster:
    address: str
    scheduler: subprocess.Popen[bytes]
    workers: dict[str, subprocess.Popen[bytes]]
    work_dirs: dict[str, Path]


@contextlib.contextmanager
def cluster(directory: Path, names: list[str], allowed_failures: int = 3) -> Iterator[Cluster]:
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler_log = directory / "scheduler.log"
    scheduler = _start(
        [
            "cluster",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--allowed-failures",
            str(allowed_failures),
        ],
        scheduler_log,
    )
    running = Cluster(address, scheduler, {}, {})
    try:
        _wait_for(scheduler_log, "scheduler listening", scheduler)
        for name in names:
            work_dir = directory / f"work-{name}"
            log = directory / f"worker-{name}.log"
            args = ["cluster", "worker", address, "--name", name, "--work-dir", str(work_dir)]
            running.workers[name] = _start(args, log)
            running.work_dirs[name] = work_dir
            _wait_for(log, f"worker {name} at", running.workers[name])
        yield running
    finally:
        for proc in [*running.workers.values(), scheduler]:
            _stop(proc)
        # Whatever a killed worker's unit left running is stopped, as its next unit would.
        for work_dir in running.work_dirs.values():
            for servers in work_dir.glob("runs/*/servers"):
                stop_orphans(servers)


def test_a_scheduler_without_benchmark_hosts_is_one_line(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path)
    with cluster(tmp_path, []) as running:
        result = run_cli(
            "run", str(exp), "--cluster", running.address, "--out", str(tmp_path / "out")
        )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no worker with the 'benchmark_host' resource" in lines[0]
    assert not (tmp_path / "out" / "results.sqlite").exists()  # nothing was started


def test_resume_of_an_unknown_run_id_is_one_line(tmp_path: Path) -> None:
    open_store(tmp_path / "s.sqlite").close()
    result = run_cli("run", "--resume", "nope-1", "--store", str(tmp_path / "s.sqlite"))
    assert result.returncode == 2
    assert "nope-1 is neither an experiment file nor a run in" in result.stderr


# --- with real servers on two "hosts" ------------------------------------------------------


def _unit_servers(work_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] == "mariadbd" and str(work_dir) in cmdline:
            found.append(proc)
    return found


def _kill_when_host_finished_a_cell(
    store_url: str, victim: subprocess.Popen[bytes], host: str, driver: subprocess.Popen[bytes]
) -> dict[tuple[str, str, str, int, int], int]:
    """SIGKILL the host's worker (its process group) once it committed a cell; the cells
    finished then, with their sample counts."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and driver.poll() is None:
        try:
            store = open_store(store_url, readonly=True)
        except MallocbenchError:  # the driver has not created the store's tables yet
            time.sleep(0.5)
            continue
        try:
            runs = store.list_runs()
            result = store.load_run(runs[0]["run_id"]) if runs else None
        finally:
            store.close()
        if result is not None:
            hosts = {s.id: s.host for s in result.sessions}
            if any(hosts.get(c.session) == host for c in result.cells):
                os.killpg(victim.pid, signal.SIGKILL)
                return {c.key: len(c.samples) for c in result.cells}
        time.sleep(0.5)
    raise AssertionError("no cell of host " + host + " before the run ended")


@pytest.mark.server
def test_a_host_killed_mid_run_loses_no_finished_cell(
    tmp_path: Path, postgres_store_url: str
) -> None:
    exp = write_experiment(tmp_path)
    # No retry: the killed host's unit is lost, so --resume has something to do.
    with cluster(tmp_path, ["host-a", "host-b"], allowed_failures=0) as running:
        started = time.monotonic()
        driver = _start(
            [
                "run",
                str(exp),
                "--cluster",
                running.address,
                "--store",
                postgres_store_url,
                "--out",
                str(tmp_path / "out"),
                "-q",
            ],
            tmp_path / "driver.log",
        )
        before = _kill_when_host_finished_a_cell(
            postgres_store_url, running.workers["host-a"], "host-a", driver
        )
        code = driver.wait(timeout=300)
        driver_log = (tmp_path / "driver.log").read_text()
        cluster_s = time.monotonic() - started
        # The killed worker's unit dies with it (PR_SET_PDEATHSIG) and stops its servers.
        deadline = time.monotonic() + 60
        while _unit_servers(running.work_dirs["host-a"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _unit_servers(running.work_dirs["host-a"])
    assert "Traceback" not in driver_log
    # Lost (exit 3, "interrupted") when the kill hit a unit, else a finished run.
    assert code in (0, 3), driver_log[-3000:]
    store = open_store(postgres_store_url, readonly=True)
    try:
        (run,) = store.list_runs()
        run_id = run["run_id"]
        result = store.load_run(run_id)
    finally:
        store.close()
    if code == 3:
        assert "lost with their benchmark host" in driver_log and run["status"] == "interrupted"
        assert any("lost" in note for note in result.metadata.notes or [])
    after = {c.key: len(c.samples) for c in result.cells}
    for key, samples in before.items():
        assert key in after and after[key] >= samples > 0, key
    assert any(n.startswith("Dask worker used") for n in result.metadata.notes or [])
    recorded = result.metadata.cluster
    assert recorded is not None and recorded.worker_cpu_share is not None
    share = recorded.worker_cpu_share.median
    assert share is not None
    assert 0 <= share < 0.05, share  # the engine stays quiet while hosts measure
    # The hosts' allocator versions, with each setup's library kept.
    allocators = result.metadata.allocators
    assert allocators and all(a.library and a.version for a in allocators.values())
    assert "allocators" not in result.metadata.extra
    assert {s.host for s in result.sessions} == {"host-a", "host-b"}

    # No experiment file, no cluster: the stored run is enough (another machine would do).
    resumed_at = time.monotonic()
    again = run_cli(
        "run", "--resume", run_id, "--store", postgres_store_url, "--out", str(tmp_path / "r")
    )
    assert again.returncode == 0, again.stderr[-3000:]
    store = open_store(postgres_store_url, readonly=True)
    try:
        final = store.load_run(run_id)
        (run,) = store.list_runs()
    finally:
        store.close()
    assert run["status"] == "finished"
    recorded = final.metadata.cluster  # kept through a local resume
    assert recorded is not None and recorded.worker_cpu_share is not None
    assert len(final.cells) == 16 and all(c.status == "ok" for c in final.cells)
    for key, samples in before.items():
        cell = next(c for c in final.cells if c.key == key)
        assert len(cell.samples) == samples  # a finished cell is never measured again
    resume_s = time.monotonic() - resumed_at
    print(
        f"\ncluster part {cluster_s:.0f} s (exit {code}), resume {resume_s:.0f} s; "
        f"Dask worker CPU share while measuring: median {100 * share:.2f}%"
    )
