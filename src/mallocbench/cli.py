"""The `mallocbench` command group. Thin: parse, call one function, print.

Every MallocbenchError becomes one line on stderr and exit status 2 (`exitcodes`, the one
policy of every command), or 3 when the environment, not the input, went away
(EnvironmentLost); nothing else is caught here, so a real bug still shows its
traceback.
"""

from __future__ import annotations

import sys

import click

from mallocbench import __version__, exitcodes
from mallocbench.commands import (
    allocators,
    calibrate,
    cluster,
    compare,
    memory,
    patterns,
    recommend,
    record,
    replay,
    run,
    schema,
    soak,
    store,
)
from mallocbench.errors import EnvironmentLost, MallocbenchError


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MallocbenchError as exc:
            click.echo(f"mallocbench: error: {exc}", err=True)
            lost = isinstance(exc, EnvironmentLost)
            sys.exit(exitcodes.ABORTED if lost else exitcodes.USAGE)
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


for module in (
    allocators,
    run,
    compare,
    recommend,
    calibrate,
    soak,
    patterns,
    record,
    replay,
    memory,
    store,
    cluster,
    schema,
):
    for command in module.commands:
        main.add_command(command)

if __name__ == "__main__":
    main()
