"""A private server's RSS split at the end of a cell: what the server accounts for and
what it does not, as cell metrics; the same account `mallocbench memory` gives of any
running server, cut down to numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mallocbench.memory import breakdown, process
from mallocbench.memory import server as server_memory
from mallocbench.probes.server import PFS_METRIC

if TYPE_CHECKING:
    from mallocbench.servers.mariadb import PrivateServer


def account(server: PrivateServer, allocator: str) -> dict[str, float]:
    """RSS split into what the server accounts for and what it does not, as cell metrics.

    The unaccounted part is the heap's resident pages beyond what the server says it
    holds there: the allocator's overhead and fragmentation (negative when the server
    counts memory it reserved but never touched).
    """
    try:
        with server.connect(connect_timeout=5, read_timeout=30) as conn:
            reported = server_memory.collect(conn)
        proc = process.sample(server.pid, allocator, reported.var("innodb_buffer_pool_size"))
        split = breakdown.build(proc, reported)
    except Exception:  # noqa: BLE001 - an account must never cost a measured cell
        return {}
    metrics = {
        "rss_at_accounting_bytes": float(split.rss),
        "rss_accounted_bytes": float(split.accounted),
        "rss_unaccounted_bytes": float(split.unaccounted),
        "heap_rss_bytes": float(split.heap_rss),
        "heap_accounted_bytes": float(split.heap_accounted),
    }
    if reported.pfs_enabled and reported.pfs_total is not None:
        metrics[PFS_METRIC] = float(reported.pfs_total)
    return metrics
