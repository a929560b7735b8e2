"""The one place mallocbench makes a rich Console, so every table and line obeys one policy.

A terminal gets rich's defaults: its own width, colour, a live progress bar. Anything
else (a pipe, `| tee`, a CI log, a file) has no width to respect: rich would assume 80
columns and fold table headers and names inside words ("unacc / ounte / d:", "jemall /
oc"), so output there is as wide as it naturally is, or `COLUMNS` when set, and carries
no cursor movement. Colour follows the terminal unless `NO_COLOR` (never) or
`FORCE_COLOR` (even into a pipe, for CI viewers that render it) says otherwise; see
https://no-color.org and https://force-color.org.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Self, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

# Wide enough for any table mallocbench prints, so rich never has to shrink one; lines
# are not padded to it, so a narrow table stays narrow.
NATURAL_WIDTH = 1000


def wants_colour(terminal: bool, environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return terminal


def pipe_width(environ: Mapping[str, str] | None = None) -> int:
    """COLUMNS when the user set it, else the natural width."""
    columns = (os.environ if environ is None else environ).get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else NATURAL_WIDTH


def make_console(stderr: bool = False, file: TextIO | None = None) -> Console:
    """A Console for stdout (or stderr, or `file`) under the policy above."""
    # Imported here: commands that print nothing through rich (`--help`) skip loading it.
    from rich.console import Console

    stream = file or (sys.stderr if stderr else sys.stdout)
    terminal = _isatty(stream)
    colour = wants_colour(terminal)
    if terminal:
        # NO_COLOR takes colour away, not bold or dim (no-color.org).
        return Console(stderr=stderr, file=file, no_color=not colour)
    # force_terminal=False: FORCE_COLOR asks for colour, not for a live display that
    # rewrites lines with cursor codes in a log.
    return Console(
        stderr=stderr,
        file=file,
        force_terminal=False,
        color_system="standard" if colour else None,
        no_color=not colour,
        width=pipe_width(),
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return False


class LiveBar:
    """A progress bar drawn only on a terminal, from `with` on; off one its owner prints
    plain lines instead, since cursor codes are noise in a log."""

    live: bool
    progress: Progress

    def __enter__(self) -> Self:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()
