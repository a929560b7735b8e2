from __future__ import annotations

import json
import subprocess

import pytest

from cli_runner import run_cli
from mallocbench import allocators
from mallocbench.errors import MallocbenchError


def test_registry_lists_all_with_versions_and_paths() -> None:
    entries = {a.name: a for a in allocators.builtin_allocators()}
    assert set(entries) == {"glibc", "jemalloc", "tcmalloc", "tcmalloc_minimal", "mimalloc"}
    assert entries["glibc"].available and entries["glibc"].version
    for allocator in entries.values():
        if allocator.available:
            assert allocator.path and allocator.version, allocator.name


def test_aliases_custom_paths_and_errors(tmp_path: object) -> None:
    assert allocators.get("je").name == "jemalloc"
    jemalloc = allocators.get("jemalloc")
    assert jemalloc.path is not None
    custom = allocators.get(jemalloc.path)
    assert custom.custom_path == jemalloc.path and custom.preload() == jemalloc.path
    with pytest.raises(MallocbenchError, match="unknown allocator 'ptmalloc3'"):
        allocators.get("ptmalloc3")
    with pytest.raises(MallocbenchError, match="does not exist"):
        allocators.get("/no/such/libmalloc.so")


def test_detect_and_verify_on_a_real_process() -> None:
    jemalloc = allocators.get("jemalloc")
    proc = subprocess.Popen(
        ["sleep", "5"], env={"LD_PRELOAD": jemalloc.preload() or "", "PATH": "/usr/bin:/bin"}
    )
    try:
        import time

        time.sleep(0.2)
        assert allocators.detect(proc.pid).name == "jemalloc"
        assert allocators.verify(jemalloc, proc.pid).endswith(".so.2")
        with pytest.raises(MallocbenchError, match="should use glibc"):
            allocators.verify(allocators.get("glibc"), proc.pid)
        with pytest.raises(MallocbenchError, match="is not mapped"):
            allocators.verify(allocators.get("mimalloc"), proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_cli_json_lists_objects() -> None:
    out = run_cli("allocators", "--json")
    assert out.returncode == 0, out.stderr
    entries = json.loads(out.stdout)
    assert {"name", "version", "path", "available"} <= set(entries[0])
    assert any(e["name"] == "mimalloc" for e in entries)
