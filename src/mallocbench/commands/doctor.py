"""`mallocbench doctor` and `mallocbench install-shim`: what this host has, and the shim
put where a system service can load it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mallocbench.deploy.install import DEFAULT_PREFIX, install_shim


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of lines.")
def doctor_cmd(as_json: bool) -> None:
    """Say what is installed for mallocbench, and what each missing piece blocks.

    Server build, sysbench, allocators, the shim, the replayer and the pattern driver,
    cgroups, privileges and chromium. It only looks: nothing is built or started.
    A piece marked optional is needed only for what its line names.
    """
    from mallocbench.doctor.checks import checks

    found = checks()
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in found], indent=2))
        return
    width = max(len(c.name) for c in found)
    for check in found:
        status = "ok" if check.found else ("optional" if check.optional else "MISSING")
        click.echo(f"{status:<9}{check.name:<{width + 2}}{check.detail}")
        if not check.found:
            click.echo(f"{'':<{width + 11}}blocks: {check.blocks}")


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
    click.echo(install_shim(prefix.absolute()))


commands = [doctor_cmd, install_shim_cmd]
