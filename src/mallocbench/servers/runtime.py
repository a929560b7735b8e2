"""Where a root-run harness keeps its private servers' own state.

When mallocbench runs as root its servers drop to the unprivileged server user, which
must reach its datadir, socket, tmpdir, init file and `secure_file_priv` directory. The
user's `--out` may sit anywhere, often under a 0700 home or `mktemp -d`, and opening such
a directory to every user would undo the point of dropping root. So that state lives in a
runtime directory of its own, created for the run (mode 0700, owned by the server's
user) and removed when the run ends; results, reports, my.cnf and error-log copies stay
in `--out`, which the server never needs to enter.

The runtime directories sit under /var/lib/mallocbench/run: on disk, because datadirs
can be gigabytes (/run is a tmpfs, and RAM spent there would distort the very memory
being measured); beside /var/cache/mallocbench, so copying a golden datadir usually
stays on one file system; and under root-owned 0755 directories that nobody else can
plant entries in, unlike /tmp.

Each runtime directory has a lock file beside it that its harness holds for as long as
it lives (flock locks die with their process, SIGKILL included). Creating a new one
first removes every runtime directory whose lock nobody holds, stopping any server
still running inside it: that harness died and nobody is served by it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.servers import process
from mallocbench.servers.orphans import find_orphan, stop_signals
from mallocbench.servers.outcome import SERVER_RECORD

RUNTIME_ROOT = Path("/var/lib/mallocbench/run")
# Moves the runtime directories elsewhere (a bigger disk; a test's small one), read at
# each use: a process forked from one that imported this module may have another value.
RUNTIME_ENV = "MALLOCBENCH_RUNTIME"


def runtime_root() -> Path:
    return Path(os.environ.get(RUNTIME_ENV) or RUNTIME_ROOT)


# Held while a runtime directory is created or leftovers are removed, so a sweep never
# mistakes a directory being created for one whose harness died.
_ROOT_LOCK = ".lock"
_LOCK_SUFFIX = ".lock"


class RuntimeDir:
    """One harness's runtime directory; its lock is held until `remove()` or death."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd

    @classmethod
    def create(cls, label: str, uid: int, gid: int, root: Path | None = None) -> RuntimeDir:
        """A new 0700 directory owned by uid:gid; leftovers of dead harnesses go first."""
        root = root or runtime_root()
        try:
            _prepare_root(root)
            with _root_locked(root):
                sweep_locked(root, uid)
                name = re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40] or "run"
                path = Path(tempfile.mkdtemp(prefix=f"{name}.", dir=root))
                fd = os.open(f"{path}{_LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                holder = {"pid": os.getpid(), "started": time.time(), "command": sys.argv}
                os.write(fd, (json.dumps(holder) + "\n").encode())
                os.chown(path, uid, gid)
        except OSError as exc:
            raise MallocbenchError(
                f"cannot create a runtime directory for the private servers in {root}: "
                f"{exc.strerror}; mallocbench needs it when run as root"
            ) from exc
        return cls(path, fd)

    def state_dir(self, rundir: Path) -> Path:
        """Where the server of a session directory keeps its state: the same for the same
        directory, so a server restarted on it finds its datadir again."""
        digest = hashlib.sha256(str(rundir).encode()).hexdigest()[:8]
        return self.path / f"{rundir.name[:32]}-{digest}"

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{self.path}{_LOCK_SUFFIX}")
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RuntimeDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _prepare_root(root: Path) -> None:
    """Create the root (0755: the server's user passes through to its own directory) and
    refuse one that others could write to: they could plant or swap entries in it."""
    for directory in reversed([root, *root.parents]):
        if not directory.exists():
            with contextlib.suppress(FileExistsError):
                directory.mkdir(mode=0o755)
                # Our own new directory: the umask (root's may be 077) must not close it.
                os.chmod(directory, 0o755)
    info = root.stat()
    if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise MallocbenchError(
            f"{root} must be owned by root and writable by nobody else (it is mode "
            f"{stat.S_IMODE(info.st_mode):o}, owner uid {info.st_uid}): remove it, and "
            "mallocbench creates it anew"
        )
    for directory in [root, *root.parents]:
        # System directories and ours: the server's user passes as "other".
        if not directory.stat().st_mode & stat.S_IXOTH:
            raise MallocbenchError(
                f"{directory} (mode {stat.S_IMODE(directory.stat().st_mode):o}) keeps the "
                f"server's user out of the runtime directories under {root}: it needs "
                "mode 755, as mallocbench creates its own directories there"
            )


@contextlib.contextmanager
def _root_locked(root: Path) -> Iterator[None]:
    fd = os.open(root / _ROOT_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _abandoned(directory: Path) -> bool:
    """Whether the directory is a harness's (its lock file is beside it) and no live
    harness holds that lock. One without a lock file is not ours to remove: the root
    may be a directory the user named (MALLOCBENCH_RUNTIME) that holds other things."""
    try:
        fd = os.open(f"{directory}{_LOCK_SUFFIX}", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def sweep_locked(root: Path, uid: int) -> list[Path]:
    """Remove the runtime directories of dead harnesses (the caller holds the root lock),
    after stopping the servers still running in them; the directories removed."""
    removed = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir() or entry.is_symlink():
            continue
        if not _abandoned(entry):
            continue
        signals = _family_signals(entry)
        for pid in _processes_inside(entry, uid):
            _stop(pid, entry, uid, signals.get(pid, _DEFAULT_SIGNALS))
        shutil.rmtree(entry, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{entry}{_LOCK_SUFFIX}")
        removed.append(entry)
    return removed


def _inside(pid: int, directory: Path, uid: int) -> bool:
    """A process of the server's user working in the directory: a server there (mysqld
    works in its datadir). The kernel says so, not a file anyone could have edited."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return cwd == str(directory) or cwd.startswith(f"{directory}/")


def _processes_inside(directory: Path, uid: int) -> list[int]:
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _inside(int(entry.name), directory, uid)
    ]


_DEFAULT_SIGNALS = ((signal.SIGTERM, 60.0), (signal.SIGKILL, 10.0))


def _family_signals(directory: Path) -> dict[int, tuple[tuple[signal.Signals, float], ...]]:
    """The servers' own ways to stop, by PID, from the records their servers left in
    their state directories (outcome.write_record): a postmaster reads SIGTERM as a
    smart shutdown that waits for every client, so it gets its family's fast one. A
    record names a PID only while that process runs under the recorded start time."""
    found = {}
    for record in directory.glob(f"*/{SERVER_RECORD}"):
        orphan = find_orphan(record)
        if orphan is not None:
            found[orphan.pid] = stop_signals(orphan.family, 60.0)
    return found


def _stop(
    pid: int,
    directory: Path,
    uid: int,
    signals: tuple[tuple[signal.Signals, float], ...] = _DEFAULT_SIGNALS,
) -> None:
    """The server's way to stop (SIGTERM, then SIGKILL, unless its family says
    otherwise), through a pidfd: a reused PID is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if not _inside(pid, directory, uid):
            return
        for sig, wait in signals:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, sig)
            # A pidfd turns readable when its process exits.
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if poller.poll(wait * 1000):
                return
        raise MallocbenchError(
            f"a server left by a dead mallocbench run (PID {pid}, in {directory}) did not "
            f"stop: kill it with `kill -9 {pid}`, then run again"
        )
    finally:
        os.close(fd)


def discard_state(rundir: Path, statedir: Path, datadir: Path, keep_datadir: bool) -> None:
    """Remove what a stopped server kept in its state directory; a datadir kept for
    inspection moves into the session directory, beside its logs."""
    if statedir == rundir:
        if not keep_datadir:
            shutil.rmtree(datadir, ignore_errors=True)
        return
    if keep_datadir and datadir.is_dir():
        kept = rundir / "data"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.move(datadir, kept)
    shutil.rmtree(statedir, ignore_errors=True)


_process_default: RuntimeDir | None = None


def process_default(uid: int, gid: int) -> RuntimeDir:
    """The runtime directory for servers started outside a run (a dataset load, a
    profile, a test), created on first use and removed when this process exits."""
    global _process_default
    if _process_default is None:
        _process_default = RuntimeDir.create(f"pid{os.getpid()}", uid, gid)
        atexit.register(_remove_process_default)
    return _process_default


def _remove_process_default() -> None:
    # atexit runs last-registered first: stop the servers before their state goes.
    process.stop_all()
    if _process_default is not None:
        _process_default.remove()


__all__ = [
    "RUNTIME_ENV",
    "RUNTIME_ROOT",
    "RuntimeDir",
    "discard_state",
    "runtime_root",
    "process_default",
    "sweep_locked",
]
