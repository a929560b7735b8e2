"""Which process is the server: a pid checked to be a MariaDB/MySQL server, or found
among the processes listening where the server was reached."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from mallocbench.errors import MallocbenchError
from mallocbench.memory.client import ConnectOptions
from mallocbench.memory.server import ServerMemory

SERVER_NAMES = ("mariadbd", "mysqld")


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
