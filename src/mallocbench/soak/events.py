"""Soak events run beside the load: one thread per server, one event at a time.

An event still running when the next is due delays it, and the record says when it
really started (run.soak_events says what an experiment may ask for).

Each event's start, end and outcome are recorded in the session (SessionInfo.events, in
the same epoch seconds as the samples), where the analysis (analysis.ratchet) reads RSS
before, during and after it. A failed event (the server refused the statement, the dump
tool exited non-zero) is an outcome, recorded with its message; the soak goes on.

The forms here are MariaDB's. A family with forms of its own (ServerFamily.soak_events:
PostgreSQL's, which also read the private memory of the backend each event ran in) runs
each event through them, and this module keeps the timing and the records.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import pymysql

from mallocbench.errors import MallocbenchError
from mallocbench.run.soak_events import (
    ALTER,
    BACKUP,
    BIG_SORT,
    CONNECT_STORM,
    DEFAULT_SORT_BUFFER,
    DUMP,
    OPTIMIZE,
    SoakEvent,
)
from mallocbench.servers.family import SoakEvents
from mallocbench.servers.process import ToolRun

SORT_OFFSET = 1 << 40  # past any dataset's last row: see _one_sort
EVENT_TIMEOUT_S = 3600.0  # an external tool still running after an hour is stopped: failed
STATUS_OK, STATUS_FAILED, STATUS_CUT = "ok", "failed", "cut"
DATABASE = "sbtest"  # where the dataset lives (workloads.sysbench)


# --- running them ---------------------------------------------------------------------------


class EventServer(Protocol):
    """What an event needs of the private server (servers.mariadb.PrivateServer is one)."""

    files_dir: Path
    client_cnf: Path
    cnf_path: Path
    rundir: Path

    def connect(self, connect_timeout: float = 10, **kwargs: Any) -> pymysql.Connection: ...


def _tool(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise MallocbenchError(
        f"{names[0]} is missing: install it with scripts/install-deps.sh (Debian's "
        f"{'mariadb-backup' if names[0] == 'mariadb-backup' else 'mariadb-client'} package)"
    )


def check_tools(events: tuple[SoakEvent, ...]) -> None:
    """Refuse, before a soak starts, events whose tool is not installed."""
    for event in events:
        if event.action == DUMP:
            _tool("mariadb-dump", "mysqldump")
        elif event.action == BACKUP:
            _tool("mariadb-backup", "mariabackup")


class EventRunner:
    """Runs a session's events in a thread of its own until `stop`; `records` is the story."""

    def __init__(self, events: tuple[SoakEvent, ...], server: EventServer, started_at: float,
                 horizon_s: float, forms: SoakEvents | None = None) -> None:  # fmt: skip
        self.server = server
        self.forms = forms  # the family's own forms of the events; None: the ones here
        self.started_at = started_at
        due = [(t, i, e) for i, e in enumerate(events) for t in e.due_times(horizon_s)]
        self.due = sorted(due, key=lambda d: (d[0], d[1]))
        self.records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._tool = ToolRun(self._stop, EVENT_TIMEOUT_S)
        self._connections: list[pymysql.Connection] = []
        self._thread = threading.Thread(target=self._loop, name="soak-events", daemon=True)

    def start(self) -> None:
        if self.due:
            self._thread.start()

    def stop(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Stop the thread, cutting an event under way short; the records so far."""
        self._stop.set()
        self._interrupt()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return list(self.records)

    def _interrupt(self) -> None:
        """End what an event has running: its tool, its queries (the server is going)."""
        if self.forms is not None:
            self.forms.interrupt()
            return
        self._tool.terminate()
        with self._lock:
            ids = []
            for conn in self._connections:
                with contextlib.suppress(Exception):
                    ids.append(conn.thread_id())
        if not ids:
            return
        with (
            contextlib.suppress(pymysql.MySQLError, OSError),
            self.server.connect(connect_timeout=5) as conn,
            conn.cursor() as cur,
        ):
            for thread_id in ids:
                with contextlib.suppress(pymysql.MySQLError):
                    cur.execute(f"KILL {int(thread_id)}")

    def _loop(self) -> None:
        for due_s, index, event in self.due:
            wait = self.started_at + due_s - time.time()
            if wait > 0 and self._stop.wait(wait):
                return
            if self._stop.is_set():
                return
            record: dict[str, Any] = {
                "index": index, "action": event.action, "label": event.label,
                "due_s": due_s, "start": time.time(),
            }  # fmt: skip
            try:
                record.update(self._outcome(event), status=STATUS_OK)
            except Exception as exc:  # noqa: BLE001 - any failure of an event is its outcome
                status = STATUS_CUT if self._stop.is_set() else STATUS_FAILED
                record.update(status=status, error=_one_line(exc))
            record["end"] = time.time()
            self.records.append(record)

    def _outcome(self, event: SoakEvent) -> dict[str, Any]:
        """What the event's record gains: its detail line, and the family's readings."""
        if self.forms is not None:
            return dict(self.forms.run(event.action, event.params))
        detail = self._run(event)
        return {"detail": detail} if detail else {}

    def _run(self, event: SoakEvent) -> str | None:
        action = event.action
        if action == DUMP:
            return self._dump()
        if action == BACKUP:
            return self._backup()
        if action == ALTER:
            self._statements([f"ALTER TABLE `{DATABASE}`.`{event.table}` FORCE"])
            return None
        if action == OPTIMIZE:
            return self._optimize(event.table)
        if action == BIG_SORT:
            return self._big_sort(event)
        if action == CONNECT_STORM:
            return self._connect_storm(event.connections)
        self._statements([event.sql], database=DATABASE)
        return None

    # --- actions --------------------------------------------------------------------------

    def _tool_run(self, command: list[str]) -> None:
        self._tool.run(command)

    def _dump(self) -> str:
        target = self.server.files_dir / "dump.sql"
        self._tool_run([
            _tool("mariadb-dump", "mysqldump"), f"--defaults-file={self.server.client_cnf}",
            "--single-transaction", "--quick", "--databases", DATABASE,
            f"--result-file={target}",
        ])  # fmt: skip
        return f"{target.stat().st_size} bytes"

    def _backup(self) -> str:
        target = self.server.files_dir / "backup"
        shutil.rmtree(target, ignore_errors=True)
        # mariadb-backup takes the datadir from the server's my.cnf and the credentials
        # from the client one; one file of both, private like either.
        cnf = self.server.rundir / "backup.cnf"
        cnf.write_text(self.server.cnf_path.read_text() + "\n" + self.server.client_cnf.read_text())
        cnf.chmod(0o600)
        self._tool_run([
            _tool("mariadb-backup", "mariabackup"), f"--defaults-file={cnf}", "--backup",
            f"--target-dir={target}",
        ])  # fmt: skip
        size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        shutil.rmtree(target, ignore_errors=True)  # the copy is not what is measured
        return f"{size} bytes"

    def _connection(self, **kwargs: Any) -> pymysql.Connection:
        conn = self.server.connect(connect_timeout=10, **kwargs)
        with self._lock:
            self._connections.append(conn)
        return conn

    def _release(self, conn: pymysql.Connection) -> None:
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
        with contextlib.suppress(Exception):
            conn.close()

    def _statements(self, statements: list[str], database: str | None = None) -> list[Any]:
        conn = self._connection(database=database) if database else self._connection()
        try:
            with conn.cursor() as cur:
                rows: list[Any] = []
                for statement in statements:
                    cur.execute(statement)
                    rows = list(cur.fetchall())
                return rows
        finally:
            self._release(conn)

    def _optimize(self, table: str) -> str | None:
        rows = self._statements([f"OPTIMIZE TABLE `{DATABASE}`.`{table}`"])
        # OPTIMIZE reports a missing table in its result, not as an error.
        errors = [str(r[3]) for r in rows if len(r) > 3 and str(r[2]).lower() == "error"]
        if errors:
            raise MallocbenchError(errors[-1])
        notes = [str(r[3]) for r in rows if len(r) > 3 and str(r[2]).lower() == "note"]
        return notes[0] if notes else None

    def _one_sort(self, event: SoakEvent) -> tuple[int, int]:
        conn = self._connection(database=DATABASE)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@global.sort_buffer_size")
                configured = int(cur.fetchall()[0][0])
                wanted = event.sort_buffer or max(DEFAULT_SORT_BUFFER, configured)
                cur.execute(f"SET SESSION sort_buffer_size = {int(wanted)}")
                cur.execute("SELECT @@session.sort_buffer_size")
                got = int(cur.fetchall()[0][0])
                # Every row sorted on columns no index holds (a filesort of the whole
                # table, in the server's sort buffer), with an offset past the last row:
                # no row comes back, so the harness spends nothing on the result.
                cur.execute(
                    f"SELECT id FROM `{event.table}` ORDER BY pad, c LIMIT 1 OFFSET {SORT_OFFSET}"
                )
                cur.fetchall()
                cur.execute("SHOW SESSION STATUS LIKE 'Sort_rows'")
                sorted_rows = int(cur.fetchall()[0][1])
                return got, sorted_rows
        finally:
            self._release(conn)

    def _big_sort(self, event: SoakEvent) -> str:
        with ThreadPoolExecutor(event.sessions) as pool:
            got = list(pool.map(lambda _: self._one_sort(event), range(event.sessions)))
        return (
            f"{event.sessions} sessions, sort_buffer_size {min(g for g, _ in got)} bytes, "
            f"{min(r for _, r in got)} rows sorted each"
        )

    def _connect_storm(self, connections: int) -> str:
        # Every connection open at the same moment: the server's per-connection memory
        # (THD, buffers, a thread each) is what the storm asks for all at once.
        together = threading.Barrier(connections)

        def one(_: int) -> None:
            try:
                conn = self._connection()
            except BaseException:
                together.abort()  # the others need not wait for one that never comes
                raise
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT CONNECTION_ID()")
                with contextlib.suppress(threading.BrokenBarrierError):
                    together.wait(30)
            finally:
                self._release(conn)

        with ThreadPoolExecutor(connections) as pool:
            outcomes = list(pool.map(_outcome(one), range(connections)))
        failed = [o for o in outcomes if o]
        if failed:
            raise MallocbenchError(
                f"{len(failed)} of {connections} connections failed: {failed[0]}"
            )
        return f"{connections} connections"


def _outcome(work: Callable[[int], None]) -> Callable[[int], str]:
    def run(i: int) -> str:
        try:
            work(i)
            return ""
        except Exception as exc:  # noqa: BLE001 - counted, the first one told
            return _one_line(exc)

    return run


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, pymysql.MySQLError) and len(exc.args) >= 2:
        text = f"server error {exc.args[0]}: {exc.args[1]}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:300]


__all__ = ["EventRunner", "check_tools"]
