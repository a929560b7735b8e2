"""The memory account's advice worded: what to change and the numbers that led to it.

memory/advice.py decides which advice applies (an Advice: its kind and level); the words
here read the same MemoryReport it judged, so each figure shown is the one decided on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from mallocbench import allocators
from mallocbench.deploy import deployment
from mallocbench.deploy import forms as deploy
from mallocbench.memory.process import ArenaCount, MemoryLimit
from mallocbench.memory.report import Advice, AdviceKind, JemallocArenas, MemoryReport

MiB = 1024 * 1024

Worded = tuple[str, str, str]  # title, what to change, evidence


ARENA_COUNT_TEXT = {
    ArenaCount.HEAP_INFO: "heap_info headers read from /proc/PID/mem",
    ArenaCount.MAPS: "64 MiB heap mappings in /proc/PID/maps (no ptrace access to verify)",
}


def arena_count_text(source: ArenaCount | None) -> str:
    return ARENA_COUNT_TEXT[source] if source is not None else ""


def limit_source_text(limit: MemoryLimit) -> str:
    group = limit.group
    if group is None:
        return "physical memory (MemTotal)"
    return f"cgroup v{group.version} {group.file} of {group.directory}"


def jemalloc_arenas_text(arenas: JemallocArenas) -> str:
    if arenas.narenas is not None:
        return f"{arenas.narenas} (MALLOC_CONF narenas)"
    if not arenas.cpus:
        return "?"
    return f"up to {4 * arenas.cpus} (jemalloc default: 4 per CPU, created on demand)"


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


def _knobs(report: MemoryReport) -> dict[str, str] | None:
    return report.process.knobs if report.process else None


def _allocator(report: MemoryReport) -> str | None:
    return report.allocator.name if report.allocator else None


def _heap_fix(report: MemoryReport) -> str:
    """What to change when the heap holds much more than the server accounts for."""
    decay = "dirty_decay_ms:5000,muzzy_decay_ms:5000"
    allocator = _allocator(report)
    if allocator == "glibc":
        return (
            "jemalloc or tcmalloc usually return freed memory better than glibc; "
            f"MALLOC_ARENA_MAX and MALLOC_TRIM_THRESHOLD_ help glibc; {_permanent_jemalloc(report)}"
        )
    if allocator == "jemalloc":
        return f"lower jemalloc's retention (MALLOC_CONF={decay}); " + _permanent_malloc_conf(
            report, _knobs(report), decay
        )
    return f"lower the allocator's retention (jemalloc: MALLOC_CONF={decay})"


def _footprint_against_limit(report: MemoryReport, advice: Advice) -> Worded:
    """The worst case over the limit, or the peak so far near it: one footprint, one
    limit, read the same way for both."""
    fp, limit = report.footprint, report.memory_limit
    assert fp is not None and limit is not None  # memory/advice.py decided on them
    against = f"{_mb(limit.bytes)} ({limit_source_text(limit)})"
    if advice.kind == AdviceKind.FOOTPRINT_OVER_LIMIT:
        return (
            "worst-case footprint exceeds the memory limit",
            "lower max_connections or the per-connection buffers (sort_buffer_size, "
            "join_buffer_size, tmp_table_size), or cap connections with a pool",
            f"global buffers {_mb(fp.global_total)} + {fp.max_connections} connections x "
            f"{_mb(fp.per_connection_total)} = {_mb(fp.worst_case)} > {against}",
        )
    return (
        "peak footprint so far is above 85% of the memory limit",
        "the connections seen so far could use nearly all memory at once",
        f"{_mb(fp.peak_so_far)} with Max_used_connections={fp.max_used_connections} vs {against}",
    )


def _oom_risk(report: MemoryReport, _: Advice) -> Worded:
    proc, limit = report.process, report.memory_limit
    assert proc is not None and limit is not None
    return (
        "RSS is close to the memory limit: OOM kill risk",
        "reduce the caches or move to a larger host before the next peak",
        f"RSS {_mb(proc.rss)} vs limit {_mb(limit.bytes)}",
    )


def _myrocks_on_glibc(report: MemoryReport, _: Advice) -> Worded:
    server, bd = report.server, report.breakdown
    assert server is not None
    return (
        "MyRocks runs on glibc malloc",
        "start the server with jemalloc (LD_PRELOAD, or malloc-lib in [mysqld_safe]); "
        "published runs saw peak RSS 3.6x the block cache with glibc against 1.2x "
        f"with jemalloc; {_permanent_jemalloc(report)}",
        "allocator glibc, rocksdb_block_cache_size "
        f"{_mb(server.var('rocksdb_block_cache_size') or 0)}"
        + (f", heap ratio {bd.heap_ratio:.2f}" if bd and bd.heap_ratio else ""),
    )


def _glibc_arenas(report: MemoryReport, advice: Advice) -> Worded:
    proc, bd = report.process, report.breakdown
    assert proc is not None
    knob = (proc.knobs or {}).get("MALLOC_ARENA_MAX")
    return (
        f"{proc.arenas} glibc arenas on {advice.cpus} CPUs",
        "each arena keeps its own free memory; MALLOC_ARENA_MAX=4 (or 2x CPUs) bounds that "
        "at some cost in throughput, jemalloc or tcmalloc avoid it; "
        + _hint(report, {"MALLOC_ARENA_MAX": "4"}, "the arena cap"),
        f"arenas {proc.arenas} ({arena_count_text(proc.arena_source)}), MALLOC_ARENA_MAX "
        f"{knob or 'not set (default 8 per CPU)'}"
        + (f", unaccounted heap {_mb(bd.unaccounted)}" if bd else ""),
    )


def _heap_gap(report: MemoryReport, _: Advice) -> Worded:
    bd = report.breakdown
    assert bd is not None
    return (
        "heap holds more than the server accounts for",
        _heap_fix(report),
        f"heap RSS {_mb(bd.heap_rss)} / accounted {_mb(bd.heap_accounted)} = "
        f"{bd.heap_ratio or 0:.2f} (gap {_mb(bd.unaccounted)}; Redis's doctor flags > 1.1 "
        "with > 10 MiB)",
    )


def _lazy_free(report: MemoryReport, advice: Advice) -> Worded:
    proc = report.process
    assert proc is not None
    lazy = proc.rollup.get("LazyFree") or 0
    stats = report.allocator_keeps.jemalloc if report.allocator_keeps else None
    if advice.kind is AdviceKind.LAZY_FREE_MUZZY:
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
        by = _allocator(report) or "the allocator"
        fix = (
            f"these pages were given back with MADV_FREE (by {by} or another part of the "
            "server): the kernel reclaims them as soon as it needs memory, so they are no "
            "leak; judge the server's use by RSS minus LazyFree"
        )
    evidence = f"LazyFree {_mb(lazy)} of RSS {_mb(proc.rss)} (/proc/{proc.pid}/smaps_rollup)"
    if stats is not None:
        evidence += f"; jemalloc's muzzy pages in its last print: {_mb(stats.muzzy)}"
    return "RSS counts memory the allocator has already freed (MADV_FREE)", fix, evidence


def _jemalloc_dirty(report: MemoryReport, _: Advice) -> Worded:
    keeps, proc = report.allocator_keeps, report.process
    stats = keeps.jemalloc if keeps else None
    assert stats is not None and proc is not None
    decay = "background_thread:true,dirty_decay_ms:5000"
    settings = ", ".join(
        f"{name} {value}"
        for name, value in (
            ("dirty_decay_ms", stats.dirty_decay_ms),
            ("background_thread", stats.background_thread),
        )
        if value is not None
    )
    return (
        "jemalloc keeps freed pages resident (dirty)",
        "dirty pages wait out dirty_decay_ms (10 s by default) and, without a background "
        "thread, are purged only when the server next allocates; a shorter decay with "
        "background_thread purges them on time: "
        + _permanent_malloc_conf(report, proc.knobs, decay),
        f"dirty {_mb(stats.dirty)} of jemalloc's resident {_mb(stats.resident)} in its last "
        f"print for process {stats.printed_by}" + (f" ({settings})" if settings else ""),
    )


def _thp_evidence(report: MemoryReport) -> str:
    setup, proc = report.thp_setup, report.process
    huge = proc.rollup.get("AnonHugePages") if proc else None
    parts = [f"THP mode {report.thp}", f"AnonHugePages {_mb(huge) if huge is not None else '?'}"]
    if setup is not None and setup.defrag:
        parts.append(f"defrag {setup.defrag}")
    if setup is not None and setup.max_ptes_none is not None:
        parts.append(f"khugepaged max_ptes_none {setup.max_ptes_none}")
    return ", ".join(parts)


def _khugepaged(report: MemoryReport) -> str:
    ptes = report.thp_setup.max_ptes_none if report.thp_setup is not None else None
    return (
        f"; or lower khugepaged's max_ptes_none ({ptes} now) to 0 so it stops making huge "
        "pages out of mostly empty ranges"
        if ptes
        else ""
    )


def _thp_always_jemalloc(report: MemoryReport, _: Advice) -> Worded:
    return (
        "transparent huge pages are 'always' with jemalloc",
        "huge pages keep freed memory resident: turn THP off for the server alone with "
        "MALLOC_CONF=thp:never ("
        + _permanent_malloc_conf(report, _knobs(report), "thp:never", "THP off")
        + "), or set the host's THP to madvise (echo madvise > "
        "/sys/kernel/mm/transparent_hugepage/enabled)" + _khugepaged(report),
        _thp_evidence(report),
    )


def _thp_always(report: MemoryReport, _: Advice) -> Worded:
    return (
        "transparent huge pages are 'always'",
        "THP can inflate RSS of a fragmented heap; madvise is the safer mode for databases "
        "(echo madvise > /sys/kernel/mm/transparent_hugepage/enabled: systemd has no "
        "per-service THP setting)" + _khugepaged(report),
        _thp_evidence(report),
    )


def _reserved_address_space(report: MemoryReport, _: Advice) -> Worded:
    proc = report.process
    assert proc is not None
    return (
        "VSZ is far above RSS",
        "harmless: address space reserved but not backed by memory (buffer pool resize "
        "reservation, glibc arena heaps, jemalloc extents); watch RSS, not VSZ",
        f"VSZ {_mb(proc.vsz)} vs RSS {_mb(proc.rss)}",
    )


def _performance_schema(report: MemoryReport, _: Advice) -> Worded:
    server, proc = report.server, report.process
    assert server is not None and server.pfs_total is not None and proc is not None
    return (
        "performance_schema holds a large share of memory",
        "size its history tables down (performance_schema_events_*_history_long_size) "
        "if you do not use them",
        f"performance_schema {_mb(server.pfs_total)} of RSS {_mb(proc.rss)}",
    )


_WORDS: dict[AdviceKind, Callable[[MemoryReport, Advice], Worded]] = {
    AdviceKind.FOOTPRINT_OVER_LIMIT: _footprint_against_limit,
    AdviceKind.PEAK_NEAR_LIMIT: _footprint_against_limit,
    AdviceKind.OOM_RISK: _oom_risk,
    AdviceKind.MYROCKS_ON_GLIBC: _myrocks_on_glibc,
    AdviceKind.GLIBC_ARENAS: _glibc_arenas,
    AdviceKind.HEAP_GAP: _heap_gap,
    AdviceKind.LAZY_FREE_MUZZY: _lazy_free,
    AdviceKind.LAZY_FREE: _lazy_free,
    AdviceKind.JEMALLOC_DIRTY: _jemalloc_dirty,
    AdviceKind.THP_ALWAYS_JEMALLOC: _thp_always_jemalloc,
    AdviceKind.THP_ALWAYS: _thp_always,
    AdviceKind.RESERVED_ADDRESS_SPACE: _reserved_address_space,
    AdviceKind.PERFORMANCE_SCHEMA: _performance_schema,
}


def worded(report: MemoryReport, advice: Advice) -> Worded:
    """One piece of advice's title, what to change, and its evidence."""
    return _WORDS[advice.kind](report, advice)


@dataclass(frozen=True)
class ShownAdvice:
    """One piece of advice as the reader gets it, in the JSON account's shape."""

    level: str
    title: str
    advice: str
    evidence: str


def shown_advice(report: MemoryReport, advice: list[Advice] | None = None) -> list[ShownAdvice]:
    """`advice` (the report's own by default) worded for `report`."""
    chosen = report.advice if advice is None else advice
    return [ShownAdvice(a.level, *worded(report, a)) for a in chosen]


def advice_dicts(report: MemoryReport) -> list[dict[str, Any]]:
    """The advice as the JSON account has it."""
    return [asdict(a) for a in shown_advice(report)]
