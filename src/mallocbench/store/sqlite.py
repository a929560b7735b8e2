"""SQLite store: runs, setups, sessions, cells and per-second samples.

Cells are written in their own transaction as each finishes, so a killed run keeps every
cell it measured and `run --resume` can skip them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.model.results import Cell, Sample
from mallocbench.store import locks, schema
from mallocbench.store.base import (
    STORE_SCHEMA_VERSION,
    StoreDiskFault,
    damaged_store,
    schema_refusal,
)
from mallocbench.store.sql import CELL_COLUMNS, SAMPLE_COLUMNS, SqlStore, cell_row, sample_rows

# What a run's status says, truthfully: a harness that dies leaves "running" behind, which
# readers check against the run's lock (store.locks.run_holder) before believing it.
STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"
STATUS_INTERRUPTED = "interrupted"
STATUS_RUN_FAILED = "failed"

STORE_TABLES = frozenset({"runs", "cells"})


DAMAGED, NOT_SQLITE, FULL, IO_ERROR = "damaged", "not SQLite", "full", "I/O error"


def fault_kind(exc: sqlite3.Error) -> str | None:
    """What an SQLite error says of the file or its disk (DAMAGED, NOT_SQLITE, FULL,
    IO_ERROR); None for anything else (a lock, a bad statement). The tune's studies are
    judged by the same rule."""
    primary = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    return {
        sqlite3.SQLITE_CORRUPT: DAMAGED,
        sqlite3.SQLITE_NOTADB: NOT_SQLITE,
        sqlite3.SQLITE_FULL: FULL,
        sqlite3.SQLITE_IOERR: IO_ERROR,
    }.get(primary)


@contextlib.contextmanager
def _guard(path: Path) -> Iterator[None]:
    """sqlite3's damaged-file, full-disk and I/O errors as one line naming the store.

    Every statement of both the results and the pattern tables runs on a connection
    that passes through here, so no reader or writer shows sqlite3's traceback.
    """
    try:
        yield
    except sqlite3.DatabaseError as exc:
        kind = fault_kind(exc)
        if kind == DAMAGED:
            raise MallocbenchError(damaged_store(str(path), exc)) from exc
        if kind in (FULL, IO_ERROR):
            raise StoreDiskFault(str(path), exc, kind == FULL) from exc
        raise


class _GuardedCursor(sqlite3.Cursor):
    def _path(self) -> Path:
        return getattr(self.connection, "store_path", Path("?"))

    def execute(self, sql: str, parameters: Any = (), /) -> _GuardedCursor:
        with _guard(self._path()):
            return super().execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> _GuardedCursor:
        with _guard(self._path()):
            return super().executemany(sql, seq)

    def fetchone(self) -> Any:
        with _guard(self._path()):
            return super().fetchone()

    def fetchall(self) -> list[Any]:
        with _guard(self._path()):
            return super().fetchall()

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        with _guard(self._path()):
            return super().fetchmany(size)

    def __next__(self) -> Any:
        with _guard(self._path()):
            return super().__next__()


class _GuardedConnection(sqlite3.Connection):
    store_path = Path("?")

    def cursor(self, factory: Any = _GuardedCursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> Any:
        return self.cursor().executemany(sql, seq)

    def executescript(self, script: str, /) -> Any:
        with _guard(self.store_path):
            return super().executescript(script)

    def commit(self) -> None:
        with _guard(self.store_path):
            super().commit()

    def __exit__(self, *exc: Any) -> Any:
        with _guard(self.store_path):
            return super().__exit__(*exc)


def _connect(target: str, path: Path, **kwargs: Any) -> sqlite3.Connection:
    db = sqlite3.connect(target, factory=_GuardedConnection, **kwargs)
    db.store_path = path
    return db


def _readonly_uri(path: Path, immutable: bool) -> str:
    return path.absolute().as_uri() + ("?mode=ro&immutable=1" if immutable else "?mode=ro")


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write `path`, once it is known to be a results store.

    A WAL reader needs -wal and -shm files beside the database; SQLite creates them when
    missing and a read-only connection leaves them behind, owned by whoever read (root's
    would lock the store's owner out of it). Without a -wal file every committed change
    is in the main file, so it is read as immutable instead: nothing is created, and a
    store on a read-only mount reads too. With one, a run is writing (or was killed), and
    its log is read the ordinary way.
    """
    has_log = Path(f"{path}-wal").exists()
    try:
        db = _connect(_readonly_uri(path, immutable=not has_log), path, uri=True, timeout=30)
    except sqlite3.Error as exc:
        raise MallocbenchError(f"cannot open the results store {path}: {exc}") from exc
    try:
        tables = {
            row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    except sqlite3.OperationalError as exc:
        db.close()
        if has_log and exc.sqlite_errorcode == sqlite3.SQLITE_CANTOPEN:
            raise MallocbenchError(
                f"cannot read the results store {path} read-only ({exc}): its write-ahead "
                f"log needs a {path.name}-shm file beside it that cannot be created there: "
                "copy the store with its -wal file to a writable directory and read it there"
            ) from exc
        raise MallocbenchError(f"cannot read the results store {path}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        db.close()
        raise MallocbenchError(
            f"{path} is not a mallocbench results store ({exc}): give an output directory "
            "or the results.sqlite in it"
        ) from exc
    if not STORE_TABLES.issubset(tables):
        db.close()
        what = "an empty file" if path.stat().st_size == 0 else "an SQLite file"
        raise MallocbenchError(
            f"{path} is {what} but not a mallocbench results store: give an output "
            "directory or the results.sqlite in it"
        )
    return db


class Store(SqlStore):
    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        """Open (creating when needed) the store at `path` for writing runs.

        `readonly` is for commands that only read: nothing is created or changed (no
        schema, no WAL switch), and a file that is not a results store is refused.
        """
        self.path = Path(path)
        if readonly:
            self.db = _connect_readonly(self.path)
            self._refuse_newer()
            return
        existed = self.path.is_file() and self.path.stat().st_size > 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = _connect(str(self.path), self.path, timeout=30)
            if existed:
                self._refuse_foreign()
                self._refuse_newer()
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.executescript(schema.ddl(schema.SQLITE))
            # A store from before versions were recorded has the same tables: it is
            # version 1 and gets the record now.
            self.db.execute(
                "INSERT INTO schema_version (version) SELECT ? WHERE NOT EXISTS"
                " (SELECT 1 FROM schema_version)",
                (STORE_SCHEMA_VERSION,),
            )
            self.db.commit()
        except (OSError, sqlite3.Error) as exc:
            raise MallocbenchError(
                f"cannot open the results store {self.path}: {exc}; "
                "choose a writable path with --store"
            ) from exc

    def _refuse_foreign(self) -> None:
        """Someone else's SQLite file gets neither our tables nor a switch to WAL."""
        tables = self._tables()
        if tables and not STORE_TABLES.issubset(tables):
            self.db.close()
            raise MallocbenchError(
                f"{self.path} is an SQLite file but not a mallocbench results store; "
                "mallocbench writes only into its own stores: give a new file with --store"
            )

    @property
    def label(self) -> str:
        return str(self.path)

    def describe(self) -> str:
        return f"SQLite store {self.path}"

    def schema_version(self) -> int:
        """The recorded version; 1 for a store from before versions were recorded."""
        try:
            row = self.db.execute("SELECT max(version) FROM schema_version").fetchone()
        except sqlite3.OperationalError:
            return 1
        return int(row[0]) if row and row[0] is not None else 1

    def _refuse_newer(self) -> None:
        version = self.schema_version()
        if version > STORE_SCHEMA_VERSION:
            self.db.close()
            raise MallocbenchError(schema_refusal(self.label, version))

    def close(self) -> None:
        self.db.close()

    def lock_run(self, run_id: str) -> locks.HeldLock:
        return locks.lock_run(self.path, run_id)

    def live_status(self, run_id: str, status: str) -> str:
        return locks.live_status(self.path, run_id, status)

    # --- what SqlStore asks of a database ------------------------------------------------

    def _tables(self) -> set[str]:
        rows = self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {str(row[0]) for row in rows}

    def _run(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.db.execute(sql, params)

    def _transaction(self) -> sqlite3.Connection:
        # The connection as a context manager commits on success and rolls back on error.
        return self.db

    def _insert_cell(self, run_id: str, cell: Cell, data: dict[str, Any]) -> int:
        cur = self.db.execute(
            f"INSERT INTO cells ({CELL_COLUMNS}, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " ?, ?, ?)",
            (*cell_row(run_id, cell), json.dumps(data)),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def _insert_samples(self, cell_id: int, samples: list[Sample]) -> None:
        self.db.executemany(
            f"INSERT INTO samples ({SAMPLE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            sample_rows(cell_id, samples),
        )

    # --- cells ----------------------------------------------------------------------------

    def max_session_value(self, run_id: str, session_id: str, kind: str) -> int | None:
        column = "peak_rss_bytes" if kind == "rss" else "peak_vsz_bytes"
        row = self.db.execute(
            f"SELECT max({column}) FROM cells WHERE run_id = ?"
            " AND json_extract(data, '$.session') = ?",
            (run_id, session_id),
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None


SqliteStore = Store
