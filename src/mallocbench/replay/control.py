"""Arm and disarm the shim in a running process through its control file.

The control file and the trace are reached through /proc/PID/root, so a server with a
private /tmp (systemd's PrivateTmp) or in a container is armed in its own view of the
file system; the trace is written by the server (as its user), beside --out when it can
(`near_out`), and then moved to --out and handed to the user who ran `record`.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.files import write_text_atomic
from mallocbench.probes import process as proc_probe
from mallocbench.replay import trace as tracemod
from mallocbench.replay.preload import control_path, in_process, not_loaded_message, shim_loaded
from mallocbench.replay.trace import STATUS_OFFSET, STATUS_SIZE


def _write(path: Path, text: str) -> None:
    """Atomically, mode 0644: the shim obeys only a file no other user can write."""
    write_text_atomic(path, text, mode=0o644)


LOCK_SUFFIX = ".lock"


def _read_at(directory: int, name: str) -> str:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return ""
    try:
        return os.read(fd, 4096).decode(errors="replace").strip()
    finally:
        os.close(fd)


@dataclass
class Window:
    """An armed recording window in process `pid`; the trace is written to `server_file`
    (as the process sees it) until `stop`. The descriptors reach the control file's and
    the trace's directories, and the trace itself, after the process has ended too: its
    /proc/PID/root goes with it, and a private /tmp with its service."""

    pid: int
    control: str
    server_file: str
    pidfd: int = -1
    ctl_dir: int = -1
    trace_dir: int = -1
    trace_fd: int = -1
    locked: bool = False
    armed_at: float = 0.0

    @property
    def here(self) -> Path:
        return in_process(self.pid, self.control)

    @property
    def status(self) -> Path:
        return self.here.with_name(self.here.name + ".status")

    @property
    def name(self) -> str:
        return os.path.basename(self.control)

    def read_status(self) -> str:
        return _read_at(self.ctl_dir, self.name + ".status")

    def remove(self, *suffixes: str) -> None:
        for suffix in suffixes:
            with contextlib.suppress(OSError):
                os.unlink(self.name + suffix, dir_fd=self.ctl_dir)

    def ended(self, wait_s: float = 0.0) -> bool:
        """The process has exited or was killed (waiting up to `wait_s` for it)."""
        if self.pidfd >= 0:
            return bool(select.select([self.pidfd], [], [], wait_s)[0])
        time.sleep(wait_s)
        return not Path(f"/proc/{self.pid}").exists()

    def header_status(self) -> str:
        """The trace's in-place status, read through the descriptor kept on it (a
        segmented trace's directory: its last segment's)."""
        if self.trace_fd < 0:
            return ""
        fd = self.trace_fd
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            names = [n for n in os.listdir(fd) if tracemod.SEGMENT_NAME.fullmatch(n)]
            if not names:
                return ""
            last = max(names, key=lambda n: int(n.split(".")[0]))
            fd = os.open(last, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.trace_fd)
        try:
            raw = os.pread(fd, STATUS_SIZE, STATUS_OFFSET)
        finally:
            if fd != self.trace_fd:
                os.close(fd)
        return raw.split(b"\0", 1)[0].decode(errors="replace")

    def close(self) -> None:
        """Give back the lock and the descriptors (the trace and its files stay)."""
        if self.locked:
            self.remove(LOCK_SUFFIX)
            self.locked = False
        for fd in (self.pidfd, self.ctl_dir, self.trace_dir, self.trace_fd):
            if fd >= 0:
                os.close(fd)
        self.pidfd = self.ctl_dir = self.trace_dir = self.trace_fd = -1


def _open_dir(pid: int, path: str) -> int:
    return os.open(in_process(pid, path), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def _open(window: Window) -> None:
    """Take hold of the process, its control directory and its trace's, and the lock."""
    pid = window.pid
    try:
        window.pidfd = os.pidfd_open(pid)
        window.ctl_dir = _open_dir(pid, os.path.dirname(window.control) or "/")
        window.trace_dir = _open_dir(pid, os.path.dirname(window.server_file) or "/")
    except OSError as exc:
        window.close()
        raise MallocbenchError(
            f"cannot reach {exc.filename or 'the files'} of process {pid} ({exc.strerror}): "
            "run as the server's user or root"
        ) from None
    _lock(window)


def _claim(window: Window, name: str) -> bool:
    """Create the lock with this recorder's PID already in it (a link to a file written
    first), so no other recorder ever reads it empty; False if it exists."""
    temp = f"{name}.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644,
                 dir_fd=window.ctl_dir)  # fmt: skip
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)
    try:
        os.link(temp, name, src_dir_fd=window.ctl_dir, dst_dir_fd=window.ctl_dir)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temp, dir_fd=window.ctl_dir)


def _lock(window: Window) -> None:
    """One recorder per process: a second "on" would close the first one's window early
    and leave it waiting for a trace that is no longer its own."""
    name = window.name + LOCK_SUFFIX
    owner = ""
    try:
        for _ in range(2):
            if _claim(window, name):
                window.locked = True
                return
            owner = _read_at(window.ctl_dir, name)
            if owner.isdigit() and proc_probe.alive(int(owner)):
                break
            with contextlib.suppress(OSError):  # its recorder died: the lock is stale
                os.unlink(name, dir_fd=window.ctl_dir)
    except OSError as exc:
        window.close()
        raise MallocbenchError(
            f"cannot write beside the control file {window.control} of process "
            f"{window.pid}: {exc.strerror}; run as the server's user or root"
        ) from None
    window.close()
    raise MallocbenchError(
        f"process {window.pid} is already being recorded by mallocbench (pid {owner or '?'}): "
        f"wait for that recording to end, or stop it with kill -INT {owner or 'PID'} (it "
        "keeps its trace), then record"
    )


def _await_status(window: Window, word: str, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while True:
        text = window.read_status()
        # "stopped": the shim's buffer cap ended the window early; the trace is closed
        if text.startswith((word, "error", "stopped")):
            return text
        if window.ended() or time.monotonic() >= deadline:
            return window.read_status()  # an exiting shim may have answered meanwhile
        time.sleep(0.05)


def _stopped(window: Window) -> bool:
    """The shim ended the window itself (its buffer cap): no use waiting out the time."""
    return window.read_status().startswith("stopped")


class CannotCreate(MallocbenchError):
    """The shim could not create the trace where it was told to."""


# Free room --out's directory needs to take the trace from its start: below it, or
# below what the process's own directory has, the trace goes there first (all of it is
# kept there, and moved at the end, where --out could only have taken it cut short).
NEAR_OUT_FREE = 256 << 20


def _free(path: Path) -> int:
    room = os.statvfs(path)
    return room.f_bavail * room.f_frsize


def near_out(pid: int, out: Path, ctl: str) -> str | None:
    """Where the shim may write the trace in --out's own directory, or None.

    The shim writes the trace itself, as the server's user, in its own mount namespace:
    no file descriptor can be handed to it, and a pipe through this command would make
    the server wait on it. So the trace goes beside --out only when the process sees
    that directory as this command does, can write there, and it has room; else beside
    the control file (its /tmp, perhaps tmpfs, i.e. RAM) until the end."""
    directory = out.parent.absolute()
    ctl_dir = in_process(pid, os.path.dirname(ctl) or "/")
    try:
        here = os.stat(directory)
        same = os.path.samestat(os.stat(in_process(pid, str(directory))), here)
        room = _free(directory)
        own = 0 if os.stat(ctl_dir).st_dev == here.st_dev else _free(ctl_dir)
    except OSError:
        return None
    if not same or room < max(NEAR_OUT_FREE, own):
        return None
    if not proc_probe.may_write(pid, directory):
        return None
    return str(directory / f".{out.name}.recording-{pid}")


@dataclass(frozen=True)
class Segmenting:
    """A long recording: its segments' size and age (0: no rotation by that; both 0: one
    file) and the disk budget of the whole recording (0: none)."""

    size: int = 0
    seconds: float = 0.0
    budget: int = 0

    @property
    def segmented(self) -> bool:
        return self.size > 0 or self.seconds > 0

    def words(self) -> str:
        """As the control file's "on" takes them (mbrecord.c: window_options)."""
        return f"seg={self.size} segsec={self.seconds:g} budget={self.budget} "

    def env(self) -> dict[str, str]:
        """As a program armed from its start takes them (mbrecord.c: env_options)."""
        return {
            "MBRECORD_SEGMENT": str(self.size),
            "MBRECORD_SEGMENT_SECONDS": f"{self.seconds:g}",
            "MBRECORD_MAX_SIZE": str(self.budget),
        }


def start(
    pid: int,
    server_file: str | None = None,
    max_buffer: int | None = None,
    out: Path | None = None,
    long: Segmenting | None = None,
) -> Window:
    """Arm the shim in `pid`; returns once it says it is recording. `max_buffer` caps the
    shim's buffers for this window (None: its MBRECORD_MAX_BUFFER, or 64 MiB); `long`
    makes the trace a directory of segments, or gives it a disk budget; the trace goes to
    `server_file`, else beside `out` if it can, else beside the control file. A process
    another recorder has armed is refused."""
    if shim_loaded(pid) is None:
        raise MallocbenchError(not_loaded_message(pid))
    ctl = control_path(pid)
    beside = near_out(pid, out, ctl) if server_file is None and out is not None else None
    if beside is not None:
        try:
            return _started(pid, ctl, beside, max_buffer, long)
        except CannotCreate:
            pass  # what the mode bits do not show (AppArmor, SELinux): its own directory
    server_file = server_file or (
        f"{os.path.dirname(ctl) or '/tmp'}/mbrecord-{pid}-{time.time_ns()}.mbt"
    )
    return _started(pid, ctl, server_file, max_buffer, long)


def _started(
    pid: int, ctl: str, server_file: str, max_buffer: int | None, long: Segmenting | None
) -> Window:
    window = Window(pid, ctl, server_file)
    _open(window)
    try:
        _arm(window, max_buffer, long)
    except BaseException:
        with contextlib.suppress(OSError):  # interrupted while arming: not armed either
            _write(window.here, "off\n")
        window.close()
        raise
    window.armed_at = time.monotonic()
    with contextlib.suppress(OSError):  # to copy it even if its directory goes
        window.trace_fd = os.open(
            os.path.basename(server_file), os.O_RDONLY | os.O_CLOEXEC, dir_fd=window.trace_dir
        )
    return window


def _arm(window: Window, max_buffer: int | None, long: Segmenting | None = None) -> None:
    pid, ctl = window.pid, window.control
    window.remove(".status")
    try:
        cap = "" if max_buffer is None else f"cap={max_buffer} "
        cap += "" if long is None else long.words()
        _write(window.here, f"on {cap}{window.server_file}\n")
    except OSError as exc:
        raise MallocbenchError(
            f"cannot write the control file {ctl} of process {pid}: {exc.strerror}; "
            "run as the server's user or root"
        ) from None
    answer = _await_status(window, "recording", 5.0)
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
    if (
        long is not None
        and answer.startswith("recording ")
        and (answer.removeprefix("recording ").strip() != window.server_file)
    ):  # a shim from before segments took the options for a path: it records there
        with contextlib.suppress(OSError):
            _write(window.here, "off\n")
        raise MallocbenchError(
            f"the shim loaded in process {pid} predates segmented recordings: restart the "
            "server to load the current one, or record without --segment-size, "
            "--segment-seconds and --max-size"
        )
    if answer.startswith("error cannot create"):
        raise CannotCreate(
            f"the shim in process {pid} cannot create {window.server_file} ({answer})"
        )
    if not answer.startswith(("recording", "stopped")):  # stopped: it recorded, briefly
        raise MallocbenchError(
            f"the shim in process {pid} did not start recording "
            f"({answer or 'no answer in 5 s'}): check that {ctl} is its control file"
        )


def disarm(window: Window) -> None:
    """Tell the shim to stop, without waiting for it."""
    _write(window.here, "off\n")


@dataclass
class Outcome:
    """How a window ended and where its trace is. `ended`: "window" (it ran its time),
    "shim" (the shim stopped it: its buffer cap or a write error), "exited" (the process
    exited and the shim closed the trace), "killed" (the process ended without closing
    it), "interrupted", "unanswered" (the shim said nothing in time)."""

    closing: str
    ended: str
    kept: Path | None = None
    problem: str = ""  # why the trace is not where it was asked to go
    signal: str = ""  # what interrupted it: SIGINT (Ctrl-C), SIGTERM, SIGHUP


def _ending(window: Window, closing: str, interrupted: bool) -> str:
    if not closing.startswith(("complete", "stopped", "error")):
        return "killed" if window.ended() else "unanswered"
    if interrupted:
        return "interrupted"
    if "(process exit)" in window.header_status():
        return "exited"
    return "shim" if closing.startswith(("stopped", "error")) else "window"


def _finish(
    window: Window, out: Path | None, wait_s: float, interrupted: str = "",
    seconds: float | None = None,
) -> Outcome:  # fmt: skip
    """Disarm, await the shim's closing line, take the trace to `out` (None: leave it
    where the process wrote it) and say in its header why the window ended, where only
    this side knows. Nothing of the window stays in the process's /tmp, unless the shim
    has not answered in `wait_s` (it may still be writing the trace and reading those
    files, so all stay)."""
    if not window.ended():
        with contextlib.suppress(OSError):
            disarm(window)
    closing = _await_status(window, "complete", wait_s)
    ended = _ending(window, closing, bool(interrupted))
    if ended == "unanswered":
        # It may still be writing the trace: a copy now could be torn; it stays there.
        source = in_process(window.pid, window.server_file)
        said = f"said {closing!r}" if closing else "said nothing"
        return Outcome(
            closing, ended, source if source.exists() else None,
            f"the shim in process {window.pid} left no closed trace within {wait_s:.0f} s "
            f"({said})",
        )  # fmt: skip
    # The shim reads the control file only for a change: without it nothing happens.
    window.remove("", ".status")
    if out is None:
        source = in_process(window.pid, window.server_file)
        return Outcome(closing, ended, source if source.exists() else None)
    outcome = _deliver(window, out, Outcome(closing, ended, signal=interrupted))
    if outcome.kept is not None and not str(outcome.kept).startswith("/proc/"):
        hand_over(outcome.kept)
    if outcome.kept is not None and outcome.kept.parent.is_dir():
        with contextlib.suppress(OSError):
            _annotate(outcome, window, time.monotonic() - window.armed_at, seconds)
    return outcome


def _annotate(outcome: Outcome, window: Window, elapsed: float, seconds: float | None) -> None:
    """The header's status says why a window ended early when the shim could not know."""
    assert outcome.kept is not None
    status = tracemod.header_status(outcome.kept)
    span = f"{elapsed:.1f} s" + ("" if seconds is None else f" of a {seconds:g} s window")
    if outcome.ended == "killed":
        end = tracemod.cut_to_whole_frames(outcome.kept)
        text = (
            f"stopped: process {window.pid} ended at about {span} before the shim could "
            f"close the trace; whole frames up to byte offset {end}"
        )
    elif outcome.ended == "interrupted" and status.startswith("complete (disarmed)"):
        text = status.replace("(disarmed)", f"(interrupted by {outcome.signal} at {span})", 1)
    elif outcome.ended == "exited":
        text = status.replace("(process exit)", f"(process {window.pid} exited at {span})", 1)
    else:
        return
    tracemod.set_status(outcome.kept, text)


def recorder_ids() -> tuple[int, int]:
    """The user who ran `record`: under sudo, the one who called sudo."""
    uid, gid = os.environ.get("SUDO_UID", ""), os.environ.get("SUDO_GID", "")
    if os.geteuid() == 0 and uid.isdigit() and gid.isdigit():
        return int(uid), int(gid)
    return os.getuid(), os.getgid()


def hand_over(path: Path) -> None:
    """The trace to the user who ran `record`, readable by no one else: the shim made it
    as the server's user with the server's umask (mysql, 0640), and a trace tells how
    the server's memory is used. Best effort: a file the trace is kept in anyway."""
    uid, gid = recorder_ids()
    for part in [path, *(tracemod.segments(path) if path.is_dir() else [])]:
        with contextlib.suppress(OSError):
            st = part.stat()
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.chown(part, uid, gid)
            os.chmod(part, 0o700 if part.is_dir() else 0o600)


def _deliver(window: Window, out: Path, outcome: Outcome) -> Outcome:
    """Move the trace to `out`; failing that, keep it where it outlasts the process."""
    name = os.path.basename(window.server_file)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _clear_for(out, name, window)
        try:
            os.rename(name, out, src_dir_fd=window.trace_dir)  # on one filesystem
        except OSError:
            _copy(window, name, out)
        outcome.kept = out
        return outcome
    except OSError as exc:
        outcome.problem = f"cannot write {out}: {exc.strerror}"
    outcome.kept = _rescue(window, name)
    return outcome


def _clear_for(out: Path, name: str, window: Window) -> None:
    """An earlier trace at `out` makes way when its kind differs from the new one's (a
    rename replaces a file by a file, and an empty directory by a directory, only): a
    segmented trace, or a file in place of one. Anything else at `out` stays, and the
    rename's error says why."""
    try:
        new_is_dir = stat.S_ISDIR(os.stat(name, dir_fd=window.trace_dir).st_mode)
    except OSError:
        return
    if out.is_dir() and not out.is_symlink():
        names = [p.name for p in out.iterdir()]
        if all(tracemod.SEGMENT_NAME.fullmatch(n) for n in names):
            shutil.rmtree(out)
    elif new_is_dir and out.is_file():
        out.unlink()


def _copy(window: Window, name: str, dest: Path) -> None:
    """The trace to `dest`, through a temporary name: `dest` is whole or untouched. Read
    through the descriptor taken when the window opened, so a trace whose directory went
    with its process is still copied (a segmented trace: segment by segment)."""
    src = window.trace_fd
    if src < 0:
        src = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=window.trace_dir)
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        if stat.S_ISDIR(os.fstat(src).st_mode):
            partial.mkdir()
            for part in sorted(n for n in os.listdir(src) if tracemod.SEGMENT_NAME.fullmatch(n)):
                fd = os.open(part, os.O_RDONLY | os.O_CLOEXEC, dir_fd=src)
                with open(fd, "rb") as reader, (partial / part).open("wb") as writer:
                    shutil.copyfileobj(reader, writer, 1 << 20)
        else:
            with open(os.dup(src), "rb") as reader, partial.open("wb") as writer:
                reader.seek(0)
                shutil.copyfileobj(reader, writer, 1 << 20)
        os.replace(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        partial.unlink(missing_ok=True)
        raise
    finally:
        if src != window.trace_fd:
            os.close(src)
    with contextlib.suppress(OSError):
        _remove(window.trace_dir, name)


def _remove(directory: int, name: str) -> None:
    """The trace the process wrote, a file or a directory of segments."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=directory).st_mode):
        os.unlink(name, dir_fd=directory)
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory)
    try:
        for part in os.listdir(fd):
            os.unlink(part, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=directory)


def _rescue(window: Window, name: str) -> Path | None:
    """Where the trace is when --out could not take it: where the process wrote it if
    this host sees that directory under the same path (a shared /tmp outlasts the
    process), else copied to this command's temporary directory; as a last resort its
    path through /proc, which lasts as long as the process."""
    with contextlib.suppress(OSError):
        os.stat(name, dir_fd=window.trace_dir)
        here = os.stat(os.path.dirname(window.server_file) or "/")
        if os.path.samestat(here, os.fstat(window.trace_dir)):
            return Path(window.server_file)
    rescued = Path(tempfile.gettempdir()) / name
    try:
        _copy(window, name, rescued)
        return rescued
    except OSError:
        source = in_process(window.pid, window.server_file)
        return source if source.exists() else None


def stop(window: Window, out: Path | None) -> str:
    """Disarm; move the trace to `out` (None: leave it where the process wrote it).
    Returns the shim's closing status line."""
    try:
        outcome = _finish(window, out, 60.0)
    finally:
        window.close()
    if outcome.kept is None or (out is not None and outcome.kept != out):
        where = f"it is at {outcome.kept}" if outcome.kept else "no copy could be kept"
        raise MallocbenchError(f"{outcome.problem or 'no trace was written'}; {where}")
    if outcome.ended == "killed":  # the shim said nothing; the header says it now
        return tracemod.header_status(outcome.kept)
    return outcome.closing


class RecordingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) while recording: the shim was disarmed, and `outcome`
    says where the trace so far is (its `kept` is None when the shim did not close it in
    time)."""

    def __init__(self, outcome: Outcome, signum: int = signal.SIGINT) -> None:
        super().__init__()
        self.outcome = outcome
        self.kept = outcome.kept
        self.signum = int(signum)


class Signalled(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a recording, raised where Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the window as Ctrl-C does: by default they would kill this
    command and leave the server recording, its trace in the server's /tmp (and a
    cluster's replay unit its replayer running for nobody)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise Signalled(signum)

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# After an interruption, how long the shim may take to close its trace: it polls the
# control file ten times a second and flushes what its writer holds.
CLOSE_AFTER_INTERRUPT_S = 5.0


def _wait_window(window: Window, seconds: float) -> None:
    """Until the window's time is up, the shim stopped it, or the process ended."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0 and not _stopped(window):
        if window.ended(min(left, 0.5)):
            return


def _armed_window(
    pid: int,
    seconds: float,
    started: Callable[[], None] | None,
    max_buffer: int | None,
    out: Path,
    long: Segmenting | None = None,
) -> tuple[Window, int | None]:
    """Arm, and wait out the window; the signal that cut it short, if one did (then the
    shim has been told to stop)."""
    with signals_interrupt():
        window = start(pid, max_buffer=max_buffer, out=out, long=long)
        try:
            if started is not None:
                started()
            _wait_window(window, seconds)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                disarm(window)  # never leave a server recording
            if not isinstance(exc, KeyboardInterrupt):
                window.close()
                raise
            return window, getattr(exc, "signum", int(signal.SIGINT))
    return window, None


def record(
    pid: int,
    seconds: float,
    out: Path,
    started: Callable[[], None] | None = None,
    max_buffer: int | None = None,
    long: Segmenting | None = None,
) -> Outcome:
    """Arm the shim in `pid` for `seconds`, disarm it and move the trace to `out`; the
    outcome says how the window ended and where the trace is. Interrupted (Ctrl-C,
    SIGTERM, SIGHUP), it disarms the shim, keeps the trace so far and raises
    RecordingInterrupted."""
    window, signum = _armed_window(pid, seconds, started, max_buffer, out, long)
    try:
        if signum is None:
            return _finish(window, out, 60.0, seconds=seconds)
        name = signal.Signals(signum).name
        try:
            outcome = _finish(window, out, CLOSE_AFTER_INTERRUPT_S, name, seconds)
        except OSError as lost:
            outcome = Outcome("", "interrupted", None, str(lost), name)
        raise RecordingInterrupted(outcome, signum) from None
    finally:
        window.close()
