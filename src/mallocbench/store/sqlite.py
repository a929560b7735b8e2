"""SQLite store: runs, setups, sessions, cells and per-second samples.

Cells are written in their own transaction as each finishes, so a killed run keeps every
cell it measured and `run --resume` can skip them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.results import Cell, RunResult, Sample, SessionInfo, SetupInfo

# What a run's status says, truthfully: a harness that dies leaves "running" behind, which
# readers check against the run's lock (store.locks.run_holder) before believing it.
STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"
STATUS_INTERRUPTED = "interrupted"
STATUS_RUN_FAILED = "failed"

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    base_setup TEXT NOT NULL,
    experiment_text TEXT NOT NULL,
    metadata TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    status TEXT NOT NULL DEFAULT 'running'
);
CREATE TABLE IF NOT EXISTS setups (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    name TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS sessions (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    id TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
);
CREATE TABLE IF NOT EXISTS cells (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    setup TEXT NOT NULL,
    engine TEXT NOT NULL,
    step TEXT NOT NULL,
    threads INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    status TEXT NOT NULL,
    qps REAL,
    p95_ms REAL,
    p99_ms REAL,
    peak_rss_bytes INTEGER,
    peak_vsz_bytes INTEGER,
    data TEXT NOT NULL,
    UNIQUE (run_id, setup, engine, step, threads, repeat)
);
CREATE TABLE IF NOT EXISTS samples (
    cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    t REAL NOT NULL,
    rss_bytes INTEGER,
    vsz_bytes INTEGER,
    qps REAL,
    tps REAL,
    latency_ms REAL,
    extra TEXT
);
CREATE INDEX IF NOT EXISTS samples_cell ON samples(cell_id);
"""


STORE_TABLES = frozenset({"runs", "cells"})


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
        db = sqlite3.connect(_readonly_uri(path, immutable=not has_log), uri=True, timeout=30)
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


class Store:
    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        """Open (creating when needed) the store at `path` for writing runs.

        `readonly` is for commands that only read: nothing is created or changed (no
        schema, no WAL switch), and a file that is not a results store is refused.
        """
        self.path = Path(path)
        if readonly:
            self.db = _connect_readonly(self.path)
            return
        existed = self.path.is_file() and self.path.stat().st_size > 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(self.path), timeout=30)
            if existed:
                self._refuse_foreign()
            self.db.execute("PRAGMA foreign_keys = ON")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.executescript(SCHEMA)
            self.db.commit()
        except (OSError, sqlite3.Error) as exc:
            raise MallocbenchError(
                f"cannot open the results store {self.path}: {exc}; "
                "choose a writable path with --store"
            ) from exc

    def _refuse_foreign(self) -> None:
        """Someone else's SQLite file gets neither our tables nor a switch to WAL."""
        tables = {
            row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if tables and not STORE_TABLES.issubset(tables):
            self.db.close()
            raise MallocbenchError(
                f"{self.path} is an SQLite file but not a mallocbench results store; "
                "mallocbench writes only into its own stores: give a new file with --store"
            )

    def close(self) -> None:
        self.db.close()

    # --- runs -----------------------------------------------------------------------------

    def create_run(self, result: RunResult) -> None:
        with self.db:
            self.db.execute(
                "INSERT INTO runs (run_id, experiment, base_setup, experiment_text, metadata,"
                " started_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    result.run_id,
                    result.experiment,
                    result.base_setup,
                    result.experiment_text,
                    json.dumps(result.metadata),
                    time.time(),
                ),
            )

    def save_run(self, result: RunResult) -> None:
        """A whole run at once: for importing results and for tests."""
        self.create_run(result)
        for setup in result.setups:
            self.save_setup(result.run_id, setup)
        for session in result.sessions:
            self.save_session(result.run_id, session)
        for cell in result.cells:
            self.save_cell(result.run_id, cell)

    def run_exists(self, run_id: str) -> bool:
        row = self.db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return row is not None

    def update_metadata(self, run_id: str, metadata: dict[str, Any]) -> None:
        with self.db:
            self.db.execute(
                "UPDATE runs SET metadata = ? WHERE run_id = ?", (json.dumps(metadata), run_id)
            )

    def set_status(self, run_id: str, status: str) -> None:
        with self.db:
            self.db.execute(
                "UPDATE runs SET status = ?, finished_at = NULL WHERE run_id = ?", (status, run_id)
            )

    def finish_run(self, run_id: str, status: str) -> None:
        with self.db:
            self.db.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE run_id = ?",
                (time.time(), status, run_id),
            )

    def list_runs(self) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT r.run_id, r.experiment, r.started_at, r.finished_at, r.status,"
            " (SELECT count(*) FROM cells c WHERE c.run_id = r.run_id)"
            " FROM runs r ORDER BY r.started_at"
        ).fetchall()
        keys = ("run_id", "experiment", "started_at", "finished_at", "status", "cells")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def latest_run_id(self) -> str | None:
        row = self.db.execute("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()
        return row[0] if row else None

    # --- setups and sessions --------------------------------------------------------------

    def save_setup(self, run_id: str, setup: SetupInfo) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO setups (run_id, name, data) VALUES (?, ?, ?)",
                (run_id, setup.name, json.dumps(asdict(setup))),
            )

    def save_session(self, run_id: str, session: SessionInfo) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO sessions (run_id, id, data) VALUES (?, ?, ?)",
                (run_id, session.id, json.dumps(asdict(session))),
            )

    # --- cells ----------------------------------------------------------------------------

    def save_cell(self, run_id: str, cell: Cell) -> None:
        """Commit one finished cell with its samples (replacing an earlier failed attempt)."""
        data = cell.to_dict(with_samples=False)
        with self.db:
            self.db.execute(
                "DELETE FROM cells WHERE run_id = ? AND setup = ? AND engine = ? AND step = ?"
                " AND threads = ? AND repeat = ?",
                (run_id, *cell.key),
            )
            cur = self.db.execute(
                "INSERT INTO cells (run_id, setup, engine, step, threads, repeat, status, qps,"
                " p95_ms, p99_ms, peak_rss_bytes, peak_vsz_bytes, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    *cell.key,
                    cell.status,
                    cell.qps,
                    cell.p95_ms,
                    cell.p99_ms,
                    cell.peak_rss_bytes,
                    cell.peak_vsz_bytes,
                    json.dumps(data),
                ),
            )
            self.db.executemany(
                "INSERT INTO samples (cell_id, t, rss_bytes, vsz_bytes, qps, tps, latency_ms,"
                " extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        cur.lastrowid,
                        s.t,
                        s.rss_bytes,
                        s.vsz_bytes,
                        s.qps,
                        s.tps,
                        s.latency_ms,
                        json.dumps(s.extra) if s.extra else None,
                    )
                    for s in cell.samples
                ],
            )

    def finished_cell_keys(self, run_id: str) -> set[tuple[str, str, str, int, int]]:
        """Cells that need no re-run: measured, or a server crash/OOM (itself a result)."""
        rows = self.db.execute(
            "SELECT setup, engine, step, threads, repeat FROM cells"
            " WHERE run_id = ? AND status != 'failed'",
            (run_id,),
        ).fetchall()
        return {(r[0], r[1], r[2], int(r[3]), int(r[4])) for r in rows}

    def load_run(self, run_id: str | None = None, with_samples: bool = True) -> RunResult:
        run_id = run_id or self.latest_run_id()
        if run_id is None:
            raise MallocbenchError(f"the store {self.path} holds no runs yet: run an experiment")
        row = self.db.execute(
            "SELECT run_id, experiment, base_setup, experiment_text, metadata FROM runs"
            " WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            known = ", ".join(r["run_id"] for r in self.list_runs()[-5:]) or "none"
            raise MallocbenchError(f"no run {run_id!r} in {self.path} (latest: {known})")
        result = RunResult(
            run_id=row[0],
            experiment=row[1],
            base_setup=row[2],
            experiment_text=row[3],
            metadata=json.loads(row[4]),
        )
        for (data,) in self.db.execute(
            "SELECT data FROM setups WHERE run_id = ? ORDER BY rowid", (run_id,)
        ):
            result.setups.append(SetupInfo(**json.loads(data)))
        for (data,) in self.db.execute(
            "SELECT data FROM sessions WHERE run_id = ? ORDER BY rowid", (run_id,)
        ):
            result.sessions.append(SessionInfo(**json.loads(data)))
        for cell_id, data in self.db.execute(
            "SELECT id, data FROM cells WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall():
            cell = Cell.from_dict(json.loads(data))
            if with_samples:
                cell.samples = [
                    Sample(
                        t=s[0],
                        rss_bytes=s[1],
                        vsz_bytes=s[2],
                        qps=s[3],
                        tps=s[4],
                        latency_ms=s[5],
                        extra=json.loads(s[6]) if s[6] else {},
                    )
                    for s in self.db.execute(
                        "SELECT t, rss_bytes, vsz_bytes, qps, tps, latency_ms, extra"
                        " FROM samples WHERE cell_id = ? ORDER BY t",
                        (cell_id,),
                    )
                ]
            result.cells.append(cell)
        return result


def open_store(path: str | os.PathLike[str]) -> Store:
    return Store(path)
