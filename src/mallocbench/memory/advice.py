"""What to change, each piece with the numbers that led to it."""

from __future__ import annotations

import os

from mallocbench import allocators
from mallocbench.deploy import deployment
from mallocbench.deploy import forms as deploy
from mallocbench.memory.report import Advice, MemoryReport

MiB = 1024 * 1024


def _mb(n: float) -> str:
    if abs(n) >= 1024**4:
        return f"{n / 1024**4:,.1f} TiB"
    if abs(n) >= 10 * 1024**3:
        return f"{n / 1024**3:,.1f} GiB"
    return f"{n / MiB:,.0f} MiB"


def _hint(report: MemoryReport, environment: dict[str, str], what: str) -> str:
    """How to make `environment` permanent, in the form the server runs under."""
    return deploy.permanent_hint(environment, what, report.deploy_form, report.deploy_service)


def _permanent_jemalloc(report: MemoryReport) -> str:
    """The line that preloads jemalloc from where it lives on this host."""
    jemalloc = allocators.get("jemalloc", require_available=False)
    if jemalloc.path is None:
        return f"jemalloc is not installed here: {jemalloc.install_hint()}"
    library = deployment.stable_library_path(jemalloc.path, jemalloc)
    return _hint(report, {"LD_PRELOAD": library}, "jemalloc")


def _permanent_malloc_conf(
    report: MemoryReport,
    knobs: dict[str, str] | None,
    extra: str,
    what: str = "the shorter decay",
) -> str:
    # Keep what the server already has: a new MALLOC_CONF line would replace it, and
    # jemalloc lets the later of two repeated options win.
    current = (knobs or {}).get("MALLOC_CONF")
    conf = f"{current},{extra}" if current else extra
    return _hint(report, {"MALLOC_CONF": conf}, what)


def _heap_fix(report: MemoryReport, allocator: str | None, knobs: dict[str, str] | None) -> str:
    """What to change when the heap holds much more than the server accounts for."""
    decay = "dirty_decay_ms:5000,muzzy_decay_ms:5000"
    if allocator == "glibc":
        return (
            "jemalloc or tcmalloc usually return freed memory better than glibc; "
            f"MALLOC_ARENA_MAX and MALLOC_TRIM_THRESHOLD_ help glibc; {_permanent_jemalloc(report)}"
        )
    if allocator == "jemalloc":
        return f"lower jemalloc's retention (MALLOC_CONF={decay}); " + _permanent_malloc_conf(
            report, knobs, decay
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
        _lazy_free(report, allocator),
        _jemalloc_dirty(report),
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
        f"with jemalloc; {_permanent_jemalloc(report)}",
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
        + _hint(report, {"MALLOC_ARENA_MAX": "4"}, "the arena cap"),
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
        _heap_fix(report, allocator, proc.knobs if proc else None),
        f"heap RSS {_mb(bd.heap_rss)} / accounted {_mb(bd.heap_accounted)} = "
        f"{ratio:.2f} (gap {_mb(gap)}; Redis's doctor flags > 1.1 with > 10 MiB)",
    )


# Kept memory worth a word: at least this much, and this share of RSS.
_KEPT_MIN = 64 * MiB
_KEPT_SHARE = 0.10


def _worth_saying(kept: int | None, rss: int) -> bool:
    return kept is not None and kept >= _KEPT_MIN and kept >= _KEPT_SHARE * rss


def _lazy_free(report: MemoryReport, allocator: str | None) -> Advice | None:
    """Pages freed with MADV_FREE: in RSS until the kernel wants them, then gone at once."""
    proc = report.process
    lazy = proc.rollup.get("LazyFree") if proc else None
    if proc is None or lazy is None or not _worth_saying(lazy, proc.rss):
        return None
    stats = report.allocator_keeps.jemalloc if report.allocator_keeps else None
    # jemalloc's own figures, where it printed them, may show the pages are not its own.
    if allocator == "jemalloc" and (stats is None or stats.muzzy >= lazy / 2):
        fix = (
            "under jemalloc these are normally its muzzy pages; muzzy_decay_ms:0 has it give "
            "them back with MADV_DONTNEED, which RSS shows at once, and background_thread:true "
            "purges on time instead of at the next allocation; "
            + _permanent_malloc_conf(
                report,
                proc.knobs,
                "muzzy_decay_ms:0,background_thread:true",
                "the immediate purge",
            )
        )
    else:
        fix = (
            f"these pages were given back with MADV_FREE (by {allocator or 'the allocator'} or "
            "another part of the server): the kernel reclaims them as soon as it needs "
            "memory, so they are no leak; judge the server's use by RSS minus LazyFree"
        )
    evidence = f"LazyFree {_mb(lazy)} of RSS {_mb(proc.rss)} (/proc/{proc.pid}/smaps_rollup)"
    if stats is not None:
        evidence += f"; jemalloc's muzzy pages in its last print: {_mb(stats.muzzy)}"
    return Advice(
        "info", "RSS counts memory the allocator has already freed (MADV_FREE)", fix, evidence
    )


def _jemalloc_dirty(report: MemoryReport) -> Advice | None:
    """jemalloc's dirty pages, where jemalloc printed its statistics for the process."""
    keeps, proc = report.allocator_keeps, report.process
    stats = keeps.jemalloc if keeps else None
    if stats is None or proc is None or not _worth_saying(stats.dirty, stats.resident):
        return None
    decay = "background_thread:true,dirty_decay_ms:5000"
    settings = ", ".join(
        f"{name} {value}"
        for name, value in (
            ("dirty_decay_ms", stats.dirty_decay_ms),
            ("background_thread", stats.background_thread),
        )
        if value is not None
    )
    return Advice(
        "info",
        "jemalloc keeps freed pages resident (dirty)",
        "dirty pages wait out dirty_decay_ms (10 s by default) and, without a background "
        "thread, are purged only when the server next allocates; a shorter decay with "
        "background_thread purges them on time: "
        + _permanent_malloc_conf(report, proc.knobs, decay),
        f"dirty {_mb(stats.dirty)} of jemalloc's resident {_mb(stats.resident)} in its last "
        f"print for process {stats.printed_by}" + (f" ({settings})" if settings else ""),
    )


def _thp_evidence(report: MemoryReport, huge: int | None) -> str:
    setup = report.thp_setup
    parts = [f"THP mode {report.thp}", f"AnonHugePages {_mb(huge) if huge is not None else '?'}"]
    if setup is not None and setup.defrag:
        parts.append(f"defrag {setup.defrag}")
    if setup is not None and setup.max_ptes_none is not None:
        parts.append(f"khugepaged max_ptes_none {setup.max_ptes_none}")
    return ", ".join(parts)


def _huge_pages(report: MemoryReport, allocator: str | None) -> Advice | None:
    proc, thp, setup = report.process, report.thp, report.thp_setup
    if thp != "always" or (setup is not None and setup.process_disabled):
        # THP is off for this process (PR_SET_THP_DISABLE): the host's mode does not apply.
        return None
    huge = proc.rollup.get("AnonHugePages") if proc else None
    ptes = setup.max_ptes_none if setup is not None else None
    khugepaged = (
        f"; or lower khugepaged's max_ptes_none ({ptes} now) to 0 so it stops making huge "
        "pages out of mostly empty ranges"
        if ptes
        else ""
    )
    if allocator == "jemalloc":
        return Advice(
            "warning",
            "transparent huge pages are 'always' with jemalloc",
            "huge pages keep freed memory resident: turn THP off for the server alone with "
            "MALLOC_CONF=thp:never ("
            + _permanent_malloc_conf(report, proc.knobs if proc else None, "thp:never", "THP off")
            + "), or set the host's THP to madvise (echo madvise > "
            "/sys/kernel/mm/transparent_hugepage/enabled)" + khugepaged,
            _thp_evidence(report, huge),
        )
    if proc is not None and huge is not None and huge > _KEPT_MIN:
        return Advice(
            "info",
            "transparent huge pages are 'always'",
            "THP can inflate RSS of a fragmented heap; madvise is the safer mode for databases "
            "(echo madvise > /sys/kernel/mm/transparent_hugepage/enabled: systemd has no "
            "per-service THP setting)" + khugepaged,
            _thp_evidence(report, huge),
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
