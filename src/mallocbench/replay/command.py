"""Record a program from its first call: `record -- COMMAND ARGS`.

The program is started under the shim, armed from its start (MBRECORD_ARMED), and the
window is the program's lifetime or `seconds`, whichever ends first. The same window
machinery as `record --pid` takes the trace (control.Window, control._finish): the
trace is written beside --out and renamed to it, and whatever ends the window it is
kept. The program shares this command's terminal and process group, so Ctrl-C reaches
it as it would without mallocbench.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.native import shim_path
from mallocbench.replay import control, preload

# The shell's $$ is its own pid, which exec keeps: the shim arms only in that process
# (and in whatever it execs), never in the programs it starts, which inherit the
# variables and would otherwise write their calls into the same trace.
WRAPPER = (
    'export MBRECORD_ARMED="pid:$$" LD_PRELOAD="$MALLOCBENCH_PRELOAD"; '
    'unset MALLOCBENCH_PRELOAD; exec "$@"'
)
# How long the program may take to exec and its shim to answer "recording": a loaded
# host delays both, and a program that never loads the shim is caught by this.
ARM_WAIT_S = 15.0


class CommandWindow(control.Window):
    """A window in a program this command started: its files are in this command's own
    view of the file system, reachable after the program has gone."""

    @property
    def here(self) -> Path:
        return Path(self.control)


@dataclass
class Recorded:
    """A command's window: how it ended and where the trace is (`outcome`), and the
    program (still running when the window ended at --seconds)."""

    outcome: control.Outcome
    proc: subprocess.Popen[bytes]
    signum: int | None = None  # the signal that interrupted the window

    @property
    def running(self) -> bool:
        return self.proc.poll() is None


def _preload() -> str:
    """The shim in front of whatever this command was itself given to preload (an
    allocator: `LD_PRELOAD=libjemalloc.so mallocbench record -- prog`)."""
    given = os.environ.get("LD_PRELOAD", "").strip()
    return f"{shim_path()} {given}" if given else str(shim_path())


def _checked(command: Sequence[str], out: Path) -> Path:
    """Refuse what would only fail once the program runs; the trace's working name."""
    if shutil.which(command[0]) is None:
        raise MallocbenchError(
            f"cannot run {command[0]!r}: no such program (give its path, or a name on PATH)"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MallocbenchError(
            f"cannot create --out's directory {out.parent}: {exc.strerror}"
        ) from None
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise MallocbenchError(f"cannot write in {out.parent}: give an --out you can write")
    # Absolute: the shim opens it in each image the program execs, from wherever it is.
    return out.parent.absolute() / f".{out.name}.{os.getpid()}.recording"


def _start(
    command: Sequence[str],
    trace: Path,
    ctl: Path,
    max_buffer: int | None,
    long: control.Segmenting | None,
) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        MALLOCBENCH_PRELOAD=_preload(),
        MBRECORD_OUT=str(trace),
        MBRECORD_CONTROL=str(ctl),
    )
    env.pop("MBRECORD_ARMED", None)
    if max_buffer is not None:
        env["MBRECORD_MAX_BUFFER"] = str(max_buffer)
    for name in control.Segmenting().env():  # this command's, not its caller's
        env.pop(name, None)
    if long is not None:
        env.update(long.env())
    return subprocess.Popen(["/bin/sh", "-c", WRAPPER, "mallocbench-record", *command], env=env)


def _open(proc: subprocess.Popen[bytes], ctl: Path, trace: Path) -> CommandWindow:
    window = CommandWindow(proc.pid, str(ctl), str(trace))
    window.pidfd = os.pidfd_open(proc.pid)
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    window.ctl_dir = os.open(ctl.parent, flags)
    window.trace_dir = os.open(trace.parent, flags)
    return window


def _armed(window: CommandWindow, name: str) -> None:
    """Until the shim says it records; a program it never armed in is stopped, and one
    line says why (the program has not run far: it was started to be recorded)."""
    answer = control._await_status(window, "recording", ARM_WAIT_S)
    if answer.startswith(("recording", "complete", "stopped")):
        with contextlib.suppress(OSError):  # to take the trace after its directory goes
            window.trace_fd = os.open(window.server_file, os.O_RDONLY | os.O_CLOEXEC)
        return
    loaded = not window.ended() and preload.shim_loaded(window.pid) is not None
    fate = "it ran unrecorded"
    if not window.ended():
        os.kill(window.pid, signal.SIGTERM)
        fate = "the program was stopped"
    if answer.startswith("error"):
        why = f"the shim could not record ({answer.removeprefix('error ').strip()})"
    elif loaded:
        why = f"the shim in it did not answer in {ARM_WAIT_S:.0f} s"
    else:
        why = (
            "it never loaded the recording shim: a statically linked program or a setuid "
            "one ignores LD_PRELOAD, and its calls cannot be recorded"
        )
    raise MallocbenchError(f"{name}: {why}; {fate}")


def _window(
    proc: subprocess.Popen[bytes],
    window: CommandWindow,
    seconds: float | None,
    started: Callable[[], None] | None,
    name: str,
) -> int | None:
    """Wait out the window; the signal that cut it short, if one did."""
    with control.signals_interrupt():
        try:
            _armed(window, name)
            if started is not None:
                started()
            control._wait_window(window, math.inf if seconds is None else seconds)
        except KeyboardInterrupt as exc:
            return getattr(exc, "signum", int(signal.SIGINT))
        except BaseException:
            if proc.poll() is None:
                proc.terminate()
            raise
    return None


def record(
    command: Sequence[str],
    seconds: float | None,
    out: Path,
    started: Callable[[], None] | None = None,
    max_buffer: int | None = None,
    long: control.Segmenting | None = None,
) -> Recorded:
    """Run `command` under the shim from its first call until it exits or `seconds`
    pass, and take the trace to `out`. The program is left as the window left it: still
    running when `seconds` ended the window."""
    trace = _checked(command, out)
    workdir = Path(tempfile.mkdtemp(prefix="mallocbench-record-"))
    ctl = workdir / "control"
    try:
        proc = _start(command, trace, ctl, max_buffer, long)
        window = _open(proc, ctl, trace)
        window.armed_at = time.monotonic()
        try:
            signum = _window(proc, window, seconds, started, command[0])
            how = "" if signum is None else signal.Signals(signum).name
            wait_s = 60.0 if signum is None else control.CLOSE_AFTER_INTERRUPT_S
            outcome = control._finish(window, out, wait_s, how, seconds)
        finally:
            window.close()
        return Recorded(outcome, proc, signum)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
