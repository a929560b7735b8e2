"""Locks that keep two runs from writing into one output directory or one run id.

flock(2) locks die with their process, so a harness killed with SIGKILL never leaves a
stale lock behind; the file keeps who held it last, for the message a second run gets.
A store shared by several runs (as on several hosts) stays possible: each run locks its
own output directory and its own run id, not the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sys
import time
from pathlib import Path

from mallocbench.errors import MallocbenchError

DIRECTORY_LOCK = ".mallocbench.lock"
RUN_LOCKS = ".mallocbench-locks"


class HeldLock:
    """An exclusive lock this process holds until `release()` (or its death)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(holder: dict[str, object]) -> str:
    pid = holder.get("pid", "?")
    started = holder.get("started")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
        if isinstance(started, int | float)
        else "an unknown time"
    )
    return f"PID {pid}, started {when}"


def _acquire(path: Path, what: str, hint: str) -> HeldLock:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise MallocbenchError(f"cannot create the lock {path}: {exc.strerror}; {hint}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise MallocbenchError(
            f"{what} is in use by another mallocbench run ({_describe(_holder(path))}): {hint}"
        ) from None
    record = {"pid": os.getpid(), "started": time.time(), "command": " ".join(sys.argv)}
    # The flock is the lock; the record only names its holder to a second command. On a
    # full disk it is left out, and the command goes on to the write that says what the
    # full disk costs it (the store's), rather than dying here.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(record) + "\n").encode())
    return HeldLock(path, fd)


def lock_directory(out_dir: Path) -> HeldLock:
    """The output directory, for the whole run: its servers, reports and store are ours."""
    return _acquire(
        out_dir / DIRECTORY_LOCK,
        f"the output directory {out_dir}",
        "wait for it to finish or stop it, or choose another --out",
    )


def _run_lock_path(store_path: Path, run_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", run_id)
    return store_path.parent / RUN_LOCKS / f"{store_path.name}.{safe}.lock"


def lock_run(store_path: Path, run_id: str) -> HeldLock:
    """One run id in one store: a run and its --resume never write it at the same time."""
    return _acquire(
        _run_lock_path(store_path, run_id),
        f"run {run_id} in {store_path}",
        "wait for it to finish or stop it before resuming",
    )


def run_holder(store_path: Path, run_id: str) -> int | None:
    """The PID running `run_id` now, or None; reads only, creates nothing."""
    path = _run_lock_path(store_path, run_id)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder(path).get("pid")
        return pid if isinstance(pid, int) else -1
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return None


def live_status(store_path: Path, run_id: str, status: str) -> str:
    """A stored status as it stands now: "running" is only true while someone holds the run."""
    if status != "running":
        return status
    pid = run_holder(store_path, run_id)
    if pid is None:
        return "died (its harness is gone: run again with --resume to continue)"
    return f"running (PID {pid})"
