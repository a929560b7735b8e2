"""`mallocbench check --pid PID`: the allocator and each allocator setting in force; with
--against TRACE, the server watched against its recorded window."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from mallocbench.commands.output import say
from mallocbench.errors import MallocbenchError

if TYPE_CHECKING:
    from mallocbench.replay.workload import Sample


@click.command("check")
@click.option("--pid", type=click.IntRange(1), required=True, help="The server process.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@click.option(
    "--against",
    "trace",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A trace `record --pid` wrote of this server: watch it and compare its RSS and QPS "
    "with the recorded window's.",
)
@click.option(
    "--watch",
    "watch_text",
    default="10m",
    show_default=True,
    metavar="DURATION",
    help="How long --against watches the server.",
)
@click.option(
    "--advice",
    type=click.Path(dir_okay=False, path_type=Path),
    help="advise.json of the decision deployed: its predicted saving is the prediction "
    "--against checks (default: the setting unchanged, 1.00x).",
)
@click.option(
    "--predicted",
    type=click.FloatRange(min=0, min_open=True),
    metavar="RATIO",
    help="The predicted ratio of the server's RSS to the recorded window's, instead of --advice.",
)
@click.option(
    "--tolerance",
    "tolerance_text",
    default="10%",
    show_default=True,
    metavar="PCT",
    help="How far from the prediction the RSS ratio's interval may reach and still hold.",
)
def check(
    pid: int,
    as_json: bool,
    trace: Path | None,
    watch_text: str,
    advice: Path | None,
    predicted: float | None,
    tolerance_text: str,
) -> None:
    """Say which allocator and allocator settings are in force in a running process.

    \b
    One line each: the allocator mapped (from /proc/PID/maps), how the process was
    started, the recording shim, each LD_PRELOAD library (mapped or not), and each
    setting: every GLIBC_TUNABLES tunable and MALLOC_CONF key on its own line, in force
    or not (a glibc.malloc tunable does nothing under jemalloc), or a name the mapped
    library does not read. Run after a restart with a new setting, as root or the
    server's user:
      mallocbench check --pid "$(pidof -s mariadbd)"
    A PostgreSQL backend's PID is checked at its postmaster, whose environment every
    backend inherited.
    \b
    With --against TRACE, then watch the server for --watch (once it has warmed up)
    and compare its RSS and QPS with the recorded window's, with 95% intervals; the last
    line says whether advise's prediction held:
      mallocbench check --pid "$(pidof -s mariadbd)" --against prod.mbt \\
          --advice advise-out/advise.json --watch 10m
    """
    from mallocbench.deploy.inforce import check as in_force
    from mallocbench.replay.preload import shim_status

    if trace is None and (advice is not None or predicted is not None):
        raise MallocbenchError("--advice and --predicted are for --against TRACE: give it too")
    asked, pid = pid, _server_process(pid, as_json)
    if trace is not None:
        _against(pid, trace, watch_text, advice, predicted, tolerance_text, as_json)
        return
    from mallocbench.report import formats

    found = in_force(pid, shim_status)
    from mallocbench.report.held import CheckedProcess

    checked = CheckedProcess(found, asked if asked != pid else None)
    say(formats.IN_FORCE, checked, fmt="json" if as_json else None)


def _server_process(pid: int, as_json: bool) -> int:
    """The process whose environment tells what the server started with: a PostgreSQL
    backend's postmaster (a backend writes its title over its environment; it forked
    with the postmaster's allocator and settings), else `pid` itself."""
    from mallocbench.servers.postgresql.attach import postmaster_of

    postmaster = postmaster_of(pid)
    if postmaster is None or postmaster == pid:
        return pid
    if not as_json:
        from mallocbench.report import formats
        from mallocbench.report.held import BackendAsked

        say(formats.BACKEND_ASKED, BackendAsked(pid, postmaster))
    return postmaster


def _against(
    pid: int,
    trace: Path,
    watch_text: str,
    advice: Path | None,
    predicted: float | None,
    tolerance_text: str,
    as_json: bool,
) -> None:
    from mallocbench.console import make_console
    from mallocbench.deploy.inforce import check as in_force
    from mallocbench.replay import against
    from mallocbench.replay.preload import shim_status
    from mallocbench.report import formats, held
    from mallocbench.units import parse_duration, parse_percent

    watch_s = parse_duration(watch_text, "--watch")
    tolerance = parse_percent(tolerance_text, "--tolerance")
    prediction, by = against.predicted_from(advice, predicted)
    against.recorded(trace)  # refused before the watch, not after it
    found = in_force(pid, shim_status)
    if not as_json:
        say(formats.IN_FORCE, held.CheckedProcess(found))
    err = make_console(stderr=True)
    with err.status(held.watching_text(pid, watch_s)) as status:

        def tick(sample: Sample) -> None:
            status.update(held.watching_text(pid, watch_s, sample.t))

        result, notes = against.check_against(pid, trace, watch_s, prediction, tolerance, tick)
    checked = held.Checked(result, by, notes, found)
    say(formats.CHECKED, checked, fmt="json" if as_json else None)


commands = [check]
