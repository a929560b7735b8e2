"""One memory account of a running server: collect everything, keep it as data."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import pymysql

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.memory import breakdown as breakdown_mod
from mallocbench.memory import process as process_mod
from mallocbench.memory import server as server_mod
from mallocbench.memory.advice import Advice, advise
from mallocbench.memory.breakdown import Breakdown, Footprint
from mallocbench.memory.process import ProcessMemory
from mallocbench.memory.server import ConnectOptions, ServerMemory
from mallocbench.probes.system import thp_mode


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


def jemalloc_arenas(knobs: dict[str, str] | None, pid: int) -> str:
    """jemalloc keeps no arena list a reader can see; say what bounds it and why."""
    conf = ",".join(v for k, v in (knobs or {}).items() if k in ("MALLOC_CONF", "JE_MALLOC_CONF"))
    for part in conf.split(","):
        if part.startswith("narenas:"):
            return f"{part.split(':', 1)[1]} (MALLOC_CONF narenas)"
    try:
        cpus = len(os.sched_getaffinity(pid))
    except OSError:
        cpus = 0
    return f"up to {4 * cpus} (jemalloc default: 4 per CPU, created on demand)" if cpus else "?"


def connect_and_collect(opts: ConnectOptions) -> tuple[pymysql.Connection, ServerMemory]:
    conn = server_mod.connect(opts)
    try:
        return conn, server_mod.collect(conn)
    except BaseException:
        conn.close()
        raise


def take(
    opts: ConnectOptions,
    pid: int | None = None,
    conn: pymysql.Connection | None = None,
    pid_checked: bool = False,
) -> MemoryReport:
    """One full account. `conn` is reused by --watch so each sample costs one round trip set."""
    own_conn = conn is None
    if conn is None:
        conn = server_mod.connect(opts)
    try:
        try:
            srv = server_mod.collect(conn)
        except pymysql.err.MySQLError as exc:
            raise MallocbenchError(
                f"lost the server at {opts.where}: {exc.args[-1] if exc.args else exc}"
            ) from None
    finally:
        if own_conn:
            conn.close()
    if pid is not None:
        if not pid_checked:
            server_mod.check_pid(pid, srv, opts)
        pid_source = "--pid"
    else:
        pid, pid_source = server_mod.find_pid(srv, opts)
    proc = None
    allocator = None
    limit = None
    if pid is not None:
        mapped = allocators.detect(pid)
        allocator = {"name": mapped.name, "path": mapped.path}
        proc = process_mod.sample(pid, mapped.name, srv.var("innodb_buffer_pool_size"))
        if mapped.name == "jemalloc":
            allocator["arenas"] = jemalloc_arenas(proc.knobs, pid)
        limit = process_mod.memory_limit(pid)
    bd = breakdown_mod.build(proc, srv) if proc is not None else None
    report = MemoryReport(
        taken_at=time.time(),
        where=opts.where,
        server=srv,
        process=proc,
        pid_source=pid_source,
        allocator=allocator,
        footprint=breakdown_mod.footprint(srv),
        breakdown=bd,
        memory_limit=limit,
        thp=thp_mode(),
    )
    report.advice = advise(report)
    return report
