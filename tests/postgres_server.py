"""A private PostgreSQL 15 server for the tests: its own datadir, port and socket.

`make test` installs Debian's postgresql-15; nothing here touches its "main" cluster or
the default port. The server listens on 127.0.0.1 only and trusts only its own test
user (plus a password user, for the authentication tests); it is stopped and its
datadir removed on the way out, also when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from mallocbench.probes import process as proc_probe

TEST_USER = "bench"
PASSWORD_USER = "secretive"
PASSWORD = "pw-never-printed-7f3a"


@dataclass
class PostgresServer:
    host: str
    port: int
    database: str

    def url(self, database: str | None = None, user: str = TEST_USER) -> str:
        return f"postgresql://{user}@{self.host}:{self.port}/{database or self.database}"

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.url("postgres"), autocommit=True)

    def create_database(self) -> str:
        """A fresh empty database: a test that uses it sees no other test's runs."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bin_dir() -> Path:
    """The PostgreSQL server binaries: Debian keeps them off PATH, per major version."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    initdb = shutil.which("initdb")
    if initdb is not None:
        return Path(initdb).parent
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: `make test` installs "
        "postgresql-15 (bash scripts/install-deps.sh postgresql-15)"
    )


def _server_user() -> str | None:
    """Whom to run the server as: PostgreSQL refuses root; None means ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root, but there is no postgres or nobody user to run as")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(user: str | None, *args: str | Path) -> None:
    command = [str(a) for a in args]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/")
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")


def _configure(datadir: Path, port: int, socket_dir: Path) -> None:
    with (datadir / "postgresql.conf").open("a") as conf:
        conf.write(
            "\nlisten_addresses = '127.0.0.1'\n"
            f"port = {port}\n"
            f"unix_socket_directories = '{socket_dir}'\n"
            "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            "shared_buffers = 32MB\nmax_connections = 60\n"
        )
    # Only the test users, only from this machine; everyone else is rejected.
    (datadir / "pg_hba.conf").write_text(
        f"local all {TEST_USER} trust\n"
        f"host all {TEST_USER} 127.0.0.1/32 trust\n"
        f"host all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n"
    )


PREFIX = "mallocbench-pg-"
OWNER_FILE = "owner.pid"  # the test process that started the server in this directory


def sweep_orphans(binaries: Path, user: str | None) -> list[Path]:
    """Stop and remove the servers of test sessions that died without cleaning up.

    A SIGKILLed pytest cannot run its fixture's finally, so its server would stay up,
    holding memory and a port, until the machine restarts. A directory whose owner is
    alive belongs to a test session running now and is left alone.
    """
    swept = []
    for base in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            owner = int((base / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = None
        if owner is not None and proc_probe.alive(owner):
            continue
        if owner is None and time.time() - base.stat().st_mtime < 3600:
            continue  # no owner yet: a session may be creating it right now
        if (base / "data" / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                _run(user, binaries / "pg_ctl", "-D", base / "data", "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)
        swept.append(base)
    return swept


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """initdb, start, create a database, yield; then stop and remove, whatever happened."""
    binaries = bin_dir()
    user = _server_user()
    sweep_orphans(binaries, user)
    base = Path(tempfile.mkdtemp(prefix=PREFIX))
    (base / OWNER_FILE).write_text(str(os.getpid()))
    datadir, socket_dir, log = base / "data", base / "sock", base / "server.log"
    socket_dir.mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (base, socket_dir):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    started = False
    try:
        _run(user, binaries / "initdb", "-D", datadir, "-U", TEST_USER, "-A", "trust", "-E", "UTF8")
        port = _free_port()
        _configure(datadir, port, socket_dir)
        _run(user, binaries / "pg_ctl", "-D", datadir, "-l", log, "-w", "-t", "60", "start")
        started = True
        server = PostgresServer("127.0.0.1", port, "mallocbench")
        with server.admin() as conn:
            conn.execute('CREATE DATABASE "mallocbench"')
            conn.execute(f"CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}'")
        yield server
    finally:
        if started:
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                _run(user, binaries / "pg_ctl", "-D", datadir, "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)
