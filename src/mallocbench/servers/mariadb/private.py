"""A private MariaDB/MySQL server, usable by the run that started it and nobody else.

Never the system instance: the server is started directly from its binary with a
rendered my.cnf (`--defaults-file`, so /etc/mysql is not read) and the setup's
environment (LD_PRELOAD + allocator knobs), and the allocator is checked in
/proc/PID/maps before anything is measured.

Who can reach it: by default nobody over TCP (`skip-networking`); the socket lives in
the server's state directory, mode 0700 and owned by the server's user, so only that
user and root get to it. Every start sets a fresh random root password (an init file read
before the first connection is accepted) that clients read from 0600 files, never
from a command line; with an explicit `port` the server also listens on 127.0.0.1,
behind that password. FILE statements are confined to the state directory's
`files/` (`secure_file_priv`), and when mallocbench runs as root the server drops to the
unprivileged `mysql` user.

Two directories: the session directory (`rundir`, under `--out`) holds what people and
the harness read, my.cnf (mysqld reads it as root, before dropping privileges), the
client files, the server's stdout and a copy of its error log; the state directory
holds what the server itself must reach. Run as root, that is a directory of the
server's user in a runtime directory (servers/runtime.py), so `--out` may be anywhere,
a 0700 home included; otherwise it is the session directory itself.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers import process, runtime
from mallocbench.servers.access import chown_tree, port_in_use, write_private
from mallocbench.servers.cgroup.oom import OomWatch
from mallocbench.servers.lifetime import Lifetime, started
from mallocbench.servers.mariadb.access import server_user
from mallocbench.servers.mariadb.build import ServerBuild, initialise_command
from mallocbench.servers.mariadb.config import (
    ServerConfig,
    in_child,
    init_sql,
    mysqld_settings,
    render_mycnf,
    server_command,
    server_environment,
    size_value,
)
from mallocbench.servers.mariadb.outcome import logged_about, start_failure_summary
from mallocbench.servers.outcome import (
    SERVER_RECORD,
    ServerExit,
    ServerStartError,
    SettingNotTaken,
    log_tail,
    signal_name,
    write_record,
)
from mallocbench.servers.taken import Plugin, adjusted, not_taken

_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux; leave room


class PrivateServer(Lifetime):
    """One server lifetime in `rundir`; use as a context manager so it is always stopped."""

    def __init__(
        self,
        build: ServerBuild,
        rundir: str | os.PathLike[str],
        config: ServerConfig,
        runtime_dir: runtime.RuntimeDir | None = None,
    ):
        # mysqld resolves a relative datadir against its basedir: rundir made absolute.
        super().__init__(rundir, server_user(), runtime_dir)
        self.build = build
        self.config = config
        self.cnf_path = self.rundir / "my.cnf"
        self.error_log = self.statedir / "error.log"
        # Where the error log is kept once the server stops (the state goes with the session).
        self.kept_error_log = self.rundir / "error.log"
        self.stdout_log = self.rundir / "server.out"  # we open it; the server inherits the fd
        self.tmpdir = self.statedir / "tmp"
        self.files_dir = self.statedir / "files"  # the only place FILE statements may touch
        self.init_file = self.statedir / "init.sql"
        # The shim's control file: in the server's own directory, where it may answer.
        self.record_control = self.statedir / "mbrecord.control"
        # For people: `mariadb --defaults-file=client.cnf` reaches this server.
        self.client_cnf = self.rundir / "client.cnf"
        self.sysbench_options = self.rundir / "sysbench.cnf"
        self.record = self.rundir / SERVER_RECORD
        self.socket = self._socket_path()
        self.port = config.port
        self.password = secrets.token_urlsafe(24)
        self.proc: subprocess.Popen[bytes] | None = None
        self.allocator_path: str | None = None
        self.server_version: str | None = None
        # The setup's settings the server runs with another value of (servers.taken).
        self.adjusted: list[str] = []
        self._stopping = False
        self._oom_watch: OomWatch | None = None

    # --- paths and config -------------------------------------------------------------------

    def _socket_path(self) -> Path:
        path = self.statedir / "mysqld.sock"
        if len(str(path)) <= _SOCKET_PATH_MAX:
            return path
        # Deep run directories overflow sun_path; keep the socket in a private temp dir
        # (mkdtemp makes it 0700; it is handed to the server's user with the rest).
        return Path(tempfile.mkdtemp(prefix="mallocbench-")) / "mysqld.sock"

    def settings(self) -> dict[str, str]:
        return mysqld_settings(
            self.config,
            datadir=self.datadir,
            socket=self.socket,
            statedir=self.statedir,
            error_log=self.error_log,
            tmpdir=self.tmpdir,
            files_dir=self.files_dir,
            init_file=self.init_file,
            port=self.port,
            user=self.user.name if self.user is not None else None,
        )

    def render_config(self) -> str:
        return render_mycnf(self.settings())

    def _write_credentials(self) -> None:
        write_private(self.init_file, init_sql(self.password), owner=self.user)
        write_private(
            self.client_cnf,
            f"[client]\nuser=root\npassword={self.password}\nsocket={self.socket}\n",
        )
        write_private(
            self.sysbench_options,
            f"mysql-socket={self.socket}\nmysql-user=root\nmysql-password={self.password}\n",
        )

    def environment(self) -> dict[str, str]:
        return server_environment(self.config, self.build.version, str(self.record_control))

    def command(self) -> list[str]:
        return server_command(self.build.mysqld, str(self.cnf_path), self.config.cpus)

    # --- datadir --------------------------------------------------------------------------

    def prepare_rundir(self) -> None:
        try:
            for directory in (self.rundir, self.statedir, self.tmpdir, self.files_dir):
                directory.mkdir(parents=True, exist_ok=True)
                os.chmod(directory, 0o700)
            self.cnf_path.write_text(self.render_config())
            self._write_credentials()
            # The socket's own directory when sun_path forced it out of the state directory.
            if self.socket.parent != self.statedir and self.user is not None:
                os.chown(self.socket.parent, self.user.uid, self.user.gid)
            if self.user is not None:
                # Only the state directory is handed over: the session directory, in the
                # user's --out, stays root's and the server never enters it.
                for path in (self.statedir, self.tmpdir, self.files_dir):
                    os.chown(path, self.user.uid, self.user.gid)
                if self.error_log.exists():
                    os.chown(self.error_log, self.user.uid, self.user.gid)
        except OSError as exc:
            raise self.unwritable(exc) from exc

    def initialize_datadir(self) -> None:
        """Create an empty system datadir (mariadb-install-db, or mysqld --initialize)."""
        self.prepare_rundir()
        if self.datadir.exists():
            shutil.rmtree(self.datadir)
        cmd = initialise_command(self.build, self.datadir, self.tmpdir)
        if self.user is not None:
            cmd.append(f"--user={self.user.name}")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
            raise ServerStartError(f"initialising the datadir failed: {tail}")
        os.chmod(self.datadir, 0o700)
        chown_tree(self.datadir, self.user)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        if self.config.port is not None and port_in_use(self.config.port):
            raise MallocbenchError(
                f"port {self.config.port} is in use: choose another server.port in the "
                "experiment, or leave it out to pick a free one"
            )
        if not self.datadir.is_dir():
            raise MallocbenchError(f"no datadir at {self.datadir}: initialise or copy one first")
        self.error_log.write_text("")
        self.prepare_rundir()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        with open(self.stdout_log, "ab") as out:
            # A process group of its own keeps a terminal's Ctrl-C off the server (the
            # harness stops it) and lets one killpg take wrappers along. Not a session
            # of its own: Linux schedules each session as one group (autogroup), and
            # a server in its own group beside its clients' group was starved for 1-2
            # s at a time when clients taking turns changed hands (scheduling delays
            # of 2,000 ms in perf sched; a turn in ten ran late, four times the paired
            # turns' variance with four servers).
            self.proc = subprocess.Popen(
                self.command(),
                env=self.environment(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                process_group=0,
                preexec_fn=in_child(self.config),
            )
        process.track(self.proc)
        self._oom_watch = OomWatch.start(self.proc.pid)
        write_record(
            self.record,
            self.proc.pid,
            family="mariadb",
            binary=self.build.mysqld,
            rundir=self.rundir,
            statedir=self.statedir,
            socket=self.socket,
        )
        self._stopping = False
        self.stopped_unless(
            lambda: self._wait_ready(timeout), self._check_started, self._check_taken
        )

    def _check_started(self) -> None:
        """The allocator in the process and the server's version, read once it answers.

        The server can die between answering and these reads (killed, OOM-killed): that
        is a failed start, said in one line, not a connection error escaping."""
        assert self.proc is not None
        try:
            self.allocator_path = allocators.verify(self.config.allocator, self.proc.pid)
            with self.connect() as conn, conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                row = cur.fetchone()
                self.server_version = str(row[0]) if row else "unknown"
        except (pymysql.err.MySQLError, OSError, MallocbenchError) as exc:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
            if self.proc.returncode is not None:
                process.untrack(self.proc)
                raise ServerStartError(
                    f"server exited just after it started (exit code {self.proc.returncode}); "
                    f"error log {self.kept_error_log}"
                ) from exc
            if isinstance(exc, MallocbenchError):
                raise
            raise ServerStartError(f"server started but its first query failed: {exc}") from exc

    def _check_taken(self) -> None:
        """Fail the start when the server runs without a setting it was given."""
        try:
            variables = {str(k): str(v) for k, v in self.query("SHOW GLOBAL VARIABLES")}
            rows = self.query(
                "SELECT PLUGIN_NAME, PLUGIN_LIBRARY, PLUGIN_STATUS FROM information_schema.PLUGINS"
            )
        except pymysql.err.MySQLError as exc:
            raise ServerStartError(
                f"server started but reading its settings failed: {exc}"
            ) from exc
        plugins = [Plugin(str(n), str(lib) if lib else None, str(st)) for n, lib, st in rows]
        asked = {k: size_value(v) for k, v in self.config.overrides.items()}
        self.adjusted = adjusted(asked, variables)
        problems = not_taken(self.settings(), variables, plugins)
        if not problems:
            return
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        said = logged_about(self.error_log, first.word)
        raise SettingNotTaken(
            f"the server started without a setting it was given, {first.text}{more}"
            + (f" (its error log: {said})" if said else "")
            + "; nothing is measured under a setup it does not run"
        )

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                process.untrack(self.proc)
                summary = start_failure_summary(self.error_log, self.stdout_log)
                raise ServerStartError(
                    f"server failed to start (exit code {self.proc.returncode}); "
                    f"error log {self.kept_error_log}:\n{summary}"
                )
            if self.socket.exists():
                try:
                    self.connect(connect_timeout=2).close()
                    return
                except pymysql.err.MySQLError as exc:
                    last_error = str(exc)
            time.sleep(0.1)
        raise ServerStartError(
            f"server not ready after {timeout:.0f}s ({last_error or 'no socket'}); "
            f"see {self.kept_error_log}"
        )

    def connect(self, connect_timeout: float = 10, **kwargs: Any) -> pymysql.Connection:
        return pymysql.connect(
            unix_socket=str(self.socket),
            user="root",
            password=self.password,
            connect_timeout=connect_timeout,
            autocommit=True,
            **kwargs,
        )

    def query(self, sql: str, args: tuple[object, ...] | None = None) -> list[tuple[object, ...]]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def exit_info(self) -> ServerExit | None:
        """None while running; otherwise how it ended (crash, OOM kill or our stop)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        sig = signal_name(code)
        oom = (
            sig == "SIGKILL"
            and not self._stopping
            and self._oom_watch is not None
            and self._oom_watch.killed(code)
        )
        return ServerExit(
            returncode=code,
            signal=sig,
            stopped_by_us=self._stopping,
            oom=oom,
            log_tail=log_tail(self.error_log),
        )

    def stop(self, timeout: float = 120.0) -> ServerExit | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._stopping = True
            process.terminate(self.proc, timeout)
        else:
            process.untrack(self.proc)
        with contextlib.suppress(FileNotFoundError):
            self.record.unlink()
        if self.socket.parent != self.statedir:
            # The private temp dir a deep state directory needed for its socket.
            shutil.rmtree(self.socket.parent, ignore_errors=True)
        self._keep_error_log()
        exit_info = self.exit_info()
        if self._oom_watch is not None:
            self._oom_watch.close()  # after exit_info: it may still read the kernel log
        return exit_info

    def _keep_error_log(self) -> None:
        if self.error_log != self.kept_error_log:
            with contextlib.suppress(OSError):
                shutil.copyfile(self.error_log, self.kept_error_log)


@contextlib.contextmanager
def running(build: ServerBuild, rundir: Path, config: ServerConfig) -> Iterator[PrivateServer]:
    """Start a fresh private server on an empty datadir; stop it on the way out."""
    server = PrivateServer(build, rundir, config)
    server.initialize_datadir()
    with started(server):
        yield server
