"""How a server runs (systemd unit, mysqld_safe, container, by hand), and the recording
shim's preload in the form that fits: detection on recorded /proc contents, and a real
server started by mysqld_safe with the shim as its malloc-lib."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mallocbench import allocators
from mallocbench.deploy import deployment, install, launch, systemd
from mallocbench.deploy import forms as deploy
from mallocbench.model.results import SetupInfo
from mallocbench.native import shim_path
from mallocbench.replay import preload
from mallocbench.replay import trace as tracemod
from mallocbench.servers import engines
from mallocbench.servers.mariadb import PrivateServer, ServerBuild, ServerConfig
from test_deploy import TEST_SERVICE, systemd_verify

CASES = json.loads((Path(__file__).parent / "fixtures" / "proc-launch.json").read_text())
JEMALLOC = allocators.get("jemalloc", require_available=False)
JE_LIB = JEMALLOC.path or "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def mallocbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_the_form_that_fits_from_recorded_proc_contents(case: dict[str, Any]) -> None:
    facts = launch.Facts(
        pid=100,
        cgroup=case["cgroup"],
        parent_pid=99,
        parent_comm=case["parent_comm"],
        parent_cmdline=tuple(case.get("parent_cmdline", ())),
        environ=frozenset(case.get("environ", ())),
        root_markers=frozenset(case.get("root_markers", ())),
    )
    found = launch.judge(facts)
    assert found.form == case["form"], found
    assert found.service == case.get("service"), found
    assert found.reasons and case["form"] not in found.others
    assert tuple(deployment.FORM_SNIPPETS) == launch.FORMS  # every form has its text


def test_recording_forms_keep_the_allocator_behind_the_shim(tmp_path: Path) -> None:
    shim = "/usr/local/lib/mallocbench/libmbrecord.so"
    d = deploy.recording(shim, "jemalloc", JE_LIB, TEST_SERVICE)
    path = systemd.write_dropin(d, tmp_path)
    assert path.name == deployment.RECORD_DROPIN
    assert systemd.dropin_environment(path) == {"LD_PRELOAD": f"{shim} {JE_LIB}"}
    assert systemd_verify(tmp_path, TEST_SERVICE).stderr == ""
    safe = deploy.render_form(d, "mysqld_safe")
    # malloc-lib takes one library, which mysqld_safe puts in front of LD_PRELOAD
    assert f"malloc-lib={shim}\n" in safe and f"export LD_PRELOAD={JE_LIB}\n" in safe
    assert f"env LD_PRELOAD='{shim} {JE_LIB}' mariadbd" in deploy.render_form(d, "env")
    yaml = pytest.importorskip("yaml")  # PyYAML: what Compose and kubectl parse alike
    compose = yaml.safe_load(deploy.render_form(d, "docker"))["services"][TEST_SERVICE]
    assert compose["volumes"] == [f"{shim}:{shim}:ro"]
    assert compose["environment"] == {"LD_PRELOAD": f"{shim} {JE_LIB}"}
    pod = yaml.safe_load(deploy.render_form(d, "kubernetes"))
    assert pod["volumeMounts"][0]["mountPath"] == os.path.dirname(shim)
    assert pod["env"] == [{"name": "LD_PRELOAD", "value": f"{shim} {JE_LIB}"}]
    assert not d.notes  # a system path: nothing to warn of


def test_a_tuned_dropin_sorts_after_the_recording_one_and_removal_spares_it(
    tmp_path: Path,
) -> None:
    """systemd applies drop-ins in name order, the last LD_PRELOAD winning: once the old
    mbrecord.conf sorted after mallocbench-jemalloc-tuned-3.conf and kept the shim."""
    shim = str(shim_path())
    recording = systemd.write_dropin(deploy.recording(shim, service=TEST_SERVICE), tmp_path)
    tuned_setup = SetupInfo("jemalloc-tuned-3", "jemalloc", allocator_library=JE_LIB)
    tuned_deployment = deploy.deployment_for(tuned_setup, TEST_SERVICE)
    tuned = systemd.write_dropin(tuned_deployment, tmp_path)
    in_order = systemd.unit_files(TEST_SERVICE, (str(tmp_path),))
    assert in_order == [recording, tuned]
    assert systemd.unit_environment(in_order) == tuned_deployment.environment  # it wins
    units = tmp_path / f"{TEST_SERVICE}.service.d"
    (units / "mbrecord.conf").write_text(f"[Service]\nEnvironment=LD_PRELOAD={shim}\n")
    foreign = tmp_path / "other.service.d" / "mbrecord.conf"
    foreign.parent.mkdir()
    foreign.write_text("[Service]\nEnvironment=LD_PRELOAD=/usr/lib/libsomething.so\n")
    out = mallocbench(
        "record", "--remove-dropin", "--service", TEST_SERVICE, "--units-dir", str(tmp_path)
    )
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in units.iterdir()) == [tuned.name], out.stdout
    assert f"removed {recording}" in out.stdout and "daemon-reload" in out.stdout
    again = mallocbench("record", "--remove-dropin", "--service", "other",
                        "--units-dir", str(tmp_path))  # fmt: skip
    assert again.returncode == 0 and "nothing removed" in again.stdout and foreign.is_file()


def test_a_shim_under_home_names_install_shim() -> None:
    d = deploy.recording("/home/dba/mallocbench/native/build/libmbrecord.so")
    text = deploy.render_form(d, "systemd")
    assert "ProtectHome=true" in text and "mallocbench install-shim" in text
    assert "/usr/local/lib/mallocbench/" in text


def test_several_pids_are_refused_with_their_list() -> None:
    sleepers = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    try:
        pids = [str(p.pid) for p in sleepers]
        for args in (["--pid", *pids], ["--pid", " ".join(pids)]):  # unquoted, quoted
            out = mallocbench("record", *args, "--seconds", "1")
            assert out.returncode == 2, out.stderr
            line = out.stderr.strip()
            assert "\n" not in line and line.startswith("mallocbench: error: --pid names 2")
            assert all(f"{pid} (sleep 30)" in line for pid in pids), line
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


@pytest.fixture
def safe_server(
    build: ServerBuild, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[PrivateServer]:
    """A server started as a DBA without systemd starts one: mysqld_safe, its malloc-lib
    the shim when the parameter says so (mallocbench's own start runs mariadbd directly,
    so it cannot stand in)."""
    safe = shutil.which("mysqld_safe") or shutil.which("mariadbd-safe")
    if safe is None:
        pytest.skip("mysqld_safe is not installed (Debian package: mariadb-server)")
    server = PrivateServer(
        build,
        tmp_path / "srv",
        ServerConfig(engines.get("innodb"), 32 << 20, allocators.get("glibc")),
    )
    server.initialize_datadir()
    pid_file = server.statedir / "mysqld.pid"
    proc = subprocess.Popen(
        [safe, f"--defaults-file={server.cnf_path}",
         f"--malloc-lib={shim_path() if request.param else ''}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not pid_file.is_file() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline and proc.poll() is None, server.error_log
            time.sleep(0.2)
        server.proc = None
        yield server
    finally:
        if pid_file.is_file():
            with_pid = pid_file.read_text().strip()
            if with_pid.isdigit():
                os.kill(int(with_pid), 15)
        proc.wait(timeout=120)


def _pid_of(server: PrivateServer) -> int:
    return int((server.statedir / "mysqld.pid").read_text())


@pytest.mark.server
@pytest.mark.parametrize("safe_server", [True], indirect=True)
def test_a_server_started_by_mysqld_safe_gets_its_form_and_records(
    safe_server: PrivateServer, tmp_path: Path
) -> None:
    pid = _pid_of(safe_server)
    assert preload.shim_loaded(pid) == str(shim_path())
    found = launch.detect(pid)
    assert found.form == "mysqld_safe", found
    out = mallocbench("record", "--print-dropin", "--pid", str(pid))
    assert out.returncode == 0, out.stderr
    assert f"# process {pid} runs as mysqld_safe: its parent" in out.stdout
    assert f"malloc-lib={preload.record_shim()}\n" in out.stdout
    removal = mallocbench("record", "--remove-dropin", "--pid", str(pid))
    assert removal.stdout.startswith(f"process {pid} runs as mysqld_safe") and (
        "no systemd drop-in removed" in removal.stdout
    ), removal
    checked = mallocbench("check", "--pid", str(pid)).stdout.splitlines()
    assert checked[1].startswith("started as mysqld_safe: its parent") and checked[2] == (
        f"recording shim: loaded ({shim_path()})"
    ), checked
    trace = tmp_path / "safe.mbt"
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            safe_server.query("SELECT REPEAT('x', 5000), COUNT(*) FROM mysql.user")

    worker = threading.Thread(target=load)
    worker.start()
    try:
        recorded = mallocbench("record", "--pid", str(pid), "--seconds", "2", "--out", str(trace))
    finally:
        stop.set()
        worker.join()
    assert recorded.returncode == 0, recorded.stderr
    info = tracemod.check(trace)
    assert info.complete and info.data["events"] > 10, info.data
    assert trace.stat().st_mode & 0o777 == 0o600


@pytest.mark.server
@pytest.mark.parametrize("safe_server", [False], indirect=True)
def test_the_shim_not_loaded_names_malloc_lib_for_mysqld_safe(safe_server: PrivateServer) -> None:
    pid = _pid_of(safe_server)
    out = mallocbench("record", "--pid", str(pid), "--seconds", "1")
    line = out.stderr.strip()
    assert out.returncode == 2 and "\n" not in line, out.stderr
    assert f"process {pid} does not have the recording shim loaded; it runs as mysqld_safe" in line
    assert f"put malloc-lib={preload.record_shim()} in the [mysqld_safe] section" in line


def test_tune_prints_the_form_of_the_traces_server_while_it_runs_here() -> None:
    me = {"host": socket.gethostname(), "pid": str(os.getpid()),
          "exe": os.readlink("/proc/self/exe")}  # fmt: skip
    form, why, service = launch.form_for(None, me)
    assert form == launch.detect(os.getpid()).form and f"process {os.getpid()} " in why
    assert service == (launch.detect(os.getpid()).service or "mariadb")
    # its pid now another program's, or another host's: the common case
    assert launch.form_for(None, {**me, "exe": "/usr/sbin/mariadbd"})[0] == "systemd"
    assert launch.form_for(None, {**me, "host": "elsewhere"})[0] == "systemd"
    assert launch.form_for("kubernetes", me)[:2] == ("kubernetes", "--form")


def test_the_shim_not_loaded_hint_is_in_each_forms_own_terms() -> None:
    shim = "/usr/local/lib/mallocbench/libmbrecord.so"
    d = deploy.recording(shim, "jemalloc", JE_LIB, "mariadb")
    hints = {form: deploy.form_hint(d, form) for form in launch.FORMS}
    assert "00-mallocbench-record.conf" in hints["systemd"]
    assert f"malloc-lib={shim}" in hints["mysqld_safe"] and JE_LIB in hints["mysqld_safe"]
    assert "Compose" in hints["docker"] and "container spec" in hints["kubernetes"]
    assert hints["env"] == f"start the server with LD_PRELOAD='{shim} {JE_LIB}' in its environment"


def test_the_facts_of_a_real_process_are_gathered() -> None:
    child = subprocess.Popen(["sleep", "30"], env={**os.environ, "KUBERNETES_SERVICE_HOST": "x"})
    try:
        time.sleep(0.1)
        facts = launch.gather(child.pid)
    finally:
        child.kill()
        child.wait()
    assert facts.parent_pid == os.getpid()
    assert facts.parent_comm == Path("/proc/self/comm").read_text().strip()
    assert facts.cgroup == Path("/proc/self/cgroup").read_text()  # a child shares it
    markers = {m for m in ("/.dockerenv", "/run/.containerenv") if Path(m).exists()}
    assert facts.root_markers == markers and "KUBERNETES_SERVICE_HOST" in facts.environ
    assert launch.judge(facts).form == "kubernetes"


def test_an_installed_shim_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOCBENCH_RECORD_SHIM", raising=False)
    monkeypatch.setattr(install, "SYSTEM_PREFIXES", (tmp_path,))
    assert preload.record_shim() == str(shim_path())
    installed = install.installed_shim(tmp_path)
    installed.parent.mkdir(parents=True)
    installed.write_bytes(shim_path().read_bytes())
    assert preload.record_shim() == str(installed)
    monkeypatch.setenv("MALLOCBENCH_RECORD_SHIM", str(shim_path()))  # an explicit choice
    assert preload.record_shim() == str(shim_path())
