"""`mallocbench record`: arm the recording shim in a running server for a window."""

from __future__ import annotations

from pathlib import Path

import click

from mallocbench.errors import MallocbenchError
from mallocbench.units import parse_size

# The shim's buffers at rest (zstd's context and two frame buffers, which shrink under a
# small cap, and a chunk per recording thread) take about this much at the least: a cap
# below it would stop every recording at its start.
MIN_BUFFER = 1 << 20


@click.command("record")
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
    from mallocbench.replay import control
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
    try:
        closing = control.record(
            pid,
            seconds,
            out,
            started=lambda: click.echo(f"recording process {pid} for {seconds:g} s ...", err=True),
            max_buffer=cap,
        )
    except control.RecordingInterrupted as stopped:
        if stopped.kept is not None:
            size = stopped.kept.stat().st_size
            click.echo(
                f"{stopped.kept}: {size / 1e6:.2f} MB, the trace up to the interruption "
                "(it replays as it is); the server was disarmed and runs on",
                err=True,
            )
        raise
    size = out.stat().st_size
    status = header_status(out)
    if not status.startswith("stopped"):
        click.echo(f"{out}: {size / 1e6:.2f} MB ({closing})")
        return
    click.echo(f"{out}: {size / 1e6:.2f} MB (recording {status})")
    remedy = (
        "record with a larger --max-buffer or on a quieter host"
        if "fell behind" in status
        else "fix that and record again"
    )
    click.echo(
        f"note: the recording ended early; the trace is usable up to that point and replays "
        f"as it is (for the whole window, {remedy})",
        err=True,
    )


commands = [record]
