"""A PostgreSQL server's memory account drawn (`memory --pid` on a postmaster or a
backend): its parts, shared memory named once, and every process on a line."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mallocbench.report.memory import mb, pct
from mallocbench.servers.postgresql.attach import RunningMemory
from mallocbench.servers.postgresql.memory import ServerMemory, metrics


def _parts(m: ServerMemory) -> list[tuple[str, str, int]]:
    """(key, words, bytes) of the parts that add up to the server's PSS."""
    return [
        (
            "shared_memory",
            "shared memory (shared_buffers and the rest), counted once",
            m.shared_pss,
        ),
        (
            "private_anon",
            "processes' private memory (memory contexts, allocator overhead, stacks)",
            sum(p.anon_pss for p in m.processes),
        ),
        ("files", "code and libraries (their share)", sum(p.file_pss for p in m.processes)),
    ]


def render(report: RunningMemory, console: Console) -> None:
    m = report.memory
    place = report.place
    asked = (
        f"process {report.asked_pid} is a backend of postmaster {place.postmaster}; "
        if report.asked_pid != place.postmaster
        else f"postmaster {place.postmaster}; "
    )
    console.print(f"[bold]mallocbench memory: PostgreSQL {escape(report.version)}[/]")
    console.print(
        escape(
            f"{asked}reached at {place.socket} as role {report.user} (found from "
            f"{place.source}); malloc is {report.allocator}'s"
            + (f" ({report.allocator_path})" if report.allocator_path else "")
        ),
        highlight=False,
    )
    t = Table(title="the server's PSS, each page counted once", title_justify="left")
    t.add_column("part")
    t.add_column("size", justify="right")
    t.add_column("share", justify="right")
    for _, words, size in _parts(m):
        t.add_row(words, mb(size), pct(size, m.total_pss))
    t.add_row("[bold]total PSS[/]", f"[bold]{mb(m.total_pss)}[/]", "100.0%")
    console.print(t)
    console.print(
        escape(
            f"the main shared segment holds {mb(m.shmem_allocated)} (pg_shmem_allocations; "
            f"shared_buffers {mb(m.shared_buffers_bytes)}, work_mem {mb(m.work_mem_bytes)}); "
            f"adding up every process's RSS gives {mb(m.rss_sum)}, shared memory once per "
            "process that touched it"
        ),
        highlight=False,
    )
    console.print(_process_table(m))
    if report.contexts_log is None:
        console.print(
            "note: the other backends' memory contexts were not read (the server's log "
            "is not readable here, or the role is no superuser): their allocator overhead "
            "is left blank",
            highlight=False,
        )


def _process_table(m: ServerMemory) -> Table:
    t = Table(title="every process of the server", title_justify="left")
    for name in ("pid", "type", "PSS", "shared", "private", "contexts", "allocator overhead"):
        t.add_column(name, justify="left" if name == "type" else "right")
    for p in sorted(m.processes, key=lambda p: (-p.anon_pss, p.pid)):
        t.add_row(
            str(p.pid),
            escape(p.backend_type),
            mb(p.pss),
            mb(p.shared_pss),
            mb(p.anon_pss),
            mb(p.contexts_bytes),
            mb(p.allocator_overhead),
        )
    return t


def to_dict(report: RunningMemory) -> dict[str, Any]:
    m = report.memory
    place = report.place
    return {
        "family": "postgresql",
        "version": report.version,
        "asked_pid": report.asked_pid,
        "postmaster": place.postmaster,
        "socket": place.socket,
        "found_from": place.source,
        "user": report.user,
        "allocator": report.allocator,
        "allocator_library": report.allocator_path,
        "contexts_log": report.contexts_log,
        "parts": {key: size for key, _, size in _parts(m)},
        "total_pss": m.total_pss,
        "rss_sum": m.rss_sum,
        "shmem_allocated": m.shmem_allocated,
        "shared_buffers": m.shared_buffers_bytes,
        "work_mem": m.work_mem_bytes,
        "totals": metrics(m),
        "processes": [
            {
                "pid": p.pid,
                "type": p.backend_type,
                "rss": p.rss,
                "pss": p.pss,
                "uss": p.uss,
                "shared_pss": p.shared_pss,
                "private_anon_pss": p.anon_pss,
                "files_pss": p.file_pss,
                "contexts": p.contexts_bytes,
                "allocator_overhead": p.allocator_overhead,
            }
            for p in sorted(m.processes, key=lambda p: p.pid)
        ],
    }


__all__ = ["render", "to_dict"]


def to_json(r: RunningMemory) -> str:
    return json.dumps(to_dict(r), indent=2) + "\n"
