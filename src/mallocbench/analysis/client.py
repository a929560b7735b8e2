"""Is the load generator the bottleneck?

sysbench shares the host with the server; when it burns more CPU than the server, the
measured QPS says more about the client than about the allocator under test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

# client_cpu_share = client CPU / (client + server CPU): above one half the client used
# more CPU than the server.
CLIENT_SHARE_LIMIT = 0.5


class CellLike(Protocol):
    @property
    def metrics(self) -> Mapping[str, float]: ...


def client_cpu_share(cell: CellLike) -> float | None:
    return (cell.metrics or {}).get("client_cpu_share")


def client_bound(cell: CellLike) -> bool:
    """The client used more CPU than the server (report.words says what to do about it)."""
    share = client_cpu_share(cell)
    return share is not None and share > CLIENT_SHARE_LIMIT


__all__ = ["CLIENT_SHARE_LIMIT", "CellLike", "client_bound", "client_cpu_share"]
