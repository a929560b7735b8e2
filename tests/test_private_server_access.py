"""A private server is usable by the run that started it and nobody else.

The attack these tests replay: another local user reaches the run's server (socket or
TCP), logs in as root and writes files as the server's user, e.g. `SELECT ... INTO
OUTFILE`. They run real servers and try it as `nobody`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

import psutil
import pymysql
import pytest

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers import engines
from mallocbench.servers.access import free_port
from mallocbench.servers.mariadb import (
    SERVER_USER,
    PrivateServer,
    ServerBuild,
    ServerConfig,
    running,
)
from mallocbench.workloads.sysbench import Sysbench

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


def config(**kw: object) -> ServerConfig:
    return ServerConfig(
        engine=engines.get("innodb"),
        cache_bytes=64 << 20,
        allocator=allocators.get("glibc"),
        **kw,  # type: ignore[arg-type]
    )


def as_nobody(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def mariadb_client() -> str:
    client = shutil.which("mariadb") or shutil.which("mysql")
    assert client, "the mariadb client comes with mariadb-server"
    return client


def test_socket_only_by_default_and_tcp_only_on_loopback(tmp_path: Path) -> None:
    build = ServerBuild("/usr/sbin/mariadbd", None, "10.11", "mariadb")
    server = PrivateServer(build, tmp_path / "a", config())
    settings = server.settings()
    assert settings["skip-networking"] == "ON"
    assert "port" not in settings and "bind-address" not in settings
    assert settings["secure-file-priv"] == str(server.statedir / "files")
    assert Path(settings["socket"]).parent == server.statedir
    tcp = PrivateServer(build, tmp_path / "b", config(port=free_port())).settings()
    assert "skip-networking" not in tcp and tcp["bind-address"] == "127.0.0.1"


def test_credentials_are_private_files_never_in_my_cnf(tmp_path: Path) -> None:
    server = PrivateServer(
        ServerBuild("/usr/sbin/mariadbd", None, "10.11", "mariadb"), tmp_path / "r", config()
    )
    server.prepare_rundir()
    for path in (server.init_file, server.client_cnf, server.sysbench_options):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert server.password in path.read_text()
    assert server.password not in server.cnf_path.read_text()
    assert stat.S_IMODE(server.rundir.stat().st_mode) == 0o700
    command = Sysbench(str(server.sysbench_options), 1, 10, "InnoDB")._command(None, "x.lua", 1)
    assert not any(server.password in part for part in command)


def test_injected_option_never_reaches_my_cnf(tmp_path: Path, integrity_figures) -> None:
    integrity_figures.add("faults injected")
    server = PrivateServer(
        ServerBuild("/usr/sbin/mariadbd", None, "10.11", "mariadb"),
        tmp_path,
        config(overrides={"sort_buffer_size": "2M\ninit_file=/tmp/evil.sql"}),
    )
    with pytest.raises(MallocbenchError, match="sort_buffer_size"):
        server.render_config()


@pytest.mark.server
@needs_root
def test_other_users_cannot_log_in_or_write_files(
    build: ServerBuild, tmp_path: Path, integrity_figures
) -> None:
    with running(build, tmp_path / "srv", config()) as server:
        proc = psutil.Process(server.pid)
        assert proc.uids().real == pwd.getpwnam(SERVER_USER).pw_uid
        # No TCP listener at all: nothing to reach from another user or host.
        listening = [c for c in proc.net_connections(kind="inet") if c.status == "LISTEN"]
        assert listening == []

        integrity_figures.add("faults injected")
        attempt = as_nobody(
            mariadb_client(), f"--socket={server.socket}", "-uroot", "-e", "SELECT 1"
        )
        assert attempt.returncode != 0
        assert "Permission denied" in attempt.stderr or "Can't connect" in attempt.stderr

        # Even the run's own root account cannot write outside the run directory.
        outside = tmp_path / "outside.txt"
        with pytest.raises(pymysql.err.MySQLError, match="secure-file-priv"):
            server.query(f"SELECT 'x' INTO OUTFILE '{outside}'")
        assert not outside.exists()
        inside = server.files_dir / "ok.txt"
        server.query(f"SELECT 'x' INTO OUTFILE '{inside}'")
        assert inside.stat().st_uid == pwd.getpwnam(SERVER_USER).pw_uid


@pytest.mark.server
@needs_root
def test_tcp_needs_this_starts_random_password(
    build: ServerBuild, tmp_path: Path, integrity_figures
) -> None:
    port = free_port()
    with running(build, tmp_path / "srv", config(port=port)) as server:
        listening = [
            c.laddr.ip
            for c in psutil.Process(server.pid).net_connections(kind="inet")
            if c.status == "LISTEN"
        ]
        assert listening == ["127.0.0.1"]
        integrity_figures.add("faults injected", 2)
        for password in ("", "root"):
            attempt = as_nobody(
                mariadb_client(),
                "--no-defaults",
                "-h127.0.0.1",
                f"-P{port}",
                "-uroot",
                f"--password={password}",
                "-e",
                "SELECT 'x' INTO OUTFILE '/tmp/mallocbench-should-not-exist'",
            )
            assert attempt.returncode != 0 and "Access denied" in attempt.stderr
        assert not Path("/tmp/mallocbench-should-not-exist").exists()
        # The run itself gets in, and so does a person with the run's client.cnf.
        assert server.query("SELECT 1") == [(1,)]
        mine = subprocess.run(
            [mariadb_client(), f"--defaults-file={server.client_cnf}", "-e", "SELECT 7"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert mine.returncode == 0 and "7" in mine.stdout


@pytest.mark.server
def test_two_starts_get_two_passwords(build: ServerBuild, tmp_path: Path) -> None:
    first = PrivateServer(build, tmp_path / "a", config())
    first.initialize_datadir()
    with first:
        first.start()
        first_password = first.password
    # A second server on the same session directory finds the first one's datadir.
    second = PrivateServer(build, tmp_path / "a", config())
    assert second.password != first_password and second.datadir == first.datadir
    try:
        with second:
            second.start()
            with pytest.raises(pymysql.err.OperationalError, match="Access denied"):
                pymysql.connect(
                    unix_socket=str(second.socket), user="root", password=first_password
                ).close()
            assert second.query("SELECT 1") == [(1,)]
    finally:
        second.discard_state()
