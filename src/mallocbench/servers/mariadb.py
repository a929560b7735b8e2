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
import ctypes
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from mallocbench import allocators
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError
from mallocbench.servers import process, runtime
from mallocbench.servers.cgroup import CpuCgroup, MemoryCgroup, OomWatch
from mallocbench.servers.engines import Engine
from mallocbench.servers.options import check_config
from mallocbench.servers.taken import Plugin, adjusted, not_taken

SERVER_BINARIES = ("mariadbd", "mysqld")
# Environment variables that would change the allocator or its behaviour behind our back.
_ALLOCATOR_ENV = re.compile(
    r"^(LD_PRELOAD|MALLOC_|GLIBC_TUNABLES|JE_MALLOC_CONF|TCMALLOC_|HEAPPROFILE|MIMALLOC_"
    r"|MBRECORD_)"
)
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes on Linux; leave room
# The unprivileged account a root-run harness hands its servers to (Debian's packages
# create it with mariadb-server).
SERVER_USER = "mysql"
# Written beside each running server; the next run in the same directory uses it to find
# and stop a server whose harness died (SIGKILL leaves no chance to clean up).
SERVER_RECORD = "server.json"


class ServerStartError(MallocbenchError):
    """The server did not become ready; the message carries the error log's last lines."""


class SettingNotTaken(ServerStartError):
    """The server started without a setting it was given (servers.taken): a failed
    setup, since measuring it would measure another setup under its name."""


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
    # A TCP port on 127.0.0.1, for builds or tools that need one; None: socket only.
    port: int | None = None
    max_connections: int = 1000
    # PR_SET_THP_DISABLE for this server only: THP "never" without touching the host.
    thp_disabled: bool = False
    # The server starts inside this cgroup (a memory cap); its OOM kills are told apart.
    memory_cgroup: MemoryCgroup | None = None
    # ... and inside this one (a CPU quota: a known handicap for this setup).
    cpu_cgroup: CpuCgroup | None = None
    # The recording shim, preloaded in front of the allocator (idle until armed).
    record_shim: str | None = None


_PR_SET_THP_DISABLE = 41
_libc = ctypes.CDLL(None, use_errno=True)


def _disable_thp() -> None:
    """Runs in the forked child: the flag survives execve and covers all of mysqld."""
    if _libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_THP_DISABLE) failed")


@dataclass(frozen=True)
class ServerUser:
    name: str
    uid: int
    gid: int


def server_user() -> ServerUser | None:
    """The account a server runs as when mallocbench is root; None: as ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise MallocbenchError(
            f"mallocbench runs as root and hands its servers to the user {SERVER_USER!r}, "
            f"which does not exist: run `make setup` (mariadb-server creates it) or "
            f"`useradd --system {SERVER_USER}`"
        ) from None
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _chown_tree(path: Path, user: ServerUser | None) -> None:
    if user is None:
        return
    os.chown(path, user.uid, user.gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), user.uid, user.gid)


def _write_private(path: Path, text: str, owner: ServerUser | None = None) -> None:
    """A 0600 file created with that mode: a password in it is never readable by others."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    if owner is not None:
        os.chown(path, owner.uid, owner.gid)


def process_start_time(pid: int) -> int | None:
    """Clock ticks since boot at which a live PID started (None once it has exited).

    The start time tells a reused PID from ours; a zombie counts as exited, since an
    orphaned server that stopped waits for init to reap it.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ")".
    fields = text.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


class PrivateServer:
    """One server lifetime in `rundir`; use as a context manager so it is always stopped."""

    def __init__(
        self,
        build: ServerBuild,
        rundir: str | os.PathLike[str],
        config: ServerConfig,
        runtime_dir: runtime.RuntimeDir | None = None,
    ):
        self.build = build
        self.config = config
        # mysqld resolves a relative datadir against its basedir, not our working directory.
        self.rundir = Path(rundir).absolute()
        self.user = server_user()
        # What the server itself reads and writes; see the module's docstring.
        self.statedir = self.rundir
        if self.user is not None:
            where = runtime_dir or runtime.process_default(self.user.uid, self.user.gid)
            self.statedir = where.state_dir(self.rundir)
        self.datadir = self.statedir / "data"
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
        """The my.cnf [mysqld] settings: harness defaults, engine, then the setup's overrides."""
        settings: dict[str, str] = {
            "datadir": str(self.datadir),
            "socket": str(self.socket),
            "pid-file": str(self.statedir / "mysqld.pid"),
            "log-error": str(self.error_log),
            # A private tmpdir: concurrent servers sharing /tmp collide on temp-table names.
            "tmpdir": str(self.tmpdir),
            "secure-file-priv": str(self.files_dir),
            "init-file": str(self.init_file),
            "skip-name-resolve": "ON",
            "skip-log-bin": "ON",
            "max_connections": str(self.config.max_connections),
            "max_prepared_stmt_count": "1000000",
            "table_open_cache": "2000",
            "performance_schema": "OFF",
        }
        if self.port is None:
            settings["skip-networking"] = "ON"
        else:
            settings["port"] = str(self.port)
            settings["bind-address"] = "127.0.0.1"
        if self.user is not None:
            settings["user"] = self.user.name
        settings.update(self.config.engine.config(self.config.cache_bytes))
        for key, value in self.config.overrides.items():
            # Validated with the experiment already; checked again here because this is
            # the last step before text reaches the server.
            check_config(key, _size_value(value), "server config")
            settings[key] = _size_value(value)
        return settings

    def render_config(self) -> str:
        lines = [
            "# Written by mallocbench for one private server; not read by any system service.",
            "[mysqld]",
        ]
        for key, value in self.settings().items():
            lines.append(f"{key}={value}")
        return "\n".join(lines) + "\n"

    def _init_sql(self) -> str:
        """Run by the server before it accepts a connection: this start's credential."""
        quoted = self.password  # token_urlsafe: letters, digits, '-' and '_' only
        accounts = ", ".join(
            f"'root'@'{host}' IDENTIFIED BY '{quoted}'"
            for host in ("localhost", "127.0.0.1", "::1")
        )
        hostname = re.sub(r"[^A-Za-z0-9.-]", "", socket.gethostname())
        return (
            f"ALTER USER IF EXISTS {accounts};\n"
            # install-db adds root@<hostname> without a password; nothing needs it.
            f"DROP USER IF EXISTS 'root'@'{hostname}', ''@'localhost', ''@'{hostname}';\n"
        )

    def _write_credentials(self) -> None:
        _write_private(self.init_file, self._init_sql(), owner=self.user)
        _write_private(
            self.client_cnf,
            f"[client]\nuser=root\npassword={self.password}\nsocket={self.socket}\n",
        )
        _write_private(
            self.sysbench_options,
            f"mysql-socket={self.socket}\nmysql-user=root\nmysql-password={self.password}\n",
        )

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not _ALLOCATOR_ENV.match(k)}
        preload = self.config.allocator.preload()
        shim = self.config.record_shim
        if shim:
            # First, so its malloc is the one called; it forwards to the allocator's.
            preload = f"{shim} {preload}" if preload else shim
            env["MBRECORD_CONTROL"] = str(self.record_control)
            env["MBRECORD_ALLOCATOR"] = self.config.allocator.name
            env["MBRECORD_SERVER_VERSION"] = self.build.version
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
        else:
            # --initialize-insecure leaves root without a password; the init file of every
            # start sets one before any connection is accepted.
            cmd = [
                self.build.mysqld,
                "--no-defaults",
                "--initialize-insecure",
                f"--datadir={self.datadir}",
            ]
        if self.user is not None:
            cmd.append(f"--user={self.user.name}")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
            raise ServerStartError(f"initialising the datadir failed: {tail}")
        os.chmod(self.datadir, 0o700)
        _chown_tree(self.datadir, self.user)

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
            # A partial copy would keep a full disk full; cp's first line names the file.
            shutil.rmtree(self.datadir, ignore_errors=True)
            first = (out.stderr.strip().splitlines() or ["cp failed"])[0]
            raise MallocbenchError(f"copying the dataset into {self.datadir} failed: {first}")
        os.chmod(self.datadir, 0o700)
        _chown_tree(self.datadir, self.user)

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
                preexec_fn=self._in_child(),
            )
        process.track(self.proc)
        self._oom_watch = OomWatch.start(self.proc.pid)
        self._write_record()
        self._stopping = False
        try:
            self._wait_ready(timeout)
            self._check_started()
            self._check_taken()
        except BaseException:
            self.stop()
            raise

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
        asked = {k: _size_value(v) for k, v in self.config.overrides.items()}
        self.adjusted = adjusted(asked, variables)
        problems = not_taken(self.settings(), variables, plugins)
        if not problems:
            return
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        said = self._logged_about(first.word)
        raise SettingNotTaken(
            f"the server started without a setting it was given, {first.text}{more}"
            + (f" (its error log: {said})" if said else "")
            + "; nothing is measured under a setup it does not run"
        )

    def _logged_about(self, word: str) -> str | None:
        """The first error or warning of the log that names `word` (the cause comes
        before what follows from it), without its time stamp."""
        for line in log_tail(self.error_log, 400).splitlines():
            if word in line and ("[ERROR]" in line or "[Warning]" in line):
                return re.sub(r"^.*?\[(ERROR|Warning)\] ", "", line).strip()
        return None

    def _in_child(self) -> Callable[[], None] | None:
        """What the forked child does before exec: THP off, join the memory and cpu cgroups."""
        steps: list[Callable[[], None]] = []
        if self.config.thp_disabled:
            steps.append(_disable_thp)
        if self.config.memory_cgroup is not None:
            steps.append(self.config.memory_cgroup.join_self)
        if self.config.cpu_cgroup is not None:
            steps.append(self.config.cpu_cgroup.join_self)
        if not steps:
            return None

        def run_steps() -> None:
            for step in steps:
                step()

        return run_steps

    def _write_record(self) -> None:
        assert self.proc is not None
        record = {
            "pid": self.proc.pid,
            "start_time": process_start_time(self.proc.pid),
            "harness_pid": os.getpid(),
            "mysqld": self.build.mysqld,
            "rundir": str(self.rundir),
            "statedir": str(self.statedir),
            "socket": str(self.socket),
        }
        self.record.write_text(json.dumps(record) + "\n")

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                process.untrack(self.proc)
                raise ServerStartError(
                    f"server failed to start (exit code {self.proc.returncode}); "
                    f"error log {self.kept_error_log}:\n{self._start_failure_summary()}"
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

    def _start_failure_summary(self) -> str:
        tail = log_tail(self.error_log, 40) or log_tail(self.stdout_log, 40)
        errors = [line for line in tail.splitlines() if "[ERROR]" in line or "rror" in line]
        return "\n".join(errors[-5:]) if errors else tail

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

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_info(self) -> ServerExit | None:
        """None while running; otherwise how it ended (crash, OOM kill or our stop)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        sig = signal.Signals(-code).name if code is not None and code < 0 else None
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

    def discard_state(self, keep_datadir: bool = False) -> None:
        """Remove what the stopped server kept in its state directory; a datadir kept for
        inspection moves into the session directory, beside its logs."""
        if self.statedir == self.rundir:
            if not keep_datadir:
                shutil.rmtree(self.datadir, ignore_errors=True)
            return
        if keep_datadir and self.datadir.is_dir():
            kept = self.rundir / "data"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.move(self.datadir, kept)
        shutil.rmtree(self.statedir, ignore_errors=True)

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
        server.discard_state()
