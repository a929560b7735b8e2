"""Every server process mallocbench starts is tracked here and stopped on any exit path."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time

_live: dict[int, subprocess.Popen[bytes]] = {}
_lock = threading.Lock()


def track(proc: subprocess.Popen[bytes]) -> None:
    with _lock:
        _live[proc.pid] = proc


def untrack(proc: subprocess.Popen[bytes]) -> None:
    with _lock:
        _live.pop(proc.pid, None)


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM, wait up to `timeout`, then SIGKILL the process group. Returns the exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
    untrack(proc)
    return proc.returncode


def stop_all(timeout: float = 30.0) -> None:
    with _lock:
        procs = list(_live.values())
    deadline = time.monotonic() + timeout
    for proc in procs:
        terminate(proc, max(1.0, deadline - time.monotonic()))


def _on_sigterm(signum: int, frame: object) -> None:
    stop_all()
    raise SystemExit(128 + signum)


atexit.register(stop_all)
if threading.current_thread() is threading.main_thread():
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, _on_sigterm)
        signal.signal(signal.SIGHUP, _on_sigterm)


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: signal.Signals) -> None:
    """Have the kernel send `sig` to this process when `parent_pid`, its parent, dies.

    However the harness or a cluster worker ends, SIGKILL included, the load generator
    or unit it started does not live on measuring nothing. The parent check closes the
    window between fork and this call, when nobody would send the signal.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
