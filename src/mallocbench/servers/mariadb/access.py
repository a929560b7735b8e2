"""Who can reach a private server: the unprivileged user a root-run harness hands it to,
files only that user (or ours) may read, and the TCP port it may listen on."""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError

# The unprivileged account a root-run harness hands its servers to (Debian's packages
# create it with mariadb-server).
SERVER_USER = "mysql"


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


def chown_tree(path: Path, user: ServerUser | None) -> None:
    if user is None:
        return
    os.chown(path, user.uid, user.gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), user.uid, user.gid)


def write_private(path: Path, text: str, owner: ServerUser | None = None) -> None:
    """A 0600 file created with that mode: a password in it is never readable by others."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    if owner is not None:
        os.chown(path, owner.uid, owner.gid)


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
