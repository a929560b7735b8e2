"""The queries every results store shares, written once for SQLite and PostgreSQL.

The two databases differ in how they connect, lock, create their tables and move
samples in bulk; the rows they keep and the questions asked of them are the same, for
server runs and replays (runs, setups, sessions, cells, samples) as for pattern runs
(pattern_runs, pattern_results). Each
store subclasses `SqlStore` and says only what differs: how a statement runs (the
placeholder style), what a transaction is, how a cell's row and its samples go in, and
which column keeps setups and sessions in the order they were written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import RunMetadata
from mallocbench.model.patterns import (
    RESULT_COLUMNS,
    PatternKey,
    PatternResult,
    PatternRun,
    PatternRunMetadata,
    RunModel,
)
from mallocbench.model.results import Cell, RunResult, Sample, SessionInfo, SetupInfo
from mallocbench.store.base import CellKey

RUN_COLUMNS = ("run_id", "experiment", "started_at", "finished_at", "status", "cells")
CELL_COLUMNS = (
    "run_id, setup, engine, step, threads, repeat, status, qps, p95_ms, p99_ms,"
    " peak_rss_bytes, peak_vsz_bytes"
)
SAMPLE_COLUMNS = "cell_id, t, rss_bytes, vsz_bytes, qps, tps, latency_ms, extra"


def cell_row(run_id: str, cell: Cell) -> tuple[Any, ...]:
    """The cell's indexed columns, in CELL_COLUMNS order."""
    return (
        run_id,
        *cell.key,
        cell.status,
        cell.qps,
        cell.p95_ms,
        cell.p99_ms,
        cell.peak_rss_bytes,
        cell.peak_vsz_bytes,
    )


def sample_rows(cell_id: int, samples: Iterable[Sample]) -> list[tuple[Any, ...]]:
    """The samples' rows, in SAMPLE_COLUMNS order."""
    return [
        (
            cell_id,
            s.t,
            s.rss_bytes,
            s.vsz_bytes,
            s.qps,
            s.tps,
            s.latency_ms,
            json.dumps(s.extra) if s.extra else None,
        )
        for s in samples
    ]


class SqlStore:
    """Runs, setups, sessions, cells and samples; each write one transaction."""

    # The columns that keep setups and sessions, and samples, in the order written.
    order_column = "rowid"
    sample_order_column = "rowid"

    @property
    def label(self) -> str:
        raise NotImplementedError

    # --- what a database says for itself ----------------------------------------------------

    def _tables(self) -> set[str]:
        """The tables the database holds now."""
        raise NotImplementedError

    def _run(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute one statement written with `?` placeholders; its cursor."""
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[object]:
        raise NotImplementedError

    def _insert_cell(self, run_id: str, cell: Cell, data: dict[str, Any]) -> int:
        """Insert the cell's row; its id."""
        raise NotImplementedError

    def _insert_samples(self, cell_id: int, samples: list[Sample]) -> None:
        raise NotImplementedError

    # --- runs -----------------------------------------------------------------------------

    def create_run(self, result: RunResult) -> None:
        with self._transaction():
            self._run(
                "INSERT INTO runs (run_id, experiment, base_setup, experiment_text, metadata,"
                " started_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    result.run_id,
                    result.experiment,
                    result.base_setup,
                    result.experiment_text,
                    json.dumps(result.metadata.to_dict()),
                    time.time(),
                ),
            )

    def save_run(
        self,
        result: RunResult,
        *,
        started_at: float | None = None,
        finished_at: float | None = None,
        status: str | None = None,
    ) -> None:
        """A whole run at once: for importing results, `store copy` and tests."""
        self.create_run(result)
        for setup in result.setups:
            self.save_setup(result.run_id, setup)
        for session in result.sessions:
            self.save_session(result.run_id, session)
        for cell in result.cells:
            self.save_cell(result.run_id, cell)
        if started_at is not None or status is not None:
            with self._transaction():
                self._run(
                    "UPDATE runs SET started_at = coalesce(?, started_at), finished_at = ?,"
                    " status = coalesce(?, status) WHERE run_id = ?",
                    (started_at, finished_at, status, result.run_id),
                )

    def delete_run(self, run_id: str) -> None:
        with self._transaction():
            self._run(
                "DELETE FROM samples WHERE cell_id IN (SELECT id FROM cells WHERE run_id = ?)",
                (run_id,),
            )
            for table in ("cells", "sessions", "setups", "runs"):
                self._run(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    def run_exists(self, run_id: str) -> bool:
        return self._run("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None

    def update_metadata(self, run_id: str, metadata: RunMetadata) -> None:
        with self._transaction():
            self._run(
                "UPDATE runs SET metadata = ? WHERE run_id = ?",
                (json.dumps(metadata.to_dict()), run_id),
            )

    def set_status(self, run_id: str, status: str) -> None:
        self._set_status("runs", run_id, status, None)

    def finish_run(self, run_id: str, status: str) -> None:
        self._set_status("runs", run_id, status, time.time())

    def _set_status(self, table: str, run_id: str, status: str, finished: float | None) -> None:
        """A run's status in `table` (runs or pattern_runs), finished now or not yet."""
        with self._transaction():
            self._run(
                f"UPDATE {table} SET status = ?, finished_at = ? WHERE run_id = ?",
                (status, finished, run_id),
            )

    def list_runs(self) -> list[dict[str, Any]]:
        return self._listed("runs", "cells")

    def _listed(self, table: str, results: str) -> list[dict[str, Any]]:
        """Every run in `table`, oldest first, with its count of rows in `results`."""
        rows = self._run(
            "SELECT r.run_id, r.experiment, r.started_at, r.finished_at, r.status,"
            f" (SELECT count(*) FROM {results} c WHERE c.run_id = r.run_id)"
            f" FROM {table} r ORDER BY r.started_at, r.run_id"
        ).fetchall()
        return [dict(zip(RUN_COLUMNS, row, strict=True)) for row in rows]

    def latest_run_id(self) -> str | None:
        row = self._run(
            "SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1"
        ).fetchone()
        return str(row[0]) if row else None

    # --- setups and sessions --------------------------------------------------------------

    def save_setup(self, run_id: str, setup: SetupInfo) -> None:
        self._replace("setups", "name", run_id, setup.name, json.dumps(asdict(setup)))

    def save_session(self, run_id: str, session: SessionInfo) -> None:
        self._replace("sessions", "id", run_id, session.id, json.dumps(asdict(session)))

    def _replace(self, table: str, key: str, run_id: str, name: str, data: str) -> None:
        """Delete, then insert: the row moves to the end of the order it is read back in,
        so a session's last record is where its last write put it, in either database."""
        with self._transaction():
            self._run(f"DELETE FROM {table} WHERE run_id = ? AND {key} = ?", (run_id, name))
            self._run(
                f"INSERT INTO {table} (run_id, {key}, data) VALUES (?, ?, ?)",
                (run_id, name, data),
            )

    def session_ids(self, run_id: str) -> set[str]:
        rows = self._run("SELECT id FROM sessions WHERE run_id = ?", (run_id,)).fetchall()
        return {str(row[0]) for row in rows}

    # --- cells ----------------------------------------------------------------------------

    def save_cell(self, run_id: str, cell: Cell) -> None:
        """Commit one finished cell with its samples (replacing an earlier failed attempt)."""
        data = cell.to_dict(with_samples=False)
        with self._transaction():
            self._run(
                "DELETE FROM samples WHERE cell_id IN (SELECT id FROM cells WHERE run_id = ?"
                " AND setup = ? AND engine = ? AND step = ? AND threads = ? AND repeat = ?)",
                (run_id, *cell.key),
            )
            self._run(
                "DELETE FROM cells WHERE run_id = ? AND setup = ? AND engine = ? AND step = ?"
                " AND threads = ? AND repeat = ?",
                (run_id, *cell.key),
            )
            cell_id = self._insert_cell(run_id, cell, data)
            if cell.samples:
                self._insert_samples(cell_id, cell.samples)

    def finished_cell_keys(self, run_id: str) -> set[CellKey]:
        """Cells that need no re-run: measured, or a server crash/OOM (itself a result)."""
        rows = self._run(
            "SELECT setup, engine, step, threads, repeat FROM cells"
            " WHERE run_id = ? AND status != 'failed'",
            (run_id,),
        ).fetchall()
        return {(r[0], r[1], r[2], int(r[3]), int(r[4])) for r in rows}

    def setups_with_status(self, run_id: str, statuses: tuple[str, ...]) -> set[tuple[str, str]]:
        marks = ", ".join("?" for _ in statuses)
        rows = self._run(
            f"SELECT DISTINCT setup, engine FROM cells WHERE run_id = ? AND status IN ({marks})",
            (run_id, *statuses),
        ).fetchall()
        return {(str(setup), str(engine)) for setup, engine in rows}

    # --- reading a run back ---------------------------------------------------------------

    def load_run_header(self, run_id: str | None = None) -> RunResult:
        """The run's own row (experiment, its text, metadata) without setups or cells:
        what a resume checks and carries over, at the cost of one row however long the
        run."""
        run_id = run_id or self.latest_run_id()
        if run_id is None:
            raise MallocbenchError(f"the store {self.label} holds no runs yet: run an experiment")
        row = self._run(
            "SELECT run_id, experiment, base_setup, experiment_text, metadata FROM runs"
            " WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            known = ", ".join(r["run_id"] for r in self.list_runs()[-5:]) or "none"
            raise MallocbenchError(f"no run {run_id!r} in {self.label} (latest: {known})")
        return RunResult(
            run_id=row[0],
            experiment=row[1],
            base_setup=row[2],
            experiment_text=row[3],
            metadata=RunMetadata.from_dict(json.loads(row[4])),
        )

    def load_run(self, run_id: str | None = None, with_samples: bool = True) -> RunResult:
        result = self.load_run_header(run_id)
        run_id = result.run_id
        order = self.order_column
        for (data,) in self._run(
            f"SELECT data FROM setups WHERE run_id = ? ORDER BY {order}", (run_id,)
        ).fetchall():
            result.setups.append(SetupInfo(**json.loads(data)))
        for (data,) in self._run(
            f"SELECT data FROM sessions WHERE run_id = ? ORDER BY {order}", (run_id,)
        ).fetchall():
            result.sessions.append(SessionInfo(**json.loads(data)))
        samples = self._load_samples(run_id) if with_samples else {}
        for cell_id, data in self._run(
            "SELECT id, data FROM cells WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall():
            cell = Cell.from_dict(json.loads(data))
            if with_samples:
                cell.samples = samples.get(cell_id, [])
            result.cells.append(cell)
        return result

    def _load_samples(self, run_id: str) -> dict[int, list[Sample]]:
        """Every sample of the run in one query, not one round trip per cell."""
        by_cell: dict[int, list[Sample]] = {}
        rows = self._run(
            "SELECT s.cell_id, s.t, s.rss_bytes, s.vsz_bytes, s.qps, s.tps, s.latency_ms,"
            " s.extra FROM samples s JOIN cells c ON c.id = s.cell_id"
            f" WHERE c.run_id = ? ORDER BY s.cell_id, s.t, s.{self.sample_order_column}",
            (run_id,),
        )
        for cell_id, t, rss, vsz, qps, tps, latency, extra in rows:
            by_cell.setdefault(cell_id, []).append(
                Sample(
                    t=t,
                    rss_bytes=rss,
                    vsz_bytes=vsz,
                    qps=qps,
                    tps=tps,
                    latency_ms=latency,
                    extra=json.loads(extra) if extra else {},
                )
            )
        return by_cell

    # --- pattern runs ---------------------------------------------------------------------
    #
    # A pattern run's row and each run of the driver, committed as it ends; the JSON
    # columns hold the records' to_dict() (model/patterns.py), the others are for queries.

    def create_pattern_run(self, run: PatternRun) -> None:
        """The run's row, before anything ran: started now, running."""
        with self._transaction():
            self._run(
                "INSERT INTO pattern_runs (run_id, experiment, base_setup, experiment_text,"
                " model, metadata, started_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    run.run_id,
                    run.experiment,
                    run.base_setup,
                    run.experiment_text,
                    json.dumps(run.model.to_dict()),
                    json.dumps(run.metadata.to_dict()),
                    time.time(),
                ),
            )

    def save_pattern_result(self, run_id: str, result: PatternResult) -> None:
        """Commit one run of the driver (replacing an earlier attempt at the same cell)."""
        with self._transaction():
            self._run(
                "DELETE FROM pattern_results WHERE run_id = ? AND case_name = ? AND setup = ?"
                " AND threads = ? AND repeat = ?",
                (run_id, *result.key),
            )
            self._run(
                "INSERT INTO pattern_results (run_id, case_name, pattern, setup, threads,"
                " repeat, status, ops_per_sec, peak_rss_bytes, final_rss_bytes, live_bytes,"
                " peak_live_bytes, rss_per_live, peak_rss_per_live, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    result.case,
                    result.pattern,
                    result.setup,
                    result.threads,
                    result.repeat,
                    result.status,
                    *(result.metric(c) for c in RESULT_COLUMNS),
                    json.dumps(result.to_dict()),
                ),
            )

    def finish_pattern_run(self, run_id: str, status: str) -> None:
        self._set_status("pattern_runs", run_id, status, time.time())

    def reopen_pattern_run(self, run_id: str) -> None:
        self._set_status("pattern_runs", run_id, "running", None)

    def finished_pattern_keys(self, run_id: str) -> set[PatternKey]:
        """Cells that need no re-run: measured, or a driver crash (itself a result)."""
        rows = self._run(
            "SELECT case_name, setup, threads, repeat FROM pattern_results"
            " WHERE run_id = ? AND status != 'failed'",
            (run_id,),
        ).fetchall()
        return {(r[0], r[1], int(r[2]), int(r[3])) for r in rows}

    def latest_pattern_run(self, experiment: str | None = None) -> str | None:
        """The newest pattern run (of `experiment`, when given), or None."""
        if "pattern_runs" not in self._tables():
            return None
        where, params = (
            ("WHERE experiment = ?", (experiment,)) if experiment is not None else ("", ())
        )
        row = self._run(
            f"SELECT run_id FROM pattern_runs {where} ORDER BY started_at DESC LIMIT 1", params
        ).fetchone()
        return str(row[0]) if row else None

    def list_pattern_runs(self) -> list[dict[str, Any]]:
        """Every pattern run, oldest first, as list_runs lists runs (its results as cells)."""
        if "pattern_runs" not in self._tables():
            return []
        return self._listed("pattern_runs", "pattern_results")

    def load_pattern_run(self, run_id: str | None = None) -> PatternRun:
        """A stored pattern run (the latest when no `run_id`) with every result."""
        if "pattern_runs" not in self._tables():
            raise MallocbenchError(
                f"{self.label} holds no pattern runs: run `mallocbench patterns` first"
            )
        run_id = run_id or self.latest_pattern_run()
        if run_id is None:
            raise MallocbenchError(f"{self.label} holds no pattern runs yet")
        row = self._run(
            "SELECT run_id, experiment, base_setup, experiment_text, model, metadata, status,"
            " started_at, finished_at FROM pattern_runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise MallocbenchError(f"no pattern run {run_id!r} in {self.label}")
        # `data` alone, not the columns: it is the whole record (the columns are for queries)
        results = self._run(
            "SELECT data FROM pattern_results WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall()
        return PatternRun(
            run_id=row[0],
            experiment=row[1],
            base_setup=row[2],
            experiment_text=row[3],
            model=RunModel.from_dict(json.loads(row[4])),
            metadata=PatternRunMetadata.from_dict(json.loads(row[5])),
            status=row[6],
            results=[PatternResult.from_dict(json.loads(r[0])) for r in results],
            started_at=row[7],
            finished_at=row[8],
        )

    def save_pattern_run(self, run: PatternRun) -> None:
        """A whole pattern run at once, its times and status as they were: `store copy`."""
        self.create_pattern_run(run)
        for result in run.results:
            self.save_pattern_result(run.run_id, result)
        with self._transaction():
            self._run(
                "UPDATE pattern_runs SET started_at = coalesce(?, started_at), finished_at = ?,"
                " status = ? WHERE run_id = ?",
                (run.started_at, run.finished_at, run.status, run.run_id),
            )

    def delete_pattern_run(self, run_id: str) -> None:
        with self._transaction():
            self._run("DELETE FROM pattern_results WHERE run_id = ?", (run_id,))
            self._run("DELETE FROM pattern_runs WHERE run_id = ?", (run_id,))

    def pattern_run_exists(self, run_id: str) -> bool:
        if "pattern_runs" not in self._tables():
            return False
        row = self._run("SELECT 1 FROM pattern_runs WHERE run_id = ?", (run_id,)).fetchone()
        return row is not None
