"""Where `record` has the trace written, and whose it is at the end: a process running
as another user (as a server runs as mysql), recorded by root under sudo."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import native_programs
from mallocbench.native import shim_path
from mallocbench.replay import preload
from mallocbench.replay import trace as tracemod

SUDO = {"SUDO_UID": "4242", "SUDO_GID": "4243"}


@pytest.fixture
def place(readable_dir: Path) -> Path:
    """A directory the server's user can reach."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run a process as another user")
    try:
        pwd.getpwnam("mysql")
    except KeyError:
        pytest.skip("no mysql user (Debian package: mariadb-server)")
    return readable_dir


def start_as_mysql(place: Path) -> subprocess.Popen[str]:
    (place / "build").mkdir(mode=0o755)
    exe = native_programs.build("linger", place / "build")
    ctl_dir = place / "ctl"
    ctl_dir.mkdir(mode=0o700)
    shutil.chown(ctl_dir, "mysql", "mysql")
    ctl = ctl_dir / "ctl"
    env = dict(os.environ, LD_PRELOAD=str(shim_path()), MBRECORD_CONTROL=str(ctl))
    proc = subprocess.Popen(
        [str(exe), f"{ctl}.status", "60"], env=env, stdout=subprocess.PIPE, text=True,
        user="mysql", group="mysql", extra_groups=[],
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while preload.shim_loaded(proc.pid) is None:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    return proc


@pytest.mark.parametrize("server_may_write", [True, False], ids=["beside-out", "its-own-dir"])
def test_the_trace_is_written_beside_out_when_it_can_and_ends_the_callers(
    place: Path, server_may_write: bool
) -> None:
    """Once written into the server's /tmp (RAM when it is tmpfs) and left there as
    mysql's, 0640: now beside --out when the server may write there, and always the
    sudo caller's at the end, 0600."""
    out_dir = place / "out"
    out_dir.mkdir(mode=0o777 if server_may_write else 0o700)
    out_dir.chmod(0o777 if server_may_write else 0o700)
    out = out_dir / "trace.mbt"
    proc = start_as_mysql(place)
    try:
        recorder = subprocess.Popen(
            [sys.executable, "-m", "mallocbench.cli", "record", "--pid", str(proc.pid),
             "--seconds", "2", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **SUDO},
        )  # fmt: skip
        assert recorder.stderr is not None and proc.stdout is not None
        assert "recording process" in recorder.stderr.readline()
        assert proc.stdout.readline().strip() == "armed"
        during = sorted(p.name for p in out_dir.iterdir())
        checked = subprocess.run(
            [sys.executable, "-m", "mallocbench.cli", "check", "--pid", str(proc.pid)],
            capture_output=True, text=True, check=False, timeout=60,
        ).stdout.splitlines()  # fmt: skip
        in_ctl = [p.name for p in (place / "ctl").iterdir() if p.name.endswith(".mbt")]
        _, err = recorder.communicate(timeout=120)
        assert recorder.returncode == 0, err
    finally:
        proc.kill()
        proc.wait()
    assert checked[2].startswith(f"recording shim: loaded ({shim_path()}), its last status: "
                                 "recording "), checked  # fmt: skip
    if server_may_write:
        assert during == [f".trace.mbt.recording-{proc.pid}"] and in_ctl == []
    else:
        assert during == [] and len(in_ctl) == 1
    st = out.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (4242, 4243, 0o600)
    assert sorted(p.name for p in out_dir.iterdir()) == ["trace.mbt"]
    assert tracemod.header_status(out).startswith("complete")
