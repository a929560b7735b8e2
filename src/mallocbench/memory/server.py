"""Reading a running MariaDB/MySQL server: connection, pid discovery, what it accounts for.

Read-only: only SELECT and SHOW statements are sent. The password comes from an option
file, MYSQL_PWD or a prompt and is never printed, logged or put in an error message.
With no server named, one is found the way the mysql client finds it (`find_server`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pymysql

from mallocbench.errors import MallocbenchError

SERVER_NAMES = ("mariadbd", "mysqld")
# The groups the mariadb/mysql client reads, plus one of our own.
CLIENT_GROUPS = (
    "client",
    "client-server",
    "client-mariadb",
    "mysql",
    "mariadb-client",
    "mallocbench",
)
SYSTEM_OPTION_FILES = ("/etc/my.cnf", "/etc/mysql/my.cnf")
DEBIAN_CNF = "/etc/mysql/debian.cnf"
USUAL_SOCKETS = (
    "/run/mysqld/mysqld.sock",
    "/var/run/mysqld/mysqld.sock",
    "/tmp/mysql.sock",
    "/var/lib/mysql/mysql.sock",
)
# For tests only: the system paths above are looked up under this directory instead of
# /, so a test decides what the machine offers and an installed server cannot answer it.
TEST_ROOT_ENV = "MALLOCBENCH_TEST_SYSTEM_ROOT"
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "")
_MAX_INCLUDE_DEPTH = 10
# Discovery tries several places: a host that does not answer must not hold it long.
_DISCOVERY_TIMEOUT = 5.0
_ACCESS_DENIED = (1045, 1698)
_HOW_TO_GIVE = (
    "give the server with --socket PATH, --host HOST --port PORT, --defaults-file FILE "
    "(a [client] section with socket=, user=, password=) or --pid PID"
)


@dataclass
class ConnectOptions:
    socket: str | None = None
    host: str | None = None
    port: int | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    defaults_file: str | None = None

    @property
    def where(self) -> str:
        if self.socket:
            return f"socket {self.socket}"
        return f"{self.host or 'localhost'}:{self.port or 3306}"

    @property
    def target(self) -> str:
        """The socket path or host:port, as a person would type it."""
        return self.socket or f"{self.host or 'localhost'}:{self.port or 3306}"

    @property
    def is_local(self) -> bool:
        return bool(self.socket) or (self.host or "localhost") in _LOCAL_HOSTS


def os_user() -> str:
    """The login name the client uses when no user is given (unix_socket checks the same)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return os.environ.get("USER") or "root"


# --- option files, read the way the mysql client reads them -----------------------------


@dataclass
class OptionFiles:
    """What the client groups of some option files say, and which file said each value."""

    values: dict[str, str] = field(default_factory=dict, repr=False)
    origin: dict[str, str] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def get(self, key: str) -> str | None:
        return self.values.get(key)


_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "r": "\r", "s": " ", "\\": "\\"}


def _option_value(raw: str) -> str:
    """A value as the client reads it: a # comment outside quotes cut off, enclosing
    quotes removed, then the \\b \\t \\n \\r \\s \\\\ escapes applied."""
    quote: str | None = None
    escaped = False
    end = len(raw)
    for i, ch in enumerate(raw):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "'\"":
            quote = None if quote == ch else (quote or ch)
        elif ch == "#" and quote is None:
            end = i
            break
    value = raw[:end].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[0]), value)


def read_option_files(
    paths: Iterable[str | Path], groups: tuple[str, ...] = CLIENT_GROUPS
) -> OptionFiles:
    """The client options of `paths` in order, a later value winning over an earlier one.

    Tolerant as the client is: keys without values, `!include` and `!includedir`
    (its *.cnf files in name order), `loose-` prefixes, `-` or `_` in names. Missing
    files are skipped; unreadable ones are listed in `unreadable`.
    """
    out = OptionFiles()
    for path in paths:
        _read_one(Path(path).expanduser(), groups, out, frozenset(), 0)
    return out


def _read_one(
    path: Path, groups: tuple[str, ...], out: OptionFiles, chain: frozenset[Path], depth: int
) -> None:
    real = path.resolve()
    if real in chain or depth > _MAX_INCLUDE_DEPTH:
        return  # an include cycle: the client refuses it too
    try:
        text = path.read_text(errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return
    except OSError:
        out.unreadable.append(str(path))
        return
    out.read.append(str(path))
    chain = chain | {real}
    group: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("!"):
            for included in _included(line, path):
                _read_one(included, groups, out, chain, depth + 1)
        elif line.startswith("["):
            group = line[1:].split("]", 1)[0].strip().lower()
        elif group in groups:
            key, sep, value = line.partition("=")
            key = key.split("#", 1)[0].strip().lower().replace("-", "_").removeprefix("loose_")
            # A key without a value is a flag (a bare `password` means "prompt"): no value.
            if sep and key:
                out.values[key] = _option_value(value)
                out.origin[key] = str(path)


def _included(line: str, path: Path) -> list[Path]:
    parts = line[1:].split(None, 1)
    if len(parts) < 2:
        return []
    name, target = parts[0].lower(), Path(parts[1].strip())
    if not target.is_absolute():
        target = path.parent / target
    if name == "include":
        return [target]
    if name == "includedir":
        try:
            return sorted(p for p in target.iterdir() if p.suffix == ".cnf" and p.is_file())
        except OSError:
            return []
    return []


def _system_path(path: str) -> Path:
    root = os.environ.get(TEST_ROOT_ENV)
    return Path(root + path) if root else Path(path)


def default_option_files() -> list[Path]:
    """The files the client reads when not given --defaults-file, in its order."""
    return [*(_system_path(p) for p in SYSTEM_OPTION_FILES), Path("~/.my.cnf").expanduser()]


def _explicit_option_file(path: str) -> OptionFiles:
    file = Path(path).expanduser()
    if not file.is_file():
        raise MallocbenchError(
            f"option file {path} does not exist: give --defaults-file an existing file"
        )
    options = read_option_files([file])
    if options.unreadable:
        raise MallocbenchError(
            f"cannot read option file {path}: permission denied (run as its owner)"
        )
    return options


def _option_files_for(opts: ConnectOptions) -> OptionFiles:
    """--defaults-file replaces the default files, as it does for the client."""
    if opts.defaults_file:
        return _explicit_option_file(opts.defaults_file)
    return read_option_files(default_option_files())


def read_option_file(path: str | None) -> dict[str, str]:
    """The client options of one option file, or of the client's default files."""
    if path is not None:
        return _explicit_option_file(path).values
    return read_option_files(default_option_files()).values


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
    files = _option_files_for(opts)
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
    files = _option_files_for(given)
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
    return [ConnectOptions(socket=str(_system_path(s))) for s in USUAL_SOCKETS]


def _debian_candidates(
    client: ConnectOptions | None, tried: _Tried
) -> Iterator[tuple[ConnectOptions, str]]:
    """Debian's maintenance account: a password on old releases, root by socket on 12."""
    path = _system_path(DEBIAN_CNF)
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
        [where] if where else [ConnectOptions(socket=str(_system_path(s))) for s in USUAL_SOCKETS]
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
    return _short_reason(exc)


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
    return _ask(cur, sql).rows


@dataclass
class _Answer:
    rows: list[tuple[Any, ...]]
    error: int | None = None  # the server's error code when it refused the statement
    message: str = ""


def _ask(cur: pymysql.cursors.Cursor, sql: str) -> _Answer:
    try:
        cur.execute(sql)
        return _Answer(list(cur.fetchall()))
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else -1
        return _Answer([], code, _short_reason(exc))


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
class Gap:
    """A source of the account the server did not give, why, and how to get it."""

    key: str  # memory_used, sessions, performance_schema, rocksdb, rocksdb_memtables, innodb
    what: str
    why: str

    @property
    def text(self) -> str:
        return f"{self.what}: unknown — {self.why}"

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "what": self.what, "why": self.why, "text": self.text}


@dataclass
class Session:
    """One connection as information_schema.PROCESSLIST shows it (no query text)."""

    id: int
    user: str
    memory_used: int
    command: str
    state: str | None


@dataclass
class ServerMemory:
    """What the server knows about its own memory, and its memory settings."""

    version: str
    flavor: str
    variables: dict[str, str]
    status: dict[str, str]
    sessions: list[Session]
    pfs_enabled: bool
    pfs_total: int | None
    pfs_top: list[tuple[str, int]]
    rocksdb: dict[str, int] | None
    innodb_status: dict[str, int]
    gaps: list[Gap] = field(default_factory=list)
    # False when PROCESSLIST showed only this user's sessions (no PROCESS privilege).
    sessions_complete: bool = True
    account: str = ""

    def var(self, name: str) -> int | None:
        return _int(self.variables.get(name))

    def stat(self, name: str) -> int | None:
        return _int(self.status.get(name))

    def gap(self, key: str) -> Gap | None:
        return next((g for g in self.gaps if g.key == key), None)

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


# Refusals for want of a privilege: database, table, column, and "needs PROCESS".
_DENIED = (1044, 1142, 1143, 1227)
_PFS_SQL = (
    "SELECT EVENT_NAME, CURRENT_NUMBER_OF_BYTES_USED FROM "
    "performance_schema.memory_summary_global_by_event_name "
    "WHERE CURRENT_NUMBER_OF_BYTES_USED > 0 "
    "ORDER BY CURRENT_NUMBER_OF_BYTES_USED DESC"
)
_PFS_INSTRUMENTS_SQL = (
    "SELECT COUNT(*) FROM performance_schema.setup_instruments WHERE NAME LIKE 'memory/%' "
    "AND NAME NOT LIKE 'memory/performance_schema/%' AND ENABLED = 'YES'"
)


def read_status(cur: pymysql.cursors.Cursor) -> dict[str, str]:
    """SHOW GLOBAL STATUS by name. A seam: tests wrap it to drop one variable of a real
    server's answer (MySQL's lack of Memory_used, say) while the rest stays real."""
    return {str(k): str(v) for k, v in _rows(cur, "SHOW GLOBAL STATUS")}


def _account(cur: pymysql.cursors.Cursor) -> str:
    rows = _rows(cur, "SELECT CURRENT_USER()")
    user, _, host = str(rows[0][0]).rpartition("@") if rows else ("", "", "")
    return f"'{user}'@'{host}'" if user else "the user"


def _process_grant(account: str) -> str:
    return f"GRANT PROCESS ON *.* TO {account}"


def collect(conn: pymysql.Connection) -> ServerMemory:
    """Everything the server says about its memory; what it refuses becomes a Gap."""
    with conn.cursor() as cur:
        variables = {str(k).lower(): str(v) for k, v in _rows(cur, "SHOW GLOBAL VARIABLES")}
        status = read_status(cur)
        version = variables.get("version", "")
        flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
        account = _account(cur)
        gaps: list[Gap] = []
        if "Memory_used" not in status:
            gaps.append(_memory_used_gap(flavor))
        innodb = _ask(cur, "SHOW ENGINE INNODB STATUS")
        has_process = innodb.error != 1227
        sessions: list[Session] = []
        if flavor == "mariadb":
            sessions = _sessions(cur, has_process, account, gaps)
        pfs_enabled = variables.get("performance_schema", "OFF").upper() in ("ON", "1")
        pfs_total: int | None = None
        pfs_top: list[tuple[str, int]] = []
        if pfs_enabled:
            pfs_total, pfs_top = _performance_schema(cur, account, gaps, "Memory_used" in status)
        elif "Memory_used" not in status:
            gaps.append(
                Gap(
                    "performance_schema",
                    "performance_schema memory",
                    "performance_schema is off (performance_schema=ON in my.cnf, then restart)",
                )
            )
        rocksdb = None
        if "rocksdb_block_cache_size" in variables:
            rocksdb = _rocksdb(cur, account, gaps)
        innodb_status = _parse_innodb_memory(str(innodb.rows[0][-1])) if innodb.rows else {}
        if innodb.error in _DENIED:
            gaps.append(
                Gap(
                    "innodb",
                    "InnoDB's own counters (total large memory, dictionary memory)",
                    f"SHOW ENGINE INNODB STATUS needs PROCESS: {_process_grant(account)}",
                )
            )
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
        gaps=gaps,
        sessions_complete=has_process and not any(g.key == "sessions" for g in gaps),
        account=account,
    )


def _memory_used_gap(flavor: str) -> Gap:
    if flavor == "mysql":
        why = "status variable Memory_used missing (MySQL has none; MariaDB 10.x has it)"
    else:
        why = "status variable Memory_used missing from SHOW GLOBAL STATUS (MariaDB 10.x has it)"
    return Gap("memory_used", "heap the server accounts for", why)


def _sessions(
    cur: pymysql.cursors.Cursor, has_process: bool, account: str, gaps: list[Gap]
) -> list[Session]:
    answer = _ask(
        cur,
        "SELECT ID, USER, MEMORY_USED, COMMAND, STATE FROM "
        "information_schema.PROCESSLIST ORDER BY MEMORY_USED DESC",
    )
    if answer.error is not None:
        gaps.append(
            Gap(
                "sessions",
                "memory per connection",
                f"information_schema.PROCESSLIST unreadable: {answer.message}",
            )
        )
    elif not has_process:
        gaps.append(
            Gap(
                "sessions",
                "memory of other users' connections",
                "without PROCESS, information_schema.PROCESSLIST lists only this user's "
                f"sessions: {_process_grant(account)}",
            )
        )
    return [
        Session(
            id=int(row[0]), user=row[1], memory_used=int(row[2] or 0), command=row[3], state=row[4]
        )
        for row in answer.rows
    ]


def _performance_schema(
    cur: pymysql.cursors.Cursor, account: str, gaps: list[Gap], has_memory_used: bool
) -> tuple[int | None, list[tuple[str, int]]]:
    answer = _ask(cur, _PFS_SQL)
    if answer.error is not None:
        if answer.error in _DENIED:
            why = (
                f"access denied for user {account}: "
                f"GRANT SELECT ON performance_schema.* TO {account}"
            )
        else:
            why = f"memory_summary_global_by_event_name unreadable: {answer.message}"
        gaps.append(Gap("performance_schema", "performance_schema memory", why))
        return None, []
    # MariaDB ships its memory instruments off, and needs none of them (Memory_used
    # counts the heap); without Memory_used, as on MySQL, they are the only account.
    instruments = [] if has_memory_used else _rows(cur, _PFS_INSTRUMENTS_SQL)
    if instruments and _int(instruments[0][0]) == 0:
        gaps.append(
            Gap(
                "performance_schema_instruments",
                "server memory seen by performance_schema",
                "its memory instruments are off, it counts only itself "
                "(performance-schema-instrument='memory/%=ON' in my.cnf, then restart)",
            )
        )
    total = sum(int(r[1]) for r in answer.rows)
    return total, [(str(r[0]), int(r[1])) for r in answer.rows[:10]]


def _rocksdb(cur: pymysql.cursors.Cursor, account: str, gaps: list[Gap]) -> dict[str, int]:
    out: dict[str, int] = {}
    status = _ask(cur, "SHOW ENGINE ROCKSDB STATUS")
    for row in status.rows:
        if row[0] == "MEMORY_STATS":
            out.update(_parse_rocksdb_memory(str(row[2])))
    stats = _ask(cur, "SELECT STAT_TYPE, VALUE FROM information_schema.ROCKSDB_DBSTATS")
    for name, value in stats.rows:
        if name == "DB_BLOCK_CACHE_USAGE":
            out["DB_BLOCK_CACHE_USAGE"] = int(value)
    if status.error is None:
        return out
    if status.error in _DENIED:
        why = f"SHOW ENGINE ROCKSDB STATUS needs PROCESS: {_process_grant(account)}"
    else:
        why = f"SHOW ENGINE ROCKSDB STATUS failed: {status.message}"
    if "DB_BLOCK_CACHE_USAGE" in out:
        gaps.append(Gap("rocksdb_memtables", "RocksDB memtables and table readers", why))
    else:
        gaps.append(Gap("rocksdb", "RocksDB block cache, memtables and table readers", why))
    return out


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
