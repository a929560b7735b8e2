"""The one error type the CLI turns into a single line: what is wrong and how to fix it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class MallocbenchError(Exception):
    """A problem the user can fix; the message names it and says how."""


class EnvironmentLost(MallocbenchError):
    """Something the command relied on went away mid-way (the results store's server,
    its network): not the user's input, so not a usage error. What was measured and
    stored before is kept, and the message says how to go on."""


class NothingMeasured(MallocbenchError):
    """Every measurement a command made failed (each replay's replayer crashed): not
    the user's input but no result either, so an abort (exitcodes.ABORTED). The
    failures are kept and shown before the line that names them."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ " (did you mean 'jemalloc'?)" for a near miss such as 'jemaloc', else ""."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""
