"""A PostgreSQL server's memory accounted once (servers/postgresql/memory.py): shared
memory once over all processes, each backend's private memory beside what its memory
contexts hold, and parts that add up to the server's PSS, read here independently."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mallocbench.servers.postgresql.build import PgBuild
from mallocbench.servers.postgresql.family import FAMILY
from mallocbench.servers.postgresql.memory import account
from mallocbench.servers.postgresql.server import PgServer, running
from test_postgresql_server import SHAPE, _config, golden, pg_build  # noqa: F401


@pytest.fixture
def busy(pg_build: PgBuild, golden: Path, tmp_path: Path) -> Iterator[PgServer]:  # noqa: F811
    config = _config("jemalloc", overrides={"work_mem": "16MB"})
    with running(pg_build, tmp_path / "s", config, golden) as server:
        yield server


def _pss_of_every_process_of(postmaster: int) -> int:
    """The server's PSS from the kernel alone: every process whose parent is the
    postmaster, found by walking /proc, not by the code under test."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            rollup = (entry / "smaps_rollup").read_text()
        except OSError:
            continue
        ppid = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")
        )
        if int(entry.name) != postmaster and ppid != postmaster:
            continue
        pss = next(line for line in rollup.splitlines() if line.startswith("Pss:"))
        total += int(pss.split()[1]) * 1024
    return total


def test_the_parts_sum_to_the_servers_pss_and_shared_memory_is_counted_once(
    busy: PgServer,
) -> None:
    clients = [busy.connect() for _ in range(3)]
    try:
        for conn in clients:
            # A sort in memory (work_mem 16MB) and every table's pages in shared_buffers.
            conn.execute("SELECT c FROM sbtest1 ORDER BY c").fetchall()
            conn.execute("SELECT count(*) FROM sbtest2").fetchall()
        memory = account(busy, clients[0])
        independent = _pss_of_every_process_of(busy.pid)
    finally:
        for conn in clients:
            conn.close()
    assert abs(memory.parts_sum - independent) <= 0.05 * independent
    assert abs(memory.total_pss - independent) <= 0.05 * independent
    backends = [p for p in memory.processes if p.backend_type == "client backend"]
    assert len(backends) == 3  # the three clients, the first of them asking
    assert memory.asking_pid in {p.pid for p in backends}
    # Shared memory once: what each process maps of it is its share, so the shares add
    # up to no more than the segment holds; the RSS sum counts it in every process.
    assert 0 < memory.shared_pss <= memory.shmem_allocated + (64 << 20)
    assert memory.rss_sum - memory.total_pss > memory.shared_pss
    for p in memory.processes:
        assert p.pss == pytest.approx(p.shared_pss + p.anon_pss + p.file_pss, abs=16 << 10)
    # Every backend's contexts were read (its own through pg_backend_memory_contexts,
    # the others' from the log), and the allocator's overhead is what they leave.
    for p in backends:
        assert p.contexts_bytes is not None and p.contexts_bytes > 0
        assert p.allocator_overhead == p.anon_pss - p.contexts_bytes
    assert memory.work_mem_bytes == 16 << 20
    assert memory.shared_buffers_bytes == SHAPE.cache_bytes


def test_the_cell_metrics_are_values_that_add_up(busy: PgServer) -> None:
    metrics = FAMILY.account(busy, "jemalloc")
    assert metrics is not None  # PostgreSQL's account is its own
    parts = (
        metrics["pss_shared_memory_bytes"]
        + metrics["pss_private_anon_bytes"]
        + metrics["pss_files_bytes"]
    )
    assert parts == pytest.approx(metrics["pss_total_bytes"], rel=0.05)
    assert all(isinstance(v, float) for v in metrics.values())
    busy.stop()
    assert FAMILY.account(busy, "jemalloc") == {}  # a stopped server: no account, no raise
