"""`mallocbench allocators`: what is installed, its version and library, and its knobs."""

from __future__ import annotations

import json
from typing import Any

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
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    if with_knobs:
        print_knobs(entries)
        return
    from mallocbench.report.terminal import print_allocators

    print_allocators(entries)


def print_knobs(entries: list[dict[str, Any]]) -> None:
    """One table per allocator; a knob the installed version does not read is marked."""
    from rich.table import Table

    from mallocbench.console import make_console

    console = make_console()
    for entry in entries:
        version = entry["version"] or ("not installed" if not entry["available"] else "-")
        table = Table(title=f"{entry['name']} {version}", title_justify="left")
        for column in ("knob", "type", "range", "default", "unit", "passed as", "installed"):
            table.add_column(column, overflow="fold")
        for knob in entry["knobs"]:
            table.add_row(
                knob["name"],
                knob["type"],
                knob["range"],
                knob["default"],
                knob["unit"] or "-",
                knob["passed_as"],
                "[green]yes[/]" if knob["available"] else "[red]no[/]",
            )
        console.print(table)
    console.print(
        "A knob marked 'no' is not in the installed library and is refused; names the "
        "library reads beyond this list are accepted as raw knobs."
    )


commands = [allocators_cmd]
