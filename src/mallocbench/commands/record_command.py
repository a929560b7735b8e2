"""`mallocbench record -- COMMAND ARGS`: what it says and how it exits (replay/command.py
runs the program and takes its trace)."""

from __future__ import annotations

import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mallocbench import exitcodes
from mallocbench.errors import MallocbenchError

if TYPE_CHECKING:
    from mallocbench.replay.command import Recorded


def record_command(
    command: Sequence[str],
    seconds: float | None,
    out: Path,
    max_buffer: int | None,
    leave_running: bool,
) -> None:
    from mallocbench.commands.record import _interrupted, _not_at_out
    from mallocbench.replay import command as commandmod

    if leave_running and seconds is None:
        raise MallocbenchError(
            "--leave-running needs --seconds: without it the window is the program's lifetime"
        )
    shown = shlex.join(command)
    span = "until it exits" if seconds is None else f"for up to {seconds:g} s"

    def started() -> None:
        click.echo(f"recording {shown} {span} ...", err=True)

    done = commandmod.record(command, seconds, out, started, max_buffer)
    pid = done.proc.pid
    if done.outcome.kept != out:
        if done.running and not leave_running:
            done.proc.wait()
        _not_at_out(done.outcome, out, pid)
    size = out.stat().st_size
    if done.signum is not None:
        click.echo(f"{out}: {size / 1e6:.2f} MB, the trace up to the interruption", err=True)
        if done.signum != signal.SIGINT and done.running:  # Ctrl-C reached it already
            done.proc.send_signal(done.signum)
        _interrupted(done.signum)
    _ended(done, out, size, leave_running)


def _ended(done: Recorded, out: Path, size: float, leave_running: bool) -> None:
    """The window's end: the program's exit (a whole trace), --seconds (then the program
    is waited for, or left running), or a cut (the shim stopped, the program killed)."""
    outcome, proc = done.outcome, done.proc
    if outcome.ended == "window":
        click.echo(f"{out}: {size / 1e6:.2f} MB ({outcome.closing})")
        if leave_running:
            click.echo(f"note: the program (pid {proc.pid}) runs on, unrecorded", err=True)
            return
        if done.running:
            click.echo(f"the window ended; waiting for the program (pid {proc.pid}) to exit",
                       err=True)  # fmt: skip
        _exit_note(proc.wait())
        return
    if outcome.ended == "exited":
        click.echo(f"{out}: {size / 1e6:.2f} MB (the program's whole run)")
        _exit_note(proc.wait())
        return
    from mallocbench.replay.trace import header_status

    click.echo(f"{out}: {size / 1e6:.2f} MB (recording {header_status(out)})")
    code = proc.wait() if outcome.ended == "killed" else None
    if code is None:
        why = "the recording stopped before the program ended"
    elif code < 0:
        why = f"the program was killed by {_signal_name(-code)} before the shim closed the trace"
    else:
        why = "the program ended without running its exit handlers (_exit), so the shim "
        why += "could not close the trace"
    click.echo(f"note: {why}; the trace holds its calls until then and replays as it is",
               err=True)  # fmt: skip
    if outcome.ended != "killed" and not leave_running:
        _exit_note(proc.wait())
    sys.exit(exitcodes.ABORTED)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _exit_note(code: int) -> None:
    """The program's own status, for a script: mallocbench's says how the trace went."""
    if code > 0:
        click.echo(f"note: the program exited with status {code}", err=True)
    elif code < 0:
        click.echo(f"note: the program was killed by {_signal_name(-code)}", err=True)
