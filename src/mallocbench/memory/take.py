"""Take one memory account of a running server: the server's view, the process's, the
breakdown of RSS between them, and the advice that follows."""

from __future__ import annotations

import os
import time

import pymysql

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.memory import breakdown as breakdown_mod
from mallocbench.memory import process as process_mod
from mallocbench.memory import server as server_mod
from mallocbench.memory.advice import advise
from mallocbench.memory.report import AllocatorSummary, MemoryReport
from mallocbench.memory.server import ConnectOptions, ServerMemory
from mallocbench.probes.system import thp_mode


def jemalloc_arenas(knobs: dict[str, str] | None, pid: int) -> str:
    """jemalloc keeps no arena list a reader can see; say what bounds it and why."""
    conf = ",".join(v for k, v in (knobs or {}).items() if k in ("MALLOC_CONF", "JE_MALLOC_CONF"))
    for part in conf.split(","):
        if part.startswith("narenas:"):
            return f"{part.split(':', 1)[1]} (MALLOC_CONF narenas)"
    try:
        cpus = len(os.sched_getaffinity(pid))
    except OSError:
        cpus = 0
    return f"up to {4 * cpus} (jemalloc default: 4 per CPU, created on demand)" if cpus else "?"


def connect_and_collect(opts: ConnectOptions) -> tuple[pymysql.Connection, ServerMemory]:
    conn = server_mod.connect(opts)
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
        conn = server_mod.connect(opts)
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
            server_mod.check_pid(pid, srv, opts)
        pid_source = "--pid"
    else:
        pid, pid_source = server_mod.find_pid(srv, opts)
    proc = None
    allocator: AllocatorSummary | None = None
    limit = None
    if pid is not None:
        mapped = allocators.detect(pid)
        proc = process_mod.sample(pid, mapped.name, srv.var("innodb_buffer_pool_size"))
        arenas = jemalloc_arenas(proc.knobs, pid) if mapped.name == "jemalloc" else None
        allocator = AllocatorSummary.of(mapped.name, mapped.path, proc, arenas)
        limit = process_mod.memory_limit(pid)
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
    )
    report.advice = advise(report)
    return report
