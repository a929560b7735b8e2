"""Is the load generator the bottleneck?

sysbench shares the host with the server; when it burns more CPU than the server, the
measured QPS says more about the client than about the allocator under test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

# client_cpu_share = client CPU / (client + server CPU): above one half the client used
# more CPU than the server.
CLIENT_SHARE_LIMIT = 0.5


class CellLike(Protocol):
    @property
    def metrics(self) -> Mapping[str, float]: ...


def client_cpu_share(cell: CellLike) -> float | None:
    return (cell.metrics or {}).get("client_cpu_share")


def client_cpu_warning(cell: CellLike) -> str | None:
    """A one-line warning when the client used more CPU than the server, else None."""
    metrics = cell.metrics or {}
    share = metrics.get("client_cpu_share")
    if share is None or share <= CLIENT_SHARE_LIMIT:
        return None
    detail = ""
    if "client_cpu_s" in metrics and "server_cpu_s" in metrics:
        detail = f" ({metrics['client_cpu_s']:.1f} s vs {metrics['server_cpu_s']:.1f} s)"
    where = _where(cell)
    return (
        f"{where}the client (sysbench) used more CPU than the server{detail}, "
        f"{share:.0%} of the total: the load generator may be the bottleneck; "
        "use fewer threads, pin the server to other CPUs (setup `cpus`), or a bigger host"
    )


def client_cpu_warnings(cells: Iterable[CellLike]) -> list[str]:
    """The warnings of every cell that has one, in the order given."""
    return [w for w in (client_cpu_warning(c) for c in cells) if w is not None]


def _where(cell: object) -> str:
    parts = [
        str(getattr(cell, name))
        for name in ("setup", "engine", "step")
        if getattr(cell, name, None) not in (None, "")
    ]
    threads = getattr(cell, "threads", None)
    if threads:
        parts.append(f"{threads} threads")
    return f"{' / '.join(parts)}: " if parts else ""


__all__ = ["CLIENT_SHARE_LIMIT", "client_cpu_share", "client_cpu_warning", "client_cpu_warnings"]
