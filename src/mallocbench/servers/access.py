"""Who can reach a private server of any family: the unprivileged user a root-run harness
hands it to, files only that user (or ours) may read, and the TCP port it may listen on."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError


@dataclass(frozen=True)
class ServerUser:
    name: str
    uid: int
    gid: int


def handed_to(name: str, why: str, package: str) -> ServerUser | None:
    """The account `name` when mallocbench is root (`why` says what it is for, `package`
    which Debian package creates it); None: servers run as ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise MallocbenchError(
            f"{why}, which does not exist: run `make setup` ({package} "
            f"creates it) or `useradd --system {name}`"
        ) from None
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def chown_tree(path: Path, user: ServerUser | None) -> None:
    if user is None:
        return
    os.chown(path, user.uid, user.gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), user.uid, user.gid)


def copy_datadir(golden: Path, datadir: Path, user: ServerUser | None) -> None:
    """A copy of a golden datadir, 0700 and handed to the server's user."""
    shutil.rmtree(datadir, ignore_errors=True)
    # cp -a keeps sparse files sparse and is much faster than copytree for big datadirs.
    out = subprocess.run(
        ["cp", "-a", "--reflink=auto", str(golden), str(datadir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        # A partial copy would keep a full disk full; cp's first line names the file.
        shutil.rmtree(datadir, ignore_errors=True)
        first = (out.stderr.strip().splitlines() or ["cp failed"])[0]
        raise MallocbenchError(f"copying the dataset into {datadir} failed: {first}")
    os.chmod(datadir, 0o700)
    chown_tree(datadir, user)


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
