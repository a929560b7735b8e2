"""A PostgreSQL server's memory accounted once (servers/postgresql/memory.py): shared
memory once over all processes, each backend's private memory beside what its memory
contexts hold, and parts that add up to the server's PSS, read here independently."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from mallocbench.cli import main
from mallocbench.servers.postgresql.build import PgBuild
from mallocbench.servers.postgresql.family import FAMILY
from mallocbench.servers.postgresql.memory import account, server_pids
from mallocbench.servers.postgresql.server import ROLE, PgServer, running
from test_postgresql_server import SHAPE, _config, golden, pg_build  # noqa: F401


@pytest.fixture
def busy(pg_build: PgBuild, golden: Path, tmp_path: Path) -> Iterator[PgServer]:  # noqa: F811
    config = _config("jemalloc", overrides={"work_mem": "16MB"}, knobs={"MALLOC_CONF": "narenas:2"})
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


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _backend(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(str(row[0]))


def test_memory_given_a_backends_pid_accounts_the_whole_running_server(
    busy: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memory --pid` on a server it did not start: the postmaster found from a backend,
    the socket from postmaster.pid, the parts adding up to the total PSS (the account
    against the kernel's own reading is the first test's: here the command's session
    is gone before a second reading could be taken)."""
    monkeypatch.setenv("PGPASSWORD", busy.password)
    clients = [busy.connect() for _ in range(3)]
    try:
        for conn in clients:
            conn.execute("SELECT c FROM sbtest1 ORDER BY c").fetchall()
        backends = {_backend(conn) for conn in clients}
        before = set(server_pids(busy.pid))
        code, out, err = _cli("memory", "--pid", str(min(backends)), "--user", ROLE, "--json")
        after = set(server_pids(busy.pid))
        term_code, term, term_err = _cli("memory", "--pid", str(busy.pid), "--user", ROLE)
    finally:
        for conn in clients:
            conn.close()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["postmaster"] == busy.pid and doc["asked_pid"] == min(backends)
    assert doc["socket"] == str(busy.socket) and doc["found_from"] == "postmaster.pid"
    assert doc["allocator"] == "jemalloc"
    # Shared memory is one part, named once; the parts add up to the server's PSS.
    assert set(doc["parts"]) == {"shared_memory", "private_anon", "files"}
    parts = sum(doc["parts"].values())
    assert abs(parts - doc["total_pss"]) <= 0.05 * doc["total_pss"]
    assert doc["rss_sum"] - doc["total_pss"] > doc["parts"]["shared_memory"]
    # Every process of the server is listed, each backend with its contexts read.
    listed = {p["pid"]: p for p in doc["processes"]}
    assert (before & after) <= set(listed) and busy.pid in listed
    for pid in backends:
        assert listed[pid]["type"] == "client backend"
        assert listed[pid]["contexts"] > 0
        assert listed[pid]["allocator_overhead"] == (
            listed[pid]["private_anon_pss"] - listed[pid]["contexts"]
        )
    assert term_code == 0, term_err
    assert "total PSS" in term and term.count("shared memory (shared_buffers") == 1
    assert all(str(pid) in term for pid in backends)


def test_memory_without_a_password_says_which_option_gives_it(
    busy: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    code, out, err = _cli("memory", "--pid", str(busy.pid), "--user", ROLE)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("mallocbench: error: the PostgreSQL server at ")
    assert f"asks role '{ROLE}' for a password: give it with --ask-password" in err
    assert busy.password not in err
    code, _, err = _cli("memory", "--pid", str(busy.pid), "--watch", "1")
    assert code == 2 and "--watch is for MariaDB/MySQL servers" in err


def test_check_given_a_backends_pid_reads_its_postmaster(busy: PgServer) -> None:
    """A backend's environ holds its process title; the postmaster's is intact."""
    with busy.connect() as conn:
        backend = _backend(conn)
        code, out, err = _cli("check", "--pid", str(backend), "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["pid"] == busy.pid and doc["asked_pid"] == backend
        assert doc["allocator"] == "jemalloc"
        assert any(
            s["variable"] == "MALLOC_CONF" and s["name"] == "narenas" and s["status"] == "in force"
            for s in doc["settings"]
        ), doc["settings"]
        code, out, _ = _cli("check", "--pid", str(backend))
    assert code == 0
    assert out.splitlines()[0] == (
        f"process {backend} is a PostgreSQL backend: its postmaster {busy.pid} is checked "
        "(a backend writes its title over its environment)"
    )
    assert f"process {busy.pid} (" in out and "malloc is jemalloc's" in out
