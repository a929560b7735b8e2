"""The native pattern driver: exact accounting, every pattern under every allocator,
one-line errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.patterns.driver import (
    PATTERNS,
    check_malloc_library,
    clean_environment,
    run_driver,
)


@pytest.fixture(scope="session")
def built(native_build: Path) -> Path:
    return native_build


def drive(built: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(
        [str(built / "mbpatterns"), *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("threads", [1, 3])
def test_live_bytes_match_an_independent_malloc_count(
    built: Path, pattern: str, threads: int
) -> None:
    """Under a counting interposer, the bytes malloc itself saw live over the measured
    window equal the driver's own live_bytes, to the byte; teardown leaves nothing."""
    extra = ["--size", "64K"] if pattern == "sortbuf" else []
    if pattern == "blockcache":
        extra = ["--capacity", "2M"]
    env = {"LD_PRELOAD": str(built / "libmbcount.so")}
    data = drive(
        built, pattern, "--threads", str(threads), "--ops", "3000", "--seed", "5", *extra, env=env
    )
    assert data["malloc_library"].endswith("libmbcount.so")
    assert data["interposer_live_bytes"] == data["live_bytes"]
    assert data["leaked_bytes"] == 0
    assert data["ops"] == 3000 * threads
    if pattern != "sortbuf":
        assert data["live_bytes"] > 0
    assert data["peak_live_bytes"] >= data["live_bytes"]


def test_single_thread_runs_are_deterministic(built: Path) -> None:
    args = ["blockcache", "--ops", "4000", "--capacity", "1M", "--pinned", "0.1"]
    a = drive(built, *args, "--seed", "9")
    b = drive(built, *args, "--seed", "9")
    c = drive(built, *args, "--seed", "10")
    keys = ("live_bytes", "requested_bytes", "allocations", "frees")
    assert [a[k] for k in keys] == [b[k] for k in keys]
    assert a["requested_bytes"] != c["requested_bytes"]


def test_oltp_accounting_is_exact_by_construction(built: Path) -> None:
    # with no long-lived objects, every allocation of an operation is freed by its end:
    # what stays live is the per-thread bookkeeping only (two arrays of --allocs entries
    # and the thread's struct of four pointers)
    data = drive(built, "oltp", "--ops", "500", "--allocs", "10", "--long-lived", "0")
    assert data["live_bytes"] == 10 * 8 + 10 * 8 + 4 * 8
    assert data["allocations"] == 500 * 10 + 3


def test_sortbuf_init_modes_and_rss(built: Path) -> None:
    for init in ("memset", "calloc", "none"):
        # a buffer lives for microseconds: the peak must not depend on the sampler
        data = drive(built, "sortbuf", "--size", "1M", "--init", init, "--ops", "20")
        assert data["options"]["init"] == init
        assert data["peak_live_bytes"] >= 1 << 20
        assert data["peak_rss_bytes"] >= data["final_rss_bytes"] > 0
        assert data["rss_per_live"] is None  # nothing stays live
        assert data["peak_rss_per_live"] > 0


INSTALLED = [a for a in allocators.builtin_allocators() if a.available]


@pytest.mark.parametrize("allocator", INSTALLED, ids=[a.name for a in INSTALLED])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_pattern_runs_under_every_installed_allocator(
    built: Path, allocator: allocators.Allocator, pattern: str
) -> None:
    args = [pattern, "--threads", "2", "--seconds", "0.3"]
    if pattern == "sortbuf":
        args += ["--size", "256K"]
    if pattern == "blockcache":
        args += ["--capacity", "8M"]
    run = run_driver(allocator, {}, args, timeout=60, binary=built / "mbpatterns")
    assert run.status == "ok", run.error
    data = run.data
    assert data["ops"] > 0 and data["ops_per_sec"] > 0
    assert data["leaked_bytes"] == 0
    assert data["peak_rss_bytes"] > 0
    check_malloc_library(allocator, data["malloc_library"])


def test_verification_catches_a_preload_that_did_not_happen() -> None:
    jemalloc = allocators.get("jemalloc", require_available=False)
    with pytest.raises(MallocbenchError, match="preload did not take effect"):
        check_malloc_library(jemalloc, "/lib/x86_64-linux-gnu/libc.so.6")
    glibc = allocators.get("glibc")
    with pytest.raises(MallocbenchError):
        check_malloc_library(glibc, "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")


def test_inherited_knobs_do_not_leak_into_a_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_CONF", "narenas:1")
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent.so")
    env = clean_environment(allocators.get("glibc"), {"MALLOC_ARENA_MAX": "1"})
    assert "MALLOC_CONF" not in env and "LD_PRELOAD" not in env
    assert env["MALLOC_ARENA_MAX"] == "1"


BAD = [
    ([], "name a pattern"),
    (["heap"], "unknown pattern 'heap'"),
    (["sortbuf", "--threads", "0"], "--threads expects a whole number"),
    (["sortbuf", "--capacity", "1M"], "--capacity applies to blockcache, not to sortbuf"),
    (["sortbuf", "--size", "12Q"], "--size expects a size"),
    (["sortbuf", "--init", "zero"], "--init expects memset, calloc or none"),
    (["oltp", "--seconds", "1", "--ops", "3"], "either --seconds or --ops"),
    (["oltp", "--bogus"], "unknown option '--bogus'"),
    (["xthread", "--batch"], "--batch needs a value"),
    (["blockcache", "--min-size", "64K", "--max-size", "4K"], "larger than --max-size"),
    (["blockcache", "--pinned", "2"], "--pinned expects a number from 0 to 1"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) or "none" for a, _ in BAD])
def test_bad_options_give_one_clear_line(built: Path, args: list[str], message: str) -> None:
    proc = subprocess.run([str(built / "mbpatterns"), *args], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbpatterns: error: ")
    assert message in lines[0]


def test_help_teaches(built: Path) -> None:
    proc = subprocess.run([str(built / "mbpatterns"), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for word in ("sortbuf", "blockcache", "oltp", "xthread", "LD_PRELOAD", "rss_per_live"):
        assert word in proc.stdout


def test_driver_is_not_linked_against_an_allocator(built: Path) -> None:
    out = subprocess.run(["ldd", str(built / "mbpatterns")], capture_output=True, text=True)
    assert not any(n in out.stdout for n in ("jemalloc", "tcmalloc", "mimalloc"))
