"""A private PostgreSQL server, reachable by the run that started it and nobody else.

Never a system cluster: the postmaster is started from its binary on a data directory
of its own, with the setup's environment (LD_PRELOAD and the allocator's knobs), which
every backend inherits through fork; the allocator is checked in a backend's
/proc/PID/maps before anything is measured.

Who can reach it: nobody over TCP (`listen_addresses = ''`); the socket lives in a 0700
directory of the server's user, and pg_hba.conf admits only the run's own role over it,
with a password made anew for every start (set in single-user mode before the server
accepts a connection) that clients read from 0600 files, never from a command line.
PostgreSQL refuses to run as root: a root-run harness hands the server to the `postgres`
user, and its state (data directory, socket) lives in a runtime directory of that user
(servers/runtime.py), while what people read (the rendered configuration, the server's
output, the client files) stays in the session directory under --out.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from mallocbench import allocators
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError
from mallocbench.servers import process, runtime
from mallocbench.servers.access import ServerUser, free_port, handed_to, write_private
from mallocbench.servers.cgroup.own import CpuCgroup, MemoryCgroup
from mallocbench.servers.lifetime import Lifetime, started
from mallocbench.servers.orphans import stop_signals
from mallocbench.servers.outcome import (
    SERVER_RECORD,
    ServerExit,
    ServerStartError,
    SettingNotTaken,
    log_tail,
    signal_name,
    write_record,
)
from mallocbench.servers.postgresql import settings as pg_settings
from mallocbench.servers.postgresql.build import PgBuild

SERVER_USER = "postgres"
ROLE = "mallocbench"
DATABASE = "sbtest"
# With no TCP listener the port only names the socket file (.s.PGSQL.<port>); a port
# nothing listens on makes "no TCP" checkable: a connection there is refused.
_SOCKET_NAME_MAX = len(".s.PGSQL.65535")
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux; leave room


def server_user() -> ServerUser | None:
    """The account the server runs as when mallocbench is root; None: as ourselves."""
    return handed_to(
        SERVER_USER,
        f"mallocbench runs as root and PostgreSQL refuses root: it runs its servers as "
        f"{SERVER_USER!r}",
        "postgresql-15",
    )


@dataclass
class PgConfig:
    """Everything that decides how one private PostgreSQL server is started."""

    cache_bytes: int
    allocator: Allocator
    knobs: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, object] = field(default_factory=dict)
    cpus: str | None = None
    max_connections: int = 200
    # PR_SET_THP_DISABLE for this server only, inherited by every backend.
    thp_disabled: bool = False
    memory_cgroup: MemoryCgroup | None = None
    cpu_cgroup: CpuCgroup | None = None


_runtimes: dict[int, runtime.RuntimeDir] = {}
_live: list[PgServer] = []


def _process_runtime(user: ServerUser) -> runtime.RuntimeDir:
    """This process's runtime directory for the postgres user's servers.

    Not runtime.process_default: that one belongs to the MariaDB servers' user, and
    one process may start servers of both families."""
    if user.uid not in _runtimes:
        _runtimes[user.uid] = runtime.RuntimeDir.create(f"pg{os.getpid()}", user.uid, user.gid)
        if len(_runtimes) == 1:
            atexit.register(_at_exit)
    return _runtimes[user.uid]


def _at_exit() -> None:
    # Registered after servers.process's own: runs first, so servers stop fast (not
    # with SIGTERM's smart shutdown) before their state directories go.
    for server in list(_live):
        server.stop(timeout=20)
    for directory in _runtimes.values():
        directory.remove()


class _Postmaster(subprocess.Popen[bytes]):
    """The postmaster as servers.process stops every tracked server (SIGTERM, on any
    exit path): for a postmaster SIGTERM is a smart shutdown, which waits for every
    client to leave, so a harness that dies with a session open would wait out its
    timeout and SIGKILL. It gets SIGINT, PostgreSQL's fast shutdown, instead."""

    def send_signal(self, sig: int) -> None:
        super().send_signal(signal.SIGINT if sig == signal.SIGTERM else sig)


def _become(user: ServerUser) -> Callable[[], None]:
    def drop() -> None:
        os.setgroups([])
        os.setgid(user.gid)
        os.setuid(user.uid)

    return drop


class PgServer(Lifetime):
    """One PostgreSQL server lifetime in `rundir`; a context manager, so always stopped."""

    def __init__(
        self,
        build: PgBuild,
        rundir: str | os.PathLike[str],
        config: PgConfig,
        runtime_dir: runtime.RuntimeDir | None = None,
    ) -> None:
        super().__init__(rundir, server_user(), runtime_dir)
        self.build = build
        self.config = config
        self.socket_dir = self._socket_dir()
        self.port = free_port()
        self.socket = self.socket_dir / f".s.PGSQL.{self.port}"
        self.tmpdir = self.statedir / "tmp"
        self.stdout_log = self.rundir / "server.out"  # we open it; the server inherits it
        self.kept_error_log = self.stdout_log
        self.error_log = self.stdout_log
        self.conf_copy = self.rundir / "postgresql.conf"  # for people; the server reads its own
        self.sysbench_options = self.rundir / "sysbench.cnf"
        self.client_env = self.rundir / "client.env"  # PGHOST=... for psql by hand
        self.record = self.rundir / SERVER_RECORD
        self.password = secrets.token_urlsafe(24)
        self.proc: subprocess.Popen[bytes] | None = None
        self.allocator_path: str | None = None
        self.server_version: str | None = None
        self.adjusted: list[str] = []
        self._stopping = False

    def runtime_default(self, user: ServerUser) -> runtime.RuntimeDir:
        return _process_runtime(user)

    def _socket_dir(self) -> Path:
        path = self.statedir / "sock"
        if len(str(path)) + 1 + _SOCKET_NAME_MAX <= _SOCKET_PATH_MAX:
            return path
        # Deep state directories overflow sun_path: a private temp dir (0700, handed over).
        return Path(tempfile.mkdtemp(prefix="mallocbench-pg-"))

    # --- settings ---------------------------------------------------------------------

    def settings(self) -> dict[str, str]:
        """postgresql.conf: the harness's settings, then the setup's (checked again here,
        the last step before text reaches the server)."""
        chosen = {
            "listen_addresses": "",
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "unix_socket_permissions": "0700",
            "max_connections": str(self.config.max_connections),
            "shared_buffers": f"{max(128, self.config.cache_bytes // 1024)}kB",
            # Like the InnoDB engine's settings: a benchmark data directory is disposable.
            "synchronous_commit": "off",
            "full_page_writes": "off",
            # Huge pages from hugetlbfs are in no process's PSS: the account needs them off.
            "huge_pages": "off",
            "logging_collector": "off",
            "log_destination": "stderr",
            "log_line_prefix": "%m [%p] ",
        }
        known = pg_settings.describe_config(self.build.bindir)
        for name, value in self.config.overrides.items():
            text = pg_settings.value_text(value)
            pg_settings.check_setting(name, text, known)
            chosen[name] = text
        return chosen

    def render_config(self) -> str:
        return pg_settings.render(self.settings())

    def environment(self) -> dict[str, str]:
        return process.allocator_environment(self.config.allocator, self.config.knobs)

    def command(self) -> list[str]:
        return process.pinned(
            [self.build.binary("postgres"), "-D", str(self.datadir)], self.config.cpus
        )

    # --- directories ------------------------------------------------------------------

    def prepare_rundir(self) -> None:
        # A setting the server would refuse stops here, before initdb or a copy.
        self.settings()
        try:
            for directory in (self.rundir, self.statedir, self.socket_dir, self.tmpdir):
                directory.mkdir(parents=True, exist_ok=True)
                os.chmod(directory, 0o700)
            if self.user is not None:
                for path in (self.statedir, self.socket_dir, self.tmpdir):
                    os.chown(path, self.user.uid, self.user.gid)
            self._write_credentials()
        except OSError as exc:
            raise self.unwritable(exc) from exc

    def _write_credentials(self) -> None:
        write_private(
            self.sysbench_options,
            f"pgsql-host={self.socket_dir}\npgsql-port={self.port}\npgsql-user={ROLE}\n"
            f"pgsql-password={self.password}\npgsql-db={DATABASE}\n",
        )
        write_private(
            self.client_env,
            f"PGHOST={self.socket_dir}\nPGPORT={self.port}\nPGUSER={ROLE}\n"
            f"PGPASSWORD={self.password}\nPGDATABASE={DATABASE}\n",
        )

    def _run_as_server(self, cmd: list[str], stdin: str | None = None) -> str:
        """A server tool (initdb, single-user postgres) as the server's user; its output."""
        out = subprocess.run(
            cmd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd="/",
            preexec_fn=_become(self.user) if self.user is not None else None,
        )
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
            raise ServerStartError(f"{Path(cmd[0]).name} failed: {tail}")
        return out.stdout

    def initialize_datadir(self) -> None:
        """An empty cluster whose only role is ours, with this start's password."""
        self.prepare_rundir()
        shutil.rmtree(self.datadir, ignore_errors=True)
        pwfile = self.statedir / "initdb.pw"
        write_private(pwfile, self.password + "\n", owner=self.user)
        try:
            self._run_as_server(
                [
                    self.build.binary("initdb"),
                    "-D",
                    str(self.datadir),
                    "-U",
                    ROLE,
                    "--auth=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ]
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def _write_server_files(self) -> None:
        """The configuration the server reads, in its data directory: each start's own."""
        text = self.render_config()
        self.conf_copy.write_text(text)
        for name, content in (
            ("postgresql.conf", text),
            ("pg_hba.conf", pg_settings.render_hba(ROLE)),
        ):
            write_private(self.datadir / name, content, owner=self.user)

    def _set_password(self) -> None:
        """This start's password, set before the server accepts any connection: the
        copy's own (from the load) is one nobody keeps."""
        self._run_as_server(
            [self.build.binary("postgres"), "--single", "-D", str(self.datadir), "postgres"],
            stdin=f"ALTER ROLE {ROLE} PASSWORD '{self.password}';\n",
        )

    # --- lifecycle --------------------------------------------------------------------

    def _in_child(self) -> Callable[[], None] | None:
        """Before exec: THP off, join the cgroups (as root), then become the server's user."""
        steps: list[Callable[[], None]] = []
        if self.config.thp_disabled:
            steps.append(process.disable_thp)
        for group in (self.config.memory_cgroup, self.config.cpu_cgroup):
            if group is not None:
                steps.append(group.join_self)
        if self.user is not None:
            steps.append(_become(self.user))
        return process.in_child(steps)

    def start(self, timeout: float = 120.0) -> None:
        if not (self.datadir / "PG_VERSION").is_file():
            raise MallocbenchError(f"no data directory at {self.datadir}: initialise or copy one")
        self.prepare_rundir()
        self._write_server_files()
        self._set_password()
        with open(self.stdout_log, "ab") as out:
            # A process group of its own: Ctrl-C stays off the server (the harness stops
            # it) and one killpg reaches the postmaster and every backend.
            self.proc = _Postmaster(
                self.command(),
                env=self.environment(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.statedir,
                process_group=0,
                preexec_fn=self._in_child(),
            )
        process.track(self.proc)
        _live.append(self)
        write_record(
            self.record,
            self.proc.pid,
            family="postgresql",
            binary=self.build.binary("postgres"),
            rundir=self.rundir,
            statedir=self.statedir,
            socket=self.socket,
        )
        self._stopping = False
        self.stopped_unless(lambda: self._wait_ready(timeout), self._check_started)

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                process.untrack(self.proc)
                raise ServerStartError(
                    f"server failed to start (exit code {self.proc.returncode}): "
                    f"{self._fatal_line()}; its output is in {self.stdout_log}"
                )
            if self.socket.exists():
                try:
                    self.connect(connect_timeout=2, dbname="postgres").close()
                    return
                except psycopg.OperationalError as exc:
                    last_error = str(exc).strip().splitlines()[0]
            time.sleep(0.05)
        raise ServerStartError(
            f"server not ready after {timeout:.0f}s ({last_error or 'no socket'}); "
            f"see {self.stdout_log}"
        )

    def _fatal_line(self) -> str:
        """The server's own reason, without its time stamp: its first FATAL or ERROR."""
        for line in log_tail(self.stdout_log, 60).splitlines():
            if "FATAL:" in line or "ERROR:" in line:
                return re.sub(r"^.*?(FATAL|ERROR):\s*", "", line).strip()
        return log_tail(self.stdout_log, 1) or "no output"

    def _check_started(self) -> None:
        """The allocator in a backend (what runs the queries), the version, and every
        setting of the configuration file applied."""
        assert self.proc is not None
        try:
            with self.connect(dbname="postgres") as conn:
                backend = int(str(_one(conn, "SELECT pg_backend_pid()")))
                self.allocator_path = allocators.verify(self.config.allocator, backend)
                allocators.verify(self.config.allocator, self.proc.pid)
                self.server_version = str(_one(conn, "SHOW server_version"))
                rejected = conn.execute(
                    "SELECT name, error FROM pg_file_settings"
                    " WHERE NOT applied AND error IS NOT NULL ORDER BY seqno"
                ).fetchall()
        except psycopg.Error as exc:
            raise ServerStartError(f"server started but its first query failed: {exc}") from exc
        if rejected:
            name, error = rejected[0]
            raise SettingNotTaken(
                f"the server started without the setting {name} ({error}); nothing is "
                "measured under a setup it does not run"
            )

    def connect(
        self, connect_timeout: float = 10, dbname: str = DATABASE, **kwargs: Any
    ) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=str(self.socket_dir),
            port=self.port,
            user=ROLE,
            password=self.password,
            dbname=dbname,
            connect_timeout=max(1, round(connect_timeout)),
            autocommit=True,
            **kwargs,
        )

    def query(
        self, sql: str, args: tuple[object, ...] | None = None, dbname: str = DATABASE
    ) -> list[tuple[object, ...]]:
        with self.connect(dbname=dbname) as conn:
            cur = conn.execute(sql.encode(), args)
            return list(cur.fetchall()) if cur.description else []

    def variables(self) -> dict[str, str]:
        """What the server runs with, by name (pg_settings), as SHOW prints each."""
        rows = self.query("SELECT name, current_setting(name) FROM pg_settings", dbname="postgres")
        return {str(name): str(value) for name, value in rows}

    def exit_info(self) -> ServerExit | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        return ServerExit(code, signal_name(code), self._stopping, False, log_tail(self.stdout_log))

    def stop(self, timeout: float = 60.0) -> ServerExit | None:
        """Fast shutdown, then immediate, then SIGKILL to the whole process group."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._stopping = True
            self._stop_running(timeout)
        process.untrack(self.proc)
        with contextlib.suppress(ValueError):
            _live.remove(self)
        with contextlib.suppress(FileNotFoundError):
            self.record.unlink()
        if self.socket_dir.parent != self.statedir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        return self.exit_info()

    def _stop_running(self, timeout: float) -> None:
        assert self.proc is not None
        # Fast shutdown, then immediate (orphans.stop_signals says why); SIGKILL below.
        for sig, wait in stop_signals("postgresql", timeout)[:-1]:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            try:
                self.proc.wait(max(1.0, wait))
                break
            except subprocess.TimeoutExpired:
                continue
        # Backends leave on the postmaster's death, but not at once: take the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(10)


def _one(conn: psycopg.Connection[Any], sql: str) -> object:
    row = conn.execute(sql.encode()).fetchone()
    if row is None:
        raise MallocbenchError(f"the server returned no row for {sql}")
    return row[0]


@contextlib.contextmanager
def running(
    build: PgBuild, rundir: Path, config: PgConfig, golden: Path | None = None
) -> Iterator[PgServer]:
    """A private server on a copy of `golden` (None: an empty cluster), stopped and its
    state removed on the way out."""
    server = PgServer(build, rundir, config)
    if golden is None:
        server.initialize_datadir()
    else:
        server.copy_datadir_from(golden)
    with started(server):
        yield server
