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
    key: str
    label: str
    bytes: int
    source: str
    group: str  # "process" (by mapping) or "heap" (a share of the heap mappings)


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
    notes: list[str] = field(default_factory=list)
    # Noted before the breakdown's own: the process's notes, then what the server did not
    # give (report/memory.py words each gap).
    process_notes: list[str] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

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
            "rows": [asdict(r) for r in self.rows],
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
        Row(
            "binary",
            "server binary (code, static data)",
            kinds["binary"]["rss"],
            f"file pages of {proc.exe or 'the executable'} and its .bss",
            "process",
        ),
        Row(
            "files",
            "shared libraries and other mapped files",
            kinds["files"]["rss"],
            "file-backed mappings in /proc/PID/smaps",
            "process",
        ),
        Row(
            "buffer_pool",
            "InnoDB buffer pool (resident pages)",
            kinds["buffer_pool"]["rss"],
            "Rss of the mapping sized innodb_buffer_pool_size",
            "process",
        ),
        Row(
            "stacks",
            f"thread stacks ({kinds['stack']['count']} mappings)",
            kinds["stack"]["rss"],
            "Rss of stack mappings (guard page below, per-thread sp)",
            "process",
        ),
    ]
    heap_rss = kinds["main_heap"]["rss"] + kinds["glibc_heap"]["rss"] + kinds["anon"]["rss"]
    notes: list[str] = []
    heap_rows: list[Row] = []
    if server is not None:
        heap_rows = _heap_rows(server, notes)
    heap_accounted = sum(r.bytes for r in heap_rows)
    rows.extend(heap_rows)
    rows.append(
        Row(
            "unaccounted",
            "unaccounted: allocator overhead and fragmentation",
            heap_rss - heap_accounted,
            "heap mappings' Rss minus what the server accounts for in them "
            "(negative: counted but not resident)",
            "heap",
        )
    )
    if server is None:
        notes.append("no server numbers: the whole heap is shown as unaccounted")
    if kinds["buffer_pool"]["count"] == 0 and server and server.var("innodb_buffer_pool_size"):
        notes.append(
            "no mapping of innodb_buffer_pool_size was found; its pages are in the heap rows"
        )
    return Breakdown(
        rss=proc.rss,
        rows=rows,
        heap_rss=heap_rss,
        heap_accounted=heap_accounted,
        notes=notes,
        process_notes=list(proc.notes),
        gaps=list(server.gaps) if server else [],
    )


def _heap_rows(server: ServerMemory, notes: list[str]) -> list[Row]:
    """The heap rows the server's own numbers support; each missing source is a gap the
    report names, and its bytes stay in the unaccounted row rather than being guessed."""
    rows: list[Row] = []
    if server.rocksdb is not None and not server.gap("rocksdb"):
        cache = server.rocksdb.get("Cache Total", server.rocksdb.get("DB_BLOCK_CACHE_USAGE", 0))
        rows.append(
            Row(
                "rocksdb_block_cache",
                "RocksDB block cache",
                cache,
                "SHOW ENGINE ROCKSDB STATUS: Cache Total",
                "heap",
            )
        )
        if not server.gap("rocksdb_memtables"):
            mem = server.rocksdb.get("MemTable Total", 0) + server.rocksdb.get(
                "Table Readers Total", 0
            )
            rows.append(
                Row(
                    "rocksdb_memtables",
                    "RocksDB memtables and table readers",
                    mem,
                    "MemTable Total + Table Readers Total",
                    "heap",
                )
            )
    if server.pfs_enabled and server.pfs_total is not None:
        rows.append(
            Row(
                "performance_schema",
                "performance_schema",
                server.pfs_total,
                "sum of memory_summary_global_by_event_name",
                "heap",
            )
        )
    memory_used = server.stat("Memory_used")
    if memory_used is not None:
        rows.extend(_memory_used_rows(server, memory_used, notes))
    return rows


def _memory_used_rows(server: ServerMemory, memory_used: int, notes: list[str]) -> list[Row]:
    rows: list[Row] = []
    sessions = 0
    if server.sessions_complete:
        sessions = sum(s.memory_used for s in server.sessions)
        rows.append(
            Row(
                "connections",
                f"connections ({len(server.sessions)} sessions)",
                sessions,
                "sum of information_schema.PROCESSLIST.MEMORY_USED",
                "heap",
            )
        )
    reserved = 0
    if server.memory_used_includes_caches:
        reserved = sum(server.var(v) or 0 for v in RESERVED_IN_MEMORY_USED)
        notes.append(
            f"Memory_used ({_mb(memory_used)}) counts the buffer pool, key cache and Aria page "
            f"cache at their configured size ({_mb(reserved)}); that part is left out here so "
            "the buffer pool is counted once, by its resident pages"
        )
    own = max(0, memory_used - sessions - reserved)
    if server.sessions_complete:
        label, source = (
            "server global heap (Memory_used)",
            "Memory_used - sessions - reserved caches",
        )
    else:
        # Without every session's size the split is unknown; the sum still is.
        label = "server heap, connections included (Memory_used)"
        source = "Memory_used - reserved caches"
    rows.append(Row("server_heap", label, own, source, "heap"))
    return rows


def _mb(n: int) -> str:
    return f"{n / 1048576:.0f} MiB"
