"""Pattern runs in the results store, beside the server runs (own tables, same file).

Each driver run is committed as it finishes, so an interrupted experiment keeps what it
measured.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.store.sqlite import Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS pattern_runs (
    run_id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    base_setup TEXT NOT NULL,
    experiment_text TEXT NOT NULL,
    model TEXT NOT NULL,
    metadata TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    status TEXT NOT NULL DEFAULT 'running'
);
CREATE TABLE IF NOT EXISTS pattern_results (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES pattern_runs(run_id),
    case_name TEXT NOT NULL,
    pattern TEXT NOT NULL,
    setup TEXT NOT NULL,
    threads INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    status TEXT NOT NULL,
    ops_per_sec REAL,
    peak_rss_bytes INTEGER,
    final_rss_bytes INTEGER,
    live_bytes INTEGER,
    peak_live_bytes INTEGER,
    rss_per_live REAL,
    peak_rss_per_live REAL,
    data TEXT NOT NULL,
    UNIQUE (run_id, case_name, setup, threads, repeat)
);
"""

RESULT_COLUMNS = (
    "ops_per_sec",
    "peak_rss_bytes",
    "final_rss_bytes",
    "live_bytes",
    "peak_live_bytes",
    "rss_per_live",
    "peak_rss_per_live",
)


def open_pattern_store(path: str, readonly: bool = False) -> Store:
    """The store with its pattern tables; `readonly` (for reports) creates and changes nothing."""
    if readonly:
        store = Store(path, readonly=True)
        tables = {
            row[0]
            for row in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not {"pattern_runs", "pattern_results"} <= tables:
            store.close()
            raise MallocbenchError(
                f"{path} holds no pattern runs: run `mallocbench patterns` first"
            )
        return store
    store = Store(path)
    store.db.executescript(SCHEMA)
    store.db.commit()
    return store


def create_run(
    store: Store,
    run_id: str,
    experiment: str,
    base: str,
    text: str,
    model: dict[str, Any],
    metadata: dict[str, Any],
) -> None:
    with store.db:
        store.db.execute(
            "INSERT INTO pattern_runs (run_id, experiment, base_setup, experiment_text, model,"
            " metadata, started_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run_id, experiment, base, text, json.dumps(model), json.dumps(metadata), time.time()),
        )


def save_result(store: Store, run_id: str, result: dict[str, Any]) -> None:
    """Commit one run of the driver (replacing an earlier attempt at the same cell)."""
    with store.db:
        store.db.execute(
            "INSERT OR REPLACE INTO pattern_results (run_id, case_name, pattern, setup, threads,"
            " repeat, status, ops_per_sec, peak_rss_bytes, final_rss_bytes, live_bytes,"
            " peak_live_bytes, rss_per_live, peak_rss_per_live, data)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                result["case"],
                result["pattern"],
                result["setup"],
                result["threads"],
                result["repeat"],
                result["status"],
                *(result.get(c) for c in RESULT_COLUMNS),
                json.dumps(result),
            ),
        )


def finish_run(store: Store, run_id: str, status: str) -> None:
    with store.db:
        store.db.execute(
            "UPDATE pattern_runs SET finished_at = ?, status = ? WHERE run_id = ?",
            (time.time(), status, run_id),
        )


def load_results(store: Store, run_id: str) -> list[dict[str, Any]]:
    rows = store.db.execute(
        "SELECT data FROM pattern_results WHERE run_id = ? ORDER BY id", (run_id,)
    ).fetchall()
    return [json.loads(r[0]) for r in rows]


def finished_keys(store: Store, run_id: str) -> set[tuple[str, str, int, int]]:
    """Cells that need no re-run: measured, or a driver crash (itself a result)."""
    rows = store.db.execute(
        "SELECT case_name, setup, threads, repeat FROM pattern_results"
        " WHERE run_id = ? AND status != 'failed'",
        (run_id,),
    ).fetchall()
    return {(r[0], r[1], int(r[2]), int(r[3])) for r in rows}


def latest_run_of(store: Store, experiment: str) -> tuple[str, dict[str, Any]] | None:
    """The newest run of `experiment` with the model it ran, or None."""
    row = store.db.execute(
        "SELECT run_id, model FROM pattern_runs WHERE experiment = ?"
        " ORDER BY started_at DESC LIMIT 1",
        (experiment,),
    ).fetchone()
    return (row[0], json.loads(row[1])) if row else None


def reopen_run(store: Store, run_id: str) -> None:
    with store.db:
        store.db.execute(
            "UPDATE pattern_runs SET finished_at = NULL, status = 'running' WHERE run_id = ?",
            (run_id,),
        )


def latest_run_id(store: Store) -> str | None:
    row = store.db.execute(
        "SELECT run_id FROM pattern_runs ORDER BY started_at DESC LIMIT 1"
    ).fetchone()
    return row[0] if row else None


def load_run(store: Store, run_id: str) -> dict[str, Any] | None:
    row = store.db.execute(
        "SELECT run_id, experiment, base_setup, experiment_text, model, metadata, status"
        " FROM pattern_runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    return {
        "run_id": row[0],
        "experiment": row[1],
        "base_setup": row[2],
        "experiment_text": row[3],
        "model": json.loads(row[4]),
        "metadata": json.loads(row[5]),
        "status": row[6],
        "results": load_results(store, run_id),
    }
