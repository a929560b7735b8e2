"""PostgreSQL store: the SQLite store's tables in a database several hosts share.

Each benchmark host writes its cells as they finish, each cell one transaction, so a
cluster's hosts write one run at once and a host that dies loses only the cell it was
measuring. Data columns are JSON as TEXT, exactly as SQLite keeps them: JSONB would
refuse the NaN that json.dumps writes and reorder keys, and nothing queries inside them
(the session a cell belongs to has a column of its own for `max_session_value`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from mallocbench.errors import EnvironmentLost, MallocbenchError
from mallocbench.model.results import Cell, Sample
from mallocbench.store import schema
from mallocbench.store.base import (
    STORE_SCHEMA_VERSION,
    damaged_store,
    redact,
    schema_refusal,
    store_disk_fault,
)
from mallocbench.store.sql import CELL_COLUMNS, SAMPLE_COLUMNS, SqlStore, cell_row, sample_rows

if TYPE_CHECKING:
    import psycopg

# Advisory lock keys, (class, object): one class for creating the schema, one for run ids,
# so no run id's hash can collide with the schema lock.
_SCHEMA_LOCK = (0x6D62, 0)
_RUN_LOCK_CLASS = 0x6D63
_APP_PREFIX = "mallocbench"


def _run_key(run_id: str) -> int:
    """A run id as a signed 32-bit advisory lock object id."""
    return int.from_bytes(hashlib.blake2b(run_id.encode(), digest_size=4).digest(), "big") - (
        1 << 31
    )


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise MallocbenchError(
            "a PostgreSQL store needs psycopg: pip install 'psycopg[binary]>=3.1'"
        ) from exc
    return psycopg


def _hint(text: str, connecting: bool = True) -> str:
    lowered = text.lower()
    if "pg_hba.conf entry" in lowered:
        return "the server does not admit this user from this host: add a line to its pg_hba.conf"
    if "permission denied" in lowered:
        return (
            "the user needs to own the database or have CREATE on it (to create the tables) "
            "and SELECT, INSERT, UPDATE, DELETE on its tables"
        )
    if "password" in lowered or "authentication" in lowered:
        return (
            "check the user and password (in the URL, PGPASSWORD or ~/.pgpass) and the "
            "server's pg_hba.conf"
        )
    if "does not exist" in lowered and "database" in lowered:
        return "create the database first, e.g. createdb -h HOST -U USER DBNAME"
    if "role" in lowered and "does not exist" in lowered:
        return "create the user first, e.g. createuser -h HOST -U postgres USER"
    if "invalid" in lowered or "missing" in lowered or "uri" in lowered:
        return "give a URL like postgresql://user@host:5432/dbname"
    if not connecting:
        return "the server's log may say more"
    return (
        "is the server running? check host and port, and that its firewall lets this host reach it"
    )


def _error_line(exc: BaseException, url: str, password: str | None) -> str:
    """libpq's message on one line, with any password taken out."""
    lines = [" ".join(ln.split()) for ln in str(exc).splitlines() if ln.strip()]
    text = "; ".join(lines[:2]).removeprefix("connection failed: ") or type(exc).__name__
    for secret in {password, _url_password(url)} - {None, ""}:
        text = text.replace(str(secret), "***")
    return text


def _url_password(url: str) -> str | None:
    userinfo, at, _ = url.split("://", 1)[-1].partition("/")[0].rpartition("@")
    return userinfo.partition(":")[2] or None if at else None


def connect(url: str, *, application_name: str = _APP_PREFIX) -> psycopg.Connection[Any]:
    """An autocommit connection; every failure is one line naming the store and a fix."""
    psycopg = _psycopg()
    label = redact(url)
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        line = _error_line(exc, url, None)
        raise MallocbenchError(
            f"bad PostgreSQL URL {label}: {line}: give a URL like "
            "postgresql://user@host:5432/dbname"
        ) from None
    params.setdefault("connect_timeout", 10)
    params.setdefault("application_name", application_name)
    try:
        return psycopg.connect(autocommit=True, **params)
    except psycopg.Error as exc:
        line = _error_line(exc, url, params.get("password"))
        raise MallocbenchError(
            f"cannot open the results store {label}: {line}; {_hint(line)}"
        ) from None


class RunLock:
    """A session-level advisory lock on a connection of its own, held until `release()`.

    The server drops it when that connection ends, so a harness killed with SIGKILL (or a
    host that dies, once TCP keepalives give up on it) never leaves a stale lock.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn: psycopg.Connection[Any] | None = conn

    def release(self) -> None:
        if self._conn is not None:
            # Unlocked before the connection closes: its backend may take a moment to end,
            # and a run resumed right after must find the lock free.
            with contextlib.suppress(Exception):
                self._conn.execute("SELECT pg_advisory_unlock_all()")
            self._conn.close()
            self._conn = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class GuardedConnection:
    """The store's connection, on which a connection lost mid-way (a restarted server, a
    network cut, a terminated backend) is one line, not psycopg's traceback.

    Every cell is its own transaction, so what was stored before the loss is kept and a
    resumed run goes on from there.
    """

    def __init__(self, conn: psycopg.Connection[Any], url: str) -> None:
        self.raw = conn
        self._url = url

    @contextlib.contextmanager
    def guarded(self) -> Iterator[None]:
        psycopg = _psycopg()
        errors = psycopg.errors
        try:
            yield
        except (errors.DiskFull, errors.IoError) as exc:
            # The server's disk, not the connection: one line, and exit 3 for a run.
            line = _error_line(exc, self._url, None)
            full = isinstance(exc, errors.DiskFull)
            raise EnvironmentLost(store_disk_fault(redact(self._url), line, full)) from None
        except (errors.DataCorrupted, errors.IndexCorrupted) as exc:
            line = _error_line(exc, self._url, None)
            raise MallocbenchError(damaged_store(redact(self._url), line)) from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if not self.raw.closed and not self.raw.broken:
                raise
            line = _error_line(exc, self._url, None)
            raise EnvironmentLost(
                f"lost the connection to the results store {redact(self._url)} ({line}): "
                "what was stored before is kept; a run goes on with `mallocbench run --resume`"
            ) from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        with self.guarded():
            return self.raw.execute(sql, params)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[object]:
        with self.guarded(), self.raw.transaction() as tx:
            yield tx

    @contextlib.contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        with self.guarded(), self.raw.cursor() as cur:
            yield cur

    def close(self) -> None:
        self.raw.close()


class PostgresStore(SqlStore):
    order_column = "seq"
    sample_order_column = "id"

    def __init__(self, url: str, *, readonly: bool = False) -> None:
        """Connect, and create the tables when needed (not when `readonly`)."""
        self.url = url
        self._label = redact(url)
        self.conn = GuardedConnection(connect(url), url)
        psycopg = _psycopg()
        try:
            if readonly:
                self.conn.execute("SET default_transaction_read_only = on")
                self._check_tables()
            else:
                self._create_schema()
        except psycopg.Error as exc:
            self.conn.close()
            line = _error_line(exc, url, None)
            hint = _hint(line, connecting=False)
            raise MallocbenchError(
                f"cannot use the results store {self._label}: {line}; {hint}"
            ) from None
        except BaseException:
            self.conn.close()
            raise

    @property
    def label(self) -> str:
        return self._label

    def describe(self) -> str:
        return f"PostgreSQL store {self._label}"

    def close(self) -> None:
        self.conn.close()

    def _create_schema(self) -> None:
        """The tables, unless they are there at this version already.

        Hosts of a cluster open the store at once: CREATE TABLE IF NOT EXISTS is not safe
        against itself (two creators collide on the catalog), so one at a time. And no DDL
        at all on a store that is up to date: CREATE INDEX IF NOT EXISTS locks its table
        before it looks, and deadlocks with hosts already writing cells. A store from
        before a table was added (the pattern tables) gets that table alone.
        """
        if not self._missing_tables():
            return
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _SCHEMA_LOCK)
            missing = self._missing_tables()
            if not missing:
                return  # another host created them while this one waited
            self.conn.execute(schema.ddl(schema.POSTGRESQL, missing))
            self.conn.execute(
                "INSERT INTO schema_version (version) SELECT %s WHERE NOT EXISTS"
                " (SELECT 1 FROM schema_version)",
                (STORE_SCHEMA_VERSION,),
            )

    def _missing_tables(self) -> set[str]:
        """The store's tables not in the database yet; a store whose recorded version is
        newer than this code is refused."""
        tables = self._tables()
        if "schema_version" in tables:
            version = self._recorded_version()
            if version is not None and version > STORE_SCHEMA_VERSION:
                raise MallocbenchError(schema_refusal(self._label, version))
        return set(schema.TABLE_NAMES - tables)

    def _check_tables(self) -> None:
        if not {"runs", "cells"} <= self._tables():
            raise MallocbenchError(
                f"the database {self._label} holds no mallocbench results store yet: "
                "run an experiment with --store URL, or copy runs into it with "
                "`mallocbench store copy`"
            )
        version = self.schema_version()
        if version > STORE_SCHEMA_VERSION:
            raise MallocbenchError(schema_refusal(self._label, version))

    def _tables(self) -> set[str]:
        # pg_tables, not to_regclass(): a query on the catalog sees what another host
        # committed while this one waited for the schema lock; the relation cache, which
        # to_regclass() reads, is not refreshed by taking an advisory lock.
        rows = self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
        return {str(row[0]) for row in rows}

    def _recorded_version(self) -> int | None:
        row = self.conn.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def schema_version(self) -> int:
        if "schema_version" not in self._tables():
            return 1
        return self._recorded_version() or 1

    # --- what SqlStore asks of a database ------------------------------------------------

    def _run(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        # The shared queries use no literal "?" or "%": the placeholders are all there is.
        return self.conn.execute(sql.replace("?", "%s"), params)

    def _transaction(self) -> AbstractContextManager[object]:
        return self.conn.transaction()

    def _insert_cell(self, run_id: str, cell: Cell, data: dict[str, Any]) -> int:
        row = self.conn.execute(
            f"INSERT INTO cells ({CELL_COLUMNS}, session, data) VALUES (%s, %s, %s, %s, %s,"
            " %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (*cell_row(run_id, cell), data.get("session"), json.dumps(data)),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def _insert_samples(self, cell_id: int, samples: list[Sample]) -> None:
        """COPY: one round trip for a cell's thousands of samples, over a WAN too."""
        with (
            self.conn.cursor() as cur,
            cur.copy(f"COPY samples ({SAMPLE_COLUMNS}) FROM STDIN") as copy,
        ):
            for row in sample_rows(cell_id, samples):
                copy.write_row(row)

    def max_session_value(self, run_id: str, session_id: str, kind: str) -> int | None:
        column = "peak_rss_bytes" if kind == "rss" else "peak_vsz_bytes"
        row = self.conn.execute(
            f"SELECT max({column}) FROM cells WHERE run_id = %s AND session = %s",
            (run_id, session_id),
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    # --- one writer per run id ------------------------------------------------------------

    def lock_run(self, run_id: str) -> RunLock:
        """The run id's advisory lock, on a connection named after this host and PID so
        that a second run can say who holds it."""
        name = f"{_APP_PREFIX} pid {os.getpid()} on {socket.gethostname()}"[:63]
        conn = connect(self.url, application_name=name)
        try:
            # Server-side keepalives: a host that vanishes without closing its connection
            # releases its runs within minutes, not after the kernel's two hours.
            for setting, value in (
                ("tcp_keepalives_idle", 60),
                ("tcp_keepalives_interval", 10),
                ("tcp_keepalives_count", 6),
            ):
                conn.execute(f"SET {setting} = {value}")
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", (_RUN_LOCK_CLASS, _run_key(run_id))
            ).fetchone()
            if not (row and row[0]):
                holder = self._holder(run_id) or "a process that is gone by now"
                raise MallocbenchError(
                    f"run {run_id} in {self._label} is in use by another mallocbench run "
                    f"({holder}): wait for it to finish or stop it before resuming"
                )
        except BaseException:
            conn.close()
            raise
        return RunLock(conn)

    def _holder(self, run_id: str) -> str | None:
        """Who holds the run's lock: "PID n on HOST, started ...", or None when nobody."""
        row = self.conn.execute(
            "SELECT a.application_name, extract(epoch FROM a.backend_start)"
            " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.database ="
            " (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid AND l.objsubid = 2",
            (_RUN_LOCK_CLASS, _run_key(run_id) & 0xFFFFFFFF),
        ).fetchone()
        if row is None:
            return None
        name, started = row
        who = str(name or "").removeprefix(_APP_PREFIX).strip().replace("pid", "PID", 1)
        when = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(started)))
            if started is not None
            else "an unknown time"
        )
        return f"{who or 'an unknown process'}, started {when}"

    def live_status(self, run_id: str, status: str) -> str:
        if status != "running":
            return status
        holder = self._holder(run_id)
        if holder is None:
            return "died (its harness is gone: run again with --resume to continue)"
        return f"running ({holder.split(', started')[0]})"
