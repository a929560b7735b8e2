"""Memory explain pieces that need no server: /proc parsing on small C programs, profile
parsers on files made by real valgrind/heaptrack runs, the chart, option files."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.memory import client, connect, massif, process, server, watch
from mallocbench.report.memory import write_watch_chart
from mallocbench.units import parse_size

# Threads that each hold small blocks make glibc give each its own arena; the wrapper
# named my_malloc checks that sites are attributed past allocation wrappers.
PROGRAM = textwrap.dedent(
    r"""
    #include <pthread.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <unistd.h>
    static void *keep[64];
    __attribute__((noinline)) void *my_malloc(size_t n) {
        void *p = malloc(n); memset(p, 1, n); return p; }
    __attribute__((noinline)) void big_site(void) {
        for (int i = 0; i < 8; i++) keep[i] = my_malloc(1 << 20); }
    __attribute__((noinline)) void small_site(void) {
        for (int i = 8; i < 12; i++) keep[i] = my_malloc(1 << 18); }
    static pthread_barrier_t barrier;
    static void *worker(void *arg) {
        for (int i = 0; i < 200; i++) { void *p = malloc(1000); memset(p, 2, 1000); }
        pthread_barrier_wait(&barrier); pause(); return arg; }
    int main(int argc, char **argv) {
        big_site(); small_site();
        if (argc > 1) {
            int n = atoi(argv[1]); pthread_t t;
            pthread_barrier_init(&barrier, NULL, n + 1);
            for (int i = 0; i < n; i++) pthread_create(&t, NULL, worker, NULL);
            pthread_barrier_wait(&barrier);
            printf("ready\n"); fflush(stdout); pause();
        }
        for (int i = 0; i < 12; i++) free(keep[i]);
        return 0;
    }
    """
)


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (make setup installs build-essential)")
    workdir = tmp_path_factory.mktemp("prog")
    (workdir / "a.c").write_text(PROGRAM)
    subprocess.run(
        ["gcc", "-g", "-O1", "-pthread", "-o", "a", "a.c"], cwd=workdir, check=True, timeout=60
    )
    return workdir / "a"


def _run_threads(program: Path, threads: int, preload: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    proc = subprocess.Popen([str(program), str(threads)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def test_glibc_arenas_counted_from_heap_headers(program: Path) -> None:
    proc = _run_threads(program, 4)
    try:
        mapped = allocators.detect(proc.pid)
        assert mapped.name == "glibc"
        mem = process.sample(proc.pid, mapped.name)
        # Two CPUs allow 16 arenas: each of the 4 threads gets its own, plus main.
        assert mem.arenas == 5, mem.arena_source
        assert mem.arena_source is process.ArenaCount.HEAP_INFO
        assert mem.glibc_heaps() == 4
        assert mem.threads == 5
        assert mem.by_kind()["stack"]["count"] >= 4
        assert mem.rss == sum(m.rss for m in mem.mappings)
        assert mem.knobs == {}
    finally:
        proc.kill()
        proc.wait()


def test_glibc_arena_fallback_without_ptrace(
    program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = _run_threads(program, 3)
    try:
        monkeypatch.setattr(process, "_read_words", lambda *a: None)
        mem = process.sample(proc.pid, "glibc")
        assert mem.arenas == 4
        assert mem.arena_source is process.ArenaCount.MAPS
    finally:
        proc.kill()
        proc.wait()


def test_jemalloc_detected_and_no_glibc_heaps(program: Path) -> None:
    je = allocators.get("jemalloc", require_available=False)
    if not je.available:
        pytest.skip("jemalloc not installed")
    proc = _run_threads(program, 4, preload=je.path)
    try:
        mapped = allocators.detect(proc.pid)
        assert mapped.name == "jemalloc"
        mem = process.sample(proc.pid, mapped.name)
        assert mem.arenas is None
        assert not any(m.kind == "glibc_heap" for m in mem.mappings)
        assert mem.knobs == {"LD_PRELOAD": je.path}
    finally:
        proc.kill()
        proc.wait()


def test_massif_sites_skip_wrappers(program: Path, tmp_path: Path) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    out = tmp_path / "massif.out"
    subprocess.run(
        ["valgrind", "--tool=massif", "--quiet", f"--massif-out-file={out}", str(program)],
        check=True,
        timeout=120,
    )
    profile = massif.parse_massif(out)
    assert profile.peak_bytes == 8 * 2**20 + 4 * 2**18
    names = [s.function for s in profile.sites]
    assert names[:2] == ["big_site", "small_site"]
    assert profile.sites[0].bytes == 8 * 2**20
    assert profile.sites[1].bytes == 4 * 2**18
    assert profile.sites[0].stack[0] == "main"


def test_heaptrack_print_sites(program: Path, tmp_path: Path) -> None:
    if shutil.which("heaptrack") is None or shutil.which("heaptrack_print") is None:
        pytest.skip("heaptrack is not installed (bash scripts/install-deps.sh heaptrack)")
    subprocess.run(
        ["heaptrack", "-o", str(tmp_path / "ht"), str(program)],
        check=True,
        timeout=120,
        capture_output=True,
    )
    from mallocbench.memory.profile import parse_file

    (data,) = tmp_path.glob("ht*")
    profile = parse_file(data)
    top = {s.function: s.bytes for s in profile.sites[:2]}
    # heaptrack_print prints decimal units with 3 significant digits.
    assert top["big_site"] == pytest.approx(8 * 2**20, rel=0.01)
    assert top["small_site"] == pytest.approx(4 * 2**18, rel=0.01)


def test_not_a_massif_file(tmp_path: Path) -> None:
    bogus = tmp_path / "x.out"
    bogus.write_text("hello\n")
    with pytest.raises(MallocbenchError, match="not a massif output file"):
        massif.parse_massif(bogus)


def test_watch_chart_and_csv(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"elapsed_s": i, "rss": (100 + i) * 2**20, "heap_rss": 50 * 2**20, "unaccounted": -(2**20)}
        for i in range(4)
    ]
    write_watch_chart(rows, tmp_path / "c.html")
    page = (tmp_path / "c.html").read_text()
    # Three series drawn by plotly, which loads from the shared copy beside the page.
    drawn = {k for k in watch.COLUMNS if f'"name":"{k}"' in page}
    assert drawn == {"rss", "heap_rss", "unaccounted"}
    (shared,) = tmp_path.glob("plotly-*.min.js")
    assert f'src="{shared.name}"' in page

    def sample() -> object:
        raise KeyboardInterrupt

    def draw(rows: list[dict[str, object]]) -> None:
        write_watch_chart(rows, tmp_path / "m.html")

    got = watch.watch(sample, 0.1, tmp_path / "m.csv", draw)  # type: ignore[arg-type]
    assert got == []
    assert list(csv.reader((tmp_path / "m.csv").open()))[0][0] == "time"
    assert (tmp_path / "m.html").exists()


def test_option_file_password(tmp_path: Path) -> None:
    cnf = tmp_path / "my.cnf"
    cnf.write_text("!includedir /nowhere\n[client]\nuser = monitor\npassword = 's3cret'\n")
    opts = connect.resolve_options(client.ConnectOptions(socket="/x.sock", defaults_file=str(cnf)))
    assert (opts.user, opts.password) == ("monitor", "s3cret")
    assert "s3cret" not in repr(opts)
    with pytest.raises(MallocbenchError, match="does not exist"):
        client.read_option_file(str(tmp_path / "none.cnf"))


def test_memory_used_version_rule_and_sizes() -> None:
    assert server.memory_used_includes_caches("10.11.19-MariaDB", "mariadb")
    assert not server.memory_used_includes_caches("10.11.5-MariaDB", "mariadb")
    assert server.memory_used_includes_caches("10.6.16-MariaDB", "mariadb")
    assert not server.memory_used_includes_caches("8.0.36", "mysql")
    assert parse_size("64M", "--cache") == 64 * 2**20 and parse_size("1g", "--cache") == 2**30
    with pytest.raises(MallocbenchError, match="--cache = 'lots' is not a size"):
        parse_size("lots", "--cache")


def test_resident_pages_from_pagemap() -> None:
    import mmap

    page = os.sysconf("SC_PAGE_SIZE")
    area = mmap.mmap(-1, 8 * 2**20)
    try:
        area[: 3 * 2**20] = b"\1" * (3 * 2**20)
        import ctypes

        start = ctypes.addressof(ctypes.c_char.from_buffer(area))
        assert process.resident_pages(os.getpid(), start, start + 8 * 2**20) == 3 * 2**20 // page
    finally:
        area.close()
