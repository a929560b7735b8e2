"""`mallocbench check --pid PID`: the allocator and each allocator setting in force."""

from __future__ import annotations

import json

import click


@click.command("check")
@click.option("--pid", type=click.IntRange(1), required=True, help="The server process.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
def check(pid: int, as_json: bool) -> None:
    """Say which allocator and allocator settings are in force in a running process.

    \b
    One line each: the allocator mapped (from /proc/PID/maps), how the process was
    started, the recording shim, each LD_PRELOAD library (mapped or not), and each
    setting: every GLIBC_TUNABLES tunable and MALLOC_CONF key on its own line, in force
    or not (a glibc.malloc tunable does nothing under jemalloc), or a name the mapped
    library does not read. Run after a restart with a new setting, as root or the
    server's user:
      mallocbench check --pid "$(pidof -s mariadbd)"
    """
    from mallocbench.deploy.inforce import check as in_force
    from mallocbench.replay.control import shim_status

    found = in_force(pid, shim_status)
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=2))
        return
    for line in found.lines():
        click.echo(line)


commands = [check]
