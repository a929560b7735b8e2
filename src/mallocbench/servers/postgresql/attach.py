"""A PostgreSQL server mallocbench did not start, found from one of its processes.

Any process of the server leads to its postmaster: a backend's parents are postgres
processes up to the postmaster (its title is rewritten, its command name is not). How to
reach it is read where the server wrote it: postmaster.pid in its data directory (the
postmaster works there) names its port and first socket directory; when that file is
not readable, the postmaster's command line (-p, -k, -c port=...), the Unix sockets the
kernel lists (/proc/net/unix, readable by anyone) and Debian's defaults. The role is the
one given, else the name of the user the server runs as (peer authentication's match);
a password comes from a prompt, PGPASSWORD or ~/.pgpass (libpq reads both), never from
a command line. The session only reads (SELECT, SHOW).

Backends write their memory contexts to the server's log when asked
(pg_log_backend_memory_contexts): the log is pg_current_logfile() with the logging
collector, else the file the postmaster's standard error goes to, when it is one.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers.postgresql.memory import ServerMemory, account_of

# The server's binary, and the command name of every process it forks.
SERVER_NAMES = ("postgres", "postmaster")
DEFAULT_PORT = 5432
DEFAULT_SOCKET_DIR = "/var/run/postgresql"  # Debian's build


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def is_postgres(pid: int) -> bool:
    return _comm(pid) in SERVER_NAMES


def postmaster_of(pid: int) -> int | None:
    """The postmaster of the PostgreSQL process `pid` (itself when it is the postmaster);
    None when `pid` is no PostgreSQL process."""
    if not is_postgres(pid):
        return None
    while (parent := _parent(pid)) > 1 and is_postgres(parent):
        pid = parent
    return pid


@dataclass(frozen=True)
class Place:
    """Where a server listens, and which of the sources above said so."""

    postmaster: int
    socket_dir: str
    port: int
    datadir: str | None
    source: str  # "postmaster.pid", "command line", "socket list", "default", "given"

    @property
    def socket(self) -> str:
        return f"{self.socket_dir}/.s.PGSQL.{self.port}"


def _datadir(postmaster: int) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{postmaster}/cwd")
    args = _cmdline(postmaster)
    for i, arg in enumerate(args[:-1]):
        if arg == "-D":
            return args[i + 1]
    return None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [w.decode(errors="replace") for w in raw.split(b"\0") if w]


def _from_pid_file(postmaster: int, datadir: str | None) -> Place | None:
    """postmaster.pid: pid, data directory, start time, port, socket directory, ..."""
    if datadir is None:
        return None
    try:
        lines = (Path(datadir) / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 5 or lines[0].strip() != str(postmaster) or not lines[3].strip().isdigit():
        return None
    socket_dir = lines[4].strip()
    if not socket_dir:
        return None  # no Unix socket: TCP only, which --host reaches
    return Place(postmaster, socket_dir, int(lines[3]), datadir, "postmaster.pid")


def _command_line_settings(postmaster: int) -> dict[str, str]:
    """port and unix_socket_directories as the postmaster's arguments set them."""
    args = _cmdline(postmaster)
    found: dict[str, str] = {}
    short = {"-p": "port", "-k": "unix_socket_directories"}
    for i, arg in enumerate(args):
        following = args[i + 1] if i + 1 < len(args) else ""
        if arg in short and following:
            found[short[arg]] = following
        setting = (
            following if arg == "-c" else arg.removeprefix("--") if arg.startswith("--") else ""
        )
        name, sep, value = setting.partition("=")
        if sep and name.replace("-", "_") in ("port", "unix_socket_directories"):
            found[name.replace("-", "_")] = value
    return found


def _listed_socket_dir(port: int) -> str | None:
    """A directory holding this port's socket, from the kernel's list of Unix sockets."""
    name = f"/.s.PGSQL.{port}"
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        path = line.split()[-1] if len(line.split()) > 7 else ""
        if path.endswith(name):
            return path[: -len(name)]
    return None


def where(postmaster: int, socket: str | None = None, port: int | None = None) -> Place:
    """How to reach the server of `postmaster`; `socket` (a directory, or the socket
    file itself) and `port` override what is found."""
    datadir = _datadir(postmaster)
    found = _from_pid_file(postmaster, datadir)
    if found is None:
        args = _command_line_settings(postmaster)
        the_port = int(args["port"]) if args.get("port", "").isdigit() else DEFAULT_PORT
        listed = None if "unix_socket_directories" in args else _listed_socket_dir(the_port)
        directory = args.get("unix_socket_directories", "").split(",")[0].strip()
        source = "command line" if args else "default"
        if not directory and listed:
            directory, source = listed, "socket list"
        found = Place(postmaster, directory or DEFAULT_SOCKET_DIR, the_port, datadir, source)
    if socket is None and port is None:
        return found
    if socket is not None and Path(socket).name.startswith(".s.PGSQL."):
        port = port or int(Path(socket).name.removeprefix(".s.PGSQL."))
        socket = str(Path(socket).parent)
    return Place(postmaster, socket or found.socket_dir, port or found.port, datadir, "given")


def owner(pid: int) -> str:
    """The name of the user process `pid` runs as."""
    uid = os.stat(f"/proc/{pid}").st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


_HOW = "give --user ROLE and --ask-password (or PGPASSWORD, ~/.pgpass)"


def _refusal(exc: psycopg.Error, place: Place, user: str) -> str:
    """One line: what the server said, and which option gets past it."""
    said = (str(exc).strip().splitlines() or ["no reason given"])[-1]
    said = said.split("FATAL:", 1)[-1].strip()
    at = f"the PostgreSQL server at {place.socket}"
    if "no password supplied" in said:
        return (
            f"{at} asks role {user!r} for a password: give it with --ask-password (or "
            "PGPASSWORD, ~/.pgpass)"
        )
    if "password authentication failed" in said:
        return f"{at} refused the password of role {user!r}: give the right one with --ask-password"
    if "Peer authentication failed" in said:
        return (
            f"{at} admits role {user!r} only from the system user of that name (peer "
            f"authentication): run as that user (sudo -u {user}), or {_HOW}"
        )
    if "does not exist" in said and "role" in said:
        return f"{at} has no role {user!r}: {_HOW}"
    return (
        f"cannot reach {at} (found from {place.source}): {said}; give --socket DIR and --port PORT"
    )


def connect(place: Place, user: str, password: str | None) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(
            host=place.socket_dir,
            port=place.port,
            user=user,
            password=password,
            dbname="postgres",
            connect_timeout=10,
            autocommit=True,
            application_name="mallocbench memory",
        )
    except psycopg.Error as exc:
        raise MallocbenchError(_refusal(exc, place, user)) from None


def log_file(postmaster: int, datadir: str | None, conn: psycopg.Connection[Any]) -> Path | None:
    """Where the backends' LOG lines go, when this process can read it."""
    path: Path | None = None
    try:
        row = conn.execute("SELECT pg_current_logfile()").fetchone()
        if row and row[0]:
            path = Path(str(row[0]))
            if not path.is_absolute() and datadir is not None:
                path = Path(datadir) / path
    except psycopg.Error:
        pass  # not a superuser, or no logging collector
    if path is None:
        with contextlib.suppress(OSError):
            target = Path(os.readlink(f"/proc/{postmaster}/fd/2"))
            path = target if target.is_file() else None
    return path if path is not None and os.access(path, os.R_OK) else None


@dataclass(frozen=True)
class RunningMemory:
    """`memory --pid` on a PostgreSQL server: where it was reached, and its account."""

    asked_pid: int
    place: Place
    user: str
    version: str
    allocator: str
    allocator_path: str | None
    contexts_log: str | None  # None: the other backends' contexts could not be read
    memory: ServerMemory


def take(
    pid: int,
    user: str | None,
    password: str | None,
    socket: str | None = None,
    port: int | None = None,
) -> RunningMemory:
    """The account of the PostgreSQL server process `pid` belongs to."""
    postmaster = postmaster_of(pid)
    if postmaster is None:
        raise MallocbenchError(f"process {pid} is not a PostgreSQL server process")
    place = where(postmaster, socket, port)
    role = user or owner(postmaster)
    serving = allocators.detect(postmaster)
    with connect(place, role, password) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        log = log_file(postmaster, place.datadir, conn)
        try:
            memory = account_of(postmaster, log, conn)
        except psycopg.Error as exc:
            said = (str(exc).strip().splitlines() or ["refused"])[0]
            raise MallocbenchError(
                f"role {role!r} may not read the server's memory views ({said}): "
                f"GRANT pg_read_all_stats TO {role}, or give --user of a superuser"
            ) from None
    return RunningMemory(
        asked_pid=pid,
        place=place,
        user=role,
        version=str(row[0]) if row else "unknown",
        allocator=serving.name,
        allocator_path=serving.path,
        contexts_log=str(log) if log else None,
        memory=memory,
    )


__all__ = ["Place", "RunningMemory", "connect", "is_postgres", "postmaster_of", "take", "where"]
