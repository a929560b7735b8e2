"""Soak events on a private PostgreSQL server (servers/family.SoakEvents), and the
private memory of the backend each one ran in.

PostgreSQL serves each connection with a process of its own, so what an event asks of
memory (a sort or a hash table of up to work_mem, VACUUM's or CREATE INDEX's
maintenance_work_mem) is asked in that backend, and what the allocator keeps once the
work has freed it stays in that backend for as long as the connection lives: glibc may
keep it in the heap where another allocator hands it back after a decay. The server's
total RSS, which the ratchet reads, mixes this with the load's own backends. So an
event that runs on connections of its own reads each one's backend from
/proc/PID/smaps_rollup (USS, PSS and private anonymous memory; the highest by the
latter): before the work, at its highest while the work runs (sampled), right after
it, and once more after a settle interval with the connection still open.

soak/events.py times the events and keeps the records; the words are the report's.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

from mallocbench.errors import MallocbenchError
from mallocbench.servers.access import write_private
from mallocbench.servers.postgresql.memory import private_memory
from mallocbench.servers.postgresql.server import DATABASE, ROLE, PgServer
from mallocbench.servers.process import ToolRun

BIG_SORT, HASH_JOIN, VACUUM, CREATE_INDEX, DUMP, SQL = (
    "big-sort", "hash-join", "vacuum", "create-index", "dump", "sql",
)  # fmt: skip
# The [[soak.event]] actions a PostgreSQL server runs, and the keys each takes beyond
# action/every/at (run.soak_events parses them; the names are its own).
ACTIONS: dict[str, tuple[str, ...]] = {
    BIG_SORT: ("sessions", "work_mem", "settle"),
    HASH_JOIN: ("sessions", "work_mem", "settle"),
    VACUUM: ("table", "maintenance_work_mem", "settle"),
    CREATE_INDEX: ("table", "maintenance_work_mem", "settle"),
    DUMP: (),
    SQL: ("sql", "settle"),
}
# A sort or hash of this size is one a DBA raises work_mem for (reports, analytics).
DEFAULT_WORK_MEM = 64 << 20
# Longer than jemalloc's default dirty decay (10 s): what stays after it is kept.
DEFAULT_SETTLE_S = 12.0
SAMPLE_S = 0.1
# Generated rows of an integer and a 100-character text take ~185 bytes each in a sort
# (300,000 sorted in 54 MiB on PostgreSQL 15): at one per ROW_BYTES of work_mem, a sort
# or a hash table about fills it and stays in memory.
ROW_BYTES = 200
INDEX = "mallocbench_soak_idx"
EVENT_TIMEOUT_S = 3600.0
READINGS = ("before", "peak", "after", "settled")


@dataclass(frozen=True)
class Work:
    """What one backend runs: settings first (not measured), then the measured statements;
    the rows of the last measured one are its result."""

    settings: tuple[str, ...]
    measured: tuple[str, ...]


def _kb(size: int) -> int:
    return max(64, size // 1024)


def big_sort(work_mem: int) -> Work:
    rows = work_mem // ROW_BYTES
    # A key no index or order of generation gives, and an offset past the last row: the
    # whole set is sorted in the backend and nothing comes back to the harness.
    return Work(
        (f"SET work_mem = '{_kb(work_mem)}kB'",),
        (
            "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) SELECT g, repeat('x', 100) AS pad"
            f" FROM generate_series(1, {rows}) g ORDER BY (g::int8 * 7919) % {rows}"
            f" OFFSET {rows}",
        ),
    )


def hash_join(work_mem: int) -> Work:
    rows = work_mem // ROW_BYTES
    # The padded side is the smaller one, so it is the one hashed; merge and nested-loop
    # joins are off so the planner cannot sort instead.
    return Work(
        (
            f"SET work_mem = '{_kb(work_mem)}kB'",
            "SET enable_mergejoin = off",
            "SET enable_nestloop = off",
        ),
        (
            # The pad is summed and the subquery kept whole (OFFSET 0): otherwise the
            # pad is made above the join, and the hash holds integers only.
            "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) SELECT sum(length(b.pad)) FROM"
            f" (SELECT g, repeat('x', 100) AS pad FROM generate_series(1, {rows}) g"
            " OFFSET 0) b"
            f" JOIN generate_series(1, {2 * rows}) a ON a = b.g",
        ),
    )


def _maintenance(size: object) -> tuple[str, ...]:
    return (f"SET maintenance_work_mem = '{_kb(int(str(size)))}kB'",) if size else ()


def vacuum(table: str, size: object) -> Work:
    return Work(_maintenance(size), (f'VACUUM "{table}"',))


def create_index(table: str, size: object) -> Work:
    # Dropped again in the same event: the soak's load must not gain an index.
    return Work(
        (*_maintenance(size), f"DROP INDEX IF EXISTS {INDEX}"),
        (f'CREATE INDEX {INDEX} ON "{table}" (c)', f"DROP INDEX {INDEX}"),
    )


def _plan_memory(rows: list[tuple[Any, ...]]) -> str:
    """What EXPLAIN ANALYZE says the sort or hash used: method and space, or batches and
    peak memory."""
    if not rows:
        return ""
    plan = rows[0][0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    stack = [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        if "Sort Method" in node:
            return (
                f"{node['Sort Method']} in {node.get('Sort Space Used', 0)} kB "
                f"({str(node.get('Sort Space Type', '')).lower()})"
            )
        if "Peak Memory Usage" in node:
            batches, peak = node.get("Hash Batches", 1), node["Peak Memory Usage"]
            return f"hash of {batches} batches, peak {peak} kB"
        stack += node.get("Plans", [])
    return ""


class _Peak:
    """The backend's private memory sampled while its work runs; the highest anon kept."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.highest: dict[str, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-backend", daemon=True)

    def __enter__(self) -> _Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self._take()

    def _take(self) -> None:
        now = private_memory(self.pid)
        if now and now["anon"] >= self.highest.get("anon", -1):
            self.highest = now

    def _loop(self) -> None:
        while not self._done.wait(SAMPLE_S):
            self._take()


class PgEvents:
    """Soak events on one running PostgreSQL server (servers/family.SoakEvents)."""

    def __init__(self, server: PgServer) -> None:
        self.server = server
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._open: list[psycopg.Connection[Any]] = []
        self._tool = ToolRun(self._stopped, EVENT_TIMEOUT_S)

    def run(self, action: str, params: Mapping[str, object]) -> dict[str, object]:
        if action == DUMP:
            return {"detail": self._dump()}
        settle_s = params.get("settle_s")
        settle = DEFAULT_SETTLE_S if settle_s is None else float(str(settle_s))
        table = str(params.get("table") or "sbtest1")
        if action in (BIG_SORT, HASH_JOIN):
            return self._sessions(action, params, settle)
        if action == VACUUM:
            work = vacuum(table, params.get("maintenance_work_mem"))
        elif action == CREATE_INDEX:
            work = create_index(table, params.get("maintenance_work_mem"))
        elif action == SQL:
            work = Work((), (str(params["sql"]),))
        else:
            raise MallocbenchError(f"{action} is not an event a PostgreSQL server runs")
        _, reading = self._on_backend(work, settle)
        return {"backends": [reading]}

    def interrupt(self) -> None:
        self._stopped.set()
        self._tool.terminate()
        with self._lock:
            for conn in self._open:
                with contextlib.suppress(Exception):
                    conn.cancel()

    # --- on connections of its own ------------------------------------------------------

    def _sessions(
        self, action: str, params: Mapping[str, object], settle: float
    ) -> dict[str, object]:
        sessions = int(str(params.get("sessions") or 1))
        work_mem = int(str(params.get("work_mem") or DEFAULT_WORK_MEM))
        work = big_sort(work_mem) if action == BIG_SORT else hash_join(work_mem)
        with ThreadPoolExecutor(sessions) as pool:
            done = list(pool.map(lambda _: self._on_backend(work, settle), range(sessions)))
        rows = work_mem // ROW_BYTES
        used = _plan_memory(done[0][0])
        return {
            "detail": f"{sessions} sessions, work_mem {_kb(work_mem)} kB, {rows} rows each"
            + (f": {used}" if used else ""),
            "backends": [reading for _, reading in done],
        }

    def _on_backend(
        self, work: Work, settle: float
    ) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
        if self._stopped.is_set():
            raise MallocbenchError("the session ended first")
        conn = self.server.connect(connect_timeout=10)
        with self._lock:
            self._open.append(conn)
        try:
            pid = int(str(conn.execute("SELECT pg_backend_pid()").fetchall()[0][0]))
            for statement in work.settings:
                conn.execute(statement.encode())
            reading: dict[str, Any] = {"pid": pid, "before": private_memory(pid)}
            rows: list[tuple[Any, ...]] = []
            with _Peak(pid) as peak:
                for statement in work.measured:
                    cur = conn.execute(statement.encode())
                    rows = list(cur.fetchall()) if cur.description else []
            reading.update(peak=peak.highest, after=private_memory(pid))
            began = time.monotonic()
            # The connection stays open: what the allocator keeps is still the backend's.
            if self._stopped.wait(settle):
                raise MallocbenchError("the session ended first")
            reading.update(settled=private_memory(pid), settle_s=time.monotonic() - began)
            return rows, reading
        finally:
            with self._lock:
                self._open.remove(conn)
            with contextlib.suppress(Exception):
                conn.close()

    # --- the dump tool --------------------------------------------------------------------

    def _dump(self) -> str:
        server = self.server
        target = server.rundir / "dump.sql"
        # The password from a 0600 file of the run's, never a command line or environment.
        passfile = server.rundir / "pgpass"
        write_private(passfile, f"*:{server.port}:{DATABASE}:{ROLE}:{server.password}\n")
        command = [
            server.build.binary("pg_dump"), "--host", str(server.socket_dir),
            "--port", str(server.port), "--username", ROLE, "--dbname", DATABASE,
            "--no-password", "--file", str(target),
        ]  # fmt: skip
        self._tool.run(command, env={**os.environ, "PGPASSFILE": str(passfile)})
        size = target.stat().st_size
        target.unlink()  # the copy is not what is measured
        return f"{size} bytes"


__all__ = ["ACTIONS", "DEFAULT_SETTLE_S", "DEFAULT_WORK_MEM", "PgEvents", "big_sort", "hash_join"]
