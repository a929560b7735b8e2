"""`mallocbench allocators`: what is installed, its version and library."""

from __future__ import annotations

import json

import click

from mallocbench import allocators as allocator_registry


@click.command("allocators")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def allocators_cmd(as_json: bool) -> None:
    """List the allocators mallocbench knows, with version, library and availability.

    A missing allocator names the Debian package that provides it. Any other malloc
    library can be used in an experiment by giving its path instead of a name.
    """
    entries = [a.to_dict() for a in allocator_registry.builtin_allocators()]
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    from mallocbench.report.terminal import print_allocators

    print_allocators(entries)


commands = [allocators_cmd]
