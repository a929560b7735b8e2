"""Options that several commands share, declared and parsed once."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from mallocbench.analysis.summary import parse_min_effect
from mallocbench.errors import MallocbenchError
from mallocbench.units import parse_percent

F = TypeVar("F", bound=Callable[..., Any])


def min_effect_option(help_text: str) -> Callable[[F], F]:
    """--min-effect FRACTION ("2%" or 0.02), parsed to a float; None when not given.

    A bad value raises MallocbenchError, which the command group prints as one line.
    """
    return click.option(
        "--min-effect",
        "min_effect",
        metavar="FRACTION",
        callback=lambda _ctx, _param, value: parse_min_effect(value),
        help=help_text,
    )


def out_dir_option(help_text: str) -> Callable[[F], F]:
    """--out DIR, default ./out: where a command keeps what it writes."""
    return click.option(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("out"),
        show_default=True,
        help=help_text,
    )


def percent_option(name: str, help_text: str, default: str | None = None) -> Callable[[F], F]:
    """A width or share in percent ("5%" or 0.05), given to the command in percentage
    points (5.0); None when not given and no default."""

    def convert(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
        if value is None:
            return None
        fraction = parse_percent(value, name)
        if fraction == 0:
            raise MallocbenchError(f"{name} = {value!r} must be above 0%: e.g. 5%")
        return fraction * 100

    return click.option(
        name,
        name.removeprefix("--").replace("-", "_") + "_pct",
        metavar="PCT",
        default=default,
        show_default=default is not None,
        callback=convert,
        help=help_text,
    )


def store_option() -> Callable[[F], F]:
    """--store FILE: the SQLite results store, when not OUT/results.sqlite."""
    return click.option(
        "--store",
        "store_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="SQLite results store (default: OUT/results.sqlite). Several runs can share one.",
    )


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (it compares them, and nan passes)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number
