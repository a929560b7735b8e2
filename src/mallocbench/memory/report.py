"""One memory account of a running server, kept as data (memory.take collects it).

The live objects (ServerMemory, ProcessMemory) keep everything read; the records here
are the parts of them the report shows, in the shape its JSON has.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mallocbench.memory.breakdown import Breakdown, Footprint
from mallocbench.memory.jemalloc import JemallocStats
from mallocbench.memory.process import ArenaCount, MemoryLimit, ProcessMemory, ThpSetup
from mallocbench.memory.server import ServerMemory, Session

# Sessions in the JSON account, largest first: enough to find the heavy ones.
JSON_SESSIONS = 20


class AdviceKind(enum.StrEnum):
    """What memory.advice found to change; report/memory_advice.py words each."""

    FOOTPRINT_OVER_LIMIT = "footprint_over_limit"
    PEAK_NEAR_LIMIT = "peak_near_limit"
    OOM_RISK = "oom_risk"
    MYROCKS_ON_GLIBC = "myrocks_on_glibc"
    GLIBC_ARENAS = "glibc_arenas"
    HEAP_GAP = "heap_gap"
    LAZY_FREE_MUZZY = "lazy_free_muzzy"  # under jemalloc, its muzzy pages
    LAZY_FREE = "lazy_free"
    JEMALLOC_DIRTY = "jemalloc_dirty"
    THP_ALWAYS_JEMALLOC = "thp_always_jemalloc"
    THP_ALWAYS = "thp_always"
    RESERVED_ADDRESS_SPACE = "reserved_address_space"
    PERFORMANCE_SCHEMA = "performance_schema"


@dataclass(frozen=True)
class Advice:
    """One thing to change (memory.advice decides); its numbers are the account's own."""

    kind: AdviceKind
    level: str  # "warning" or "info"
    cpus: int = 0  # the CPUs the arena count was judged against (GLIBC_ARENAS)


@dataclass
class ProcessSummary:
    """The process's memory in the figures a reader compares (bytes unless said)."""

    pid: int
    name: str
    exe: str | None
    rss: int
    vsz: int
    anonymous: int | None
    file_backed: int | None
    shmem: int | None
    shared: int  # clean + dirty
    swap: int | None
    anon_huge_pages: int | None
    # Freed with MADV_FREE but still counted in RSS until the kernel needs the memory.
    lazy_free: int | None
    threads: int
    stack_mappings: int
    stack_reservation: int
    mappings_by_kind: dict[str, dict[str, int]]  # kind -> rss, size, count

    @classmethod
    def of(cls, proc: ProcessMemory) -> ProcessSummary:
        kinds = proc.by_kind()
        return cls(
            pid=proc.pid,
            name=proc.name,
            exe=proc.exe,
            rss=proc.rss,
            vsz=proc.vsz,
            anonymous=proc.rollup.get("Anonymous", proc.status.get("RssAnon")),
            file_backed=proc.status.get("RssFile"),
            shmem=proc.status.get("RssShmem"),
            shared=proc.rollup.get("Shared_Clean", 0) + proc.rollup.get("Shared_Dirty", 0),
            swap=proc.status.get("VmSwap"),
            anon_huge_pages=proc.rollup.get("AnonHugePages"),
            lazy_free=proc.rollup.get("LazyFree"),
            threads=proc.threads,
            stack_mappings=kinds["stack"]["count"],
            stack_reservation=proc.stack_reservation(),
            mappings_by_kind=kinds,
        )


@dataclass(frozen=True)
class JemallocArenas:
    """What bounds jemalloc's arenas (report/memory.py words it)."""

    narenas: str | None = None  # MALLOC_CONF's narenas as given; None: jemalloc's default
    cpus: int = 0  # CPUs the process may run on (the default is 4 per CPU); 0: unknown


@dataclass
class AllocatorSummary:
    """The allocator mapped into the process, its arenas and the knobs in force."""

    name: str
    path: str | None  # None: the allocator built into libc, not found mapped
    jemalloc_arenas: JemallocArenas | None = None  # None for other allocators
    glibc_arenas: int | None = None  # the main one included; None when not glibc
    glibc_heaps: int | None = None
    arena_source: ArenaCount | None = None
    knobs: dict[str, str] | None = None  # None: the process's environment is unreadable

    @classmethod
    def of(
        cls,
        name: str,
        path: str | None,
        proc: ProcessMemory,
        jemalloc_arenas: JemallocArenas | None,
    ) -> AllocatorSummary:
        return cls(
            name=name,
            path=path,
            jemalloc_arenas=jemalloc_arenas,
            glibc_arenas=proc.arenas,
            glibc_heaps=proc.glibc_heaps() if proc.arenas is not None else None,
            arena_source=proc.arena_source,
            knobs=proc.knobs,
        )

    def to_dict(self) -> dict[str, Any]:
        # The JSON calls jemalloc's bound "arenas" and has it only for jemalloc; it and
        # arena_source are worded in place by report/memory.py.
        out: dict[str, Any] = {"name": self.name, "path": self.path}
        if self.jemalloc_arenas is not None:
            out["arenas"] = asdict(self.jemalloc_arenas)
        return {
            **out,
            "glibc_arenas": self.glibc_arenas,
            "glibc_heaps": self.glibc_heaps,
            "arena_source": self.arena_source.value if self.arena_source else None,
            "knobs": self.knobs,
        }


class KeepsSource(enum.StrEnum):
    """Where the figures of what the allocator keeps come from."""

    PROC = "proc"  # the kernel's view only: smaps_rollup's LazyFree and AnonHugePages
    JEMALLOC = "jemalloc"  # jemalloc's own last print in the error log, and /proc


class SeeMore(enum.StrEnum):
    """Why jemalloc's own figures are missing, and so how to get them."""

    LOG_UNREADABLE = "log-unreadable"  # its error log is there but not ours to read
    NO_PRINTS = "no-prints"  # it printed no statistics for this process


@dataclass
class AllocatorKeeps:
    """What the allocator holds beyond what the program uses, as far as anyone can tell.

    The kernel's view (LazyFree, AnonHugePages) is there for every process; the allocator's
    own (jemalloc's dirty, muzzy and retained pages) only where it printed them for the
    running process. `source` says which one the figures come from; `log` and `pid` are
    where jemalloc prints and for which process, for the words report/memory.py gives them.
    """

    source: KeepsSource
    lazy_free: int | None
    anon_huge_pages: int | None
    jemalloc: JemallocStats | None = None
    # Why the allocator's own figures are missing (how to get them); None when present.
    how_to_see_more: SeeMore | None = None
    log: Path | None = None
    pid: int = 0

    def to_dict(self) -> dict[str, Any]:
        # What the document held before `log` and `pid` were kept for the words.
        return {k: v for k, v in asdict(self).items() if k not in ("log", "pid")}


@dataclass
class BufferPoolPages:
    total: int | None
    data: int | None
    misc: int | None
    free: int | None


@dataclass
class BufferPoolAccount:
    size: int | None
    page_size: int | None
    pages: BufferPoolPages
    # From SHOW ENGINE INNODB STATUS; None when it did not say (or was refused).
    total_large_memory: int | None = None
    dictionary_memory: int | None = None

    def to_dict(self) -> dict[str, Any]:
        # The JSON has InnoDB's own counters only when InnoDB gave them.
        counters = ("total_large_memory", "dictionary_memory")
        return {k: v for k, v in asdict(self).items() if k not in counters or v is not None}


@dataclass
class MemoryConsumer:
    """One performance_schema memory event and the bytes it holds now."""

    event_name: str
    bytes: int


@dataclass
class PerformanceSchemaAccount:
    enabled: bool
    total: int | None  # None: off, or its tables were unreadable
    top: list[MemoryConsumer]


@dataclass
class ServerAccount:
    """What the server accounts for itself: caches, heap, sessions, performance_schema."""

    innodb_buffer_pool: BufferPoolAccount
    rocksdb: dict[str, int] | None  # MEMORY_STATS of SHOW ENGINE ROCKSDB STATUS, by name
    rocksdb_block_cache_size: int | None
    memory_used: int | None
    memory_used_initial: int | None
    memory_used_includes_caches: bool
    sessions: list[Session]  # every one, largest first
    performance_schema: PerformanceSchemaAccount

    @classmethod
    def of(cls, srv: ServerMemory) -> ServerAccount:
        pages = BufferPoolPages(
            *(srv.stat(f"Innodb_buffer_pool_pages_{k}") for k in ("total", "data", "misc", "free"))
        )
        return cls(
            innodb_buffer_pool=BufferPoolAccount(
                size=srv.var("innodb_buffer_pool_size"),
                page_size=srv.var("innodb_page_size"),
                pages=pages,
                total_large_memory=srv.innodb_status.get("total_large_memory"),
                dictionary_memory=srv.innodb_status.get("dictionary_memory"),
            ),
            rocksdb=srv.rocksdb,
            rocksdb_block_cache_size=srv.var("rocksdb_block_cache_size"),
            memory_used=srv.stat("Memory_used"),
            memory_used_initial=srv.stat("Memory_used_initial"),
            memory_used_includes_caches=srv.memory_used_includes_caches,
            sessions=srv.sessions,
            performance_schema=PerformanceSchemaAccount(
                enabled=srv.pfs_enabled,
                total=srv.pfs_total,
                top=[MemoryConsumer(name, nbytes) for name, nbytes in srv.pfs_top],
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "innodb_buffer_pool": self.innodb_buffer_pool.to_dict(),
            "sessions": [asdict(s) for s in self.sessions[:JSON_SESSIONS]],
        }


@dataclass
class MemoryReport:
    taken_at: float
    where: str
    server: ServerMemory | None
    process: ProcessMemory | None
    pid_source: str
    allocator: AllocatorSummary | None  # None when the process was not inspected
    footprint: Footprint | None
    breakdown: Breakdown | None
    memory_limit: MemoryLimit | None
    thp: str | None
    advice: list[Advice] = field(default_factory=list)
    thp_setup: ThpSetup | None = None
    allocator_keeps: AllocatorKeeps | None = None
    # How the server runs (launch.FORMS) and its unit: what the advice's "make it
    # permanent" lines are worded for.
    deploy_form: str = "systemd"
    deploy_service: str = "mariadb"
    # Views of the live objects above, taken once so text and JSON show the same figures.
    server_account: ServerAccount | None = field(init=False, default=None)
    process_summary: ProcessSummary | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.server is not None:
            self.server_account = ServerAccount.of(self.server)
        if self.process is not None:
            self.process_summary = ProcessSummary.of(self.process)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taken_at": self.taken_at,
            "server": self.where,
            "pid_source": self.pid_source,
        }
        if self.server is not None and self.server_account is not None:
            out["server_info"] = {"version": self.server.version, "flavor": self.server.flavor}
            # Each source the server would not give: what is unknown, why, and the fix.
            out["gaps"] = [asdict(g) for g in self.server.gaps]  # worded by report/memory.py
            out["accounted_by_server"] = self.server_account.to_dict()
        if self.process_summary is not None:
            out["process"] = asdict(self.process_summary)
        if self.allocator is not None:
            out["allocator"] = {**self.allocator.to_dict(), "thp": self.thp}
        if self.thp_setup is not None:
            out["thp_setup"] = asdict(self.thp_setup)
        if self.allocator_keeps is not None:
            out["allocator_keeps"] = self.allocator_keeps.to_dict()  # worded by report/
        if self.memory_limit is not None:
            # Its source is worded in place by report/memory.py.
            out["memory_limit"] = {"bytes": self.memory_limit.bytes, "source": None}
        if self.footprint is not None:
            out["configured_footprint"] = self.footprint.to_dict()
        if self.breakdown is not None:
            out["breakdown"] = self.breakdown.to_dict()
        out["advice"] = [asdict(a) for a in self.advice]  # worded by report/memory_advice.py
        return out
