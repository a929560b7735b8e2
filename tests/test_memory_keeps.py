"""What the allocator keeps: LazyFree, THP set-up and jemalloc's own statistics, read by
`mallocbench memory` from real private servers; and the cgroup limit it compares with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_runner import run_cli
from mallocbench import allocators
from mallocbench.memory import jemalloc as jemalloc_mod
from mallocbench.memory import process as process_mod
from mallocbench.memory import take as take_mod
from mallocbench.memory.advice import advise
from mallocbench.memory.client import ConnectOptions
from mallocbench.memory.report import (
    AllocatorKeeps,
    AllocatorSummary,
    KeepsSource,
    MemoryReport,
    SeeMore,
)
from mallocbench.report.memory import keeps_source_text, see_more_text
from mallocbench.report.memory_advice import ShownAdvice, limit_source_text, shown_advice
from mallocbench.servers import engines, mariadb

MiB = 2**20
JEMALLOC = allocators.get("jemalloc", require_available=False)
needs_jemalloc = pytest.mark.skipif(not JEMALLOC.available, reason="jemalloc not installed")


def _opts(server: mariadb.PrivateServer) -> ConnectOptions:
    return ConnectOptions(socket=str(server.socket), user="root", password=server.password)


def _config(knobs: dict[str, str], **extra: object) -> mariadb.ServerConfig:
    return mariadb.ServerConfig(
        engine=engines.get("innodb"),
        cache_bytes=64 * MiB,
        allocator=allocators.get("jemalloc"),
        knobs=knobs,
        overrides={"sort_buffer_size": str(32 * MiB)},
        max_connections=100,
        **extra,  # type: ignore[arg-type]
    )


def _sorts(server: mariadb.PrivateServer, n: int) -> None:
    """n sorts that each fill a ~31 MiB sort buffer, then free it."""
    server.query("CREATE DATABASE IF NOT EXISTS t")
    for _ in range(n):
        server.query("SELECT seq FROM t.seq_1_to_390000 ORDER BY MD5(seq) LIMIT 1")


# --- jemalloc's statistics in an error log ------------------------------------------------------


def _jemalloc_output(conf: str) -> str:
    """What jemalloc prints at exit in a process that allocated and freed 64 MiB."""
    assert JEMALLOC.path is not None
    program = "x = [bytearray(1 << 20) for _ in range(64)]; del x"
    done = subprocess.run(
        [sys.executable, "-S", "-c", program],
        env={"LD_PRELOAD": JEMALLOC.path, "MALLOC_CONF": conf},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stderr


@needs_jemalloc
@pytest.mark.parametrize("form", ["json", "text"])
def test_stats_of_the_running_process_only(form: str) -> None:
    conf = "stats_print:true,dirty_decay_ms:60000,muzzy_decay_ms:0"
    if form == "json":
        conf += ",stats_print_opts:J"
    printed = _jemalloc_output(conf)
    log = (
        "2026-01-01  0 [Note] Starting MariaDB 10.11.6 as process 111\n"
        + _jemalloc_output("stats_print:true,stats_print_opts:J")
        + "2026-01-01  0 [Note] Starting MariaDB 10.11.6 as process 222\n"
        + printed
    )
    assert jemalloc_mod.stats_in_log(log, 333) is None
    stats = jemalloc_mod.stats_in_log(log, 222)
    # Python may fork helpers that print too; the process itself exits, and prints, last.
    assert stats is not None and stats.printed_by == 222 and stats.prints >= 1
    # The 64 MiB freed decay over 60 s (smoothly, not all at its end): most are still dirty.
    assert stats.dirty >= 32 * MiB and stats.muzzy == 0
    assert stats.dirty_decay_ms == 60000 and stats.muzzy_decay_ms == 0
    assert stats.background_thread is False
    assert stats.resident >= stats.dirty and stats.mapped >= stats.resident
    older = jemalloc_mod.stats_in_log(log, 111)
    assert older is not None and older.dirty_decay_ms == 10000  # jemalloc's default


# --- a private server with MADV_FREE pages ------------------------------------------------------


LAZY_MIB = 96


@pytest.fixture(scope="module")
def lazy_server(
    tmp_path_factory: pytest.TempPathFactory, native_build: Path
) -> Iterator[mariadb.PrivateServer]:
    """A jemalloc server that printed its statistics as it ran (every 64 MiB allocated),
    with LAZY_MIB MiB freed with MADV_FREE.

    jemalloc decides for itself when it purges lazily (here it mostly purged with
    MADV_DONTNEED), so the MADV_FREE pages come from a preloaded test library that frees
    a written region that way at start (native/mblazyfree.c).
    """
    if not JEMALLOC.available:
        pytest.skip("jemalloc not installed")
    lib_dir = tmp_path_factory.mktemp("lib")
    lib_dir.chmod(0o755)  # the server's user must load the library
    lib = lib_dir / "libmblazyfree.so"
    shutil.copy(native_build / lib.name, lib)
    lib.chmod(0o755)
    knobs = {
        "LD_PRELOAD": f"{JEMALLOC.path}:{lib}",
        "MB_LAZYFREE_MIB": str(LAZY_MIB),
        "MALLOC_CONF": "stats_interval:67108864,stats_interval_opts:Jgablxeh",
    }
    build = mariadb.find_build()
    rundir = tmp_path_factory.mktemp("lazy")
    rundir.chmod(0o711)  # the server drops root for mysql, which must pass through
    with mariadb.running(build, rundir, _config(knobs)) as server:
        _sorts(server, 4)
        yield server


@pytest.mark.server
def test_lazy_free_and_jemalloc_stats(lazy_server: mariadb.PrivateServer) -> None:
    report = take_mod.take(_opts(lazy_server))
    proc, keeps = report.process_summary, report.allocator_keeps
    assert proc is not None and keeps is not None
    # The kernel keeps MADV_FREE pages in RSS until memory runs short, which this host
    # (24 GiB, mostly free) does not.
    assert proc.lazy_free is not None and proc.lazy_free >= (LAZY_MIB - 4) * MiB
    assert keeps.lazy_free == proc.lazy_free
    stats = keeps.jemalloc
    assert stats is not None, see_more_text(keeps)
    # Four sorts of ~31 MiB allocate more than 64 MiB: at least one print.
    assert stats.printed_by == proc.pid and stats.prints >= 1
    assert 0 < stats.allocated <= stats.active <= stats.resident < proc.rss
    assert keeps.source == KeepsSource.JEMALLOC and keeps.how_to_see_more is None
    assert "jemalloc's own statistics" in keeps_source_text(keeps)
    advice = {a.title: a for a in shown_advice(report)}
    lazy = advice["RSS counts memory the allocator has already freed (MADV_FREE)"]
    # jemalloc's own figures show the pages are not its muzzy ones (the test library's
    # are): its decay is not blamed for them.
    assert lazy.level == "info" and stats.muzzy < proc.lazy_free / 2
    assert "RSS minus LazyFree" in lazy.advice and "muzzy_decay_ms" not in lazy.advice
    assert f"LazyFree {proc.lazy_free // MiB:,} MiB" in lazy.evidence
    assert "jemalloc's muzzy pages in its last print" in lazy.evidence


@pytest.mark.server
def test_cli_shows_what_the_allocator_keeps(lazy_server: mariadb.PrivateServer) -> None:
    args = ["memory", "--defaults-file", str(lazy_server.client_cnf)]
    done = run_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    keeps = data["allocator_keeps"]
    assert keeps["lazy_free"] == data["process"]["lazy_free"] >= (LAZY_MIB - 4) * MiB
    assert keeps["jemalloc"]["printed_by"] == data["process"]["pid"]
    thp = data["thp_setup"]
    assert thp["mode"] == process_mod.read_thp(None).mode
    # MariaDB as packaged here turns THP off for itself (prctl PR_SET_THP_DISABLE) at
    # start, whatever the host's mode: the account must say so.
    status = Path(f"/proc/{data['process']['pid']}/status").read_text()
    assert thp["process_disabled"] is ("THP_enabled:\t0" in status)
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "lazily freed, still in RSS (LazyFree)" in out
    assert "muzzy: purged with MADV_FREE" in out
    assert "khugepaged max_ptes_none" in out
    assert "for this process: disabled (PR_SET_THP_DISABLE)" in out


@needs_jemalloc
@pytest.mark.server
def test_live_server_without_prints_says_proc_only(tmp_path: Path) -> None:
    """No stats_interval: only /proc, named as such, and how to get jemalloc's figures."""
    build = mariadb.find_build()
    with mariadb.running(build, tmp_path, _config({}, thp_disabled=True)) as server:
        report = take_mod.take(_opts(server))
        pid = server.pid
        server.stop()
        log = server.error_log.read_text(errors="replace")
    keeps = report.allocator_keeps
    assert keeps is not None and keeps.jemalloc is None
    assert keeps.source == KeepsSource.PROC and keeps.how_to_see_more == SeeMore.NO_PRINTS
    assert keeps_source_text(keeps).startswith("/proc only (live server)")
    assert jemalloc_mod.STATS_INTERVAL_CONF in (see_more_text(keeps) or "")
    assert report.thp_setup is not None and report.thp_setup.process_disabled is True
    assert jemalloc_mod.stats_in_log(log, pid) is None


@needs_jemalloc
@pytest.mark.server
@pytest.mark.parametrize("decay_ms", [0, 30000])
def test_private_server_stats_at_exit(tmp_path: Path, decay_ms: int) -> None:
    """MALLOC_CONF=stats_print: the error log holds what jemalloc kept when the server
    ended, after it freed nearly everything: with a 30 s decay, freed pages still dirty;
    with none, none."""
    build = mariadb.find_build()
    conf = f"dirty_decay_ms:{decay_ms},{jemalloc_mod.STATS_AT_EXIT_CONF}"
    with mariadb.running(build, tmp_path, _config({"MALLOC_CONF": conf})) as server:
        _sorts(server, 2)
        pid = server.pid
        server.stop()
        stats = jemalloc_mod.stats_from_log(server.error_log, pid)
    assert stats is not None and stats.prints == 1 and stats.printed_by == pid
    assert stats.dirty_decay_ms == decay_ms and stats.background_thread is False
    assert stats.allocated < 8 * MiB and stats.retained > 0
    if decay_ms:
        assert stats.dirty > 8 * MiB > stats.allocated
    else:
        assert stats.dirty == 0


# --- cgroup v1 limits -----------------------------------------------------------------------


def _v1_tree(root: Path, limits: dict[str, int], hierarchical: int | None = None) -> Path:
    """A v1 memory hierarchy as the kernel lays it out, with limits by relative path."""
    unlimited = str((1 << 63) - 4096)
    leaf = root
    for part in ["", *sorted(limits, key=len)]:
        leaf = root / part if part else root
        leaf.mkdir(parents=True, exist_ok=True)
        (leaf / "memory.limit_in_bytes").write_text(f"{limits.get(part, unlimited)}\n")
        stat = f"cache 0\nrss 0\nhierarchical_memory_limit {hierarchical or unlimited}\n"
        (leaf / "memory.stat").write_text(stat)
    return leaf


def test_v1_limit_from_a_cgroupfs_tree(tmp_path: Path) -> None:
    from mallocbench.servers.cgroup.hierarchy import memory_limit_in

    root = tmp_path / "memory"
    leaf = _v1_tree(root, {"a": 300 * MiB, "a/b": 500 * MiB, "a/b/c": (1 << 63) - 4096})
    limit = memory_limit_in(leaf, root)
    assert limit is not None and limit.bytes == 300 * MiB and limit.version == 1
    assert limit.directory == root / "a" and limit.file == "memory.limit_in_bytes"
    # A container sees only its own subtree; memory.stat tells the limit above it.
    hidden = _v1_tree(tmp_path / "ct", {"x": 900 * MiB}, hierarchical=200 * MiB)
    limit = memory_limit_in(hidden, tmp_path / "ct")
    assert limit is not None and limit.bytes == 200 * MiB
    assert limit.file == "memory.stat hierarchical_memory_limit"
    assert memory_limit_in(_v1_tree(tmp_path / "free", {}), tmp_path / "free") is None


def test_v2_limit_from_a_cgroupfs_tree(tmp_path: Path) -> None:
    from mallocbench.servers.cgroup.hierarchy import memory_limit_in

    root = tmp_path / "unified"
    for rel, value in (("", None), ("svc", "419430400"), ("svc/db", "max")):
        d = root / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.controllers").write_text("cpu memory\n")
        if value is not None:
            (d / "memory.max").write_text(value + "\n")
    limit = memory_limit_in(root / "svc" / "db", root)
    assert limit is not None and (limit.bytes, limit.version) == (400 * MiB, 2)
    assert limit.file == "memory.max" and limit.directory == root / "svc"


def test_v1_limit_of_a_real_process() -> None:
    """A process in a capped v1 memory cgroup: `memory` compares against that cap."""
    from mallocbench.servers.cgroup.hierarchy import memory_version
    from mallocbench.servers.cgroup.own import MemoryCgroup

    if memory_version() != 1:
        pytest.skip("this host mounts no cgroup v1 memory hierarchy")
    with MemoryCgroup.create("v1limit", 300 * MiB) as group:
        child = subprocess.Popen(["sleep", "60"], preexec_fn=group.join_self)
        try:
            limit = process_mod.memory_limit(child.pid)
        finally:
            child.kill()
            child.wait()
    assert limit.bytes == 300 * MiB
    assert limit_source_text(limit) == f"cgroup v1 memory.limit_in_bytes of {group.path}"


@needs_jemalloc
@pytest.mark.server
def test_memory_compares_with_the_cap_of_a_capped_server(tmp_path: Path) -> None:
    """A private server in a capped memory cgroup (v1 on this host): the account's limit
    is that cap, named by its file, not the machine's memory."""
    from mallocbench.servers.cgroup.hierarchy import memory_version
    from mallocbench.servers.cgroup.own import MemoryCgroup
    from mallocbench.servers.cgroup.parents import capping_problem

    if capping_problem() is not None:
        pytest.skip(capping_problem() or "")
    build = mariadb.find_build()
    with MemoryCgroup.create("capped", 512 * MiB) as group:
        config = _config({}, memory_cgroup=group)
        with mariadb.running(build, tmp_path, config) as server:
            report = take_mod.take(_opts(server))
    limit = report.memory_limit
    assert limit is not None and limit.bytes == 512 * MiB
    name = "memory.max" if memory_version() == 2 else "memory.limit_in_bytes"
    assert limit_source_text(limit) == f"cgroup v{memory_version()} {name} of {group.path}"


# --- cgroups left by a killed harness ---------------------------------------------------------


_HARNESS = """
import os, subprocess, sys, time
from mallocbench.servers.cgroup.own import MemoryCgroup
group = MemoryCgroup.create("killed", 256 << 20)
if sys.argv[1] == "with-server":
    # Stands in for a server: its own process group, so it outlives the harness, as
    # servers do.
    subprocess.Popen(["sleep", "300"], preexec_fn=group.join_self, process_group=0)
    while not group.pids():
        time.sleep(0.01)
print(group.path, flush=True)
time.sleep(300)
"""


def _killed_harness(mode: str) -> Path:
    harness = subprocess.Popen(
        [sys.executable, "-c", _HARNESS, mode], stdout=subprocess.PIPE, text=True
    )
    assert harness.stdout is not None
    line = harness.stdout.readline().strip()
    harness.kill()
    harness.wait()
    assert line, "the harness made no cgroup"
    return Path(line)


def test_next_run_removes_an_empty_group_of_a_killed_harness(tmp_path: Path) -> None:
    from mallocbench.servers.cgroup.own import MemoryCgroup
    from mallocbench.servers.cgroup.parents import capping_problem
    from mallocbench.servers.orphans import stop_orphans

    if capping_problem() is not None:
        pytest.skip(capping_problem() or "")
    empty = _killed_harness("empty")
    occupied = _killed_harness("with-server")
    try:
        # Not `empty.is_dir()`: a run starting in another test meanwhile does what the next
        # run does and may have removed it already, which is the behaviour checked below.
        assert occupied.is_dir()
        with MemoryCgroup.create("alive") as alive:
            stop_orphans(tmp_path / "servers")  # what the next run does first
            assert not empty.exists()
            # Still holding a process (a server not stopped yet): kept, not uncapped.
            assert occupied.is_dir()
            # This harness is alive: its group is its own business.
            assert alive.path.is_dir()
        # Once the server is stopped (here: killed), the next run removes the group too.
        _kill_members(occupied)
        stop_orphans(tmp_path / "servers")
        assert not occupied.exists()
    finally:
        for path in (empty, occupied):
            if path.exists():
                _kill_members(path)
                path.rmdir()


def _kill_members(group: Path) -> None:
    for pid in (group / "cgroup.procs").read_text().split():
        os.kill(int(pid), 9)
    deadline = time.monotonic() + 10
    while (group / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
        time.sleep(0.02)


# --- advice: which setting fits, and nothing said on too little --------------------------------


def _report(
    allocator: str,
    rollup: dict[str, int],
    thp: str = "madvise",
    process_disabled: bool | None = False,
    jemalloc: jemalloc_mod.JemallocStats | None = None,
) -> MemoryReport:
    proc = process_mod.ProcessMemory(
        pid=7,
        name="mariadbd",
        exe=None,
        rss=1024 * MiB,
        vsz=2048 * MiB,
        status={},
        rollup=rollup,
        threads=20,
        knobs={"MALLOC_CONF": "narenas:4"} if allocator == "jemalloc" else {},
    )
    return MemoryReport(
        taken_at=0.0,
        where="test",
        server=None,
        process=proc,
        pid_source="--pid",
        allocator=AllocatorSummary(name=allocator, path=None),
        footprint=None,
        breakdown=None,
        memory_limit=None,
        thp=thp,
        thp_setup=process_mod.ThpSetup(thp, "madvise", 511, process_disabled),
        allocator_keeps=AllocatorKeeps(
            KeepsSource.PROC, rollup.get("LazyFree"), None, jemalloc=jemalloc
        ),
    )


def _titles(report: MemoryReport) -> dict[str, ShownAdvice]:
    return {a.title: a for a in shown_advice(report, advise(report))}


def _stats(dirty: int, resident: int) -> jemalloc_mod.JemallocStats:
    return jemalloc_mod.JemallocStats(
        allocated=resident - dirty,
        active=resident - dirty,
        metadata=0,
        resident=resident,
        mapped=resident,
        retained=0,
        dirty=dirty,
        muzzy=0,
        dirty_decay_ms=10000,
        muzzy_decay_ms=0,
        background_thread=False,
        printed_by=7,
        prints=3,
    )


LAZY_TITLE = "RSS counts memory the allocator has already freed (MADV_FREE)"
DIRTY_TITLE = "jemalloc keeps freed pages resident (dirty)"


def test_lazy_free_advice_fits_the_allocator() -> None:
    je = _titles(_report("jemalloc", {"LazyFree": 200 * MiB}))[LAZY_TITLE]
    assert "Environment=MALLOC_CONF=narenas:4,muzzy_decay_ms:0,background_thread:true" in (
        je.advice
    )
    assert je.evidence == "LazyFree 200 MiB of RSS 1,024 MiB (/proc/7/smaps_rollup)"
    # Where jemalloc's own figures hold the pages, its decay is what to change.
    held = _stats(0, 900 * MiB)
    held.muzzy = 190 * MiB
    report = _report("jemalloc", {"LazyFree": 200 * MiB}, jemalloc=held)
    assert "muzzy_decay_ms:0" in _titles(report)[LAZY_TITLE].advice
    mi = _titles(_report("mimalloc", {"LazyFree": 200 * MiB}))[LAZY_TITLE]
    assert "RSS minus LazyFree" in mi.advice and "MALLOC_CONF" not in mi.advice
    # Too little to matter (under 64 MiB, or under a tenth of RSS): nothing is said.
    assert LAZY_TITLE not in _titles(_report("jemalloc", {"LazyFree": 60 * MiB}))


def test_dirty_advice_only_from_jemalloc_own_figures() -> None:
    dirty = _titles(_report("jemalloc", {}, jemalloc=_stats(300 * MiB, 900 * MiB)))[DIRTY_TITLE]
    assert "MALLOC_CONF=narenas:4,background_thread:true,dirty_decay_ms:5000" in dirty.advice
    assert "last print for process 7" in dirty.evidence
    assert "dirty_decay_ms 10000, background_thread False" in dirty.evidence
    assert DIRTY_TITLE not in _titles(_report("jemalloc", {}, jemalloc=_stats(MiB, 900 * MiB)))
    assert DIRTY_TITLE not in _titles(_report("jemalloc", {}))


def test_thp_advice_follows_the_mode_and_the_process() -> None:
    huge = {"AnonHugePages": 300 * MiB}
    je = _titles(_report("jemalloc", huge, thp="always"))
    warning = je["transparent huge pages are 'always' with jemalloc"]
    assert "Environment=MALLOC_CONF=narenas:4,thp:never" in warning.advice
    assert "max_ptes_none (511 now) to 0" in warning.advice
    assert "khugepaged max_ptes_none 511" in warning.evidence
    glibc = _titles(_report("glibc", huge, thp="always"))["transparent huge pages are 'always'"]
    assert "echo madvise" in glibc.advice and glibc.level == "info"
    # A process with THP turned off for itself (MariaDB does so) gets none of it.
    for allocator in ("jemalloc", "glibc"):
        titles = _titles(_report(allocator, huge, thp="always", process_disabled=True))
        assert not any("huge pages" in t for t in titles)
    assert not any("huge pages" in t for t in _titles(_report("glibc", huge, thp="madvise")))


def test_watch_draws_lazy_free(tmp_path: Path) -> None:
    from mallocbench.memory import watch
    from mallocbench.report.memory import write_watch_chart

    rows: list[dict[str, object]] = [
        {"elapsed_s": i, "rss": 300 * MiB, "lazy_free": (i % 2) * 64 * MiB} for i in range(4)
    ]
    write_watch_chart(rows, tmp_path / "c.html")
    page = (tmp_path / "c.html").read_text()
    assert {k for k in watch.COLUMNS if f'"name":"{k}"' in page} == {"rss", "lazy_free"}
