"""A PostgreSQL server read as one process, as the per-second probes read a MariaDB
server: the postmaster and the backends it forked, which do the server's work.

Memory is the PSS of them all, so shared memory counts once (RSS summed over them would
count shared_buffers once per backend that touched it). CPU time is the live processes'
plus what the postmaster has reaped: a backend that exited (each sysbench run's clients
disconnect) leaves its time in the postmaster's children's times.
"""

from __future__ import annotations

import os
from pathlib import Path

from mallocbench.probes.process import Counters, Memory, read_counters, read_memory
from mallocbench.servers.postgresql.memory import server_pids

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_REAPED_FIELDS = (13, 14)  # cutime, cstime in /proc/PID/stat after the command name


def _pids(postmaster: int) -> list[int]:
    """The postmaster and its children without walking all of /proc (read several times
    a second), where the kernel keeps the list."""
    listing = Path(f"/proc/{postmaster}/task/{postmaster}/children")
    try:
        return [postmaster, *map(int, listing.read_text().split())]
    except FileNotFoundError:
        return server_pids(postmaster)


def tree_memory(postmaster: int) -> Memory | None:
    """The server's memory: RSS is the PSS of every process (VSZ the postmaster's). The
    kernel keeps no peak of a sum: `hwm_bytes` is this reading. Never raises: a probe
    must never cost a measured cell."""
    own = read_memory(postmaster)
    if own is None:
        return None
    try:
        pss = sum(_pss(pid) for pid in _pids(postmaster))
    except (OSError, ValueError):
        return own
    return Memory(pss, own.vsz_bytes, pss, own.peak_vsz_bytes)


def _pss(pid: int) -> int:
    """One process's PSS in bytes; 0 once it has exited (between listing and reading)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    line = next((x for x in text.splitlines() if x.startswith("Pss:")), "Pss: 0 kB")
    return int(line.split()[1]) * 1024


def _reaped_s(postmaster: int) -> tuple[float, float]:
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    user, system = (int(fields[i]) / _CLK_TCK for i in _REAPED_FIELDS)
    return user, system


def tree_counters(postmaster: int) -> Counters | None:
    """The server's counters: every live process's, plus the CPU time of the reaped ones
    (their context switches and I/O left with them)."""
    own = read_counters(postmaster)
    if own is None:
        return None
    try:
        children = [c for c in map(read_counters, _pids(postmaster)[1:]) if c is not None]
        user, system = _reaped_s(postmaster)
    except (OSError, ValueError, IndexError):
        return own
    every = [own, *children]
    return Counters(
        user_s=sum(c.user_s for c in every) + user,
        system_s=sum(c.system_s for c in every) + system,
        voluntary_cs=sum(c.voluntary_cs for c in every),
        involuntary_cs=sum(c.involuntary_cs for c in every),
        read_bytes=_total([c.read_bytes for c in every]),
        write_bytes=_total([c.write_bytes for c in every]),
        read_syscalls=_total([c.read_syscalls for c in every]),
    )


def _total(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v or 0 for v in values)


__all__ = ["tree_counters", "tree_memory"]
