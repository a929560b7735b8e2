from __future__ import annotations

import os
import signal
import socket
import stat
from pathlib import Path

import pytest

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers import engines
from mallocbench.servers.mariadb import (
    PrivateServer,
    ServerBuild,
    ServerConfig,
    running,
)
from mallocbench.servers.outcome import ServerStartError

INSTALLED = [a.name for a in allocators.builtin_allocators() if a.available]


def config(allocator: str = "glibc", engine: str = "innodb", **kw: object) -> ServerConfig:
    return ServerConfig(
        engine=engines.get(engine),
        cache_bytes=64 << 20,
        allocator=allocators.get(allocator),
        **kw,  # type: ignore[arg-type]
    )


def test_config_rendering_merges_defaults_engine_and_overrides(tmp_path: Path) -> None:
    server = PrivateServer(
        ServerBuild("/usr/sbin/mariadbd", None, "10.11", "mariadb"),
        tmp_path,
        config(
            "jemalloc",
            "myrocks",
            overrides={"rocksdb_block_cache_size": "1G", "sort_buffer_size": "2M"},
            knobs={"MALLOC_CONF": "narenas:4"},
        ),
    )
    settings = server.settings()
    assert settings["skip-networking"] == "ON" and "port" not in settings
    assert settings["socket"].startswith(str(server.statedir))
    assert settings["plugin-load-add"] == "ha_rocksdb.so"
    assert settings["rocksdb_block_cache_size"] == "1G"  # the override wins over the engine
    assert settings["sort_buffer_size"] == "2M"
    text = server.render_config()
    assert text.splitlines()[1] == "[mysqld]" and "datadir=" in text
    env = server.environment()
    assert env["LD_PRELOAD"].endswith("libjemalloc.so.2") and env["MALLOC_CONF"] == "narenas:4"


def test_environment_drops_inherited_allocator_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    server = PrivateServer(
        ServerBuild("/usr/sbin/mariadbd", None, "10.11", "mariadb"), tmp_path, config()
    )
    env = server.environment()
    assert "LD_PRELOAD" not in env and "MALLOC_ARENA_MAX" not in env


def test_long_rundir_gets_a_short_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    server = PrivateServer(
        ServerBuild("/usr/sbin/mariadbd", None, "10.11", "mariadb"), deep, config()
    )
    assert len(str(server.socket)) <= 100


@pytest.mark.server
@pytest.mark.parametrize("allocator", INSTALLED)
def test_real_server_runs_under_each_allocator(
    build: ServerBuild, tmp_path: Path, allocator: str
) -> None:
    with running(build, tmp_path / allocator, config(allocator)) as server:
        expected = allocators.get(allocator)
        assert server.allocator_path is not None
        if expected.is_builtin:
            assert "libc.so" in server.allocator_path
        else:
            assert expected.is_mapped_path(server.allocator_path)
        assert allocators.detect(server.pid).name == allocator
        assert stat.S_IMODE(os.stat(server.datadir).st_mode) == 0o700
        assert server.query("SELECT 1") == [(1,)]
    exit_info = server.exit_info()
    assert exit_info is not None and exit_info.stopped_by_us and exit_info.status == "ok"


@pytest.mark.server
def test_server_has_its_own_process_group_but_shares_the_harness_session(
    build: ServerBuild, tmp_path: Path
) -> None:
    """A terminal's Ctrl-C must not reach the server (its own process group), and the
    scheduler must see its threads beside the clients' (the harness's session, so the
    same autogroup): a session of its own starved it for seconds at turn changes."""
    with running(build, tmp_path, config()) as server:
        assert os.getpgid(server.pid) == server.pid != os.getpgid(0)
        assert os.getsid(server.pid) == os.getsid(0)
        ours = Path("/proc/self/autogroup")
        if ours.exists():  # kernels with CONFIG_SCHED_AUTOGROUP
            # Empty in both for the root autogroup (CI's sandbox runs there); a session
            # of its own would have given the server a named one.
            theirs = Path(f"/proc/{server.pid}/autogroup").read_text()
            assert theirs.split()[:1] == ours.read_text().split()[:1]


@pytest.mark.server
def test_myrocks_engine_is_loaded(build: ServerBuild, tmp_path: Path) -> None:
    with running(build, tmp_path, config("jemalloc", "myrocks")) as server:
        engines_rows = dict((r[0], r[1]) for r in server.query("SHOW ENGINES"))
        assert engines_rows.get("ROCKSDB") in ("YES", "DEFAULT")
        cache = server.query("SELECT @@rocksdb_block_cache_size")[0][0]
        assert int(cache) == 64 << 20  # type: ignore[call-overload]


@pytest.mark.server
def test_killed_server_is_reported_as_crash_with_signal(build: ServerBuild, tmp_path: Path) -> None:
    with running(build, tmp_path, config()) as server:
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait(10)  # type: ignore[union-attr]
        exit_info = server.exit_info()
        assert exit_info is not None
        assert exit_info.signal == "SIGKILL" and exit_info.status == "crashed"
        assert not exit_info.stopped_by_us


@pytest.mark.server
def test_port_in_use_is_refused(build: ServerBuild, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = PrivateServer(build, tmp_path, config(port=port))
        server.initialize_datadir()
        with pytest.raises(MallocbenchError, match=f"port {port} is in use"):
            server.start()


@pytest.mark.server
def test_bad_config_fails_with_the_error_log_line(build: ServerBuild, tmp_path: Path) -> None:
    server = PrivateServer(build, tmp_path, config(overrides={"no_such_option": "1"}))
    server.initialize_datadir()
    with pytest.raises(ServerStartError, match="no_such_option"):
        server.start(timeout=60)
    assert not server.alive()


def test_a_server_killed_as_its_start_ends_is_a_failed_start(
    build: ServerBuild, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between answering and the first checks: a one-line start failure (which the
    session records), never a connection error escaping as a traceback."""
    verify = allocators.verify

    def killed_first(allocator: allocators.Allocator, pid: int) -> str:
        os.kill(pid, signal.SIGKILL)
        return verify(allocator, pid)

    monkeypatch.setattr(allocators, "verify", killed_first)
    server = PrivateServer(build, tmp_path, config())
    server.initialize_datadir()
    with pytest.raises(ServerStartError, match=r"exited just after it started \(exit code -9\)"):
        server.start(timeout=60)
    assert not server.alive()
