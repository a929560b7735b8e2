"""`mallocbench check`: the allocator mapped and each setting in force, in real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mallocbench import allocators
from mallocbench.deploy import deployment, inforce, systemd
from mallocbench.deploy import forms as deploy
from mallocbench.model.results import SetupInfo

JEMALLOC = allocators.get("jemalloc", require_available=False)
# The five settings `tune` chose in issue 45, in the one variable glibc reads.
FIVE = {
    "arena_max": "1",
    "trim_threshold": "122725",
    "mmap_threshold": "20050",
    "top_pad": "131868",
    "tcache_count": "52",
}
TUNABLES = ":".join(f"glibc.malloc.{k}={v}" for k, v in FIVE.items())


@contextmanager
def sleeper(**env: str) -> Iterator[int]:
    """A real process started with `env`, until the block ends."""
    proc = subprocess.Popen(["sleep", "30"], env={**os.environ, **env}, stderr=subprocess.DEVNULL)
    try:
        # until ld.so has mapped libc, which it loads after every preload
        deadline = time.monotonic() + 10
        while "/libc.so" not in Path(f"/proc/{proc.pid}/maps").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def check(pid: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", "check", "--pid", str(pid), *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_every_glibc_tunable_is_a_line_of_its_own() -> None:
    """glibc writes a NUL over the ':' after each tunable it takes, so the process's
    environ held GLIBC_TUNABLES with one tunable and four stray 'glibc.*' strings."""
    with sleeper(GLIBC_TUNABLES=TUNABLES) as pid:
        out = check(pid)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"process {pid} (") and "malloc is glibc's" in lines[0]
    for name, value in FIVE.items():
        assert f"GLIBC_TUNABLES glibc.malloc.{name}={value}: in force" in lines, out.stdout


def test_settings_of_another_allocator_are_not_in_force() -> None:
    if JEMALLOC.path is None:
        pytest.skip("jemalloc is not installed (Debian package: libjemalloc2)")
    env = {
        "LD_PRELOAD": f"{JEMALLOC.path} /nonexistent/libnothing.so",
        "MALLOC_CONF": "narenas:1,dirty_decay_ms:881,no_such_key:1",
        "GLIBC_TUNABLES": "glibc.malloc.arena_max=1",
    }
    with sleeper(**env) as pid:
        out = check(pid, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["allocator"] == "jemalloc" and doc["shim"] is None
    status = {(s["variable"], s["name"]): s["status"] for s in doc["settings"][2:]}
    assert status == {
        ("MALLOC_CONF", "narenas"): "in force",
        ("MALLOC_CONF", "dirty_decay_ms"): "in force",
        ("MALLOC_CONF", "no_such_key"): "unknown name",
        ("GLIBC_TUNABLES", "glibc.malloc.arena_max"): "not in force",
    }
    preloads = [(s["variable"], s["status"]) for s in doc["settings"][:2]]
    assert preloads == [("LD_PRELOAD", "mapped"), ("LD_PRELOAD", "not mapped")]


def test_a_process_not_running_is_one_line() -> None:
    out = check(2**22 + 17)  # above any pid_max
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("mallocbench: error: process ")


def test_environ_as_glibc_leaves_it_is_made_whole() -> None:
    raw = b"HOME=/root\0GLIBC_TUNABLES=glibc.malloc.arena_max=1\0glibc.pthread.rseq=0\0X=1\0"
    env = inforce.parse_environ(raw)
    assert env == {
        "HOME": "/root",
        "GLIBC_TUNABLES": "glibc.malloc.arena_max=1:glibc.pthread.rseq=0",
        "X": "1",
    }


def test_the_next_restart_is_read_from_the_units_files(tmp_path: Path) -> None:
    """What a restart would change: a tuned drop-in not yet restarted into, and the old
    recording drop-in's name, mbrecord.conf, sorting after it and winning."""
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    lib.mkdir()
    (lib / "mariadb.service").write_text("[Service]\nExecStart=/bin/true\n")
    shim = "/usr/local/lib/mallocbench/libmbrecord.so"
    je = JEMALLOC.path or "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    systemd.write_dropin(deploy.recording(shim, "jemalloc", je), etc)
    tuned = SetupInfo("jemalloc-tuned-3", "jemalloc", allocator_library=je,
                      knobs={"MALLOC_CONF": "narenas:1"})  # fmt: skip
    tuned_path = systemd.write_dropin(deploy.deployment_for(tuned), etc)
    recording_now = {"LD_PRELOAD": f"{shim} {je}", "HOME": "/"}
    files, changes = inforce.next_start(recording_now, "mariadb", (str(etc), str(lib)))
    assert [Path(f).name for f in files] == [
        "mariadb.service",
        deployment.RECORD_DROPIN,
        tuned_path.name,
    ]
    assert [c.line() for c in changes] == [
        f"at the next restart LD_PRELOAD={deployment.stable_library_path(je, JEMALLOC)} "
        f"from {tuned_path} (not {shim} {je} as now)",
        f"at the next restart MALLOC_CONF=narenas:1 from {tuned_path} (unset now)",
    ]
    old = tuned_path.parent / "mbrecord.conf"
    old.write_text(f"[Service]\nEnvironment=LD_PRELOAD={shim}\n")
    tuned_now = systemd.unit_environment([tuned_path])
    _, changes = inforce.next_start(tuned_now, "mariadb", (str(etc), str(lib)))
    assert [(c.variable, c.then, c.source) for c in changes] == [("LD_PRELOAD", shim, str(old))]
