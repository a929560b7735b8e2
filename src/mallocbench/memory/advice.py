"""What to change: which advice the account's numbers call for, and how urgent.

report/memory_advice.py words each piece with the figures that led to it.
"""

from __future__ import annotations

import os

from mallocbench.memory.report import Advice, AdviceKind, MemoryReport

MiB = 1024 * 1024


def advise(report: MemoryReport) -> list[Advice]:
    """Every piece of advice that applies, in the order a reader should act on them."""
    allocator = report.allocator.name if report.allocator else None
    candidates = [
        *_footprint_advice(report),
        _oom_risk(report),
        _myrocks_on_glibc(report, allocator),
        _glibc_arenas(report, allocator, os.cpu_count() or 1),
        _heap_gap(report),
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
    limit = report.memory_limit.bytes
    if fp.worst_case > limit:
        return [Advice(AdviceKind.FOOTPRINT_OVER_LIMIT, "warning")]
    if fp.peak_so_far > 0.85 * limit:
        return [Advice(AdviceKind.PEAK_NEAR_LIMIT, "warning")]
    return []


def _oom_risk(report: MemoryReport) -> Advice | None:
    proc, limit = report.process, report.memory_limit
    if proc is None or limit is None or proc.rss <= 0.8 * limit.bytes:
        return None
    return Advice(AdviceKind.OOM_RISK, "warning")


def _myrocks_on_glibc(report: MemoryReport, allocator: str | None) -> Advice | None:
    server = report.server
    if allocator != "glibc" or server is None or server.rocksdb is None:
        return None
    return Advice(AdviceKind.MYROCKS_ON_GLIBC, "warning")


def _glibc_arenas(report: MemoryReport, allocator: str | None, cpus: int) -> Advice | None:
    proc, bd = report.process, report.breakdown
    if allocator != "glibc" or proc is None or not proc.arenas or proc.arenas <= 2 * cpus:
        return None
    level = "warning" if bd and bd.unaccounted > 256 * MiB else "info"
    return Advice(AdviceKind.GLIBC_ARENAS, level, cpus)


def _heap_gap(report: MemoryReport) -> Advice | None:
    bd = report.breakdown
    if bd is None or bd.heap_accounted <= 0:
        return None
    ratio = bd.heap_ratio or 0
    if ratio <= 1.1 or bd.unaccounted <= 10 * MiB:
        return None
    return Advice(AdviceKind.HEAP_GAP, "warning" if ratio > 1.4 else "info")


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
        return Advice(AdviceKind.LAZY_FREE_MUZZY, "info")
    return Advice(AdviceKind.LAZY_FREE, "info")


def _jemalloc_dirty(report: MemoryReport) -> Advice | None:
    """jemalloc's dirty pages, where jemalloc printed its statistics for the process."""
    keeps, proc = report.allocator_keeps, report.process
    stats = keeps.jemalloc if keeps else None
    if stats is None or proc is None or not _worth_saying(stats.dirty, stats.resident):
        return None
    return Advice(AdviceKind.JEMALLOC_DIRTY, "info")


def _huge_pages(report: MemoryReport, allocator: str | None) -> Advice | None:
    proc, thp, setup = report.process, report.thp, report.thp_setup
    if thp != "always" or (setup is not None and setup.process_disabled):
        # THP is off for this process (PR_SET_THP_DISABLE): the host's mode does not apply.
        return None
    huge = proc.rollup.get("AnonHugePages") if proc else None
    if allocator == "jemalloc":
        return Advice(AdviceKind.THP_ALWAYS_JEMALLOC, "warning")
    if proc is not None and huge is not None and huge > _KEPT_MIN:
        return Advice(AdviceKind.THP_ALWAYS, "info")
    return None


def _reserved_address_space(report: MemoryReport) -> Advice | None:
    proc = report.process
    if proc is None or proc.vsz <= 4 * max(proc.rss, 1):
        return None
    return Advice(AdviceKind.RESERVED_ADDRESS_SPACE, "info")


def _performance_schema(report: MemoryReport) -> Advice | None:
    server, proc = report.server, report.process
    if server is None or not server.pfs_total or proc is None:
        return None
    if server.pfs_total <= 0.2 * proc.rss:
        return None
    return Advice(AdviceKind.PERFORMANCE_SCHEMA, "info")
