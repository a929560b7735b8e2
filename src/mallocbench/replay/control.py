"""Arm and disarm the shim in a running process through its control file.

The control file and the trace are reached through /proc/PID/root, so a server with a
private /tmp (systemd's PrivateTmp) or in a container is armed in its own view of the
file system; the trace is written by the server (as its user) and then moved to --out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mallocbench import allocators
from mallocbench.deploy import SYSTEMD_DIR, environment_line
from mallocbench.errors import MallocbenchError
from mallocbench.files import write_text_atomic
from mallocbench.replay.native import SHIM, shim_path

CONTROL_ENV = "MBRECORD_CONTROL"


def shim_loaded(pid: int) -> str | None:
    """The shim's path as mapped in `pid`, or None."""
    libs = allocators.mapped_libraries(pid)
    return next((lib for lib in libs if os.path.basename(lib) == SHIM), None)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def control_path(pid: int) -> str:
    """The control file as the process sees it (the shim's default unless the env says)."""
    return _environ(pid).get(CONTROL_ENV) or f"/tmp/mbrecord-{pid}.control"


def in_process(pid: int, path: str) -> Path:
    """`path` as seen by process `pid`, reached from here."""
    return Path(f"/proc/{pid}/root") / path.lstrip("/")


def service_of(pid: int) -> str | None:
    """The systemd service running `pid` (from its cgroup), e.g. "mariadb"."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for part in text.strip().split("/"):
        if part.endswith(".service"):
            return part.removesuffix(".service")
    return None


def preload_value(pid: int | None) -> str:
    """LD_PRELOAD for the shim in front of the process's allocator (shim first, so its
    malloc is the one called and it forwards to the allocator's)."""
    shim = str(shim_path())
    if pid is None:
        return shim
    mapped = allocators.detect(pid)
    return shim if mapped.name == "glibc" or not mapped.path else f"{shim} {mapped.path}"


def dropin_text(pid: int | None, service: str) -> str:
    return (
        f"# {SYSTEMD_DIR}/{service}.service.d/mbrecord.conf: preloads the mallocbench\n"
        "# recording shim; it records nothing until `mallocbench record --pid` arms it.\n"
        "[Service]\n" + environment_line("LD_PRELOAD", preload_value(pid)) + "\n"
    )


def not_loaded_message(pid: int) -> str:
    service = service_of(pid) or "mariadb"
    line = environment_line("LD_PRELOAD", preload_value(pid))
    return (
        f"process {pid} does not have the recording shim loaded: put [Service] {line} in "
        f"{SYSTEMD_DIR}/{service}.service.d/mbrecord.conf (`mallocbench record --print-dropin "
        f"--pid {pid}` prints it), systemctl daemon-reload, restart {service}, then record"
    )


def _write(path: Path, text: str) -> None:
    """Atomically, mode 0644: the shim obeys only a file no other user can write."""
    write_text_atomic(path, text, mode=0o644)


def _await_status(status: Path, word: str, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    text = ""
    while time.monotonic() < deadline:
        try:
            text = status.read_text().strip()
        except OSError:
            text = ""
        # "stopped": the shim's buffer cap ended the window early; the trace is closed
        if text.startswith((word, "error", "stopped")):
            return text
        time.sleep(0.05)
    return text


@dataclass
class Window:
    """An armed recording window in process `pid`; the trace is written to `server_file`
    (as the process sees it) until `stop`."""

    pid: int
    control: str
    server_file: str

    @property
    def here(self) -> Path:
        return in_process(self.pid, self.control)

    @property
    def status(self) -> Path:
        return self.here.with_name(self.here.name + ".status")


def _stopped(window: Window) -> bool:
    """The shim ended the window itself (its buffer cap): no use waiting out the time."""
    try:
        return window.status.read_text().startswith("stopped")
    except OSError:
        return False


def start(pid: int, server_file: str | None = None, max_buffer: int | None = None) -> Window:
    """Arm the shim in `pid`; returns once it says it is recording. `max_buffer` caps the
    shim's buffers for this window (None: its MBRECORD_MAX_BUFFER, or 64 MiB)."""
    if shim_loaded(pid) is None:
        raise MallocbenchError(not_loaded_message(pid))
    ctl = control_path(pid)
    server_file = server_file or (
        f"{os.path.dirname(ctl) or '/tmp'}/mbrecord-{pid}-{time.time_ns()}.mbt"
    )
    window = Window(pid, ctl, server_file)
    window.status.unlink(missing_ok=True)
    try:
        cap = "" if max_buffer is None else f"cap={max_buffer} "
        _write(window.here, f"on {cap}{server_file}\n")
    except OSError as exc:
        raise MallocbenchError(
            f"cannot write the control file {ctl} of process {pid}: {exc.strerror}; "
            "run as the server's user or root"
        ) from None
    answer = _await_status(window.status, "recording", 5.0)
    if not answer.startswith(("recording", "stopped")):
        # Take the "on" back: a shim that was only slow (its process stopped, its writer
        # starved) would otherwise arm on it later and record with nobody to stop it.
        with contextlib.suppress(OSError):
            _write(window.here, "off\n")
    if "cannot create cap=" in answer:  # a shim from before the cap took it for a path
        raise MallocbenchError(
            f"the shim loaded in process {pid} predates --max-buffer: restart the server "
            "to load the current one, or record without --max-buffer"
        )
    if not answer.startswith(("recording", "stopped")):  # stopped: it recorded, briefly
        raise MallocbenchError(
            f"the shim in process {pid} did not start recording "
            f"({answer or 'no answer in 5 s'}): check that {ctl} is its control file"
        )
    return window


def disarm(window: Window) -> None:
    """Tell the shim to stop, without waiting for it."""
    _write(window.here, "off\n")


def _collect(window: Window, out: Path | None, wait_s: float) -> tuple[str, Path | None]:
    """Await the disarmed shim's closing line; once it has answered, remove the control
    and status files (nothing of the window stays in the process's /tmp) and move the
    trace to `out` (None: leave it where the process wrote it). Returns the closing line
    and where the trace now is: None when the shim wrote none, or has not answered in
    `wait_s` (it may still be writing the trace and reading those files, so all stay)."""
    closing = _await_status(window.status, "complete", wait_s)
    if not closing.startswith(("complete", "stopped", "error")):
        return closing, None
    # The shim reads the control file only for a change: without it nothing happens.
    window.here.unlink(missing_ok=True)
    window.status.unlink(missing_ok=True)
    source = in_process(window.pid, window.server_file)
    if not source.is_file():
        return closing, None
    if out is None:
        return closing, source
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(source), out)
    return closing, out


def stop(window: Window, out: Path | None) -> str:
    """Disarm; move the trace to `out` (None: leave it where the process wrote it).
    Returns the shim's closing status line."""
    disarm(window)
    closing, kept = _collect(window, out, 60.0)
    if kept is None:
        said = f"said {closing!r}" if closing else "said nothing"
        raise MallocbenchError(
            f"the shim in process {window.pid} left no closed trace within 60 s ({said}); "
            f"whatever it wrote stays at {in_process(window.pid, window.server_file)}"
        )
    return closing


class RecordingInterrupted(KeyboardInterrupt):
    """Ctrl-C while recording: the shim was disarmed, and the trace so far is in `kept`
    (None when the shim did not close it in time)."""

    def __init__(self, kept: Path | None) -> None:
        super().__init__()
        self.kept = kept


# After an interruption, how long the shim may take to close its trace: it polls the
# control file ten times a second and flushes what its writer holds.
CLOSE_AFTER_INTERRUPT_S = 5.0


def record(
    pid: int,
    seconds: float,
    out: Path,
    started: Callable[[], None] | None = None,
    max_buffer: int | None = None,
) -> str:
    """Arm the shim in `pid` for `seconds`, disarm it and move the trace to `out`.
    Returns the shim's closing status line. Interrupted, it disarms the shim, keeps the
    trace so far in `out` and raises RecordingInterrupted."""
    window = start(pid, max_buffer=max_buffer)
    try:
        if started is not None:
            started()
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not _stopped(window):
            time.sleep(min(left, 0.5))
    except BaseException as exc:
        _write(window.here, "off\n")  # never leave a server recording
        if not isinstance(exc, KeyboardInterrupt):
            raise
        try:
            kept = _collect(window, out, CLOSE_AFTER_INTERRUPT_S)[1]
        except OSError:
            kept = None
        raise RecordingInterrupted(kept) from None
    return stop(window, out)
