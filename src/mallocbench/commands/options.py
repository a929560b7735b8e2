"""Options that several commands share, declared and parsed once."""

from __future__ import annotations

import math
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mallocbench.commands.output import say
from mallocbench.errors import MallocbenchError
from mallocbench.store.factory import store_target
from mallocbench.units import parse_duration, parse_min_effect, parse_percent

if TYPE_CHECKING:
    from rich.console import Console


F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def min_effect_option(help_text: str) -> Callable[[F], F]:
    """--min-effect FRACTION ("2%" or 0.02), parsed to a float; None when not given.

    A bad value raises MallocbenchError, which the command group prints as one line.
    """
    return click.option(
        "--min-effect",
        "min_effect",
        metavar="FRACTION",
        callback=lambda _ctx, _param, value: (
            None if value is None else parse_min_effect(value, "--min-effect")
        ),
        help=help_text,
    )


def confirm_time_option(func: F) -> F:
    """--confirm-time DURATION in seconds: the time OUT/confirm.toml is planned to fit
    (advise and tune derive the same confirmation from a recorded load, tune/confirm.py)."""
    return click.option(
        "--confirm-time",
        "confirm_s",
        default="15m",
        show_default=True,
        metavar="DURATION",
        callback=lambda _ctx, _param, value: parse_duration(value, "--confirm-time"),
        help="Time OUT/confirm.toml's run on servers is planned to fit; on a trace recorded "
        "with `record --pid` it runs the load the server described.",
    )(func)


def timing_options(func: F) -> F:
    """--timing recorded|none and --speed N: how a trace replay paces its calls (replay
    and tune replay the same way, so they offer the same choices)."""
    func = click.option(
        "--speed",
        type=click.FloatRange(0.001, 10000, min_open=True),
        default=1.0,
        show_default=True,
        help="With --timing recorded: replay N times faster.",
    )(func)
    return click.option(
        "--timing",
        type=click.Choice(["recorded", "none"]),
        default="recorded",
        show_default=True,
        help="recorded keeps the trace's gaps (time-based purging matters); none runs flat "
        "out (CPU cost).",
    )(func)


def cluster_options(cluster_help: str) -> Callable[[F], F]:
    """--cluster ADDRESS, and --tls DIR | --insecure with it: how a command reaches the
    Dask scheduler of the benchmark hosts (cluster_access reads them)."""

    def decorate(func: F) -> F:
        func = click.option(
            "--insecure",
            is_flag=True,
            help="With --cluster: plain TCP, no TLS and no authentication (the scheduler "
            "must have been started with --insecure too).",
        )(func)
        func = click.option(
            "--tls",
            "tls_dir",
            type=click.Path(file_okay=False, path_type=Path),
            metavar="DIR",
            help="With --cluster: this machine's certificates (a directory `mallocbench "
            "cluster init` made); the command's client presents them to the scheduler.",
        )(func)
        return click.option("--cluster", "cluster_address", metavar="ADDRESS", help=cluster_help)(
            func
        )

    return decorate


def cluster_access(
    address: str | None, tls_dir: Path | None, insecure: bool
) -> tuple[str | None, object]:
    """--cluster's address with its scheme, and the security its client presents."""
    from mallocbench.cluster import tls as clustertls

    if address is None:
        if tls_dir is not None or insecure:
            raise MallocbenchError("--tls and --insecure go with --cluster ADDRESS: add it")
        return None, None
    access = clustertls.access(tls_dir, insecure)
    return access.address(address), access.security


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


STORE_HELP = (
    "SQLite file (default OUT/results.sqlite; a directory means its results.sqlite) or a "
    "PostgreSQL URL postgresql://user@host/db shared by several hosts (password from "
    "~/.pgpass or PGPASSWORD). Several runs can share one."
)


def _store_option_value(value: str | None) -> str | Path | None:
    return None if value is None else store_target(value)


def store_option(help_text: str = STORE_HELP) -> Callable[[F], F]:
    """--store FILE|URL: the results store, when not OUT/results.sqlite."""
    return click.option(
        "--store",
        "store_path",
        metavar="FILE|URL",
        callback=lambda _ctx, _param, value: _store_option_value(value),
        help=help_text,
    )


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf (it compares them, and nan passes)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class StopOnSignals:
    """SIGINT and SIGTERM as a request to stop, for the span of a `with` block.

    A scheduler, `kill` or a CI timeout sends SIGTERM and is answered like Ctrl-C: the
    first signal asks the pipeline to stop once the work under way is dropped, so every
    finished cell is kept and the reports are written; a second aborts at once
    (KeyboardInterrupt). On `console`, when given, a line tells what the first one does.
    """

    def __init__(
        self,
        console: Console | None = None,
        dropped: str = "cell",
        under_way: str | None = None,
        plain: bool = False,
    ) -> None:
        """`under_way` (report.runs' codes) says what becomes of the work under way, when
        it is not simply dropped (a tune's trial may end and be kept); `plain`, a line
        without colour beside a live search display."""
        self.signal: int | None = None
        self._console = console
        self._previous: dict[int, Any] = {}
        # Made here, not in the handler: a signal handler should not import.
        from mallocbench.report import formats
        from mallocbench.report.runs import DROPPED, Stopping

        self._kind = formats.STOPPING
        self._stopping = lambda signum: Stopping(signum, under_way or DROPPED, dropped, plain)

    def requested(self) -> bool:
        return self.signal is not None

    def _handle(self, signum: int, frame: object) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signum
        if self._console is not None:
            say(self._kind, self._stopping(signum), console=self._console)

    def __enter__(self) -> StopOnSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
