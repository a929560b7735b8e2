"""`mallocbench schema`: the JSON Schema of an experiment file, for editors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from mallocbench.patterns import schema as patterns_schema
from mallocbench.run import schema as run_schema

SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "run": run_schema.build,
    "patterns": patterns_schema.build,
}
KINDS = tuple(SCHEMAS)


def build(kind: str) -> dict[str, Any]:
    """The JSON Schema of a `run` or a `patterns` experiment file."""
    return SCHEMAS[kind]()


@click.command("schema")
@click.argument("kind", type=click.Choice(KINDS), default="run")
def schema_cmd(kind: str) -> None:
    """Print the JSON Schema of a run (default) or patterns experiment file.

    \b
    Editors then complete keys and mark typos as you type, e.g. with the
    "Even Better TOML" extension: save it and name it in the file's first line,
      mallocbench schema run > mallocbench-run.schema.json
      #:schema ./mallocbench-run.schema.json
    `mallocbench run FILE --dry-run` remains the full check.
    """
    from mallocbench.commands.output import say
    from mallocbench.report import formats

    say(formats.JSON, build(kind))


commands = [schema_cmd]
