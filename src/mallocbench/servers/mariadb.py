"""A private MariaDB/MySQL server: own datadir, socket, 127.0.0.1 and a free port.

Never the system instance: the server is started directly from its binary with a
rendered my.cnf (`--defaults-file`, so /etc/mysql is not read) and the setup's
environment (LD_PRELOAD + allocator knobs), and the allocator is checked in
/proc/PID/maps before anything is measured.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from mallocbench import allocators
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError
from mallocbench.servers import process
from mallocbench.servers.engines import Engine

SERVER_BINARIES = ("mariadbd", "mysqld")
# Environment variables that would change the allocator or its behaviour behind our back.
_ALLOCATOR_ENV = re.compile(
    r"^(LD_PRELOAD|MALLOC_|GLIBC_TUNABLES|JE_MALLOC_CONF|TCMALLOC_|HEAPPROFILE|MIMALLOC_)"
)
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux; leave room


class ServerStartError(MallocbenchError):
    """The server did not become ready; the message carries the error log's last lines."""


@dataclass(frozen=True)
class ServerBuild:
    """A mysqld build: the binary, its datadir initialiser and its version."""

    mysqld: str
    install_db: str | None
    version: str
    flavor: str  # "mariadb" or "mysql"
    basedir: str | None = None

    @property
    def label(self) -> str:
        return f"{self.flavor} {self.version}"


def _first_existing(paths: list[Path]) -> str | None:
    return next((str(p) for p in paths if p.is_file() and os.access(p, os.X_OK)), None)


def find_build(basedir: str | None = None) -> ServerBuild:
    """Locate mysqld in a basedir (any build), or the packaged MariaDB when none is given."""
    if basedir:
        base = Path(basedir).expanduser()
        if not base.is_dir():
            raise MallocbenchError(
                f"server basedir {basedir!r} does not exist: give the directory that holds "
                "bin/mysqld (or bin/mariadbd, sbin/mariadbd)"
            )
        dirs = [base / "bin", base / "sbin", base / "libexec", base]
        mysqld = _first_existing([d / b for d in dirs for b in SERVER_BINARIES])
        install_db = _first_existing(
            [
                d / n
                for d in (base / "scripts", base / "bin", base)
                for n in ("mariadb-install-db", "mysql_install_db")
            ]
        )
        if mysqld is None:
            raise MallocbenchError(
                f"no mariadbd or mysqld in {basedir}/bin, /sbin or /libexec: "
                "point basedir at a server installation"
            )
    else:
        mysqld = _first_existing(
            [
                Path(d) / b
                for d in ("/usr/sbin", "/usr/bin", "/usr/local/bin")
                for b in SERVER_BINARIES
            ]
        )
        install_db = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if mysqld is None:
            raise MallocbenchError(
                "no MariaDB server found: run `make setup` (installs mariadb-server) or "
                "set server.basedir in the experiment"
            )
    version_text = subprocess.run(
        [mysqld, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    match = re.search(r"Ver\s+(\S+)", version_text)
    version = match.group(1) if match else "unknown"
    flavor = "mariadb" if "mariadb" in version_text.lower() else "mysql"
    return ServerBuild(mysqld, install_db, version, flavor, basedir)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _oom_kills() -> int | None:
    """The cgroup's OOM-kill counter, to tell an OOM kill from any other SIGKILL."""
    try:
        rel = Path("/proc/self/cgroup").read_text().strip().split("::", 1)[1]
        events = Path("/sys/fs/cgroup") / rel.lstrip("/") / "memory.events"
        for line in events.read_text().splitlines():
            key, value = line.split()
            if key == "oom_kill":
                return int(value)
    except (OSError, IndexError, ValueError):
        return None
    return None


@dataclass
class ServerExit:
    """How a server process ended."""

    returncode: int | None
    signal: str | None
    stopped_by_us: bool
    oom: bool
    log_tail: str

    @property
    def status(self) -> str:
        if self.stopped_by_us:
            return "ok"
        return "oom" if self.oom else "crashed"

    def describe(self) -> str:
        how = f"signal {self.signal}" if self.signal else f"exit code {self.returncode}"
        return f"server {'was OOM-killed' if self.oom else 'died'} ({how})"


def _size_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class ServerConfig:
    """Everything that decides how one private server is started."""

    engine: Engine
    cache_bytes: int
    allocator: Allocator
    knobs: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, object] = field(default_factory=dict)
    cpus: str | None = None
    port: int | None = None
    max_connections: int = 1000
    # PR_SET_THP_DISABLE for this server only: THP "never" without touching the host.
    thp_disabled: bool = False


_PR_SET_THP_DISABLE = 41
_libc = ctypes.CDLL(None, use_errno=True)


def _disable_thp() -> None:
    """Runs in the forked child: the flag survives execve and covers all of mysqld."""
    if _libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_THP_DISABLE) failed")


class PrivateServer:
    """One server lifetime in `rundir`; use as a context manager so it is always stopped."""

    def __init__(self, build: ServerBuild, rundir: str | os.PathLike[str], config: ServerConfig):
        self.build = build
        self.config = config
        # mysqld resolves a relative datadir against its basedir, not our working directory.
        self.rundir = Path(rundir).absolute()
        self.datadir = self.rundir / "data"
        self.cnf_path = self.rundir / "my.cnf"
        self.error_log = self.rundir / "error.log"
        self.stdout_log = self.rundir / "server.out"
        self.tmpdir = self.rundir / "tmp"
        self.socket = self._socket_path()
        self.port = config.port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.allocator_path: str | None = None
        self.server_version: str | None = None
        self._stopping = False
        self._oom_before: int | None = None

    # --- paths and config -------------------------------------------------------------------

    def _socket_path(self) -> Path:
        path = self.rundir / "mysqld.sock"
        if len(str(path)) <= _SOCKET_PATH_MAX:
            return path
        # Deep run directories overflow sun_path; keep the socket in a private temp dir.
        return Path(tempfile.mkdtemp(prefix="mallocbench-")) / "mysqld.sock"

    def settings(self) -> dict[str, str]:
        """The my.cnf [mysqld] settings: harness defaults, engine, then the setup's overrides."""
        settings: dict[str, str] = {
            "datadir": str(self.datadir),
            "socket": str(self.socket),
            "port": str(self.port),
            "bind-address": "127.0.0.1",
            "pid-file": str(self.rundir / "mysqld.pid"),
            "log-error": str(self.error_log),
            # A private tmpdir: concurrent servers sharing /tmp collide on temp-table names.
            "tmpdir": str(self.tmpdir),
            "skip-name-resolve": "ON",
            "skip-log-bin": "ON",
            "max_connections": str(self.config.max_connections),
            "max_prepared_stmt_count": "1000000",
            "table_open_cache": "2000",
            "performance_schema": "OFF",
        }
        if os.geteuid() == 0:
            settings["user"] = "root"
        settings.update(self.config.engine.config(self.config.cache_bytes))
        settings.update({k: _size_value(v) for k, v in self.config.overrides.items()})
        return settings

    def render_config(self) -> str:
        lines = [
            "# Written by mallocbench for one private server; not read by any system service.",
            "[mysqld]",
        ]
        for key, value in self.settings().items():
            lines.append(f"{key}={value}")
        return "\n".join(lines) + "\n"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not _ALLOCATOR_ENV.match(k)}
        preload = self.config.allocator.preload()
        if preload:
            env["LD_PRELOAD"] = preload
        env.update({k: str(v) for k, v in self.config.knobs.items()})
        return env

    def command(self) -> list[str]:
        cmd = [self.build.mysqld, f"--defaults-file={self.cnf_path}"]
        if self.config.cpus:
            taskset = shutil.which("taskset")
            if taskset is None:
                raise MallocbenchError(
                    "cpus is set but taskset is missing: apt-get install util-linux"
                )
            cmd = [taskset, "-c", self.config.cpus, *cmd]
        return cmd

    # --- datadir --------------------------------------------------------------------------

    def prepare_rundir(self) -> None:
        try:
            self.rundir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.rundir, 0o700)
            self.tmpdir.mkdir(exist_ok=True)
            self.cnf_path.write_text(self.render_config())
        except OSError as exc:
            raise MallocbenchError(
                f"cannot write the server directory {self.rundir}: {exc.strerror}; "
                "choose a writable --out directory"
            ) from exc

    def initialize_datadir(self) -> None:
        """Create an empty system datadir (mariadb-install-db, or mysqld --initialize)."""
        self.prepare_rundir()
        if self.datadir.exists():
            shutil.rmtree(self.datadir)
        if self.build.install_db and self.build.flavor == "mariadb":
            cmd = [
                self.build.install_db,
                "--no-defaults",
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                f"--tmpdir={self.tmpdir}",
            ]
            if self.build.basedir:
                cmd.append(f"--basedir={self.build.basedir}")
            if os.geteuid() == 0:
                cmd.append("--user=root")
        else:
            cmd = [
                self.build.mysqld,
                "--no-defaults",
                "--initialize-insecure",
                f"--datadir={self.datadir}",
            ]
            if os.geteuid() == 0:
                cmd.append("--user=root")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
            raise ServerStartError(f"initialising the datadir failed: {tail}")
        os.chmod(self.datadir, 0o700)

    def copy_datadir_from(self, golden: Path) -> None:
        self.prepare_rundir()
        if self.datadir.exists():
            shutil.rmtree(self.datadir)
        # cp -a keeps sparse files sparse and is much faster than copytree for big datadirs.
        out = subprocess.run(
            ["cp", "-a", "--reflink=auto", str(golden), str(self.datadir)],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise MallocbenchError(f"copying the dataset into {self.datadir} failed: {out.stderr}")
        os.chmod(self.datadir, 0o700)

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise MallocbenchError("the server is not running")
        return self.proc.pid

    def start(self, timeout: float = 120.0) -> None:
        if self.config.port is not None and port_in_use(self.config.port):
            raise MallocbenchError(
                f"port {self.config.port} is in use: choose another server.port in the "
                "experiment, or leave it out to pick a free one"
            )
        if not self.datadir.is_dir():
            raise MallocbenchError(f"no datadir at {self.datadir}: initialise or copy one first")
        self.prepare_rundir()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self.error_log.write_text("")
        self._oom_before = _oom_kills()
        with open(self.stdout_log, "ab") as out:
            self.proc = subprocess.Popen(
                self.command(),
                env=self.environment(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_disable_thp if self.config.thp_disabled else None,
            )
        process.track(self.proc)
        self._stopping = False
        try:
            self._wait_ready(timeout)
            self.allocator_path = allocators.verify(self.config.allocator, self.proc.pid)
            with self.connect() as conn, conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                self.server_version = str(cur.fetchone()[0])
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                process.untrack(self.proc)
                raise ServerStartError(
                    f"server failed to start (exit code {self.proc.returncode}); "
                    f"error log {self.error_log}:\n{self._start_failure_summary()}"
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
            f"see {self.error_log}"
        )

    def _start_failure_summary(self) -> str:
        tail = log_tail(self.error_log, 40) or log_tail(self.stdout_log, 40)
        errors = [line for line in tail.splitlines() if "[ERROR]" in line or "rror" in line]
        return "\n".join(errors[-5:]) if errors else tail

    def connect(self, connect_timeout: float = 10, **kwargs: object) -> pymysql.Connection:
        return pymysql.connect(
            unix_socket=str(self.socket),
            user="root",
            connect_timeout=connect_timeout,
            autocommit=True,
            **kwargs,
        )

    def query(self, sql: str) -> list[tuple[object, ...]]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_info(self) -> ServerExit | None:
        """None while running; otherwise how it ended (crash, OOM kill or our stop)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        sig = signal.Signals(-code).name if code is not None and code < 0 else None
        after = _oom_kills()
        oom = (
            sig == "SIGKILL"
            and not self._stopping
            and self._oom_before is not None
            and after is not None
            and after > self._oom_before
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
        return self.exit_info()

    def __enter__(self) -> PrivateServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running(build: ServerBuild, rundir: Path, config: ServerConfig) -> Iterator[PrivateServer]:
    """Start a fresh private server on an empty datadir; stop it on the way out."""
    server = PrivateServer(build, rundir, config)
    server.initialize_datadir()
    try:
        server.start()
        yield server
    finally:
        server.stop()
