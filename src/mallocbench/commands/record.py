"""`mallocbench record`: arm the recording shim in a running server for a window."""

from __future__ import annotations

from pathlib import Path

import click

from mallocbench.errors import MallocbenchError


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
@click.option("--service", help="Service name for --print-dropin (default: that of --pid).")
def record(
    pid: int | None, seconds: float, out: Path, print_dropin: bool, service: str | None
) -> None:
    """Record a running server's allocation calls (no data) for a window.

    \b
    The server must run with the shim preloaded; it records nothing until armed:
      mallocbench record --print-dropin --pid PID   the drop-in to install (once)
      mallocbench record --pid PID --seconds 60 --out trace.mbt
      mallocbench replay trace.mbt --allocators glibc,jemalloc,tcmalloc
    """
    from mallocbench.replay import control

    if print_dropin:
        name = service or (control.service_of(pid) if pid else None) or "mariadb"
        click.echo(control.dropin_text(pid, name), nl=False)
        return
    if pid is None:
        raise MallocbenchError("give --pid PID of the server to record (or --print-dropin)")
    closing = control.record(
        pid,
        seconds,
        out,
        started=lambda: click.echo(f"recording process {pid} for {seconds:g} s ...", err=True),
    )
    size = out.stat().st_size
    click.echo(f"{out}: {size / 1e6:.2f} MB ({closing})")


commands = [record]
