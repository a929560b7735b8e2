"""A memory account drawn: its terminal tables (rich), and the chart of a --watch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mallocbench.console import make_console
from mallocbench.errors import MallocbenchError
from mallocbench.memory.breakdown import Breakdown, Footprint, Row
from mallocbench.memory.jemalloc import STATS_AT_EXIT_CONF, STATS_INTERVAL_CONF
from mallocbench.memory.massif import ProfileTop
from mallocbench.memory.process import ThpSetup
from mallocbench.memory.report import (
    AllocatorKeeps,
    AllocatorSummary,
    KeepsSource,
    MemoryReport,
    ProcessSummary,
    SeeMore,
    ServerAccount,
)
from mallocbench.memory.server import Gap, GapCause
from mallocbench.report.memory_advice import (
    advice_dicts,
    arena_count_text,
    jemalloc_arenas_text,
    limit_source_text,
    worded,
)

MiB = 1024 * 1024


def mb(n: int | float | None) -> str:
    """Bytes in the unit that keeps them readable (MiB up to 10 GiB: easy to compare)."""
    if n is None:
        return "-"
    size = abs(n)
    if size >= 1024**4:
        return f"{n / 1024**4:,.1f} TiB"
    if size >= 10 * 1024**3:
        return f"{n / 1024**3:,.1f} GiB"
    return f"{n / MiB:,.1f} MiB"


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


# What each source the server would not give is, by its key; and why, with the fix.
_GAP_WHAT = {
    "memory_used": "heap the server accounts for",
    "sessions": "memory per connection",
    "performance_schema": "performance_schema memory",
    "performance_schema_instruments": "server memory seen by performance_schema",
    "innodb": "InnoDB's own counters (total large memory, dictionary memory)",
    "rocksdb": "RocksDB block cache, memtables and table readers",
    "rocksdb_memtables": "RocksDB memtables and table readers",
}
_RESTART = "in my.cnf, then restart"
_GAP_WHY = {
    GapCause.NO_MEMORY_USED: (
        "status variable Memory_used missing from SHOW GLOBAL STATUS (MariaDB 10.x has it)"
    ),
    GapCause.MYSQL_NO_MEMORY_USED: (
        "status variable Memory_used missing (MySQL has none; MariaDB 10.x has it)"
    ),
    GapCause.PROCESSLIST_UNREADABLE: "information_schema.PROCESSLIST unreadable: {0}",
    GapCause.OTHER_SESSIONS_HIDDEN: (
        "without PROCESS, information_schema.PROCESSLIST lists only this user's sessions: "
        "GRANT PROCESS ON *.* TO {0}"
    ),
    GapCause.PFS_OFF: f"performance_schema is off (performance_schema=ON {_RESTART})",
    GapCause.PFS_DENIED: "access denied for user {0}: GRANT SELECT ON performance_schema.* TO {0}",
    GapCause.PFS_UNREADABLE: "memory_summary_global_by_event_name unreadable: {0}",
    GapCause.PFS_INSTRUMENTS_OFF: (
        "its memory instruments are off, it counts only itself "
        f"(performance-schema-instrument='memory/%=ON' {_RESTART})"
    ),
    GapCause.INNODB_NEEDS_PROCESS: (
        "SHOW ENGINE INNODB STATUS needs PROCESS: GRANT PROCESS ON *.* TO {0}"
    ),
    GapCause.ROCKSDB_NEEDS_PROCESS: (
        "SHOW ENGINE ROCKSDB STATUS needs PROCESS: GRANT PROCESS ON *.* TO {0}"
    ),
    GapCause.ROCKSDB_FAILED: "SHOW ENGINE ROCKSDB STATUS failed: {0}",
}


def gap_what(gap: Gap) -> str:
    if gap.cause is GapCause.OTHER_SESSIONS_HIDDEN:
        return "memory of other users' connections"  # this user's own are counted
    return _GAP_WHAT[gap.key]


def gap_why(gap: Gap) -> str:
    return _GAP_WHY[gap.cause].format(gap.detail)


def gap_text(gap: Gap) -> str:
    return f"{gap_what(gap)}: unknown — {gap_why(gap)}"


# Each part of RSS by its key: what it is, and where its figure comes from.
_ROW_WORDS = {
    "files": ("shared libraries and other mapped files", "file-backed mappings in /proc/PID/smaps"),
    "buffer_pool": (
        "InnoDB buffer pool (resident pages)",
        "Rss of the mapping sized innodb_buffer_pool_size",
    ),
    "stacks": (
        "thread stacks ({0} mappings)",
        "Rss of stack mappings (guard page below, per-thread sp)",
    ),
    "rocksdb_block_cache": ("RocksDB block cache", "SHOW ENGINE ROCKSDB STATUS: Cache Total"),
    "rocksdb_memtables": (
        "RocksDB memtables and table readers",
        "MemTable Total + Table Readers Total",
    ),
    "performance_schema": ("performance_schema", "sum of memory_summary_global_by_event_name"),
    "connections": (
        "connections ({0} sessions)",
        "sum of information_schema.PROCESSLIST.MEMORY_USED",
    ),
    "unaccounted": (
        "unaccounted: allocator overhead and fragmentation",
        "heap mappings' Rss minus what the server accounts for in them "
        "(negative: counted but not resident)",
    ),
}


def row_words(bd: Breakdown, row: Row) -> tuple[str, str]:
    """A part of RSS's name and the source of its figure."""
    if row.key == "binary":
        exe = bd.exe or "the executable"
        return "server binary (code, static data)", f"file pages of {exe} and its .bss"
    if row.key == "server_heap" and bd.sessions_split:
        return "server global heap (Memory_used)", "Memory_used - sessions - reserved caches"
    if row.key == "server_heap":
        return "server heap, connections included (Memory_used)", "Memory_used - reserved caches"
    label, source = _ROW_WORDS[row.key]
    return label.format(row.count), source


def _whole_mib(n: int) -> str:
    return f"{n / 1048576:.0f} MiB"


def breakdown_notes(bd: Breakdown) -> list[str]:
    notes = ["buffer pool merged with a neighbouring mapping; its Rss is pro-rated"]
    notes = notes if bd.pool_prorated else []
    notes += [gap_text(g) for g in bd.gaps]
    if bd.reserved_caches is not None and bd.memory_used is not None:
        notes.append(
            f"Memory_used ({_whole_mib(bd.memory_used)}) counts the buffer pool, key cache and "
            f"Aria page cache at their configured size ({_whole_mib(bd.reserved_caches)}); that "
            "part is left out here so the buffer pool is counted once, by its resident pages"
        )
    if not bd.server_seen:
        notes.append("no server numbers: the whole heap is shown as unaccounted")
    if bd.pool_unmapped:
        notes.append(
            "no mapping of innodb_buffer_pool_size was found; its pages are in the heap rows"
        )
    return notes


def _row_dict(bd: Breakdown, row: Row) -> dict[str, Any]:
    label, source = row_words(bd, row)
    return {
        "key": row.key,
        "label": label,
        "bytes": row.bytes,
        "source": source,
        "group": row.group,
    }


def memory_json(report: MemoryReport) -> dict[str, Any]:
    """The account's values with its words: each gap's, and the breakdown's notes."""
    out = report.to_dict()
    if report.server is not None and "gaps" in out:
        # Set in place: the key keeps its place in the document.
        out["gaps"] = [
            {"key": g.key, "what": gap_what(g), "why": gap_why(g), "text": gap_text(g)}
            for g in report.server.gaps
        ]
    keeps = report.allocator_keeps
    if keeps is not None:
        out["allocator_keeps"]["source"] = keeps_source_text(keeps)  # in place
        out["allocator_keeps"]["how_to_see_more"] = see_more_text(keeps)
    summary = report.allocator
    if summary is not None:
        if summary.jemalloc_arenas is not None:
            out["allocator"]["arenas"] = jemalloc_arenas_text(summary.jemalloc_arenas)
        if summary.arena_source is not None:
            out["allocator"]["arena_source"] = arena_count_text(summary.arena_source)
    if report.memory_limit is not None:
        out["memory_limit"]["source"] = limit_source_text(report.memory_limit)
    bd = report.breakdown
    if bd is not None:
        out["breakdown"]["rows"] = [_row_dict(bd, r) for r in bd.rows]  # in place
        out["breakdown"]["notes"] = breakdown_notes(bd)
    out["advice"] = advice_dicts(report)  # the last key, as it was
    return out


def render(report: MemoryReport, console: Console | None = None) -> None:
    console = console or make_console()
    srv = report.server
    title = f"mallocbench memory: {report.where}"
    if srv is not None:
        title += f" ({srv.version})"
    console.print(f"[bold]{title}[/]")

    if report.process_summary is None:
        console.print(f"[yellow]process not inspected:[/] {report.pid_source}")
    else:
        console.print(_process_table(report.process_summary, report.pid_source))
        if report.allocator is not None:
            lines = _allocator_lines(report.allocator, report.thp, report.thp_setup)
            console.print(escape("\n".join(lines)))
        if report.allocator_keeps is not None:
            _print_keeps(report.allocator_keeps, console)
    if report.footprint is not None:
        console.print(_footprint_table(report, report.footprint))
    if report.server_account is not None:
        console.print(_server_table(report.server_account))
    if report.breakdown is not None:
        _print_breakdown(report.breakdown, console)
    _print_advice(report, console)


def _process_table(p: ProcessSummary, pid_source: str) -> Table:
    t = Table(
        title=f"process {p.pid} ({p.name}), found by {pid_source}",
        show_header=False,
        title_justify="left",
    )
    t.add_column(justify="left")
    t.add_column(justify="right")
    for label, value in (
        ("RSS", mb(p.rss)),
        ("VSZ", mb(p.vsz)),
        ("anonymous", mb(p.anonymous)),
        ("file-backed", mb(p.file_backed)),
        ("shared (clean + dirty)", mb(p.shared)),
        ("swap", mb(p.swap)),
        ("anon huge pages", mb(p.anon_huge_pages)),
        ("lazily freed (LazyFree, MADV_FREE)", mb(p.lazy_free)),
        ("threads", str(p.threads)),
        ("thread stacks reserved", f"{mb(p.stack_reservation)} in {p.stack_mappings} mappings"),
    ):
        t.add_row(label, value)
    return t


def thp_line(thp: str | None, setup: ThpSetup | None) -> str:
    """THP as the host sets it up, and whether the process opted out."""
    if setup is None:
        return f"transparent huge pages: {thp or 'unknown'}"
    if setup.process_disabled is None:
        process = "not told"
    else:
        process = "disabled (PR_SET_THP_DISABLE)" if setup.process_disabled else "not disabled"
    ptes = "-" if setup.max_ptes_none is None else str(setup.max_ptes_none)
    return (
        f"transparent huge pages: {setup.mode or 'unknown'} (defrag {setup.defrag or '-'}, "
        f"khugepaged max_ptes_none {ptes}); for this process: {process}"
    )


def _print_keeps(k: AllocatorKeeps, console: Console) -> None:
    t = Table(title="what the allocator keeps", title_justify="left", show_header=False)
    t.add_column()
    t.add_column(justify="right")
    t.add_row("lazily freed, still in RSS (LazyFree)", mb(k.lazy_free))
    t.add_row("in transparent huge pages (AnonHugePages)", mb(k.anon_huge_pages))
    je = k.jemalloc
    if je is not None:
        t.add_row("jemalloc: allocated (in use by the server)", mb(je.allocated))
        t.add_row("  active pages", mb(je.active))
        t.add_row("  dirty: freed, not yet purged (in RSS)", mb(je.dirty))
        t.add_row("  muzzy: purged with MADV_FREE (in RSS until reclaimed)", mb(je.muzzy))
        t.add_row("  metadata", mb(je.metadata))
        t.add_row("  resident", mb(je.resident))
        t.add_row("  retained: unused address space, not in RSS", mb(je.retained))
    console.print(t)
    console.print(f"[dim]source: {escape(keeps_source_text(k))}[/]")
    see_more = see_more_text(k)
    if see_more:
        console.print(f"[dim]note: {escape(see_more)}[/]")


def keeps_source_text(k: AllocatorKeeps) -> str:
    """Where the figures of what the allocator keeps come from."""
    if k.source == KeepsSource.JEMALLOC and k.jemalloc is not None:
        return (
            f"jemalloc's own statistics as of the last of the {k.jemalloc.prints} prints it "
            f"made for process {k.pid} into {k.log} (jemalloc puts no time on them); "
            "LazyFree and AnonHugePages from /proc now"
        )
    return "/proc only (live server): LazyFree and AnonHugePages of smaps_rollup"


def see_more_text(k: AllocatorKeeps) -> str | None:
    """How to get jemalloc's own figures when they are missing."""
    if k.how_to_see_more == SeeMore.LOG_UNREADABLE:
        return (
            f"the error log {k.log}, where jemalloc prints its statistics, is not readable: "
            "run as the server's user or root"
        )
    if k.how_to_see_more == SeeMore.NO_PRINTS:
        where = f"its error log {k.log}" if k.log is not None else "an error log file (log_error)"
        return (
            f"jemalloc printed no statistics for process {k.pid} into {where}: start the "
            f"server with MALLOC_CONF={STATS_INTERVAL_CONF} to have it print them as it runs "
            f"(jemalloc 5.3+), or with {STATS_AT_EXIT_CONF} for one print at exit"
        )
    return None


def _allocator_lines(
    a: AllocatorSummary, thp: str | None, setup: ThpSetup | None = None
) -> list[str]:
    lines = [f"allocator {a.name} ({a.path or 'libc'})"]
    if a.glibc_arenas is not None:
        lines.append(
            f"glibc arenas: {a.glibc_arenas} (the main one + {a.glibc_arenas - 1} in "
            f"{a.glibc_heaps} heaps of 64 MiB; {arena_count_text(a.arena_source)})"
        )
    if a.jemalloc_arenas:
        lines.append(f"jemalloc arenas: {jemalloc_arenas_text(a.jemalloc_arenas)}")
    knobs = a.knobs
    if knobs is None:
        lines.append("knobs: environment not readable (run as the server's user or root)")
    else:
        shown = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "none set (defaults)"
        lines.append(f"knobs: {shown}")
    lines.append(thp_line(thp, setup))
    return lines


def _footprint_table(report: MemoryReport, fp: Footprint) -> Table:
    t = Table(
        title="configured footprint (from variables, as mysqltuner estimates)",
        title_justify="left",
    )
    t.add_column("")
    t.add_column("bytes", justify="right")
    for name, value in fp.global_buffers.items():
        t.add_row(f"  {name}", mb(value))
    if fp.performance_schema:
        t.add_row("  performance_schema", mb(fp.performance_schema))
    t.add_row("global buffers", mb(fp.global_total))
    t.add_row("per connection", mb(fp.per_connection_total))
    t.add_row(f"worst case: global + {fp.max_connections} max_connections", mb(fp.worst_case))
    t.add_row(
        f"peak so far: global + {fp.max_used_connections} Max_used_connections",
        mb(fp.peak_so_far),
    )
    t.add_row(f"now: global + {fp.connections_now} connections", mb(fp.now))
    if report.memory_limit is not None:
        limit = report.memory_limit
        t.add_row(f"memory limit ({limit_source_text(limit)})", mb(limit.bytes))
    return t


def _server_table(acc: ServerAccount) -> Table:
    t = Table(title="what the server accounts for", title_justify="left", show_header=False)
    t.add_column()
    t.add_column(justify="right")
    bp = acc.innodb_buffer_pool
    pages, page = bp.pages, bp.page_size or 16384
    if pages.total:
        used = ((pages.data or 0) + (pages.misc or 0)) * page
        t.add_row("InnoDB buffer pool size", mb(bp.size))
        t.add_row("  pages in use (data + misc)", mb(used))
        t.add_row("  pages free", mb((pages.free or 0) * page))
    if acc.rocksdb is not None:
        t.add_row("RocksDB block cache (capacity)", mb(acc.rocksdb_block_cache_size))
        t.add_row("  in use", mb(acc.rocksdb.get("Cache Total")))
        t.add_row("RocksDB memtables", mb(acc.rocksdb.get("MemTable Total")))
        t.add_row("RocksDB table readers", mb(acc.rocksdb.get("Table Readers Total")))
    if acc.memory_used is not None:
        t.add_row(
            "Memory_used"
            + (" (caches counted as reserved)" if acc.memory_used_includes_caches else ""),
            mb(acc.memory_used),
        )
        t.add_row("  Memory_used_initial", mb(acc.memory_used_initial))
        t.add_row(f"  sessions ({len(acc.sessions)})", mb(sum(s.memory_used for s in acc.sessions)))
        for s in acc.sessions[:5]:
            t.add_row(f"    id {s.id} {s.user} {s.state or s.command}", mb(s.memory_used))
    pfs = acc.performance_schema
    if pfs.enabled:
        t.add_row("performance_schema memory", mb(pfs.total))
        for consumer in pfs.top[:5]:
            t.add_row(escape(f"  {consumer.event_name}"), mb(consumer.bytes))
    else:
        t.add_row("performance_schema", "off")
    return t


def _print_breakdown(bd: Breakdown, console: Console) -> None:
    t = Table(title=f"where RSS goes ({mb(bd.rss)})", title_justify="left")
    t.add_column("part")
    t.add_column("bytes", justify="right")
    t.add_column("of RSS", justify="right")
    t.add_column("source", style="dim")
    for row in bd.rows:
        label, source = row_words(bd, row)
        label = label if row.group == "process" else f"  heap: {label}"
        style = "bold" if row.key == "unaccounted" else None
        t.add_row(
            escape(label),
            mb(row.bytes),
            pct(row.bytes, bd.rss),
            escape(source),
            style=style,
        )
    t.add_row("total (= RSS)", mb(bd.total()), pct(bd.total(), bd.rss), "")
    console.print(t)
    ratio = f"{bd.ratio:.2f}" if bd.ratio else "-"
    heap_ratio = f"{bd.heap_ratio:.2f}" if bd.heap_ratio else "-"
    console.print(
        f"fragmentation ratio RSS/accounted = {ratio} ({mb(bd.unaccounted)} unaccounted); "
        f"heap ratio = {heap_ratio} (heap RSS {mb(bd.heap_rss)} / accounted "
        f"{mb(bd.heap_accounted)})"
    )
    for note in breakdown_notes(bd):
        console.print(f"[dim]note: {escape(note)}[/]")


def _print_advice(report: MemoryReport, console: Console) -> None:
    if report.advice:
        console.print("[bold]advice[/]")
        for a in report.advice:
            title, fix, evidence = worded(report, a)
            color = "red" if a.level == "warning" else "cyan"
            console.print(f"[{color}]{a.level}[/]: [bold]{escape(title)}[/] - {escape(fix)}")
            console.print(f"    [dim]evidence: {escape(evidence)}[/]")
    elif report.breakdown is not None:
        # Without a breakdown the heap was not checked: "nothing stands out" would claim more.
        console.print("advice: nothing stands out")


def render_profile(view: ProfileTop, console: Console) -> None:
    """The largest allocation sites at the heap peak, with what called them."""
    result, top = view.profile, view.top
    extra = (
        f", allocator overhead {result.peak_extra_bytes / MiB:,.1f} MiB"
        if result.peak_extra_bytes
        else ""
    )
    table = Table(
        title=f"top allocation sites at the heap peak ({result.tool}, peak "
        f"{result.peak_bytes / MiB:,.1f} MiB{extra})",
        title_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column("peak bytes", justify="right")
    table.add_column("of peak", justify="right")
    table.add_column("site")
    table.add_column("called from", style="dim")
    for i, site in enumerate(result.sites[:top], 1):
        share = f"{100 * site.bytes / result.peak_bytes:.1f}%" if result.peak_bytes else "-"
        where = f"{site.function}" + (f" ({site.location})" if site.location else "")
        table.add_row(
            str(i), f"{site.bytes / MiB:,.2f} MiB", share, where, " < ".join(site.stack[:3])
        )
    console.print(table)
    if result.command:
        console.print(f"[dim]profiled: {result.command}[/]")
    console.print(f"[dim]data: {result.source}[/]")


# Series drawn in --watch's chart, with their colours.
WATCH_SERIES = (
    ("rss", "#000000"),
    ("heap_rss", "#1f77b4"),
    ("buffer_pool", "#2ca02c"),
    ("unaccounted", "#d62728"),
    ("connections", "#9467bd"),
    ("rocksdb_block_cache", "#ff7f0e"),
    ("stacks", "#8c564b"),
    ("lazy_free", "#17becf"),
)


def write_watch_chart(rows: list[dict[str, object]], path: Path) -> None:
    """An HTML line chart of the main series (MiB over elapsed seconds), drawn by plotly
    like every report; plotly.js is the shared copy beside the reports."""
    import plotly.graph_objects as go

    from mallocbench.report.html import write_plotly_beside

    xs = [float(r["elapsed_s"] or 0) for r in rows]  # type: ignore[arg-type]
    figure = go.Figure()
    for key, color in WATCH_SERIES:
        values = [r.get(key) for r in rows]
        if any(isinstance(v, int | float) and v for v in values):
            figure.add_trace(
                go.Scatter(
                    x=xs,
                    y=[float(v) / MiB if isinstance(v, int | float) else None for v in values],
                    name=key,
                    mode="lines+markers" if len(rows) == 1 else "lines",
                    line={"color": color, "width": 2},
                )
            )
    figure.update_layout(
        title="mallocbench memory --watch: MiB over seconds",
        xaxis_title="seconds since the first sample",
        yaxis_title="MiB",
        template="plotly_white",
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.write_html(path, include_plotlyjs=write_plotly_beside(path), full_html=True)
    except OSError as exc:
        raise MallocbenchError(f"cannot write the chart {path}: {exc.strerror}") from exc


# --- what `memory` and `profile` say around the account -------------------------------------


def found_text(described: str) -> str:
    """Which server `memory` found, and how (an option file, a socket ...)."""
    return f"mallocbench: {described}\n"


def progress_text(message: str) -> str:
    """A step of `profile` under way, in the profiler's words."""
    return f"mallocbench: {message}\n"


def _sample_mib(value: object) -> str:
    return f"{value / (1 << 20):,.0f}M" if isinstance(value, int | float) else "-"


def sample_text(row: dict[str, object]) -> str:
    """One --watch sample, a line of its own."""
    return (
        f"{row['time']}  rss {_sample_mib(row['rss'])}  heap {_sample_mib(row['heap_rss'])}  "
        f"bp {_sample_mib(row['buffer_pool'])}  unaccounted {_sample_mib(row['unaccounted'])}  "
        f"ratio {row['ratio'] or '-'}  threads {row['threads']}\n"
    )


def sample_json(row: dict[str, object]) -> str:
    return json.dumps(row, default=str) + "\n"


@dataclass(frozen=True)
class Watching:
    """--watch about to sample: the server's pid, the interval, who to signal, the CSV."""

    pid: int
    every_s: float
    own_pid: int
    csv: Path


def watching_text(w: Watching) -> str:
    return (
        f"sampling pid {w.pid} every {w.every_s:g}s; Ctrl-C or kill {w.own_pid} stops "
        f"(writing {w.csv})\n"
    )


@dataclass(frozen=True)
class Watched:
    samples: int
    csv: Path
    chart: Path


def watched_text(w: Watched) -> str:
    return f"{w.samples} samples: {w.csv}, chart {w.chart}\n"
