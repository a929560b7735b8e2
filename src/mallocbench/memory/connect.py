"""Reaching a running MariaDB/MySQL server: where it is, found the way the mysql client
finds it when none is named (`find_server`), with which credentials, over one connection.

The password comes from an option file, MYSQL_PWD or a prompt and is never printed,
logged or put in an error message.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pymysql

from mallocbench.errors import MallocbenchError
from mallocbench.memory.client import (
    DEBIAN_CNF,
    USUAL_SOCKETS,
    ConnectOptions,
    OptionFiles,
    option_files_for,
    os_user,
    read_option_files,
    short_reason,
    system_path,
)
from mallocbench.memory.pid import is_server_process

# Discovery tries several places: a host that does not answer must not hold it long.
_DISCOVERY_TIMEOUT = 5.0
_ACCESS_DENIED = (1045, 1698)
_HOW_TO_GIVE = (
    "give the server with --socket PATH, --host HOST --port PORT, --defaults-file FILE "
    "(a [client] section with socket=, user=, password=) or --pid PID"
)


# --- finding the server -----------------------------------------------------------------


def _credentials(
    given: ConnectOptions, files: OptionFiles, env: Mapping[str, str]
) -> tuple[str, str | None, str]:
    """(user, password, where the user came from); the client's precedence: flags, option
    files, MYSQL_PWD, and the OS user when nothing names one."""
    if given.user:
        user, source = given.user, "--user"
    elif files.get("user"):
        user, source = files.values["user"], files.origin["user"]
    else:
        user, source = os_user(), ""
    if given.password is not None:
        password: str | None = given.password
    elif files.get("password") is not None:
        password = files.get("password")
    else:
        password = env.get("MYSQL_PWD")
    return user, password, source


def _given_where(opts: ConnectOptions) -> ConnectOptions | None:
    if opts.socket:
        return ConnectOptions(socket=opts.socket)
    if opts.host or opts.port:
        return ConnectOptions(host=opts.host or "127.0.0.1", port=opts.port)
    return None


def _client_where(files: OptionFiles, env: Mapping[str, str]) -> tuple[ConnectOptions | None, str]:
    """The server option files and MYSQL_* variables name, and which of them named it.

    As for the client, the variables only fill what the files leave unset, and host
    localhost (or none) means the local socket, not TCP.
    """
    host, host_src = files.get("host"), files.origin.get("host", "")
    if host is None and env.get("MYSQL_HOST"):
        host, host_src = env["MYSQL_HOST"], "MYSQL_HOST"
    tcp = (files.get("protocol") or "").lower() == "tcp"
    if host in (None, "", "localhost") and not tcp:
        socket_path, src = files.get("socket"), files.origin.get("socket", "")
        if not socket_path and env.get("MYSQL_UNIX_PORT"):
            socket_path, src = env["MYSQL_UNIX_PORT"], "MYSQL_UNIX_PORT"
        return (ConnectOptions(socket=socket_path), src) if socket_path else (None, "")
    port_text, port_src = files.get("port"), files.origin.get("port", "")
    if not port_text and env.get("MYSQL_TCP_PORT"):
        port_text, port_src = env["MYSQL_TCP_PORT"], "MYSQL_TCP_PORT"
    port = int(port_text) if port_text and port_text.isdigit() else None
    host = "127.0.0.1" if host in (None, "", "localhost") else host
    sources = [s for s in dict.fromkeys((host_src, port_src)) if s]
    return ConnectOptions(host=host, port=port), ", ".join(sources)


def _pid_where(pid: int) -> ConnectOptions | None:
    """The socket (else the TCP port) a server process listens on."""
    if not is_server_process(pid)[0]:
        return None
    try:
        conns = psutil.Process(pid).net_connections(kind="all")
    except (psutil.Error, OSError):
        return None
    port = None
    for c in conns:
        if c.family.name == "AF_UNIX" and isinstance(c.laddr, str) and c.laddr.startswith("/"):
            return ConnectOptions(socket=c.laddr)
        if c.status == psutil.CONN_LISTEN and isinstance(c.laddr, tuple) and c.laddr:
            port = port or c.laddr[1]
    return ConnectOptions(host="127.0.0.1", port=port) if port else None


def _with(where: ConnectOptions, user: str | None, password: str | None) -> ConnectOptions:
    return ConnectOptions(where.socket, where.host, where.port, user, password)


def resolve_options(opts: ConnectOptions) -> ConnectOptions:
    """`opts` completed from the option files and the environment, without connecting."""
    files = option_files_for(opts)
    user, password, _ = _credentials(opts, files, os.environ)
    where = _given_where(opts) or _client_where(files, os.environ)[0]
    if where is None:
        raise MallocbenchError(f"no server given: {_HOW_TO_GIVE}")
    found = _with(where, user, password)
    found.defaults_file = opts.defaults_file
    return found


@dataclass
class Found:
    """A connected server and how it was found (None: the flags or the file named it)."""

    opts: ConnectOptions
    conn: pymysql.Connection
    source: str | None = None

    def describe(self) -> str:
        return f"using {self.opts.target} as {self.opts.user} ({self.source})"


def find_server(
    given: ConnectOptions, pid: int | None = None, env: Mapping[str, str] | None = None
) -> Found:
    """Connect to the server the flags name, or find one the way the mysql client would.

    Flags win; --defaults-file replaces the default option files and, when it names a
    server, is used alone. Otherwise candidates are tried in order and the first that
    answers is kept: the socket --pid listens on, what the option files and MYSQL_*
    variables name, /etc/mysql/debian.cnf, the usual socket paths, then unix_socket
    authentication as the OS user. When none answers, one error names each try.
    """
    env = os.environ if env is None else env
    files = option_files_for(given)
    user, password, user_src = _credentials(given, files, env)
    named = _given_where(given)
    if named is None and given.defaults_file:
        named = _client_where(files, {})[0]
    if named is not None:
        opts = _with(named, user, password)
        opts.defaults_file = given.defaults_file
        return Found(opts, connect(opts))
    tried = _Tried()
    for opts, source in _candidates(given, pid, files, (user, password, user_src), env, tried):
        conn = tried.attempt(opts, source)
        if conn is not None:
            opts.defaults_file = given.defaults_file
            return Found(opts, conn, source)
    raise MallocbenchError(tried.summary())


def _candidates(
    given: ConnectOptions,
    pid: int | None,
    files: OptionFiles,
    creds: tuple[str, str | None, str],
    env: Mapping[str, str],
    tried: _Tried,
) -> Iterator[tuple[ConnectOptions, str]]:
    user, password, user_src = creds

    def source(where_src: str) -> str:
        if user_src and user_src not in where_src:
            return f"{where_src}; user from {user_src}"
        return where_src

    local: list[ConnectOptions] = []
    if pid is not None:
        at_pid = _pid_where(pid)
        if at_pid is None:
            tried.note(f"pid {pid}: not a server listening on a socket this user can see")
        else:
            local.append(at_pid)
            yield _with(at_pid, user, password), source(f"the socket pid {pid} listens on")
    client, client_src = _client_where(files, env)
    if client is None:
        names = ", ".join(files.read) or "none present"
        tried.note(f"option files ({names}) and MYSQL_UNIX_PORT/MYSQL_HOST name no server")
    else:
        local += [client] if client.socket else []
        yield _with(client, user, password), source(f"from {client_src}")
    # The client lets option files win over MYSQL_*; when theirs does not answer, the
    # variables' server is worth a try of its own.
    by_env, env_src = _client_where(OptionFiles(), env)
    if by_env is not None and client_src != env_src:
        local += [by_env] if by_env.socket else []
        yield _with(by_env, user, password), source(f"from {env_src}")
    own_account = given.user is None and given.password is None
    if own_account and not given.defaults_file:
        yield from _debian_candidates(client, tried)
    usual = _usual_sockets()
    for where in usual:
        yield _with(where, user, password), source("a usual socket path")
    if own_account and (user != os_user() or password):
        for where in [*local, *usual]:
            yield _with(where, os_user(), None), "unix_socket authentication as the OS user"


def _usual_sockets() -> list[ConnectOptions]:
    return [ConnectOptions(socket=str(system_path(s))) for s in USUAL_SOCKETS]


def _debian_candidates(
    client: ConnectOptions | None, tried: _Tried
) -> Iterator[tuple[ConnectOptions, str]]:
    """Debian's maintenance account: a password on old releases, root by socket on 12."""
    path = system_path(DEBIAN_CNF)
    if not path.exists():
        return
    options = read_option_files([path])
    if options.unreadable:
        tried.note(f"{path} not readable (root only)")
        return
    user = options.get("user")
    if not user:
        return
    where = _client_where(options, {})[0]
    if where is None and client is not None and client.socket:
        where = client
    wheres = (
        [where] if where else [ConnectOptions(socket=str(system_path(s))) for s in USUAL_SOCKETS]
    )
    for w in wheres:
        yield _with(w, user, options.get("password")), f"from {path}"


class _Tried:
    """What discovery tried and why each failed, for the one error line."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.missing: dict[str, str] = {}  # socket path -> who named it first
        self.failed: list[str] = []
        self.seen: set[tuple[object, ...]] = set()

    def note(self, text: str) -> None:
        self.notes.append(text)

    def attempt(self, opts: ConnectOptions, source: str) -> pymysql.Connection | None:
        where = os.path.realpath(opts.socket) if opts.socket else (opts.host, opts.port)
        key = (where, opts.user, opts.password)
        if key in self.seen:
            return None
        self.seen.add(key)
        if opts.socket:
            problem = _socket_problem(opts.socket)
            if problem == "no socket":
                self.missing.setdefault(opts.socket, source.split(";")[0])
                return None
            if problem:
                self.failed.append(f"{opts.socket}: {problem}")
                return None
        try:
            return _open(opts, _DISCOVERY_TIMEOUT)
        except (pymysql.err.MySQLError, OSError) as exc:
            self.failed.append(f"{opts.target} as {opts.user} ({source}): {_failure(exc, opts)}")
            return None

    def summary(self) -> str:
        parts = list(self.notes)
        if self.missing:
            paths = [
                path if source.startswith("a usual") else f"{path} ({source})"
                for path, source in self.missing.items()
            ]
            parts.append("no socket at " + ", ".join(paths))
        parts += self.failed
        return "no server found: " + "; ".join(parts) + "; " + _HOW_TO_GIVE


def _socket_problem(path: str) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no socket"
    except OSError as exc:
        return f"not reachable ({exc.strerror or exc})"
    return None if stat.S_ISSOCK(mode) else "not a socket"


def _failure(exc: BaseException, opts: ConnectOptions) -> str:
    code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else 0
    if code in _ACCESS_DENIED:
        return "access denied" + (" with the password given" if opts.password else "")
    return short_reason(exc)


def _open(opts: ConnectOptions, timeout: float) -> pymysql.Connection:
    kwargs: dict[str, Any] = {
        "user": opts.user or os_user(),
        "password": opts.password or "",
        "connect_timeout": timeout,
        "read_timeout": 60,
        "autocommit": True,
    }
    if opts.socket:
        kwargs["unix_socket"] = opts.socket
    else:
        kwargs["host"] = opts.host or "127.0.0.1"
        kwargs["port"] = opts.port or 3306
    return pymysql.connect(**kwargs)


def connect(opts: ConnectOptions, timeout: float = 10) -> pymysql.Connection:
    """Open a read-only-use connection; every failure becomes one line naming the fix."""
    if opts.socket and not Path(opts.socket).exists():
        raise MallocbenchError(
            f"cannot reach the server: no socket at {opts.socket} "
            "(is the server running? SELECT @@socket on it gives the path)"
        )
    try:
        return _open(opts, timeout)
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else 0
        if code in _ACCESS_DENIED:
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
            f"cannot reach the server at {opts.where}: {short_reason(exc)}"
        ) from None
    except (pymysql.err.MySQLError, OSError) as exc:
        raise MallocbenchError(
            f"cannot reach the server at {opts.where}: {short_reason(exc)}"
        ) from None
