"""`mallocbench record`: arm the recording shim in a running server for a window."""

from __future__ import annotations

import contextlib
import itertools
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from mallocbench import exitcodes
from mallocbench.commands.output import say
from mallocbench.deploy import deployment, systemd
from mallocbench.deploy.launch import FORMS, detect
from mallocbench.errors import MallocbenchError
from mallocbench.report import formats
from mallocbench.report import record as said
from mallocbench.units import parse_size

# The shim's buffers at rest (zstd's context and two frame buffers, which shrink under a
# small cap, and a chunk per recording thread) take about this much at the least: a cap
# below it would stop every recording at its start.
MIN_BUFFER = 1 << 20
# A window longer than a segment's age is recorded in segments (a directory at --out):
# one file of an hour's calls could not be replayed in part, nor copied while it grows.
SEGMENT_S = 300.0
SEGMENT_SIZE = 256 << 20
# A budget must hold a segment's header, its live-block table and a frame of calls.
MIN_MAX_SIZE = 1 << 20

if TYPE_CHECKING:
    from mallocbench.memory.client import ConnectOptions
    from mallocbench.replay.command import Recorded
    from mallocbench.replay.control import Outcome, Segmenting


@click.command(
    "record", epilog=exitcodes.RECORD_HELP, context_settings={"allow_interspersed_args": False}
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
# A str: `--pid $(pidof mariadbd)` with two servers is refused with both named.
@click.option("--pid", "pid_text", metavar="PID", help="The server process (with the shim loaded).")
@click.option(
    "--seconds",
    type=click.FloatRange(0.1, 86400),
    help="Length of the recording window; --pid: default 60; a command: default its whole "
    "run (the window ends when it exits or after SECONDS, whichever comes first).",
)
@click.option(
    "--leave-running",
    is_flag=True,
    help="A command whose --seconds ended first is left running, unrecorded, and record "
    "returns; by default record waits for it to exit.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("trace.mbt"),
    show_default=True,
    help="Where the trace goes.",
)
@click.option(
    "--print-dropin",
    is_flag=True,
    help="Print how to preload the shim (in front of the allocator of --pid, if given) "
    "in the form that fits how --pid runs (systemd unit, mysqld_safe, container, plain "
    "environment), and exit.",
)
@click.option(
    "--form",
    type=click.Choice(FORMS),
    help="The form --print-dropin prints (default: the one that fits --pid, else systemd).",
)
@click.option(
    "--remove-dropin",
    is_flag=True,
    help="Remove the recording drop-in of --service (or of --pid's unit) under --units-dir, "
    "and exit; the shim stays loaded until the service restarts.",
)
@click.option(
    "--units-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(deployment.SYSTEMD_DIR),
    show_default=True,
    help="Unit directory of --remove-dropin.",
)
@click.option(
    "--max-buffer",
    "max_buffer",
    metavar="SIZE",
    help="Cap on the shim's buffers in the server (events waiting for its writer, and the "
    "writer's own); default: the server's MBRECORD_MAX_BUFFER, or 64M. If the writer falls "
    "behind (a busy host, a slow disk) and they reach it, recording stops there: the trace "
    "is whole up to that point and says so, and the server runs on.",
)
@click.option(
    "--segment-size",
    metavar="SIZE",
    help="Write the trace as a directory of segments (at --out), a new one every SIZE "
    f"(default {SEGMENT_SIZE >> 20}M) or every --segment-seconds; each replays alone, and "
    f"the directory replays whole. A window over {SEGMENT_S:g} s is recorded in segments "
    "without asking.",
)
@click.option(
    "--segment-seconds",
    type=click.FloatRange(0.1, 86400),
    help=f"A new segment every SECONDS (default {SEGMENT_S:g}), or at --segment-size.",
)
@click.option(
    "--max-size",
    metavar="SIZE",
    help="Disk budget for the whole trace, e.g. 20G: when it is reached, recording stops "
    "there (the process runs on) and the trace so far is whole and replays.",
)
@click.option(
    "--service",
    help="Service name for --print-dropin and --remove-dropin (default: the unit of --pid, "
    "else mariadb).",
)
@click.option(
    "--socket",
    metavar="PATH",
    help="--pid's Unix socket, for asking the server about its load (kept beside the "
    "trace) when it cannot be found: by default the socket the process listens on, then "
    "the option files, as `mallocbench memory` finds one.",
)
@click.option(
    "--defaults-file",
    metavar="FILE",
    help="The only option file to read for asking --pid's server ([client] socket=, user=, "
    "password=); default: /etc/my.cnf, /etc/mysql/my.cnf and ~/.my.cnf.",
)
@click.option("--user", metavar="USER", help="The user to ask --pid's server as.")
@click.option("--ask-password", is_flag=True, help="Prompt for that user's password.")
def record(
    command: tuple[str, ...],
    pid_text: str | None,
    seconds: float | None,
    leave_running: bool,
    out: Path,
    print_dropin: bool,
    form: str | None,
    remove_dropin: bool,
    units_dir: Path,
    max_buffer: str | None,
    segment_size: str | None,
    segment_seconds: float | None,
    max_size: str | None,
    service: str | None,
    socket: str | None,
    defaults_file: str | None,
    user: str | None,
    ask_password: bool,
) -> None:
    """Record a running server's allocation calls (no data) for a window, or a
    program's from its first call.

    \b
    The server must run with the shim preloaded; it records nothing until armed:
      mallocbench record --print-dropin --pid PID   how to preload it (once)
      mallocbench record --pid PID --seconds 60 --out trace.mbt
      mallocbench replay trace.mbt --allocators glibc,jemalloc,tcmalloc
      mallocbench record --remove-dropin --service mariadb   when done (systemd)
    Or a program run under the shim from its first call until it exits (or --seconds;
    the programs it starts are not recorded; the exit status is the trace's, a note
    gives the program's):
      mallocbench record --out app.mbt -- ./app --its-options
    A long window is a directory of segments, within a disk budget if given:
      mallocbench record --pid PID --seconds 3600 --max-size 20G --out hour.mbt
    """
    from mallocbench.replay import serverrss, workload
    from mallocbench.replay.trace import header_status

    pid = one_pid(pid_text, command)
    asking = _asking(pid, print_dropin or remove_dropin, socket, defaults_file, user, ask_password)
    if _preload_only(pid, print_dropin, form, remove_dropin, units_dir, service):
        return
    _one_target(command, pid)
    cap = _buffer_cap(max_buffer)
    long = _segmenting(segment_size, segment_seconds, max_size, seconds)
    if command:
        _record_command(command, seconds, out, cap, leave_running, long)
        return
    assert pid is not None
    seconds = 60.0 if seconds is None else seconds
    at_start = serverrss.sample(pid)  # the server's RSS, for a saving in its terms
    described = workload.Capture.begin(pid, asking)  # its load, for a confirmation on it
    outcome = _window(pid, seconds, out, cap, long)
    if outcome.kept != out:
        _not_at_out(outcome, out, pid)
    serverrss.note(out, at_start, serverrss.sample(pid))
    _described(described.end(out))
    status = header_status(out)
    if outcome.ended == "window":
        _kept(out, said.CLOSED, outcome.closing)
        return
    if _budget_reached(out, status):
        return
    _kept(out, said.STATUS, status)
    say(formats.RECORD_EARLY, said.Early(outcome.ended, status, pid), err=True)
    sys.exit(exitcodes.ABORTED)


def _kept(out: Path, how: str, closing: str = "", err: bool = False) -> None:
    say(formats.RECORD_KEPT, said.Kept(out, _size(out), how, closing), err=err)


def _window(
    pid: int, seconds: float, out: Path, cap: int | None, long: Segmenting | None
) -> Outcome:
    """The window in process `pid`, to its end; an interruption exits here, in its way."""
    from mallocbench.replay import control

    try:
        return control.record(
            pid,
            seconds,
            out,
            started=lambda: say(
                formats.RECORD_START, said.Started(out, long, seconds, pid=pid), err=True
            ),
            max_buffer=cap,
            long=long,
        )
    except control.RecordingInterrupted as stopped:
        if stopped.outcome.kept == out:
            _kept(out, said.INTERRUPTED, err=True)
        else:
            _not_at_out(stopped.outcome, out, pid)
        _interrupted(stopped.signum)
    except control.Signalled as stopped:  # while arming: the shim was told "off"
        _interrupted(stopped.signum)


def _buffer_cap(max_buffer: str | None) -> int | None:
    cap = None if max_buffer is None else parse_size(max_buffer, "--max-buffer")
    if cap is not None and cap < MIN_BUFFER:
        raise MallocbenchError(
            f"--max-buffer {max_buffer} is below {MIN_BUFFER >> 20}M, less than the shim's "
            "buffers hold at rest: give e.g. 64M"
        )
    return cap


def _segmenting(
    size_text: str | None, seconds: float | None, max_size: str | None, window: float | None
) -> Segmenting | None:
    """How a long window is written (None: one file, as ever). Segments when asked for,
    or when the window is longer than a segment; a budget with or without them."""
    from mallocbench.replay.control import Segmenting

    size = 0 if size_text is None else parse_size(size_text, "--segment-size")
    budget = 0 if max_size is None else parse_size(max_size, "--max-size")
    if size_text is not None and size < MIN_MAX_SIZE:
        raise MallocbenchError(
            f"--segment-size {size_text} is below 1M, less than a segment's header and "
            "live-block table take: give e.g. 256M"
        )
    if max_size is not None and budget < MIN_MAX_SIZE:
        raise MallocbenchError(
            f"--max-size {max_size} is below 1M, less than a trace's header and first "
            "frames take: give e.g. 20G"
        )
    asked = size_text is not None or seconds is not None
    if asked or (window is not None and window > SEGMENT_S):
        age = SEGMENT_S if seconds is None else seconds
        return Segmenting(size or SEGMENT_SIZE, age, budget)
    return Segmenting(budget=budget) if budget else None


def _size(out: Path) -> said.TraceSize:
    """What the trace takes, and in how many segments."""
    from mallocbench.replay.trace import segments, trace_bytes

    return said.TraceSize(trace_bytes(out), len(segments(out)) if out.is_dir() else None)


def _budget_reached(out: Path, status: str) -> bool:
    """The disk budget ended the window: what was asked for, said in one line."""
    if not status.startswith("stopped: the disk budget"):
        return False
    at = status.split(" was reached at ", 1)[-1].split(",", 1)[0]
    _kept(out, said.BUDGET, at)
    return True


def _described(missing: str | None) -> None:
    if missing is not None:
        say(formats.RECORD_UNDESCRIBED, missing, err=True)


def _asking(
    pid: int | None,
    preload_only: bool,
    socket: str | None,
    defaults_file: str | None,
    user: str | None,
    ask_password: bool,
) -> ConnectOptions | None:
    """How to ask --pid's server about its load, as `memory` connects (None: found as
    memory finds one); refused in one line where there is no window of a server."""
    from mallocbench.memory.client import ConnectOptions

    given = [name for name, value in (("--socket", socket), ("--defaults-file", defaults_file),
             ("--user", user), ("--ask-password", ask_password)) if value]  # fmt: skip
    if not given:
        return None
    if pid is None or preload_only:
        raise MallocbenchError(
            f"{', '.join(given)}: for asking a server recorded with --pid about its load; "
            "leave them out here"
        )
    if defaults_file is not None and not Path(defaults_file).is_file():
        raise MallocbenchError(f"--defaults-file {defaults_file}: no such file")
    password = None
    if ask_password:
        password = click.prompt("Password", hide_input=True, default="", show_default=False)
    return ConnectOptions(socket=socket, user=user, password=password, defaults_file=defaults_file)


def one_pid(text: str | None, command: Sequence[str]) -> int | None:
    """The one process id of --pid; several (`--pid "$(pidof mariadbd)"`, or unquoted,
    where the second PID reads as the start of a command) are refused with each one's
    command line."""
    if text is None:
        return None
    extra = list(itertools.takewhile(str.isdigit, command))
    words = text.replace(",", " ").split() + extra
    bad = next((w for w in words if not w.isdigit() or int(w) < 1), None)
    if bad is not None or not words:
        raise MallocbenchError(
            f"--pid {bad if bad is not None else repr(text)} is not a process id: give the "
            "server's PID (did `pidof` find no server?)"
        )
    pids = list(dict.fromkeys(int(w) for w in words))
    if len(pids) > 1:
        named = ", ".join(f"{p} ({_command(p)})" for p in pids)
        raise MallocbenchError(
            f"--pid names {len(pids)} processes: {named}; record one server at a time: "
            "give one of these PIDs"
        )
    return pids[0]


def _command(pid: int) -> str:
    """A process's command line, shortened, to tell two servers apart."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "not running"
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    text = " ".join(words) or "?"
    return text if len(text) <= 100 else text[:97] + "..."


def _preload_only(
    pid: int | None,
    print_dropin: bool,
    form: str | None,
    remove_dropin: bool,
    units_dir: Path,
    service: str | None,
) -> bool:
    """--print-dropin or --remove-dropin, done (True), or neither was asked."""
    from mallocbench.replay import preload

    if form is not None and not print_dropin:
        raise MallocbenchError("--form chooses what --print-dropin prints: give both")
    if print_dropin:
        d, started = preload.recording_for(pid, service)
        say(formats.RECORD_FORM, said.Form(d, started, form))
    elif remove_dropin:
        _remove_dropin(units_dir, service, pid)
    return print_dropin or remove_dropin


def _remove_dropin(units_dir: Path, service: str | None, pid: int | None) -> None:
    from mallocbench.replay import preload

    started = detect(pid) if pid and not service else None
    name = service or (started.service if started else None) or preload.default_service(pid)
    if started is not None and started.form != "systemd":
        say(formats.RECORD_REMOVED, said.Removed(name, units_dir, started=started))
        return
    removed = systemd.remove_dropins(units_dir, name)
    say(formats.RECORD_REMOVED, said.Removed(name, units_dir, tuple(removed)))


def _one_target(command: Sequence[str], pid: int | None) -> None:
    if command and pid is not None:
        raise MallocbenchError("give --pid PID or a command to run (after --), not both")
    if pid is None and not command:
        raise MallocbenchError(
            "give --pid PID of the server to record, or a command to run: record -- COMMAND "
            "(or --print-dropin)"
        )


def _interrupted(signum: int) -> NoReturn:
    """Exit as a signal's interruption does, 128 + its number."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt  # the group's own line and status
    say(formats.RECORD_INTERRUPTED, signum, err=True)
    sys.exit(exitcodes.interrupted(signum))


def _not_at_out(outcome: Outcome, out: Path, pid: int) -> NoReturn:
    """--out could not take the trace: one line with where it is and how to move it."""
    say(formats.RECORD_NOT_AT_OUT, said.NotAtOut(out, outcome.problem, outcome.kept, pid), err=True)
    sys.exit(exitcodes.RECORD_NOT_AT_OUT)


# --- record -- COMMAND: the program is started here (replay/command.py runs it) ----------


def _record_command(
    command: Sequence[str],
    seconds: float | None,
    out: Path,
    max_buffer: int | None,
    leave_running: bool,
    long: Segmenting | None = None,
) -> None:
    from mallocbench.replay import command as commandmod

    if leave_running and seconds is None:
        raise MallocbenchError(
            "--leave-running needs --seconds: without it the window is the program's lifetime"
        )
    shown = shlex.join(command)

    def started() -> None:
        say(formats.RECORD_START, said.Started(out, long, seconds, command=shown), err=True)

    done = commandmod.record(command, seconds, out, started, max_buffer, long)
    pid = done.proc.pid
    if done.outcome.kept != out:
        if done.running and not leave_running:
            done.proc.wait()
        _not_at_out(done.outcome, out, pid)
    if done.signum is not None:
        _kept(out, said.INTERRUPTED_COMMAND, err=True)
        if done.signum != signal.SIGINT and done.running:  # Ctrl-C reached it already
            done.proc.send_signal(done.signum)
            with contextlib.suppress(subprocess.TimeoutExpired):  # it may handle it slowly
                done.proc.wait(timeout=5)
        _interrupted(done.signum)
    _ended(done, out, leave_running)


def _ended(done: Recorded, out: Path, leave_running: bool) -> None:
    """The window's end: the program's exit (a whole trace), --seconds (then the program
    is waited for, or left running), or a cut (the shim stopped, the program killed)."""
    outcome, proc = done.outcome, done.proc
    if outcome.ended == "window":
        _kept(out, said.CLOSED, outcome.closing)
        if leave_running:
            say(formats.RECORD_PROGRAM, said.Program(said.RUNS_ON, proc.pid), err=True)
            return
        if done.running:
            say(formats.RECORD_PROGRAM, said.Program(said.WAITING, proc.pid), err=True)
        _exit_note(proc.wait())
        return
    if outcome.ended == "exited":
        _kept(out, said.WHOLE_RUN)
        _exit_note(proc.wait())
        return
    from mallocbench.replay.trace import header_status

    status = header_status(out)
    if outcome.ended == "shim" and _budget_reached(out, status):
        if not leave_running:
            _exit_note(proc.wait())
        return
    _kept(out, said.STATUS, status)
    code = proc.wait() if outcome.ended == "killed" else None
    if code is None:
        cut = said.Program(said.CUT)
    elif code < 0:
        cut = said.Program(said.CUT_KILLED, proc.pid, code)
    else:
        cut = said.Program(said.CUT_EXIT, proc.pid, code)
    say(formats.RECORD_PROGRAM, cut, err=True)
    if outcome.ended != "killed" and not leave_running:
        _exit_note(proc.wait())
    sys.exit(exitcodes.ABORTED)


def _exit_note(code: int) -> None:
    """The program's own status, for a script: mallocbench's says how the trace went."""
    if code != 0:
        say(formats.RECORD_PROGRAM, said.Program(said.EXITED, code=code), err=True)


commands = [record]
