"""The `mallocbench` command group. Thin: parse, call one function, print.

Every MallocbenchError becomes one line on stderr and exit status 2 (`exitcodes`, the one
policy of every command); nothing else is caught here, so a real bug still shows its
traceback.
"""

from __future__ import annotations

import json
import sys

import click

from mallocbench import __version__, exitcodes
from mallocbench import allocators as allocator_registry
from mallocbench.errors import MallocbenchError


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MallocbenchError as exc:
            click.echo(f"mallocbench: error: {exc}", err=True)
            sys.exit(exitcodes.USAGE)
        except KeyboardInterrupt:
            click.echo("mallocbench: interrupted", err=True)
            sys.exit(exitcodes.interrupted())


@click.group(
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=exitcodes.POLICY_HELP,
)
@click.version_option(__version__, prog_name="mallocbench")
def main() -> None:
    """Compare memory allocators on real database servers, and explain their memory.

    \b
    Start here:
      mallocbench allocators            which allocators are installed
      mallocbench run examples/quick.toml --out out
                                        run an experiment, write out/report.md
      mallocbench report out            print the report of the latest run in out/ again
      mallocbench recommend out         which setup to run, the evidence, how to deploy it
      mallocbench compare base-out out --fail-on slower,rss-up
                                        a CI gate: exit 1 on a regression
      mallocbench memory                where a running server's RSS goes

    Every command exits with the same statuses (below), so scripts and CI can
    tell a finding (1) from a mistake (2) and an aborted run (3).
    """


@main.command("allocators")
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


def _register_optional_commands() -> None:
    """Commands that live beside their own stage (each module exposes one click command)."""
    import importlib

    for module_name, attr in (
        ("mallocbench.commands.run", "commands"),
        ("mallocbench.commands.compare", "commands"),
        ("mallocbench.commands.calibrate", "commands"),
        ("mallocbench.commands.recommend", "commands"),
        ("mallocbench.patterns.cli", "commands"),
        ("mallocbench.memory.cli", "commands"),
    ):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            continue
        for command in getattr(module, attr):
            main.add_command(command)


_register_optional_commands()

if __name__ == "__main__":
    main()
