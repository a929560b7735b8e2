"""The server-side memory probe and THP control, against real private servers."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.memory.account import account
from mallocbench.probes import system
from mallocbench.probes.server import ServerMemoryProbe
from mallocbench.servers import engines
from mallocbench.servers.mariadb import ServerBuild, ServerConfig, running
from mallocbench.servers.process import disable_thp


def config(engine: str, **kw: object) -> ServerConfig:
    return ServerConfig(
        engine=engines.get(engine),
        cache_bytes=64 << 20,
        allocator=allocators.get("glibc"),
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.server
def test_innodb_probe_reads_memory_used_and_performance_schema(
    build: ServerBuild, tmp_path: Path
) -> None:
    cfg = config("innodb", overrides={"performance_schema": "ON"}, thp_disabled=True)
    with running(build, tmp_path, cfg) as server:
        with ServerMemoryProbe(server) as probe:
            first, second = probe.read(), probe.read()
        for reading in (first, second):
            assert reading["server_memory_used_bytes"] > 1 << 20
            assert reading["innodb_buffer_pool_data_bytes"] > 0
            assert reading["pfs_memory_bytes"] > 0
        split = account(server, "glibc")
        # The account adds up: accounted + unaccounted is the RSS it was taken against.
        assert split["rss_accounted_bytes"] + split["rss_unaccounted_bytes"] == pytest.approx(
            split["rss_at_accounting_bytes"]
        )
        assert split["rss_accounted_bytes"] > 0 and split["heap_rss_bytes"] > 0
        assert split["pfs_memory_bytes"] > 0


@pytest.mark.server
def test_myrocks_probe_finds_the_block_cache(build: ServerBuild, tmp_path: Path) -> None:
    with running(build, tmp_path, config("myrocks")) as server:
        server.query("CREATE DATABASE test")
        server.query("CREATE TABLE test.t (id INT PRIMARY KEY, v VARCHAR(100)) ENGINE=ROCKSDB")
        server.query("INSERT INTO test.t SELECT seq, REPEAT('x', 100) FROM test.seq_1_to_20000")
        server.query("SET GLOBAL rocksdb_force_flush_memtable_now = 1")
        server.query("SELECT COUNT(*), SUM(LENGTH(v)) FROM test.t")
        with ServerMemoryProbe(server) as probe:
            reading = probe.read()
        assert reading["rocksdb_block_cache_usage_bytes"] > 0
        assert "rocksdb_memtable_bytes" in reading and "pfs_memory_bytes" not in reading


@pytest.mark.server
def test_probe_of_a_dead_server_returns_nothing(build: ServerBuild, tmp_path: Path) -> None:
    with running(build, tmp_path, config("innodb")) as server:
        probe = ServerMemoryProbe(server)
        assert probe.read()
        server.stop()
        assert probe.read() == {} and probe.read() == {}
        assert account(server, "glibc") == {}


def test_thp_never_is_set_on_the_started_process_alone() -> None:
    # Checked on a plain program: MariaDB 10.11.7+ disables THP for itself anyway.
    status = subprocess.run(
        ["cat", "/proc/self/status"], capture_output=True, text=True, preexec_fn=disable_thp
    ).stdout
    assert re.search(r"^THP_enabled:\s*0$", status, re.MULTILINE)
    assert system.process_thp_disabled(os.getpid()) is False


def test_system_thp_mode_is_restored() -> None:
    previous = system.thp_mode()
    if previous is None:
        pytest.skip("this kernel has no transparent huge pages")
    other = "never" if previous != "never" else "madvise"
    if not os.access(system.THP_ENABLED, os.W_OK):
        with (
            pytest.raises(MallocbenchError, match="is not writable"),
            system.system_thp_mode(other),
        ):
            pass
        return
    with system.system_thp_mode(other):
        assert system.thp_mode() == other
    assert system.thp_mode() == previous
    with system.system_thp_mode(previous):  # already so: nothing is written
        assert system.thp_mode() == previous
