"""What to change, each piece with the numbers that led to it."""

from __future__ import annotations

import os

from mallocbench import allocators, deploy
from mallocbench.memory.report import Advice, MemoryReport

MiB = 1024 * 1024


def _mb(n: float) -> str:
    if abs(n) >= 1024**4:
        return f"{n / 1024**4:,.1f} TiB"
    if abs(n) >= 10 * 1024**3:
        return f"{n / 1024**3:,.1f} GiB"
    return f"{n / MiB:,.0f} MiB"


def _permanent_jemalloc() -> str:
    """The drop-in line that preloads jemalloc from where it lives on this host."""
    jemalloc = allocators.get("jemalloc", require_available=False)
    if jemalloc.path is None:
        return f"jemalloc is not installed here: {jemalloc.install_hint()}"
    library = deploy.stable_library_path(jemalloc.path, jemalloc)
    return deploy.dropin_hint({"LD_PRELOAD": library}, "jemalloc")


def _permanent_malloc_conf(knobs: dict[str, str] | None, extra: str) -> str:
    # Keep what the server already has: a new MALLOC_CONF line would replace it, and
    # jemalloc lets the later of two repeated options win.
    current = (knobs or {}).get("MALLOC_CONF")
    conf = f"{current},{extra}" if current else extra
    return deploy.dropin_hint({"MALLOC_CONF": conf}, "the shorter decay")


def _heap_fix(allocator: str | None, knobs: dict[str, str] | None) -> str:
    """What to change when the heap holds much more than the server accounts for."""
    decay = "dirty_decay_ms:5000,muzzy_decay_ms:5000"
    if allocator == "glibc":
        return (
            "jemalloc or tcmalloc usually return freed memory better than glibc; "
            f"MALLOC_ARENA_MAX and MALLOC_TRIM_THRESHOLD_ help glibc; {_permanent_jemalloc()}"
        )
    if allocator == "jemalloc":
        return f"lower jemalloc's retention (MALLOC_CONF={decay}); " + _permanent_malloc_conf(
            knobs, decay
        )
    return f"lower the allocator's retention (jemalloc: MALLOC_CONF={decay})"


def advise(report: MemoryReport) -> list[Advice]:
    """Every piece of advice that applies, in the order a reader should act on them."""
    allocator = report.allocator.name if report.allocator else None
    candidates = [
        *_footprint_advice(report),
        _oom_risk(report),
        _myrocks_on_glibc(report, allocator),
        _glibc_arenas(report, allocator, os.cpu_count() or 1),
        _heap_gap(report, allocator),
        _huge_pages(report, allocator),
        _reserved_address_space(report),
        _performance_schema(report),
    ]
    return [advice for advice in candidates if advice is not None]


def _footprint_advice(report: MemoryReport) -> list[Advice]:
    """The configured footprint against the memory limit: the worst case, else the peak."""
    fp = report.footprint
    if fp is None or report.memory_limit is None:
        return []
    limit, source = report.memory_limit.bytes, report.memory_limit.source
    if fp.worst_case > limit:
        return [
            Advice(
                "warning",
                "worst-case footprint exceeds the memory limit",
                "lower max_connections or the per-connection buffers (sort_buffer_size, "
                "join_buffer_size, tmp_table_size), or cap connections with a pool",
                f"global buffers {_mb(fp.global_total)} + {fp.max_connections} connections x "
                f"{_mb(fp.per_connection_total)} = {_mb(fp.worst_case)} > {_mb(limit)} "
                f"({source})",
            )
        ]
    if fp.peak_so_far > 0.85 * limit:
        return [
            Advice(
                "warning",
                "peak footprint so far is above 85% of the memory limit",
                "the connections seen so far could use nearly all memory at once",
                f"{_mb(fp.peak_so_far)} with Max_used_connections={fp.max_used_connections} "
                f"vs {_mb(limit)} ({source})",
            )
        ]
    return []


def _oom_risk(report: MemoryReport) -> Advice | None:
    proc, limit = report.process, report.memory_limit
    if proc is None or limit is None or proc.rss <= 0.8 * limit.bytes:
        return None
    return Advice(
        "warning",
        "RSS is close to the memory limit: OOM kill risk",
        "reduce the caches or move to a larger host before the next peak",
        f"RSS {_mb(proc.rss)} vs limit {_mb(limit.bytes)}",
    )


def _myrocks_on_glibc(report: MemoryReport, allocator: str | None) -> Advice | None:
    server, bd = report.server, report.breakdown
    if allocator != "glibc" or server is None or server.rocksdb is None:
        return None
    return Advice(
        "warning",
        "MyRocks runs on glibc malloc",
        "start the server with jemalloc (LD_PRELOAD, or malloc-lib in [mysqld_safe]); "
        "published runs saw peak RSS 3.6x the block cache with glibc against 1.2x "
        f"with jemalloc; {_permanent_jemalloc()}",
        "allocator glibc, rocksdb_block_cache_size "
        f"{_mb(server.var('rocksdb_block_cache_size') or 0)}"
        + (f", heap ratio {bd.heap_ratio:.2f}" if bd and bd.heap_ratio else ""),
    )


def _glibc_arenas(report: MemoryReport, allocator: str | None, cpus: int) -> Advice | None:
    proc, bd = report.process, report.breakdown
    if allocator != "glibc" or proc is None or not proc.arenas or proc.arenas <= 2 * cpus:
        return None
    knob = (proc.knobs or {}).get("MALLOC_ARENA_MAX")
    return Advice(
        "warning" if bd and bd.unaccounted > 256 * MiB else "info",
        f"{proc.arenas} glibc arenas on {cpus} CPUs",
        "each arena keeps its own free memory; MALLOC_ARENA_MAX=4 (or 2x CPUs) bounds that "
        "at some cost in throughput, jemalloc or tcmalloc avoid it; "
        + deploy.dropin_hint({"MALLOC_ARENA_MAX": "4"}, "the arena cap"),
        f"arenas {proc.arenas} ({proc.arena_source}), MALLOC_ARENA_MAX "
        f"{knob or 'not set (default 8 per CPU)'}"
        + (f", unaccounted heap {_mb(bd.unaccounted)}" if bd else ""),
    )


def _heap_gap(report: MemoryReport, allocator: str | None) -> Advice | None:
    proc, bd = report.process, report.breakdown
    if bd is None or bd.heap_accounted <= 0:
        return None
    gap = bd.unaccounted
    ratio = bd.heap_ratio or 0
    if ratio <= 1.1 or gap <= 10 * MiB:
        return None
    return Advice(
        "warning" if ratio > 1.4 else "info",
        "heap holds more than the server accounts for",
        _heap_fix(allocator, proc.knobs if proc else None),
        f"heap RSS {_mb(bd.heap_rss)} / accounted {_mb(bd.heap_accounted)} = "
        f"{ratio:.2f} (gap {_mb(gap)}; Redis's doctor flags > 1.1 with > 10 MiB)",
    )


def _huge_pages(report: MemoryReport, allocator: str | None) -> Advice | None:
    proc, thp = report.process, report.thp
    if allocator == "jemalloc" and thp == "always":
        return Advice(
            "warning",
            "transparent huge pages are 'always' with jemalloc",
            "set THP to madvise (echo madvise > /sys/kernel/mm/transparent_hugepage/enabled) "
            "or MALLOC_CONF=thp:never: huge pages keep freed memory resident",
            "THP mode always, AnonHugePages "
            f"{_mb(proc.rollup.get('AnonHugePages', 0)) if proc else '?'}",
        )
    if thp == "always" and proc is not None and proc.rollup.get("AnonHugePages", 0) > 64 * MiB:
        return Advice(
            "info",
            "transparent huge pages are 'always'",
            "THP can inflate RSS of a fragmented heap; madvise is the safer mode for databases",
            f"AnonHugePages {_mb(proc.rollup['AnonHugePages'])}",
        )
    return None


def _reserved_address_space(report: MemoryReport) -> Advice | None:
    proc = report.process
    if proc is None or proc.vsz <= 4 * max(proc.rss, 1):
        return None
    return Advice(
        "info",
        "VSZ is far above RSS",
        "harmless: address space reserved but not backed by memory (buffer pool resize "
        "reservation, glibc arena heaps, jemalloc extents); watch RSS, not VSZ",
        f"VSZ {_mb(proc.vsz)} vs RSS {_mb(proc.rss)}",
    )


def _performance_schema(report: MemoryReport) -> Advice | None:
    server, proc = report.server, report.process
    if server is None or not server.pfs_total or proc is None:
        return None
    if server.pfs_total <= 0.2 * proc.rss:
        return None
    return Advice(
        "info",
        "performance_schema holds a large share of memory",
        "size its history tables down (performance_schema_events_*_history_long_size) "
        "if you do not use them",
        f"performance_schema {_mb(server.pfs_total)} of RSS {_mb(proc.rss)}",
    )
