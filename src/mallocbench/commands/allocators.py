"""`mallocbench allocators`: what is installed, its version and library, and its knobs."""

from __future__ import annotations

import click

from mallocbench import allocators as allocator_registry


@click.command("allocators")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.option(
    "--knobs",
    "with_knobs",
    is_flag=True,
    help="Also list each allocator's knobs: type, range, default, unit, how it is passed, "
    "and whether the installed library reads it.",
)
def allocators_cmd(as_json: bool, with_knobs: bool) -> None:
    """List the allocators mallocbench knows, with version, library and availability.

    A missing allocator names the Debian package that provides it. Any other malloc
    library can be used in an experiment by giving its path instead of a name.
    """
    entries = [a.to_dict() for a in allocator_registry.builtin_allocators()]
    if with_knobs:
        from mallocbench.allocators.knobs import catalogue

        for entry, allocator in zip(entries, allocator_registry.builtin_allocators(), strict=True):
            entry["knobs"] = catalogue(allocator)
    from mallocbench.commands.output import say
    from mallocbench.report import formats

    if as_json:
        say(formats.JSON, entries)
        return
    say(formats.KNOBS if with_knobs else formats.ALLOCATORS, entries)


commands = [allocators_cmd]
