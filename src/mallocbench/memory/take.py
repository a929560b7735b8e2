"""Take one memory account of a running server: the server's view, the process's, the
breakdown of RSS between them, and the advice that follows."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pymysql

from mallocbench import allocators
from mallocbench.deploy import launch
from mallocbench.errors import MallocbenchError
from mallocbench.memory import breakdown as breakdown_mod
from mallocbench.memory import connect as connect_mod
from mallocbench.memory import jemalloc as jemalloc_mod
from mallocbench.memory import pid as pid_mod
from mallocbench.memory import process as process_mod
from mallocbench.memory import server as server_mod
from mallocbench.memory.advice import advise
from mallocbench.memory.client import ConnectOptions
from mallocbench.memory.process import ProcessMemory
from mallocbench.memory.report import (
    AllocatorKeeps,
    AllocatorSummary,
    JemallocArenas,
    KeepsSource,
    MemoryReport,
    SeeMore,
)
from mallocbench.memory.server import ServerMemory
from mallocbench.probes.system import thp_mode


def jemalloc_arenas(knobs: dict[str, str] | None, pid: int) -> JemallocArenas:
    """jemalloc keeps no arena list a reader can see: what bounds it."""
    conf = ",".join(v for k, v in (knobs or {}).items() if k in ("MALLOC_CONF", "JE_MALLOC_CONF"))
    for part in conf.split(","):
        if part.startswith("narenas:"):
            return JemallocArenas(narenas=part.split(":", 1)[1])
    try:
        cpus = len(os.sched_getaffinity(pid))
    except OSError:
        cpus = 0
    return JemallocArenas(cpus=cpus)


def error_log(srv: ServerMemory) -> Path | None:
    """Where the server writes its error log (and its allocator its stderr); None: nowhere
    a file names (stderr, syslog)."""
    name = srv.variables.get("log_error", "")
    if not name or name.lower() in ("stderr", "0", "off"):
        return None
    path = Path(name)
    if not path.is_absolute():
        path = Path(srv.variables.get("datadir", "/")) / path
    return path


def allocator_keeps(srv: ServerMemory, proc: ProcessMemory, allocator: str) -> AllocatorKeeps:
    """The kernel's view of what the allocator keeps, and jemalloc's own where it printed it."""
    lazy_free, huge = proc.rollup.get("LazyFree"), proc.rollup.get("AnonHugePages")
    if allocator != "jemalloc":
        return AllocatorKeeps(KeepsSource.PROC, lazy_free, huge)
    log = error_log(srv)
    stats = jemalloc_mod.stats_from_log(log, proc.pid) if log is not None else None
    if log is not None and not os.access(log, os.R_OK):
        see_more = SeeMore.LOG_UNREADABLE
    elif stats is None:
        see_more = SeeMore.NO_PRINTS
    else:
        return AllocatorKeeps(KeepsSource.JEMALLOC, lazy_free, huge, stats, None, log, proc.pid)
    return AllocatorKeeps(KeepsSource.PROC, lazy_free, huge, None, see_more, log, proc.pid)


def connect_and_collect(opts: ConnectOptions) -> tuple[pymysql.Connection, ServerMemory]:
    conn = connect_mod.connect(opts)
    try:
        return conn, server_mod.collect(conn)
    except BaseException:
        conn.close()
        raise


def take(
    opts: ConnectOptions,
    pid: int | None = None,
    conn: pymysql.Connection | None = None,
    pid_checked: bool = False,
) -> MemoryReport:
    """One full account. `conn` is reused by --watch so each sample costs one round trip set."""
    own_conn = conn is None
    if conn is None:
        conn = connect_mod.connect(opts)
    try:
        try:
            srv = server_mod.collect(conn)
        except pymysql.err.MySQLError as exc:
            raise MallocbenchError(
                f"lost the server at {opts.where}: {exc.args[-1] if exc.args else exc}"
            ) from None
    finally:
        if own_conn:
            conn.close()
    if pid is not None:
        if not pid_checked:
            pid_mod.check_pid(pid, srv, opts)
        pid_source = "--pid"
    else:
        pid, pid_source = pid_mod.find_pid(srv, opts)
    proc = None
    allocator: AllocatorSummary | None = None
    limit = None
    keeps = None
    if pid is not None:
        mapped = allocators.detect(pid)
        proc = process_mod.sample(pid, mapped.name, srv.var("innodb_buffer_pool_size"))
        arenas = jemalloc_arenas(proc.knobs, pid) if mapped.name == "jemalloc" else None
        allocator = AllocatorSummary.of(mapped.name, mapped.path, proc, arenas)
        limit = process_mod.memory_limit(pid)
        keeps = allocator_keeps(srv, proc, mapped.name)
    bd = breakdown_mod.build(proc, srv) if proc is not None else None
    report = MemoryReport(
        taken_at=time.time(),
        where=opts.where,
        server=srv,
        process=proc,
        pid_source=pid_source,
        allocator=allocator,
        footprint=breakdown_mod.footprint(srv),
        breakdown=bd,
        memory_limit=limit,
        thp=thp_mode(),
        thp_setup=process_mod.read_thp(pid),
        allocator_keeps=keeps,
    )
    if pid is not None:
        started = launch.detect(pid)
        report.deploy_form, report.deploy_service = started.form, started.service or "mariadb"
    report.advice = advise(report)
    return report
