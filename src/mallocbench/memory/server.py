"""Reading a running MariaDB/MySQL server: connection, pid discovery, what it accounts for.

Read-only: only SELECT and SHOW statements are sent. The password comes from an option
file or a prompt and is never printed, logged or put in an error message.
"""

from __future__ import annotations

import configparser
import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pymysql

from mallocbench.errors import MallocbenchError

SERVER_NAMES = ("mariadbd", "mysqld")
_OPTION_GROUPS = ("client", "mysql", "mariadb-client", "client-mariadb", "mallocbench")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "")


@dataclass
class ConnectOptions:
    socket: str | None = None
    host: str | None = None
    port: int = 3306
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    defaults_file: str | None = None

    @property
    def where(self) -> str:
        if self.socket:
            return f"socket {self.socket}"
        return f"{self.host or 'localhost'}:{self.port}"

    @property
    def is_local(self) -> bool:
        return bool(self.socket) or (self.host or "localhost") in _LOCAL_HOSTS


def read_option_file(path: str | None) -> dict[str, str]:
    """user/password/socket/host/port from a MySQL option file ([client] and friends).

    With no path, ~/.my.cnf is read when it exists (as the mysql client does).
    """
    explicit = path is not None
    file = Path(path).expanduser() if path else Path("~/.my.cnf").expanduser()
    if not file.is_file():
        if explicit:
            raise MallocbenchError(f"option file {path} does not exist")
        return {}
    parser = configparser.ConfigParser(
        allow_no_value=True, strict=False, interpolation=None, comment_prefixes=("#", ";")
    )
    try:
        # Option files may start with !include lines that configparser cannot parse.
        text = "\n".join(
            line
            for line in file.read_text(errors="replace").splitlines()
            if not line.lstrip().startswith("!")
        )
        parser.read_string(text)
    except (OSError, configparser.Error) as exc:
        raise MallocbenchError(
            f"cannot read option file {file}: {type(exc).__name__}; "
            "it must have a [client] section with user= and password= lines"
        ) from exc
    values: dict[str, str] = {}
    for group in _OPTION_GROUPS:
        if parser.has_section(group):
            for key, value in parser.items(group):
                if value is not None:
                    values[key.replace("-", "_")] = value.strip().strip("'\"")
    return values


def resolve_options(opts: ConnectOptions) -> ConnectOptions:
    """Fill user/password (and a socket/host when none was given) from the option file."""
    values = read_option_file(opts.defaults_file)
    user = opts.user or values.get("user") or "root"
    password = opts.password if opts.password is not None else values.get("password")
    socket = opts.socket
    host = opts.host
    port = opts.port
    if not socket and not host:
        socket = values.get("socket")
        host = values.get("host")
        if values.get("port", "").isdigit():
            port = int(values["port"])
    if not socket and not host:
        raise MallocbenchError(
            "no server given: use --socket PATH (local) or --host H --port P "
            "(SELECT @@socket, @@port on the server tells them)"
        )
    return ConnectOptions(socket, host, port, user, password, opts.defaults_file)


def connect(opts: ConnectOptions, timeout: float = 10) -> pymysql.Connection:
    """Open a read-only-use connection; every failure becomes one line naming the fix."""
    kwargs: dict[str, Any] = {
        "user": opts.user or "root",
        "password": opts.password or "",
        "connect_timeout": timeout,
        "read_timeout": 60,
        "autocommit": True,
    }
    if opts.socket:
        if not Path(opts.socket).exists():
            raise MallocbenchError(
                f"cannot reach the server: no socket at {opts.socket} "
                "(is the server running? SELECT @@socket on it gives the path)"
            )
        kwargs["unix_socket"] = opts.socket
    else:
        kwargs["host"] = opts.host or "127.0.0.1"
        kwargs["port"] = opts.port
    try:
        return pymysql.connect(**kwargs)
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else 0
        if code in (1045, 1698):
            how = "the password given" if opts.password else "no password"
            raise MallocbenchError(
                f"access denied for user {opts.user!r} at {opts.where} with {how}: put the "
                "right password in an option file ([client] password=...) given with "
                "--defaults-file, or use --ask-password"
            ) from None
        if code == 1044 or code == 1227:
            raise MallocbenchError(
                f"user {opts.user!r} lacks a privilege mallocbench needs: grant it PROCESS "
                "(SHOW ENGINE ... STATUS) and SELECT on performance_schema"
            ) from None
        raise MallocbenchError(
            f"cannot reach the server at {opts.where}: {_short_reason(exc)}"
        ) from None
    except (pymysql.err.MySQLError, OSError) as exc:
        raise MallocbenchError(
            f"cannot reach the server at {opts.where}: {_short_reason(exc)}"
        ) from None


def _short_reason(exc: BaseException) -> str:
    text = str(exc.args[1] if len(exc.args) > 1 else exc)
    text = re.sub(r"\s+", " ", text).strip()
    if "Connection refused" in text:
        return "connection refused (no server listening there)"
    if "timed out" in text:
        return "connection timed out"
    return text[:160]


def _rows(cur: pymysql.cursors.Cursor, sql: str) -> list[tuple[Any, ...]]:
    try:
        cur.execute(sql)
        return list(cur.fetchall())
    except pymysql.err.MySQLError:
        return []


def _int(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def version_tuple(version: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else (0, 0, 0)


def memory_used_includes_caches(version: str, flavor: str) -> bool:
    """Since 10.6.16 (and 10.11.6, 11.0.4, 11.1.3, 11.2.2) MariaDB's Memory_used counts the
    buffer pool, key cache and Aria page cache as reserved, whether touched or not."""
    if flavor != "mariadb":
        return False
    v = version_tuple(version)
    firsts = {(10, 6): 16, (10, 11): 6, (11, 0): 4, (11, 1): 3, (11, 2): 2}
    if v[:2] in firsts:
        return v[2] >= firsts[v[:2]]
    return v[:2] > (11, 2)


@dataclass
class ServerMemory:
    """What the server knows about its own memory, and its memory settings."""

    version: str
    flavor: str
    variables: dict[str, str]
    status: dict[str, str]
    sessions: list[dict[str, Any]]  # id, user, memory_used, command, state (no query text)
    pfs_enabled: bool
    pfs_total: int | None
    pfs_top: list[tuple[str, int]]
    rocksdb: dict[str, int] | None
    innodb_status: dict[str, int]

    def var(self, name: str) -> int | None:
        return _int(self.variables.get(name))

    def stat(self, name: str) -> int | None:
        return _int(self.status.get(name))

    @property
    def memory_used_includes_caches(self) -> bool:
        return memory_used_includes_caches(self.version, self.flavor)


def _parse_rocksdb_memory(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip().isdigit():
            out[key.strip()] = int(value.strip())
    return out


def _parse_innodb_memory(text: str) -> dict[str, int]:
    out = {}
    for label, key in (
        ("Total large memory allocated", "total_large_memory"),
        ("Dictionary memory allocated", "dictionary_memory"),
    ):
        match = re.search(rf"{label}\s+(\d+)", text)
        if match:
            out[key] = int(match.group(1))
    return out


def collect(conn: pymysql.Connection) -> ServerMemory:
    with conn.cursor() as cur:
        variables = {str(k).lower(): str(v) for k, v in _rows(cur, "SHOW GLOBAL VARIABLES")}
        status = {str(k): str(v) for k, v in _rows(cur, "SHOW GLOBAL STATUS")}
        version = variables.get("version", "")
        flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
        sessions = []
        if flavor == "mariadb":
            for row in _rows(
                cur,
                "SELECT ID, USER, MEMORY_USED, COMMAND, STATE FROM "
                "information_schema.PROCESSLIST ORDER BY MEMORY_USED DESC",
            ):
                sessions.append(
                    {
                        "id": int(row[0]),
                        "user": row[1],
                        "memory_used": int(row[2] or 0),
                        "command": row[3],
                        "state": row[4],
                    }
                )
        pfs_enabled = variables.get("performance_schema", "OFF").upper() in ("ON", "1")
        pfs_total = None
        pfs_top: list[tuple[str, int]] = []
        if pfs_enabled:
            rows = _rows(
                cur,
                "SELECT EVENT_NAME, CURRENT_NUMBER_OF_BYTES_USED FROM "
                "performance_schema.memory_summary_global_by_event_name "
                "WHERE CURRENT_NUMBER_OF_BYTES_USED > 0 "
                "ORDER BY CURRENT_NUMBER_OF_BYTES_USED DESC",
            )
            pfs_total = sum(int(r[1]) for r in rows)
            pfs_top = [(str(r[0]), int(r[1])) for r in rows[:10]]
        rocksdb = None
        if "rocksdb_block_cache_size" in variables:
            rocksdb = {}
            for row in _rows(cur, "SHOW ENGINE ROCKSDB STATUS"):
                if row[0] == "MEMORY_STATS":
                    rocksdb.update(_parse_rocksdb_memory(str(row[2])))
            for name, value in _rows(
                cur, "SELECT STAT_TYPE, VALUE FROM information_schema.ROCKSDB_DBSTATS"
            ):
                if name == "DB_BLOCK_CACHE_USAGE":
                    rocksdb["DB_BLOCK_CACHE_USAGE"] = int(value)
        innodb_status: dict[str, int] = {}
        rows = _rows(cur, "SHOW ENGINE INNODB STATUS")
        if rows:
            innodb_status = _parse_innodb_memory(str(rows[0][-1]))
    return ServerMemory(
        version=version,
        flavor=flavor,
        variables=variables,
        status=status,
        sessions=sessions,
        pfs_enabled=pfs_enabled,
        pfs_total=pfs_total,
        pfs_top=pfs_top,
        rocksdb=rocksdb,
        innodb_status=innodb_status,
    )


# --- pid discovery ----------------------------------------------------------------------


def is_server_process(pid: int) -> tuple[bool, str]:
    """(True, name) when pid is a mariadbd/mysqld process; (False, what it is) otherwise."""
    try:
        proc = psutil.Process(pid)
        name = proc.name()
        with contextlib.suppress(psutil.Error):
            exe = os.path.basename(proc.exe())
            if exe in SERVER_NAMES:
                return True, exe
    except psutil.NoSuchProcess:
        return False, "no such process"
    except psutil.AccessDenied:
        return False, "not readable"
    if name in SERVER_NAMES:
        return True, name
    # A server run under valgrind or heaptrack shows the tool's name; its cmdline tells.
    with contextlib.suppress(psutil.Error):
        if any(os.path.basename(a) in SERVER_NAMES for a in proc.cmdline()[:12]):
            return True, name
    return False, name


def _listens_on(proc: psutil.Process, socket_path: str | None, port: int | None) -> bool:
    try:
        conns = proc.net_connections(kind="all")
    except (psutil.Error, OSError):
        return False
    for c in conns:
        if socket_path and c.family.name == "AF_UNIX" and c.laddr == socket_path:
            return True
        if (
            port
            and c.status == psutil.CONN_LISTEN
            and isinstance(c.laddr, tuple)
            and c.laddr
            and c.laddr[1] == port
        ):
            return True
    return False


def find_pid(server: ServerMemory, opts: ConnectOptions) -> tuple[int | None, str]:
    """The server's pid when it runs on this host, else (None, why not)."""
    if not opts.is_local:
        return None, f"the server runs on {opts.host}, so its process cannot be inspected here"
    pid_file = server.variables.get("pid_file")
    if pid_file:
        with contextlib.suppress(OSError, ValueError):
            pid = int(Path(pid_file).read_text().split()[0])
            if is_server_process(pid)[0]:
                return pid, f"pid file {pid_file}"
    socket_path = server.variables.get("socket")
    port = server.stat("Port") or server.var("port")
    for proc in psutil.process_iter(["name", "exe", "cmdline"]):
        if not is_server_process(proc.pid)[0]:
            continue
        if _listens_on(proc, socket_path, port):
            return proc.pid, "process listening on the server's socket/port"
    return None, (
        "no local mariadbd/mysqld process listens on the server's socket or port "
        "(pass --pid if it runs in another namespace)"
    )


def check_pid(pid: int, server: ServerMemory, opts: ConnectOptions) -> None:
    """Refuse a pid that is not a server, or that is a different server than the one asked."""
    ok, what = is_server_process(pid)
    if what == "no such process":
        raise MallocbenchError(f"process {pid} does not exist: give the pid of the server")
    if not ok:
        raise MallocbenchError(
            f"process {pid} ({what}) is not a MariaDB/MySQL server: give the pid of "
            "mariadbd or mysqld, or leave --pid out to find it from the connection"
        )
    found, _ = find_pid(server, opts)
    if found is not None and found != pid:
        raise MallocbenchError(
            f"process {pid} is a server, but not the one at {opts.where} (that is pid "
            f"{found}): leave --pid out or give the matching one"
        )
