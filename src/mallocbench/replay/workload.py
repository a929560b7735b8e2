"""What a recorded server said about its load over the window, kept beside the trace.

`record --pid` asks the server a few read-only questions at the window's start and end
(its variables, engines and tables, and its global status counters) and samples its
connections, its query counter and the process's RSS once a second meanwhile. From that
the confirmation experiment is derived (tune/confirm.py) and `check --against` compares
a restarted server's RSS and QPS with the window's.

Nothing here may harm the server: one connection, statements bounded by
max_statement_time, and any failure ends the capture (the recording goes on without it,
and says so). The capture's own statements are counted by its session's status and
taken out of the window's counts.

Kept as JSON in TRACE.workload.json, next to the trace: the header has no room for it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mallocbench.files import write_text_atomic
from mallocbench.replay import serverrss

if TYPE_CHECKING:
    from mallocbench.memory.client import ConnectOptions

FORMAT = 1
SUFFIX = ".workload.json"
SAMPLE_S = 1.0
# A statement of ours that runs longer than this is stopped by the server itself
# (MariaDB's max_statement_time), so a server with a huge dictionary is not held up.
STATEMENT_S = 5
MAX_TABLES = 10_000

# Variables a private server can be given as they were: they size its memory.
CONFIG_VARIABLES = (
    "sort_buffer_size",
    "join_buffer_size",
    "read_buffer_size",
    "read_rnd_buffer_size",
    "tmp_table_size",
    "max_heap_table_size",
    "thread_cache_size",
    "table_open_cache",
)
# And those that say what it runs, or size it in ways the experiment sets otherwise.
VARIABLES = (
    "version",
    "version_comment",
    "default_storage_engine",
    "innodb_buffer_pool_size",
    "rocksdb_block_cache_size",
    "key_buffer_size",
    "max_connections",
    "innodb_log_buffer_size",
    *CONFIG_VARIABLES,
)
_STATUS_NAMED = ("Questions", "Uptime", "Threads_connected", "Threads_running",
                 "Max_used_connections")  # fmt: skip
_SAMPLED = ("Questions", "Threads_connected", "Threads_running")
_SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


def sidecar(trace: Path) -> Path:
    return trace.with_name(trace.name + SUFFIX)


def _counter(name: str) -> bool:
    return name.startswith(("Com_", "Handler_")) or name in _STATUS_NAMED


@dataclass
class Sample:
    """One second of the window: seconds since its start, the process's RSS (bytes),
    and the server's connected and running threads and its Questions counter (None when
    the server could not be asked)."""

    t: float
    rss: int | None
    connected: int | None = None
    running: int | None = None
    questions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass
class ServerLoad:
    """The window as the server described it. Counters are the end's minus the start's,
    less the capture's own statements."""

    window_s: float
    variables: dict[str, str] = field(default_factory=dict)
    engines: dict[str, str] = field(default_factory=dict)  # engine -> SUPPORT
    tables: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    max_used_connections: int | None = None
    samples: list[Sample] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def described(self) -> bool:
        """True when the server answered at both ends: the mix and tables are known."""
        return bool(self.counters) and bool(self.variables)

    def count(self, *names: str) -> int:
        return sum(max(0, self.counters.get(n, 0)) for n in names)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "window_s": self.window_s,
            "variables": self.variables,
            "engines": self.engines,
            "tables": self.tables,
            "counters": self.counters,
            "max_used_connections": self.max_used_connections,
            "samples": [s.to_dict() for s in self.samples],
            "problems": self.problems,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerLoad:
        return cls(
            window_s=float(data.get("window_s") or 0),
            variables={str(k): str(v) for k, v in (data.get("variables") or {}).items()},
            engines={str(k): str(v) for k, v in (data.get("engines") or {}).items()},
            tables=list(data.get("tables") or []),
            counters={str(k): int(v) for k, v in (data.get("counters") or {}).items()},
            max_used_connections=data.get("max_used_connections"),
            samples=[Sample(**s) for s in data.get("samples") or []],
            problems=[str(p) for p in data.get("problems") or []],
        )


def load(trace: Path) -> ServerLoad | None:
    """The load kept beside `trace`; None when there is none or it cannot be read (a
    trace recorded by a command, or before the capture existed)."""
    try:
        data = json.loads(sidecar(trace).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    try:
        return ServerLoad.from_dict(data)
    except (TypeError, ValueError):
        return None


# --- asking the server ---------------------------------------------------------------------


def _connect(pid: int, given: ConnectOptions | None = None) -> Any:
    """A connection to the server `pid` listens on, where `given` says (record's
    --socket, --defaults-file, --user), else found as `memory` finds one."""
    from mallocbench.errors import MallocbenchError
    from mallocbench.memory.client import ConnectOptions
    from mallocbench.memory.connect import find_server

    found = find_server(given or ConnectOptions(), pid)
    if not _listens_on(pid, found.opts):
        # Discovery may end at the machine's usual socket: another server's counters
        # would describe another load.
        with contextlib.suppress(Exception):
            found.conn.close()
        said = "where --socket or --defaults-file point" if given else "the server found"
        raise MallocbenchError(f"process {pid} does not listen on {found.opts.target}, {said}")
    conn = found.conn
    # MySQL has no such variable: nothing bounds the statements there.
    with contextlib.suppress(Exception), conn.cursor() as cur:
        cur.execute(f"SET SESSION max_statement_time = {STATEMENT_S}")
    return conn


def _listens_on(pid: int, opts: Any) -> bool:
    """True when `pid` listens on the socket (or TCP port) of `opts`."""
    import os

    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="all")
    except (psutil.Error, OSError):
        return False
    for c in conns:
        if opts.socket and isinstance(c.laddr, str) and c.laddr:
            same = os.path.realpath(c.laddr) == os.path.realpath(opts.socket)
        else:
            same = (
                not opts.socket and isinstance(c.laddr, tuple) and len(c.laddr) > 1
                and c.status == psutil.CONN_LISTEN and c.laddr[1] == (opts.port or 3306)
            )  # fmt: skip
        if same:
            return True
    return False


def _pairs(conn: Any, sql: str) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return {str(r[0]): str(r[1]) for r in cur.fetchall()}


def _quoted(names: tuple[str, ...]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _status(conn: Any, scope: str = "GLOBAL") -> dict[str, int]:
    raw = _pairs(conn, f"SHOW {scope} STATUS")
    out = {}
    for name, value in raw.items():
        if _counter(name):
            with contextlib.suppress(ValueError):
                out[name] = int(value)
    return out


def _tables(conn: Any) -> list[dict[str, Any]]:
    sql = (
        "SELECT TABLE_SCHEMA, TABLE_NAME, ENGINE, TABLE_ROWS, DATA_LENGTH, INDEX_LENGTH "
        "FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA "
        f"NOT IN ({_quoted(_SYSTEM_SCHEMAS)}) LIMIT {MAX_TABLES}"
    )
    with conn.cursor() as cur:
        cur.execute(sql)
        rows = cur.fetchall()
    return [
        {"schema": r[0], "name": r[1], "engine": r[2] or "", "rows": int(r[3] or 0),
         "data_bytes": int(r[4] or 0), "index_bytes": int(r[5] or 0)}
        for r in rows
    ]  # fmt: skip


def sample_once(pid: int, conn: Any, t: float) -> Sample:
    """The process's RSS and, when `conn` answers, the server's sampled counters."""
    s = Sample(t=round(t, 3), rss=serverrss.sample(pid).get("rss"))
    if conn is None:
        return s
    with contextlib.suppress(Exception):
        raw = _pairs(conn, f"SHOW GLOBAL STATUS WHERE Variable_name IN ({_quoted(_SAMPLED)})")
        # The asking connection is one of those connected, and running while it asks.
        s.connected = max(0, int(raw["Threads_connected"]) - 1)
        s.running = max(0, int(raw["Threads_running"]) - 1)
        s.questions = int(raw["Questions"])
    return s


class Sampler:
    """A thread sampling once a second until stopped; a sample whose question fails
    keeps its RSS and drops the connection (the server is not asked again)."""

    def __init__(self, pid: int, conn: Any, interval_s: float = SAMPLE_S) -> None:
        self.pid, self.conn, self.interval_s = pid, conn, interval_s
        self.samples: list[Sample] = []
        self.began = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mb-load-sampler", daemon=True)

    def start(self) -> Sampler:
        self.began = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            s = sample_once(self.pid, self.conn, time.monotonic() - self.began)
            if self.conn is not None and s.questions is None:
                self.conn = None
            self.samples.append(s)
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join(timeout=30)
        return list(self.samples)

    def elapsed(self) -> float:
        return time.monotonic() - self.began


class Capture:
    """The window's description, begun before the recording is armed and ended after it
    is disarmed; `problem` says why a part is missing (the server would not answer)."""

    def __init__(self, pid: int, given: ConnectOptions | None = None) -> None:
        self.pid = pid
        self.given = given  # how to ask the server; None: found as `memory` finds one
        self.conn: Any = None
        self.problem: str | None = None
        self.load = ServerLoad(window_s=0.0)
        self._start: dict[str, int] = {}
        self._own: dict[str, int] = {}
        self._sampler: Sampler | None = None

    @classmethod
    def begin(cls, pid: int, given: ConnectOptions | None = None) -> Capture:
        """The description begun; with `given`, a server they do not reach is refused
        here, before anything is recorded, rather than noted after the window."""
        capture = cls(pid, given)
        if given is not None:
            from mallocbench.errors import MallocbenchError
            from mallocbench.memory.pid import is_server_process

            if not is_server_process(pid)[0]:
                raise MallocbenchError(
                    f"process {pid} is no database server to ask about its load: leave "
                    "--socket, --defaults-file and --user out"
                )
            capture.conn = _connect(pid, given)
        capture._begin()
        return capture

    def _begin(self) -> None:
        from mallocbench.errors import MallocbenchError
        from mallocbench.memory.pid import is_server_process

        if not is_server_process(self.pid)[0]:
            return  # not a database server: nothing to ask, nothing to confirm on
        try:
            self.conn = self.conn or _connect(self.pid)
            self.load.variables = _pairs(
                self.conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({_quoted(VARIABLES)})"
            )
            self.load.engines = _pairs(
                self.conn, "SELECT ENGINE, SUPPORT FROM information_schema.ENGINES"
            )
            self.load.tables = _tables(self.conn)
            self._own = _status(self.conn, "SESSION")
            self._start = _status(self.conn)
        except MallocbenchError as exc:
            self._fail(str(exc))
        except Exception as exc:  # the server's answer, whatever it is, must not stop record
            self._fail(f"the server would not answer: {str(exc)[:160]}")
        self._sampler = Sampler(self.pid, self.conn).start()

    def _fail(self, why: str) -> None:
        self.problem = self.problem or why
        self.load.problems.append(why)
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None

    def end(self, trace: Path) -> str | None:
        """Stop sampling, read the counters' end and keep it all beside `trace`; what
        is missing and why (None: the whole description was kept, or the process is no
        database server and there was none to keep)."""
        if self._sampler is None:
            return None
        self.load.samples = self._sampler.stop()
        self.load.window_s = round(self._sampler.elapsed(), 3)
        if self.conn is not None:
            try:
                end = _status(self.conn)
                own = _status(self.conn, "SESSION")
                self._keep_counters(end, own)
            except Exception as exc:  # as at the start: the recording matters, not this
                self._fail(f"the server would not answer at the window's end: {str(exc)[:160]}")
            with contextlib.suppress(Exception):
                self.conn.close()
        with contextlib.suppress(OSError):
            write_text_atomic(sidecar(trace), json.dumps(self.load.to_dict(), indent=1) + "\n")
            return self.problem
        return f"cannot write {sidecar(trace)}"

    def _keep_counters(self, end: Mapping[str, int], own_end: Mapping[str, int]) -> None:
        self.load.max_used_connections = end.get("Max_used_connections")
        counters = {}
        for name, value in end.items():
            if name in ("Uptime", "Threads_connected", "Threads_running", "Max_used_connections"):
                continue
            mine = own_end.get(name, 0) - self._own.get(name, 0)
            delta = value - self._start.get(name, value) - max(0, mine)
            if delta:
                counters[name] = max(0, delta)
        self.load.counters = counters


def watch(
    pid: int, seconds: float, tick: Callable[[Sample], None] | None = None
) -> tuple[list[Sample], str | None]:
    """Sample `pid` for `seconds` (the production-side check); the samples, and why the
    server's own counters are missing (None: they are there)."""
    from mallocbench.errors import MallocbenchError

    problem = None
    try:
        conn = _connect(pid)
    except MallocbenchError as exc:
        conn, problem = None, str(exc)
    began = time.monotonic()
    samples: list[Sample] = []
    try:
        while True:
            s = sample_once(pid, conn, time.monotonic() - began)
            if conn is not None and s.questions is None:
                problem, conn = "the server stopped answering during the watch", None
            samples.append(s)
            if tick is not None:
                tick(s)
            left = seconds - (time.monotonic() - began)
            if left <= 0 or s.rss is None:
                break
            time.sleep(min(SAMPLE_S, left))
    finally:
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
    return samples, problem
