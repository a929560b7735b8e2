"""The footprint's two pieces of advice against the memory limit, word for word: the
worst case over it, or the peak so far near it (memory/advice.py decides which; one
wording reads both from the same footprint and limit)."""

from __future__ import annotations

import pytest

from mallocbench.memory.advice import advise
from mallocbench.memory.breakdown import Footprint
from mallocbench.memory.process import MemoryLimit
from mallocbench.memory.report import AdviceKind, MemoryReport
from mallocbench.report.memory_advice import ShownAdvice, shown_advice

MiB = 1 << 20
LIMIT = MemoryLimit(8 << 30, "cgroup memory.max of /system.slice/mariadb.service")


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
                "(cgroup memory.max of /system.slice/mariadb.service)",
            ),
        ),
        (
            1600, 1600, AdviceKind.PEAK_NEAR_LIMIT,
            ShownAdvice(
                "warning",
                "peak footprint so far is above 85% of the memory limit",
                "the connections seen so far could use nearly all memory at once",
                "7,924 MiB with Max_used_connections=1600 vs 8,192 MiB "
                "(cgroup memory.max of /system.slice/mariadb.service)",
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
