"""A running PostgreSQL server's memory, each byte counted once.

Adding up the RSS of a postmaster and its backends counts shared_buffers once per
process that touched it (the "PostgreSQL uses 300% of RAM" reading). Here each process
is read from /proc/PID/smaps_rollup, whose PSS shares every page among the processes
mapping it, and the kernel's own split of PSS gives the parts: shared memory (shmem:
the main segment and dynamic shared memory, counted once over all processes), each
process's private anonymous memory (its heap: memory contexts and the allocator's
overhead on them) and its files (code, libraries). The server's own figures are set
beside them: what pg_shmem_allocations says the main segment holds, and for every
backend what its memory contexts hold (pg_backend_memory_contexts for the session
asking, pg_log_backend_memory_contexts for the others, read from the server's log),
so that a backend's private anonymous memory minus its contexts is the allocator's
overhead there. Values only; the words are the report's.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from mallocbench.errors import MallocbenchError
from mallocbench.servers.postgresql.server import PgServer

# "Grand total: 1056768 bytes in 160 blocks; ...", after the log line prefix "[pid]".
_GRAND_TOTAL = re.compile(r"\[(\d+)\] LOG:\s+Grand total: (\d+) bytes in")
# How long the other backends get to write their contexts to the log (they do so at
# their next interrupt check, at once when idle).
CONTEXT_LOG_WAIT_S = 3.0


@dataclass(frozen=True)
class ProcessMemory:
    """One process of the server, in bytes (smaps_rollup)."""

    pid: int
    backend_type: str  # as pg_stat_activity names it: postmaster, client backend, ...
    rss: int
    pss: int
    uss: int  # Private_Clean + Private_Dirty: what its exit would free
    shared_pss: int  # Pss_Shmem: its share of the server's shared memory
    anon_pss: int  # Pss_Anon: its heap and other private anonymous memory
    file_pss: int  # Pss_File: code and libraries
    contexts_bytes: int | None = None  # what its memory contexts hold (None: not read)

    @property
    def allocator_overhead(self) -> int | None:
        """Private anonymous memory its memory contexts do not hold: the allocator's
        free lists, fragmentation and metadata, plus stacks and the like."""
        return None if self.contexts_bytes is None else self.anon_pss - self.contexts_bytes


@dataclass(frozen=True)
class ServerMemory:
    """The whole server: the processes, and the shared memory once."""

    processes: list[ProcessMemory]
    total_pss: int  # the sum of every process's PSS: the server's footprint
    rss_sum: int  # the misleading sum, shared memory once per process that touched it
    shared_pss: int  # shared memory, counted once (the processes' Pss_Shmem summed)
    shmem_allocated: int  # what pg_shmem_allocations says the main segment holds
    asking_pid: int  # the backend whose contexts came from pg_backend_memory_contexts
    asking_contexts_used: int
    work_mem_bytes: int
    shared_buffers_bytes: int
    notes: dict[str, int] = field(default_factory=dict)

    @property
    def parts_sum(self) -> int:
        """Shared memory once, plus every process's private anonymous memory and files."""
        return self.shared_pss + sum(p.anon_pss + p.file_pss for p in self.processes)


def _rollup(pid: int) -> dict[str, int]:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return {}  # it exited between the listing and the reading: nothing to count
    except PermissionError as exc:
        raise MallocbenchError(
            f"no permission to read /proc/{pid}/smaps_rollup: run as root or as the server's user"
        ) from exc
    fields = {}
    for line in text.splitlines()[1:]:
        name, _, value = line.partition(":")
        number = value.split()
        if number and number[0].isdigit():
            fields[name] = int(number[0]) * 1024
    return fields


def private_memory(pid: int) -> dict[str, int]:
    """One backend's own memory now, in bytes: uss (what its exit would free), pss and
    anon (its private anonymous memory: the heap its allocator holds); {} once it exited."""
    r = _rollup(pid)
    if not r:
        return {}
    return {
        "uss": r.get("Private_Clean", 0) + r.get("Private_Dirty", 0),
        "pss": r.get("Pss", 0),
        "anon": r.get("Pss_Anon", 0),
    }


def server_pids(postmaster: int) -> list[int]:
    """The postmaster and every process it forked (backends and auxiliary processes)."""
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
            pids.append(int(entry.name))
    return pids


def _process(pid: int, backend_type: str, contexts: int | None) -> ProcessMemory | None:
    r = _rollup(pid)
    if not r:
        return None
    return ProcessMemory(
        pid=pid,
        backend_type=backend_type,
        rss=r.get("Rss", 0),
        pss=r.get("Pss", 0),
        uss=r.get("Private_Clean", 0) + r.get("Private_Dirty", 0),
        shared_pss=r.get("Pss_Shmem", 0),
        anon_pss=r.get("Pss_Anon", 0),
        file_pss=r.get("Pss_File", 0),
        contexts_bytes=contexts,
    )


def _logged_contexts(log_path: Path | None, conn: Any, pids: list[int]) -> dict[int, int]:
    """The other backends' memory context totals, as they write them to the log; none
    when the log cannot be read or the session may not ask (not a superuser)."""
    if log_path is None or not pids:
        return {}
    try:
        start = log_path.stat().st_size
        with open(log_path, "rb"):
            pass
    except OSError:
        return {}
    try:
        for pid in pids:
            conn.execute("SELECT pg_log_backend_memory_contexts(%s)", (pid,))
    except psycopg.Error:
        return {}
    found: dict[int, int] = {}
    deadline = time.monotonic() + CONTEXT_LOG_WAIT_S
    while time.monotonic() < deadline and len(found) < len(pids):
        with open(log_path, "rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace")
        for match in _GRAND_TOTAL.finditer(text):
            if int(match.group(1)) in pids:
                found[int(match.group(1))] = int(match.group(2))
        time.sleep(0.05)
    return found


def account(server: PgServer, conn: Any = None) -> ServerMemory:
    """The server's memory now, read while it runs (raises when it is not running).

    `conn` is the session that asks (a probe's kept connection); without one, one is
    opened for the reading and is one of the backends accounted."""
    if not server.alive():
        raise MallocbenchError("the server is not running: nothing to account")
    if conn is not None:
        return account_of(server.pid, server.stdout_log, conn)
    with server.connect(dbname="postgres") as own:
        return account_of(server.pid, server.stdout_log, own)


def account_of(postmaster: int, log_path: Path | None, conn: Any) -> ServerMemory:
    """The memory of the server whose postmaster is `postmaster`, asked over `conn`;
    the other backends' contexts are read from `log_path` (their LOG lines) when given
    and readable."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    asking = int(row[0])
    types = {
        int(pid): str(kind)
        for pid, kind in conn.execute("SELECT pid, backend_type FROM pg_stat_activity")
    }
    used_row = conn.execute(
        "SELECT sum(total_bytes), sum(used_bytes) FROM pg_backend_memory_contexts"
    ).fetchone()
    shmem_row = conn.execute("SELECT sum(allocated_size) FROM pg_shmem_allocations").fetchone()
    sizes = conn.execute(
        "SELECT pg_size_bytes(current_setting('work_mem')),"
        " pg_size_bytes(current_setting('shared_buffers'))"
    ).fetchone()
    others = [pid for pid, kind in types.items() if pid != asking and kind != "logger"]
    contexts = _logged_contexts(log_path, conn, others)
    contexts[asking] = int(used_row[0])
    types[postmaster] = "postmaster"
    # Read while the asking session is open: it is one of the backends.
    processes = [
        p
        for pid in server_pids(postmaster)
        if (p := _process(pid, types.get(pid, "unknown"), contexts.get(pid))) is not None
    ]
    return ServerMemory(
        processes=processes,
        total_pss=sum(p.pss for p in processes),
        rss_sum=sum(p.rss for p in processes),
        shared_pss=sum(p.shared_pss for p in processes),
        shmem_allocated=int(shmem_row[0]),
        asking_pid=asking,
        asking_contexts_used=int(used_row[1]),
        work_mem_bytes=int(sizes[0]),
        shared_buffers_bytes=int(sizes[1]),
    )


def metrics(account: ServerMemory) -> dict[str, float]:
    """The account as a cell's metrics (bytes): the parts that sum to the footprint,
    and the server's own figures beside them."""
    with_contexts = [p for p in account.processes if p.contexts_bytes is not None]
    return {
        "pss_total_bytes": float(account.total_pss),
        "pss_shared_memory_bytes": float(account.shared_pss),
        "pss_private_anon_bytes": float(sum(p.anon_pss for p in account.processes)),
        "pss_files_bytes": float(sum(p.file_pss for p in account.processes)),
        "rss_sum_bytes": float(account.rss_sum),
        "shmem_allocated_bytes": float(account.shmem_allocated),
        "memory_contexts_bytes": float(sum(p.contexts_bytes or 0 for p in with_contexts)),
        "allocator_overhead_bytes": float(sum(p.allocator_overhead or 0 for p in with_contexts)),
        "processes": float(len(account.processes)),
    }


__all__ = [
    "ProcessMemory",
    "ServerMemory",
    "account",
    "account_of",
    "metrics",
    "private_memory",
    "server_pids",
]
