"""One memory account of a running server, kept as data (memory.take collects it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mallocbench.memory.breakdown import Breakdown, Footprint
from mallocbench.memory.process import ProcessMemory
from mallocbench.memory.server import ServerMemory


@dataclass
class Advice:
    """One thing to change, with the numbers that led to it (memory.advice decides)."""

    level: str  # "warning" or "info"
    title: str
    advice: str
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MemoryReport:
    taken_at: float
    where: str
    server: ServerMemory | None
    process: ProcessMemory | None
    pid_source: str
    allocator: dict[str, Any] | None
    footprint: Footprint | None
    breakdown: Breakdown | None
    memory_limit: tuple[int, str] | None
    thp: str | None
    advice: list[Advice] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        proc = self.process
        srv = self.server
        out: dict[str, Any] = {
            "taken_at": self.taken_at,
            "server": self.where,
            "pid_source": self.pid_source,
        }
        if srv is not None:
            bp_pages = {
                k: srv.stat(f"Innodb_buffer_pool_pages_{k}")
                for k in ("total", "data", "misc", "free")
            }
            out["server_info"] = {"version": srv.version, "flavor": srv.flavor}
            # Each source the server would not give: what is unknown, why, and the fix.
            out["gaps"] = [g.to_dict() for g in srv.gaps]
            out["accounted_by_server"] = {
                "innodb_buffer_pool": {
                    "size": srv.var("innodb_buffer_pool_size"),
                    "page_size": srv.var("innodb_page_size"),
                    "pages": bp_pages,
                    **srv.innodb_status,
                },
                "rocksdb": srv.rocksdb,
                "rocksdb_block_cache_size": srv.var("rocksdb_block_cache_size"),
                "memory_used": srv.stat("Memory_used"),
                "memory_used_initial": srv.stat("Memory_used_initial"),
                "memory_used_includes_caches": srv.memory_used_includes_caches,
                "sessions": srv.sessions[:20],
                "performance_schema": {
                    "enabled": srv.pfs_enabled,
                    "total": srv.pfs_total,
                    "top": [{"event_name": n, "bytes": b} for n, b in srv.pfs_top],
                },
            }
        if proc is not None:
            kinds = proc.by_kind()
            out["process"] = {
                "pid": proc.pid,
                "name": proc.name,
                "exe": proc.exe,
                "rss": proc.rss,
                "vsz": proc.vsz,
                "anonymous": proc.rollup.get("Anonymous", proc.status.get("RssAnon")),
                "file_backed": proc.status.get("RssFile"),
                "shmem": proc.status.get("RssShmem"),
                "shared": proc.rollup.get("Shared_Clean", 0) + proc.rollup.get("Shared_Dirty", 0),
                "swap": proc.status.get("VmSwap"),
                "anon_huge_pages": proc.rollup.get("AnonHugePages"),
                "threads": proc.threads,
                "stack_mappings": kinds["stack"]["count"],
                "stack_reservation": proc.stack_reservation(),
                "mappings_by_kind": kinds,
            }
            out["allocator"] = {
                **(self.allocator or {}),
                "glibc_arenas": proc.arenas,
                "glibc_heaps": proc.glibc_heaps() if proc.arenas is not None else None,
                "arena_source": proc.arena_source or None,
                "knobs": proc.knobs,
                "thp": self.thp,
            }
        if self.memory_limit:
            out["memory_limit"] = {"bytes": self.memory_limit[0], "source": self.memory_limit[1]}
        if self.footprint is not None:
            out["configured_footprint"] = self.footprint.to_dict()
        if self.breakdown is not None:
            out["breakdown"] = self.breakdown.to_dict()
        out["advice"] = [a.to_dict() for a in self.advice]
        return out
