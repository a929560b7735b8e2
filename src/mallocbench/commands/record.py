"""`mallocbench record`: arm the recording shim in a running server for a window."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from mallocbench import exitcodes
from mallocbench.errors import MallocbenchError
from mallocbench.units import parse_size

# The shim's buffers at rest (zstd's context and two frame buffers, which shrink under a
# small cap, and a chunk per recording thread) take about this much at the least: a cap
# below it would stop every recording at its start.
MIN_BUFFER = 1 << 20

if TYPE_CHECKING:
    from mallocbench.replay.control import Outcome


@click.command("record", epilog=exitcodes.RECORD_HELP)
@click.option("--pid", type=click.IntRange(1), help="The server process (with the shim loaded).")
@click.option(
    "--seconds",
    type=click.FloatRange(0.1, 86400),
    default=60.0,
    show_default=True,
    help="Length of the recording window.",
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
    help="Print the systemd drop-in that preloads the shim (in front of the allocator "
    "of --pid, if given) and exit.",
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
@click.option("--service", help="Service name for --print-dropin (default: that of --pid).")
def record(
    pid: int | None,
    seconds: float,
    out: Path,
    print_dropin: bool,
    max_buffer: str | None,
    service: str | None,
) -> None:
    """Record a running server's allocation calls (no data) for a window.

    \b
    The server must run with the shim preloaded; it records nothing until armed:
      mallocbench record --print-dropin --pid PID   the drop-in to install (once)
      mallocbench record --pid PID --seconds 60 --out trace.mbt
      mallocbench replay trace.mbt --allocators glibc,jemalloc,tcmalloc
    """
    from mallocbench.replay import control, serverrss
    from mallocbench.replay.trace import header_status

    if print_dropin:
        name = service or (control.service_of(pid) if pid else None) or "mariadb"
        click.echo(control.dropin_text(pid, name), nl=False)
        return
    if pid is None:
        raise MallocbenchError("give --pid PID of the server to record (or --print-dropin)")
    cap = None if max_buffer is None else parse_size(max_buffer, "--max-buffer")
    if cap is not None and cap < MIN_BUFFER:
        raise MallocbenchError(
            f"--max-buffer {max_buffer} is below {MIN_BUFFER >> 20}M, less than the shim's "
            "buffers hold at rest: give e.g. 64M"
        )
    at_start = serverrss.sample(pid)  # the server's RSS, for a saving in its terms
    try:
        outcome = control.record(
            pid,
            seconds,
            out,
            started=lambda: click.echo(f"recording process {pid} for {seconds:g} s ...", err=True),
            max_buffer=cap,
        )
    except control.RecordingInterrupted as stopped:
        if stopped.outcome.kept == out:
            size = out.stat().st_size
            click.echo(
                f"{out}: {size / 1e6:.2f} MB, the trace up to the interruption "
                "(it replays as it is); the server was disarmed and runs on",
                err=True,
            )
        else:
            _not_at_out(stopped.outcome, out, pid)
        _interrupted(stopped.signum)
    except control.Signalled as stopped:  # while arming: the shim was told "off"
        _interrupted(stopped.signum)
    if outcome.kept != out:
        _not_at_out(outcome, out, pid)
    serverrss.note(out, at_start, serverrss.sample(pid))
    size = out.stat().st_size
    status = header_status(out)
    if outcome.ended == "window":
        click.echo(f"{out}: {size / 1e6:.2f} MB ({outcome.closing})")
        return
    click.echo(f"{out}: {size / 1e6:.2f} MB (recording {status})")
    click.echo(f"note: {_early_note(outcome, status, pid)}", err=True)
    sys.exit(exitcodes.ABORTED)


def _interrupted(signum: int) -> NoReturn:
    """Exit as a signal's interruption does, 128 + its number."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt  # the group's own line and status
    click.echo(f"mallocbench: interrupted by {signal.Signals(signum).name}", err=True)
    sys.exit(exitcodes.interrupted(signum))


def _early_note(outcome: Outcome, status: str, pid: int) -> str:
    """Why the window ended before its time, and what to do about it."""
    if outcome.ended in ("exited", "killed"):
        how = "exited" if outcome.ended == "exited" else "ended before the shim closed the trace"
        return (
            f"process {pid} {how} during the window; the trace holds what it did until then "
            "and replays as it is"
        )
    remedy = (
        "record with a larger --max-buffer or on a quieter host"
        if "fell behind" in status
        else "fix that and record again"
    )
    return (
        "the recording ended early; the trace is usable up to that point and replays as it "
        f"is (for the whole window, {remedy})"
    )


def _not_at_out(outcome: Outcome, out: Path, pid: int) -> NoReturn:
    """--out could not take the trace: one line with where it is and how to move it."""
    problem = outcome.problem or f"cannot write {out}"
    if outcome.kept is None:
        where = "no copy could be kept anywhere else: the trace is lost"
    elif str(outcome.kept).startswith(f"/proc/{pid}/"):
        where = (
            f"the trace is kept at {outcome.kept} while process {pid} runs: move it now with "
            f"mv {outcome.kept} DEST, DEST on a disk with room"
        )
    else:
        where = (
            f"the trace is kept at {outcome.kept}: move it with mv {outcome.kept} {out} "
            "once that disk has room"
        )
    click.echo(f"mallocbench: error: {problem}; {where}", err=True)
    sys.exit(exitcodes.RECORD_NOT_AT_OUT)


commands = [record]
