"""The account: RSS split into parts that add up to it exactly, plus the configured footprint.

The split follows the kernel first and the server second. Resident pages are assigned by
mapping (binary, libraries, buffer pool, stacks, heap); only the heap is then divided by
what the server says it allocated there. What the heap holds beyond that is the allocator's
overhead and fragmentation — the number Redis calls the fragmentation gap. It can be
negative when the server counts memory it reserved but never touched.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mallocbench.memory.process import ProcessMemory
from mallocbench.memory.server import Gap, ServerMemory

PER_CONNECTION_VARS = (
    "read_buffer_size",
    "read_rnd_buffer_size",
    "sort_buffer_size",
    "thread_stack",
    "join_buffer_size",
    "binlog_cache_size",
)
GLOBAL_VARS = (
    "innodb_buffer_pool_size",
    "key_buffer_size",
    "innodb_log_buffer_size",
    "query_cache_size",
    "aria_pagecache_buffer_size",
    "rocksdb_block_cache_size",
    "rocksdb_db_write_buffer_size",
)
# Caches that MariaDB's Memory_used counts at their full configured size (reserved).
RESERVED_IN_MEMORY_USED = (
    "innodb_buffer_pool_size",
    "key_buffer_size",
    "aria_pagecache_buffer_size",
)


@dataclass
class Row:
    """One part of RSS; report/memory.py names it and its source by its key."""

    key: str  # binary, files, buffer_pool, stacks, rocksdb_block_cache, ..., unaccounted
    bytes: int
    group: str  # "process" (by mapping) or "heap" (a share of the heap mappings)
    count: int | None = None  # the stack mappings, or the sessions, it sums


@dataclass
class Footprint:
    """What the settings allow, the way mysqltuner estimates it, plus RocksDB."""

    global_buffers: dict[str, int]
    per_connection: dict[str, int]
    max_connections: int
    connections_now: int
    max_used_connections: int
    performance_schema: int

    @property
    def global_total(self) -> int:
        return sum(self.global_buffers.values()) + self.performance_schema

    @property
    def per_connection_total(self) -> int:
        return sum(self.per_connection.values())

    @property
    def worst_case(self) -> int:
        return self.global_total + self.per_connection_total * self.max_connections

    @property
    def peak_so_far(self) -> int:
        return self.global_total + self.per_connection_total * self.max_used_connections

    @property
    def now(self) -> int:
        return self.global_total + self.per_connection_total * self.connections_now

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            global_total=self.global_total,
            per_connection_total=self.per_connection_total,
            worst_case=self.worst_case,
            peak_so_far=self.peak_so_far,
            now=self.now,
        )
        return out


def footprint(server: ServerMemory) -> Footprint:
    per_conn = {v: server.var(v) or 0 for v in PER_CONNECTION_VARS if server.var(v) is not None}
    tmp = min(server.var("tmp_table_size") or 0, server.var("max_heap_table_size") or 0)
    per_conn["min(tmp_table_size, max_heap_table_size)"] = tmp
    glob = {v: server.var(v) or 0 for v in GLOBAL_VARS if server.var(v)}
    if server.variables.get("query_cache_type", "OFF").upper() in ("OFF", "0"):
        glob.pop("query_cache_size", None)
    return Footprint(
        global_buffers=glob,
        per_connection=per_conn,
        max_connections=server.var("max_connections") or 0,
        connections_now=server.stat("Threads_connected") or 0,
        max_used_connections=server.stat("Max_used_connections") or 0,
        performance_schema=server.pfs_total or 0,
    )


@dataclass
class Breakdown:
    rss: int
    rows: list[Row]
    heap_rss: int
    heap_accounted: int
    # What report/memory.py notes: an estimated buffer pool, what the server did not
    # give, and the facts behind this split's own notes.
    pool_prorated: bool = False
    gaps: list[Gap] = field(default_factory=list)
    exe: str | None = None
    server_seen: bool = True  # False: no server numbers, the whole heap is unaccounted
    sessions_split: bool = True  # False: the server heap row includes the connections
    memory_used: int | None = None
    # The caches Memory_used counts at their configured size (None: it does not count them).
    reserved_caches: int | None = None
    pool_unmapped: bool = False  # innodb_buffer_pool_size set, no mapping of that size

    @property
    def unaccounted(self) -> int:
        return self.heap_rss - self.heap_accounted

    @property
    def accounted(self) -> int:
        return self.rss - self.unaccounted

    @property
    def ratio(self) -> float | None:
        """RSS / accounted: Redis's mem_fragmentation_ratio for the whole process."""
        return self.rss / self.accounted if self.accounted > 0 else None

    @property
    def heap_ratio(self) -> float | None:
        """Heap RSS / what the server says it holds there: the allocator's share."""
        return self.heap_rss / self.heap_accounted if self.heap_accounted > 0 else None

    def total(self) -> int:
        return sum(r.bytes for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rss": self.rss,
            "rows": [asdict(r) for r in self.rows],  # worded by report/memory.py
            "sum_of_rows": self.total(),
            "heap_rss": self.heap_rss,
            "heap_accounted": self.heap_accounted,
            "accounted": self.accounted,
            "unaccounted": self.unaccounted,
            "ratio": self.ratio,
            "heap_ratio": self.heap_ratio,
        }


def build(proc: ProcessMemory, server: ServerMemory | None) -> Breakdown:
    kinds = proc.by_kind()
    rows = [
        Row("binary", kinds["binary"]["rss"], "process"),
        Row("files", kinds["files"]["rss"], "process"),
        Row("buffer_pool", kinds["buffer_pool"]["rss"], "process"),
        Row("stacks", kinds["stack"]["rss"], "process", kinds["stack"]["count"]),
    ]
    heap_rss = kinds["main_heap"]["rss"] + kinds["glibc_heap"]["rss"] + kinds["anon"]["rss"]
    bd = Breakdown(
        rss=proc.rss, rows=rows, heap_rss=heap_rss, heap_accounted=0,
        pool_prorated=proc.pool_prorated, gaps=list(server.gaps) if server else [],
        exe=proc.exe, server_seen=server is not None,
        pool_unmapped=bool(
            kinds["buffer_pool"]["count"] == 0 and server and server.var("innodb_buffer_pool_size")
        ),
    )  # fmt: skip
    heap_rows = _heap_rows(server, bd) if server is not None else []
    bd.heap_accounted = sum(r.bytes for r in heap_rows)
    rows.extend(heap_rows)
    rows.append(Row("unaccounted", heap_rss - bd.heap_accounted, "heap"))
    return bd


def _heap_rows(server: ServerMemory, bd: Breakdown) -> list[Row]:
    """The heap rows the server's own numbers support; each missing source is a gap the
    report names, and its bytes stay in the unaccounted row rather than being guessed."""
    rows: list[Row] = []
    if server.rocksdb is not None and not server.gap("rocksdb"):
        cache = server.rocksdb.get("Cache Total", server.rocksdb.get("DB_BLOCK_CACHE_USAGE", 0))
        rows.append(Row("rocksdb_block_cache", cache, "heap"))
        if not server.gap("rocksdb_memtables"):
            mem = server.rocksdb.get("MemTable Total", 0) + server.rocksdb.get(
                "Table Readers Total", 0
            )
            rows.append(Row("rocksdb_memtables", mem, "heap"))
    if server.pfs_enabled and server.pfs_total is not None:
        rows.append(Row("performance_schema", server.pfs_total, "heap"))
    memory_used = server.stat("Memory_used")
    if memory_used is not None:
        rows.extend(_memory_used_rows(server, memory_used, bd))
    return rows


def _memory_used_rows(server: ServerMemory, memory_used: int, bd: Breakdown) -> list[Row]:
    rows: list[Row] = []
    sessions = 0
    if server.sessions_complete:
        sessions = sum(s.memory_used for s in server.sessions)
        rows.append(Row("connections", sessions, "heap", len(server.sessions)))
    reserved = 0
    bd.memory_used = memory_used
    if server.memory_used_includes_caches:
        # Left out so the buffer pool is counted once, by its resident pages.
        reserved = sum(server.var(v) or 0 for v in RESERVED_IN_MEMORY_USED)
        bd.reserved_caches = reserved
    # Without every session's size the split is unknown; the sum still is.
    bd.sessions_split = server.sessions_complete
    rows.append(Row("server_heap", max(0, memory_used - sessions - reserved), "heap"))
    return rows
