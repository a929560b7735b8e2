"""The one way a command prints: it hands a value to the registry's entry for its kind
(report.formats) and prints what that gives, or lets it draw on a console. Light on
purpose: `record` says its first line while a server waits on it."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import click

from mallocbench.console import make_console

if TYPE_CHECKING:
    from rich.console import Console

    from mallocbench.report.formats import Outputs

T = TypeVar("T")


def emit(
    outputs: Outputs[T], name: str, value: T, err: bool = False, console: Console | None = None
) -> None:
    """Format `name` of a value on standard output (standard error with `err`), as
    --format asked; a drawn format on `console` when given."""
    if name in outputs.texts:  # a text needs no console (nor rich loaded to make one)
        click.echo(outputs.render(name, value), nl=False, err=err)
        return
    outputs.show(name, value, console or make_console(stderr=err))


def say(
    kind: str,
    value: object,
    err: bool = False,
    console: Console | None = None,
    fmt: str | None = None,
) -> None:
    """What the registry's entry for `kind` shows of `value` (report.formats), in format
    `fmt` (default: the terminal's). The one way a command prints."""
    from mallocbench.report import formats

    emit(formats.outputs(kind), fmt or formats.TERMINAL, value, err, console)
