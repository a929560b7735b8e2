"""The `mallocbench` command group. Thin: parse, call one function, print.

Every MallocbenchError becomes one line on stderr and exit status 2 (`exitcodes`, the one
policy of every command), or 3 when the environment, not the input, went away
(EnvironmentLost) or nothing could be measured (NothingMeasured); nothing else is
caught here, so a real bug still shows its traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, NamedTuple, NoReturn

import click

from mallocbench import __version__, exitcodes
from mallocbench.errors import EnvironmentLost, MallocbenchError, NothingMeasured


class LazyCommand(NamedTuple):
    """Where a command lives, and the line `--help` lists for it without importing it."""

    module: str
    attribute: str
    summary: str
    hidden: bool = False


# Commands are imported only when invoked: importing them all put scipy, jinja2 and rich
# (1-2 s) in front of `--help`. tests/test_cli_startup.py checks each summary against the
# command's own help, so the two cannot drift apart.
COMMANDS: dict[str, LazyCommand] = {
    "allocators": LazyCommand(
        "allocators",
        "allocators_cmd",
        "List the allocators mallocbench knows, with version, library and availability.",
    ),
    "run": LazyCommand(
        "run", "run_cmd", "Run an experiment: every setup on every engine, step and thread count."
    ),
    "report": LazyCommand(
        "run",
        "report_cmd",
        "Report a run from an output directory, a store (.sqlite or a postgresql:// URL) "
        "or a results.json.",
    ),
    "runs": LazyCommand(
        "run",
        "runs_cmd",
        "List the runs in a store: an output directory, a .sqlite file or a postgresql:// URL.",
    ),
    "steps": LazyCommand(
        "run", "steps_cmd", "List the microbenchmark steps, their groups, ranges and SQL."
    ),
    "compare": LazyCommand(
        "compare",
        "compare_cmd",
        "Compare run B against run A: QPS(B) / QPS(A) per engine, step, threads and setup.",
    ),
    "recommend": LazyCommand(
        "recommend",
        "recommend_cmd",
        "Recommend a setup for production from a run, and show how to deploy it.",
    ),
    "calibrate": LazyCommand(
        "calibrate",
        "calibrate_cmd",
        "Measure this machine's noise now, and plan a run's repeats from it.",
    ),
    "soak": LazyCommand(
        "soak",
        "soak_cmd",
        "Soak: hold one step's load on each setup for hours; measure how RSS grows.",
    ),
    "patterns": LazyCommand(
        "patterns",
        "patterns",
        "Replay database-shaped allocation patterns under each allocator, in seconds.",
    ),
    "record": LazyCommand(
        "record",
        "record",
        "Record a running server's allocation calls (no data) for a window, or a program's "
        "from its first call.",
    ),
    "check": LazyCommand(
        "check",
        "check",
        "Say which allocator and allocator settings are in force in a running process.",
    ),
    "replay": LazyCommand(
        "replay",
        "replay",
        "Replay a recorded trace under each allocator and knob setting.",
    ),
    "tune": LazyCommand(
        "tune",
        "tune",
        "Search allocator knobs for the RSS-versus-time front, with intervals.",
    ),
    "advise": LazyCommand(
        "advise",
        "advise",
        "Decide which allocator and knobs to run from a recorded trace, within one budget.",
    ),
    "memory": LazyCommand(
        "memory",
        "memory",
        "Explain where a running MariaDB/MySQL or PostgreSQL server's memory goes.",
    ),
    "profile": LazyCommand(
        "memory",
        "profile",
        "Top allocation sites by peak bytes, from a private server under a heap profiler.",
    ),
    "store": LazyCommand(
        "store",
        "store_group",
        "Results stores: copy runs between SQLite files and a shared PostgreSQL database.",
    ),
    "cluster": LazyCommand(
        "cluster",
        "cluster_group",
        "Run one experiment's blocks, or a trace's replays, on many benchmark hosts (Dask).",
    ),
    "doctor": LazyCommand(
        "doctor",
        "doctor_cmd",
        "Say what is installed for mallocbench, and what each missing piece blocks.",
    ),
    "install-shim": LazyCommand(
        "doctor",
        "install_shim_cmd",
        "Copy the recording shim to a system path a hardened service can read; print it.",
    ),
    "_run-unit": LazyCommand(
        "cluster",
        "run_unit_cmd",
        "Internal: measure one unit, a run's block or a replay's repeat (JSON spec on stdin), "
        "for a cluster worker.",
        hidden=True,
    ),
    "schema": LazyCommand(
        "schema",
        "schema_cmd",
        "Print the JSON Schema of a run (default) or patterns experiment file.",
    ),
}


class Group(click.Group):
    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        # The group's own options are parsed here, before invoke: `mallocbench --bogus`.
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            _click_error(exc)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MallocbenchError as exc:
            click.echo(f"mallocbench: error: {exc}", err=True)
            lost = isinstance(exc, (EnvironmentLost, NothingMeasured))
            sys.exit(exitcodes.ABORTED if lost else exitcodes.USAGE)
        except click.ClickException as exc:
            _click_error(exc)
        except KeyboardInterrupt:
            click.echo("mallocbench: interrupted", err=True)
            sys.exit(exitcodes.interrupted())


def _click_error(exc: click.ClickException) -> NoReturn:
    """click's own errors in the one-line form of every other: click prints a usage
    line and a hint line before its error line, and the error is what a script needs."""
    message = " ".join(exc.format_message().split())
    if isinstance(exc, click.UsageError):
        # The command the mistake was made in (a subcommand's, inside a group).
        names: list[str] = []
        ctx = exc.ctx
        while ctx is not None and ctx.parent is not None:  # the root's name is how it ran
            names.insert(0, ctx.info_name or "")
            ctx = ctx.parent
        message += f" (see {' '.join(['mallocbench', *names, '--help'])})"
    click.echo(f"mallocbench: error: {message}", err=True)
    sys.exit(exitcodes.USAGE if isinstance(exc, click.UsageError) else exc.exit_code)


class LazyGroup(Group):
    """A group whose commands in COMMANDS are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        lazy = COMMANDS.get(cmd_name)
        if command is None and lazy is not None:
            module = importlib.import_module(f"mallocbench.commands.{lazy.module}")
            command = getattr(module, lazy.attribute)
            self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from COMMANDS' summaries, so `--help` imports no command."""
        names = [n for n in self.list_commands(ctx) if not self._hidden(n)]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(name, self._summary(name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _hidden(self, name: str) -> bool:
        if name in self.commands:
            return self.commands[name].hidden
        return COMMANDS[name].hidden

    def _summary(self, name: str, limit: int) -> str:
        if name in self.commands:
            return self.commands[name].get_short_help_str(limit)
        # A stand-in command shortens the summary exactly as the real one would.
        return click.Command(name, help=COMMANDS[name].summary).get_short_help_str(limit)


@click.group(
    cls=LazyGroup,
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


if __name__ == "__main__":
    main()
