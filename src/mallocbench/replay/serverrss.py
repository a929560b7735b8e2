"""The recorded process's resident memory at the window's start and end, kept in the
trace's header, so that a replay's saving in heap bytes can be set against what the
server as a whole held (`saves about X MiB of the server's Y MiB RSS`).

Read from /proc by the recording command, never by the shim: the server does nothing
for it, and a value that cannot be read is simply not kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

from mallocbench.model.traceinfo import PSS_END, PSS_START, RSS_END, RSS_START
from mallocbench.replay import trace as tracemod


def _kib_field(path: str, name: str) -> int | None:
    """`name:  123 kB` of a /proc file, in bytes; None when it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def sample(pid: int) -> dict[str, int]:
    """The process's RSS and, where the kernel gives it (smaps_rollup, Linux 4.14+, and
    readable by this user), its PSS, in bytes; {} when the process is gone."""
    out = {}
    rss = _kib_field(f"/proc/{pid}/status", "VmRSS")
    if rss is not None:
        out["rss"] = rss
    pss = _kib_field(f"/proc/{pid}/smaps_rollup", "Pss")
    if pss is not None:
        out["pss"] = pss
    return out


def note(trace: Path, start: Mapping[str, int], end: Mapping[str, int]) -> None:
    """Keep both samples in the trace's header; a trace the header has no room in, or
    that cannot be written, stays as it is (the recording matters, not this)."""
    items = {
        key: str(values[kind])
        for key, kind, values in (
            (RSS_START, "rss", start),
            (RSS_END, "rss", end),
            (PSS_START, "pss", start),
            (PSS_END, "pss", end),
        )
        if kind in values
    }
    if items:
        with contextlib.suppress(OSError):
            tracemod.add_info(trace, items)
