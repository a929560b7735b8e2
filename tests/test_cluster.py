"""Scale out: blocks dispatched to benchmark hosts through Dask, a host killed mid-run.

The hosts here are two workers on this one machine, told apart by their names.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from cli_runner import GLIBC_AND_JE, run_cli, small_experiment
from mallocbench.cluster import tls as clustertls
from mallocbench.cluster.driver import host_differences, share_note
from mallocbench.cluster.units import (
    LOST_NOTE,
    LOST_NOTE_DONE,
    Event,
    News,
    StoredRunSessions,
    Unit,
    experiment_from_run,
    units_of,
)
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import HostFacts, HostRecord
from mallocbench.model.results import RunResult
from mallocbench.report.cluster import news_text
from mallocbench.run import loading as loading_mod
from mallocbench.run.planning import blocks, plan
from mallocbench.run.source import check_reports_dir
from mallocbench.servers.orphans import stop_orphans
from mallocbench.store import open_store


def write_experiment(directory: Path, repeats: int = 4, design: str = "interleaved") -> Path:
    return small_experiment(
        directory, file="spread.toml", name="spread", base="glibc",
        steps='["point-query", "update-nonindex"]', top=f'repeats = {repeats}\ndesign = "{design}"',
        cache="64M", step=3, extra=None, setups=GLIBC_AND_JE, setup_extra=None,
    )  # fmt: skip


# --- without servers -----------------------------------------------------------------------


@pytest.mark.parametrize("design", ["interleaved", "sequential"])
def test_a_unit_is_a_block_on_one_host(tmp_path: Path, design: str) -> None:
    experiment = loading_mod.load(write_experiment(tmp_path, repeats=3, design=design))
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
    loaded = loading_mod.load(path, overrides)
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


def test_the_drivers_news_is_worded_in_report() -> None:
    """cluster/ tells what happened to a unit or a replay; report/cluster.py words it, as
    the driver's progress showed it before."""
    assert [
        news_text(n)
        for n in (
            News(Event.STARTED, "innodb r1", "host-a"),
            News(Event.FINISHED, "innodb r1", "host-a", cells=4, seconds=61.4),
            News(Event.LOST, "innodb r2", why="its host died"),
            News(Event.FINISHED, "je repeat 2", "host-b", replay=True),
            News(Event.LOST, "je repeat 3", why="no benchmark host left", replay=True),
        )
    ] == [
        "unit innodb r1 started on host-a",
        "unit innodb r1 finished on host-a: 4 cell(s) in 61 s",
        "unit innodb r2 lost: its host died",
        "replay je repeat 2 finished on host-b",
        "replay je repeat 3 lost: no benchmark host left",
    ]


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


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to every process group first, then wait on each: a Dask worker takes
    seconds to close, and the workers' closes overlap."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
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
    tls: Path  # the certificates `cluster init` made: TLS/NAME per host, TLS/driver

    def run_args(self) -> list[str]:
        """What `mallocbench run` adds to reach this cluster, as the driver host."""
        return ["--cluster", self.address, "--tls", str(self.tls / "driver")]

    def worker_address(self, name: str) -> str:
        log = self.work_dirs[name].parent / f"worker-{name}.log"
        line = next(x for x in log.read_text().splitlines() if f"worker {name} at" in x)
        return line.split(" at ", 1)[1].split(",", 1)[0]


@contextlib.contextmanager
def cluster(directory: Path, names: list[str], allowed_failures: int = 3) -> Iterator[Cluster]:
    port = _free_port()
    address = f"tls://127.0.0.1:{port}"
    tls = directory / "tls"
    clustertls.init(tls, ["sched", *names, "driver"])
    scheduler_log = directory / "scheduler.log"
    scheduler = _start(
        [
            "cluster",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tls",
            str(tls / "sched"),
            "--allowed-failures",
            str(allowed_failures),
        ],
        scheduler_log,
    )
    running = Cluster(address, scheduler, {}, {}, tls)
    try:
        _wait_for(scheduler_log, "scheduler listening", scheduler)
        # The workers start side by side (each is seconds of imports), then each is
        # awaited.
        for name in names:
            work_dir = directory / f"work-{name}"
            args = ["cluster", "worker", address, "--host", "127.0.0.1", "--name", name]
            args += ["--work-dir", str(work_dir), "--tls", str(tls / name)]
            running.workers[name] = _start(args, directory / f"worker-{name}.log")
            running.work_dirs[name] = work_dir
        for name in names:
            _wait_for(directory / f"worker-{name}.log", f"worker {name} at", running.workers[name])
        yield running
    finally:
        # The scheduler last: a worker closing tells it so.
        _stop(list(running.workers.values()))
        _stop([scheduler])
        # Whatever a killed worker's unit left running is stopped, as its next unit would.
        for work_dir in running.work_dirs.values():
            for servers in work_dir.glob("runs/*/servers"):
                stop_orphans(servers)


def test_a_scheduler_without_benchmark_hosts_is_one_line(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path)
    with cluster(tmp_path, []) as running:
        result = run_cli("run", str(exp), *running.run_args(), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no worker with the 'benchmark_host' resource" in lines[0]
    assert not (tmp_path / "out" / "results.sqlite").exists()  # nothing was started


def test_resume_of_an_unknown_run_id_is_one_line(tmp_path: Path) -> None:
    open_store(tmp_path / "s.sqlite").close()
    result = run_cli("run", "--resume", "nope-1", "--store", str(tmp_path / "s.sqlite"))
    assert result.returncode == 2
    assert "nope-1 is neither an experiment file nor a run in" in result.stderr


def test_init_makes_a_ca_and_private_host_certificates(tmp_path: Path) -> None:
    from cryptography import x509

    tls = tmp_path / "tls"
    made, kept = clustertls.init(tls, ["sched", "db1", "10.0.0.7"])
    assert [p.name for p in made] == ["sched", "db1", "10.0.0.7"] and kept == []
    for path in [tls, *tls.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    # No host directory holds the CA's key; each one's certificate is the CA's.
    assert sorted(p.name for p in (tls / "db1").iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    ca = x509.load_pem_x509_certificate((tls / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate((tls / "db1" / "cert.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    # Again with a new name: the same CA signs it, the existing host is kept as it was.
    before = (tls / "db1" / "cert.pem").read_bytes()
    made, kept = clustertls.init(tls, ["db1", "db2"])
    assert [p.name for p in made] == ["db2"] and [p.name for p in kept] == ["db1"]
    assert (tls / "db1" / "cert.pem").read_bytes() == before
    x509.load_pem_x509_certificate(
        (tls / "db2" / "cert.pem").read_bytes()
    ).verify_directly_issued_by(ca)
    with pytest.raises(MallocbenchError, match="cannot name a certificate directory"):
        clustertls.init(tls, ["../etc"])
    assert clustertls.security(tls / "db2").require_encryption
    (tls / "db2" / "key.pem").chmod(0o640)
    with pytest.raises(MallocbenchError, match="readable by others"):
        clustertls.security(tls / "db2")
    with pytest.raises(MallocbenchError, match="has no cert.pem, key.pem"):
        clustertls.security(tls)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["cluster", "scheduler", "--host", "127.0.0.1"], "the cluster needs --tls DIR"),
        (["cluster", "worker", "tcp://127.0.0.1:1", "--host", "127.0.0.1"], "needs --tls DIR"),
        (["cluster", "scheduler", "--port", "1"], "Missing option '--host'"),
        (["cluster", "worker", "tls://127.0.0.1:1"], "Missing option '--host'"),
        (["run", "x.toml", "--cluster", "tcp://127.0.0.1:1"], "the cluster needs --tls DIR"),
        (["run", "x.toml", "--cluster", "tcp://h:1", "--tls", "T"], "use tls://h:1"),
        (["run", "x.toml", "--cluster", "tls://h:1", "--insecure"], "use tcp://h:1 with"),
        (["run", "x.toml", "--tls", "T"], "go with --cluster"),
        # TEST-NET-1: documentation only, no machine's address.
        (["cluster", "worker", "h:1", "--host", "192.0.2.1", "--tls", "T"], "cannot listen on"),
    ],
)
def test_plain_tcp_and_open_interfaces_need_asking_for(
    tmp_path: Path, args: list[str], says: str
) -> None:
    clustertls.init(tmp_path / "T", ["h"])
    args = [str(tmp_path / "T" / "h") if a == "T" else a for a in args]
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr
    # One line saying what is wrong (a usage error comes after click's usage lines).
    assert len([line for line in result.stderr.splitlines() if "rror:" in line]) == 1


def test_a_dashboard_without_bokeh_is_one_line(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("bokeh") is not None:
        pytest.skip("bokeh is installed: the dashboard would start")
    args = ["cluster", "scheduler", "--host", "127.0.0.1", "--port", str(_free_port())]
    result = run_cli(*args, "--insecure", "--dashboard", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "mallocbench: error: --dashboard needs bokeh" in result.stderr
    # --insecure says what it opens, before anything listens.
    assert "plain TCP on 127.0.0.1" in result.stderr and "Traceback" not in result.stderr


def _stored_run(store_path: Path, run_id: str, tmp_path: Path) -> None:
    loaded = loading_mod.load(write_experiment(tmp_path))
    store = open_store(store_path)
    try:
        store.create_run(
            RunResult(
                run_id=run_id,
                experiment=loaded.name,
                base_setup="glibc",
                experiment_text=loaded.text,
            )
        )
    finally:
        store.close()


def test_a_resume_never_replaces_reports_its_store_cannot_rebuild(tmp_path: Path) -> None:
    store_path = tmp_path / "shared.sqlite"
    _stored_run(store_path, "spread-1", tmp_path)
    # ./out holds the reports of a local run of another store (its own results.sqlite).
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"schema": 3, "run_id": "mine-7", "cells": []}))
    (out / "report.md").write_text("mine-7's report\n")
    result = run_cli("run", "--resume", "spread-1", "--store", str(store_path), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "out holds the reports of run mine-7" in line and "--out out/spread-1" in line
    assert (out / "report.md").read_text() == "mine-7's report\n"
    store = open_store(store_path, readonly=True)
    try:
        assert [r["cells"] for r in store.list_runs()] == [0]  # refused before measuring
        # Reports of this run, or of one the same store keeps, are one `report` away.
        check_reports_dir(out, store, "mine-7")
        _stored_run(store_path, "mine-7", tmp_path)
        check_reports_dir(out, store, "spread-1")
    finally:
        store.close()


def test_a_completed_run_drops_what_its_notes_said_was_missing() -> None:
    notes = [LOST_NOTE.format("innodb r1: its host died"), "unit innodb r2 moved from a to b"]
    done = StoredRunSessions().completed_notes(notes)
    assert done == [LOST_NOTE_DONE.format("innodb r1: its host died"), notes[1]]
    assert not any("--resume measures the rest" in n for n in done)


def _handshake(port: int, tls: Path, host_dir: Path | None) -> str:
    """Connect with TLS as a stranger would: with no certificate, or `host_dir`'s."""
    context = ssl.create_default_context(cafile=str(tls / "ca.pem"))
    context.check_hostname = False
    if host_dir is not None:
        context.load_cert_chain(host_dir / "cert.pem", host_dir / "key.pem")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw) as conn:
                conn.settimeout(3)
                # TLS 1.3 refuses a client's certificate after the handshake, on first read.
                return "accepted" if conn.recv(1) else "closed"
        except TimeoutError:
            return "accepted"  # the server waits for our first message: we are in
        except (ssl.SSLError, ConnectionError) as exc:
            return f"refused ({exc.__class__.__name__})"


def _listening(procs: list[subprocess.Popen[bytes]]) -> set[tuple[str, int]]:
    """The addresses the processes and their descendants listen on (TCP and UDP)."""
    found = set()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            parent = psutil.Process(proc.pid)
            for each in [parent, *parent.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    for conn in each.net_connections(kind="inet"):
                        if conn.status in (psutil.CONN_LISTEN, psutil.CONN_NONE):
                            found.add((conn.laddr.ip, conn.laddr.port))
    return found


@pytest.mark.server
def test_the_cluster_admits_only_its_own_certificates_and_listens_where_told(
    tmp_path: Path, postgres_store_url: str
) -> None:
    from distributed import Client

    exp = write_experiment(tmp_path, repeats=2)
    clustertls.init(tmp_path / "stranger", ["intruder"])
    with cluster(tmp_path, ["host-a", "host-b"]) as running:
        tls = running.tls
        scheduler_port = int(running.address.rsplit(":", 1)[1])
        worker_port = int(running.worker_address("host-a").rsplit(":", 1)[1])
        for port in (scheduler_port, worker_port):
            assert _handshake(port, tls, tls / "driver") == "accepted"  # the control
            assert _handshake(port, tls, None).startswith(("refused", "closed"))
            assert _handshake(port, tls, tmp_path / "stranger" / "intruder").startswith(
                ("refused", "closed")
            )
        with pytest.raises((OSError, TimeoutError)):
            Client(running.address.replace("tls://", "tcp://"), timeout=5).close()
        stranger = clustertls.security(tmp_path / "stranger" / "intruder")
        with pytest.raises((OSError, TimeoutError)):
            Client(running.address, security=stranger, timeout=5).close()

        driver = _start(
            ["run", str(exp), *running.run_args(), "--store", postgres_store_url]
            + ["--set", 'steps=["point-query"]', "--out", str(tmp_path / "out"), "-q"],
            tmp_path / "driver.log",
        )
        procs = [running.scheduler, *running.workers.values(), driver]
        listening: set[tuple[str, int]] = set()
        while driver.poll() is None:
            listening |= _listening(procs)
            time.sleep(0.5)
        log = (tmp_path / "driver.log").read_text()
        assert driver.returncode == 0, log[-3000:]
        assert "dashboard" not in (tmp_path / "scheduler.log").read_text()
    assert ("127.0.0.1", scheduler_port) in listening and ("127.0.0.1", worker_port) in listening
    assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    store = open_store(postgres_store_url, readonly=True)
    try:
        (run,) = store.list_runs()
        result = store.load_run(run["run_id"])
    finally:
        store.close()
    assert run["status"] == "finished" and len(result.cells) == 4
    assert {s.host for s in result.sessions} <= {"host-a", "host-b"}
    assert set(result.metadata.hosts or {}) == {s.host for s in result.sessions}


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
                *running.run_args(),
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
    assert share is not None and 0 <= share < 0.05, share  # the engine stays quiet
    # The hosts' allocator versions, with each setup's library kept.
    allocators = result.metadata.allocators
    assert allocators and all(a.library and a.version for a in allocators.values())
    assert "allocators" not in result.metadata.extra
    assert {s.host for s in result.sessions} == {"host-a", "host-b"}

    # No experiment file, no cluster: the stored run is enough (another machine would do).
    command = f"mallocbench run --resume {run_id} --store {postgres_store_url}"
    if code == 3:
        assert command in driver_log  # the lost-unit error says exactly what to type
    resumed_at = time.monotonic()
    # Its report and notes on one output, as on a terminal: every note once.
    again = subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", *command.split()[1:]]
        + ["--out", str(tmp_path / "r")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=600,
    )
    assert again.returncode == 0, again.stdout[-3000:]
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
    notes = final.metadata.notes or []
    assert notes and not any("--resume measures the rest" in n for n in notes), notes
    for note in notes:
        assert again.stdout.count(note[:60]) == 1, note
    # Every session names its host; the local resume's is this machine's, and a host.
    assert all(s.host for s in final.sessions)
    here = socket.gethostname()
    measured_by = {s.host for s in final.sessions}
    assert set(final.metadata.hosts or {}) == measured_by
    if code == 3:
        assert here in measured_by and any("a --resume measured the rest" in n for n in notes)
    resume_s = time.monotonic() - resumed_at
    print(
        f"\ncluster part {cluster_s:.0f} s (exit {code}), resume {resume_s:.0f} s; "
        f"Dask worker CPU share while measuring: median {100 * share:.2f}%"
    )


@pytest.mark.server
def test_a_setting_a_host_did_not_take_fails_its_setup_and_the_run_goes_on(
    tmp_path: Path, postgres_store_url: str
) -> None:
    """As on one host: setup je's servers run without the plugin they were given, so its
    cells are failed ones with the server's reason and the base is measured on both."""
    exp = write_experiment(tmp_path, repeats=2, design="sequential")
    taken = exp.read_text().replace(
        'steps = ["point-query", "update-nonindex"]', 'steps = ["point-query"]'
    )
    exp.write_text(
        taken.replace("step = 3", "step = 2")
        + 'config = { plugin_load_add = "file_key_management" }\n'
    )
    out = tmp_path / "out"
    with cluster(tmp_path, ["host-a", "host-b"]) as running:
        args = ["run", str(exp), *running.run_args(), "--store", postgres_store_url]
        result = run_cli(*args, "--out", str(out), "-q")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "mallocbench: error" not in result.stderr
    doc = json.loads((out / "results.json").read_text())
    cells = doc["cells"]
    assert [c["status"] for c in cells if c["setup"] == "glibc"] == ["ok", "ok"]
    failed = [c for c in cells if c["setup"] == "je"]
    assert len(failed) == 2 and all(c["status"] == "failed" for c in failed)
    assert all("did not load file_key_management.so" in c["error"] for c in failed)
    notes = [n for n in doc["metadata"]["notes"] if "did not load file_key_management.so" in n]
    assert notes and len(notes) == len(set(notes))
    assert "did not load file_key_management.so" in (out / "report.md").read_text()
