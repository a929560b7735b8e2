"""`mallocbench doctor` and `mallocbench install-shim`: what this host has, and the shim
put where a system service can load it."""

from __future__ import annotations

from pathlib import Path

import click

from mallocbench.commands.output import say
from mallocbench.deploy.install import DEFAULT_PREFIX, install_shim
from mallocbench.report import formats


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of lines.")
def doctor_cmd(as_json: bool) -> None:
    """Say what is installed for mallocbench, and what each missing piece blocks.

    Server build, sysbench, allocators, the shim, the replayer and the pattern driver,
    cgroups, privileges and chromium. It only looks: nothing is built or started.
    A piece marked optional is needed only for what its line names.
    """
    from mallocbench.doctor.checks import checks

    say(formats.DOCTOR, checks(), fmt="json" if as_json else None)


@click.command("install-shim")
@click.option(
    "--prefix",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_PREFIX,
    show_default=True,
    help="Install to PREFIX/lib/mallocbench/libmbrecord.so.",
)
def install_shim_cmd(prefix: Path) -> None:
    """Copy the recording shim to a system path a hardened service can read; print it.

    A server unit with ProtectHome=true (Debian's mariadb.service) cannot load a shim
    under /root or /home, where a checkout or a pipx install keeps it. Preload the
    printed path in the unit (`mallocbench record --print-dropin` shows how).
    """
    say(formats.INSTALLED, install_shim(prefix.absolute()))


commands = [doctor_cmd, install_shim_cmd]
