"""The footprint's two pieces of advice against the memory limit, word for word: the
worst case over it, or the peak so far near it (memory/advice.py decides which; one
wording reads both from the same footprint and limit)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mallocbench.memory.advice import advise
from mallocbench.memory.breakdown import Footprint
from mallocbench.memory.process import ArenaCount, MemoryLimit
from mallocbench.memory.report import AdviceKind, AllocatorSummary, JemallocArenas, MemoryReport
from mallocbench.report.memory import memory_json
from mallocbench.report.memory_advice import ShownAdvice, jemalloc_arenas_text, shown_advice
from mallocbench.servers.cgroup.hierarchy import CgroupLimit

MiB = 1 << 20
LIMIT = MemoryLimit(
    8 << 30, CgroupLimit(8 << 30, 2, Path("/system.slice/mariadb.service"), "memory.max")
)


def report(max_connections: int, max_used: int) -> MemoryReport:
    footprint = Footprint(
        global_buffers={"innodb_buffer_pool_size": 4 << 30, "key_buffer_size": 128 * MiB},
        per_connection={"sort_buffer_size": 2 * MiB, "join_buffer_size": 256 << 10},
        max_connections=max_connections,
        connections_now=10,
        max_used_connections=max_used,
        performance_schema=100 * MiB,
    )
    return MemoryReport(
        taken_at=0.0, where="test", server=None, process=None, pid_source="--pid",
        allocator=None, footprint=footprint, breakdown=None, memory_limit=LIMIT, thp=None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("max_connections", "max_used", "kind", "shown"),
    [
        (
            2000, 100, AdviceKind.FOOTPRINT_OVER_LIMIT,
            ShownAdvice(
                "warning",
                "worst-case footprint exceeds the memory limit",
                "lower max_connections or the per-connection buffers (sort_buffer_size, "
                "join_buffer_size, tmp_table_size), or cap connections with a pool",
                "global buffers 4,324 MiB + 2000 connections x 2 MiB = 8,824 MiB > 8,192 MiB "
                "(cgroup v2 memory.max of /system.slice/mariadb.service)",
            ),
        ),
        (
            1600, 1600, AdviceKind.PEAK_NEAR_LIMIT,
            ShownAdvice(
                "warning",
                "peak footprint so far is above 85% of the memory limit",
                "the connections seen so far could use nearly all memory at once",
                "7,924 MiB with Max_used_connections=1600 vs 8,192 MiB "
                "(cgroup v2 memory.max of /system.slice/mariadb.service)",
            ),
        ),
    ],
)  # fmt: skip
def test_the_footprint_against_the_limit_is_worded_as_decided(
    max_connections: int, max_used: int, kind: AdviceKind, shown: ShownAdvice
) -> None:
    r = report(max_connections, max_used)
    footprint = (AdviceKind.FOOTPRINT_OVER_LIMIT, AdviceKind.PEAK_NEAR_LIMIT)
    decided = [a for a in advise(r) if a.kind in footprint]
    assert [a.kind for a in decided] == [kind]
    assert shown_advice(r, decided) == [shown]


@pytest.mark.parametrize(
    ("summary", "limit", "said"),
    [
        (
            AllocatorSummary("glibc", None, None, 3, 2, ArenaCount.MAPS, {}),
            MemoryLimit(16 << 30),
            {
                "name": "glibc", "path": None, "glibc_arenas": 3, "glibc_heaps": 2,
                "arena_source": "64 MiB heap mappings in /proc/PID/maps (no ptrace access "
                "to verify)",
                "knobs": {}, "thp": None,
            },
        ),
        (
            AllocatorSummary("glibc", None, None, 2, 1, ArenaCount.HEAP_INFO, {}),
            LIMIT,
            {
                "name": "glibc", "path": None, "glibc_arenas": 2, "glibc_heaps": 1,
                "arena_source": "heap_info headers read from /proc/PID/mem", "knobs": {},
                "thp": None,
            },
        ),
        (
            AllocatorSummary("jemalloc", "/j.so", JemallocArenas(cpus=2), None, None, None, {}),
            LIMIT,
            {
                "name": "jemalloc", "path": "/j.so",
                "arenas": "up to 8 (jemalloc default: 4 per CPU, created on demand)",
                "glibc_arenas": None, "glibc_heaps": None, "arena_source": None, "knobs": {},
                "thp": None,
            },
        ),
    ],
)  # fmt: skip
def test_memory_words_its_allocator_and_limit_where_it_did(
    summary: AllocatorSummary, limit: MemoryLimit, said: dict[str, object]
) -> None:
    """memory/ finds how arenas were counted, what bounds jemalloc's and which group caps
    the server; report/ words them, in the JSON's keys and order as before."""
    taken = dataclasses.replace(report(100, 10), allocator=summary, memory_limit=limit)
    out = memory_json(taken)
    assert list(out["allocator"].items()) == list(said.items())
    assert out["memory_limit"] == {
        "bytes": limit.bytes,
        "source": "physical memory (MemTotal)"
        if limit.group is None
        else "cgroup v2 memory.max of /system.slice/mariadb.service",
    }
    assert jemalloc_arenas_text(JemallocArenas(narenas="4")) == "4 (MALLOC_CONF narenas)"
    assert jemalloc_arenas_text(JemallocArenas()) == "?"
