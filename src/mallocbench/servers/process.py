"""Every server process mallocbench starts is tracked here and stopped on any exit path;
what the forked child of any family does before exec, and the environment it starts with."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping

from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError

_live: dict[int, subprocess.Popen[bytes]] = {}
_lock = threading.Lock()


class ToolRun:
    """An external tool run beside a server (a soak event's dump or backup), one at a
    time, which another thread may stop: the session is ending, the server is going."""

    def __init__(self, stopped: threading.Event, timeout_s: float) -> None:
        self.stopped = stopped
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def run(self, command: list[str], env: Mapping[str, str] | None = None) -> None:
        """Run it to its end; raises with its last line of errors when it fails."""
        with self._lock:
            if self.stopped.is_set():
                raise MallocbenchError("the session ended first")
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env=None if env is None else dict(env),
            )  # fmt: skip
        process = self._process
        try:
            _, err = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise MallocbenchError(f"still running after {self.timeout_s:g} s: stopped") from None
        finally:
            with self._lock:
                self._process = None
        if process.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()
            raise MallocbenchError(
                f"{os.path.basename(command[0])} exited with status {process.returncode}"
                + (f": {tail[-1]}" if tail else "")
            )

    def terminate(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.terminate()


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


_PR_SET_THP_DISABLE = 41


def disable_thp() -> None:
    """Runs in the forked child: the flag survives execve and covers the whole server
    (and, for PostgreSQL, every backend it forks)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_THP_DISABLE) failed")


def in_child(steps: list[Callable[[], None]]) -> Callable[[], None] | None:
    """One preexec_fn running `steps` in order; None when there are none (fork without
    a Python callback in the child)."""
    if not steps:
        return None

    def run_steps() -> None:
        for step in steps:
            step()

    return run_steps


# Environment variables that would change the allocator or its behaviour behind our back.
ALLOCATOR_ENV = re.compile(
    r"^(LD_PRELOAD|MALLOC_|GLIBC_TUNABLES|JE_MALLOC_CONF|TCMALLOC_|HEAPPROFILE|MIMALLOC_"
    r"|MBRECORD_)"
)


def allocator_environment(
    allocator: Allocator, knobs: Mapping[str, object], shim: str | None = None
) -> dict[str, str]:
    """Ours without anything that would change the allocator, then the setup's preload
    (`shim` first, so its malloc is the one called; it forwards to the allocator's) and
    knobs."""
    env = {k: v for k, v in os.environ.items() if not ALLOCATOR_ENV.match(k)}
    preload = allocator.preload()
    if shim:
        preload = f"{shim} {preload}" if preload else shim
    if preload:
        env["LD_PRELOAD"] = preload
    env.update({k: str(v) for k, v in knobs.items()})
    return env


def pinned(cmd: list[str], cpus: str | None) -> list[str]:
    """`cmd` run on the CPUs `cpus` names (taskset), or as it is when none are named."""
    if not cpus:
        return cmd
    taskset = shutil.which("taskset")
    if taskset is None:
        raise MallocbenchError("cpus is set but taskset is missing: apt-get install util-linux")
    return [taskset, "-c", cpus, *cmd]
