"""What a trace's header info holds that a replay's results are read with: the recorded
server's RSS over the window (written by replay/serverrss.py at record time)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

# Header keys (bytes): VmRSS from /proc/PID/status, and PSS from smaps_rollup (the
# shared pages split among their users), at the window's start and end.
RSS_START, RSS_END = "server_rss_start", "server_rss_end"
PSS_START, PSS_END = "server_pss_start", "server_pss_end"


def server_rss(info: Mapping[str, str]) -> float | None:
    """The server's RSS over the window (the mean of its start and end) from a trace's
    header info, in bytes; None for a trace recorded without it."""
    values = []
    for key in (RSS_START, RSS_END):
        with contextlib.suppress(KeyError, ValueError):
            values.append(float(info[key]))
    return sum(values) / len(values) if values else None
