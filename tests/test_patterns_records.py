"""Pattern runs as dataclasses: stores written as plain dicts still load, unchanged."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mallocbench.analysis.patterns import analyze_patterns
from mallocbench.errors import MallocbenchError
from mallocbench.model.patterns import RESULT_COLUMNS, PatternResult, PatternRun
from mallocbench.patterns import experiment as pexp
from mallocbench.patterns import runner
from mallocbench.patterns.driver import DriverRun
from mallocbench.report import formats
from mallocbench.store import load_pattern_run, open_store
from mallocbench.store.sqlite import Store

# The tables as the dict-based code created them, copied here (not imported) so the test
# keeps pinning that format if store/schema.py ever changes.
LEGACY_SCHEMA = """
CREATE TABLE pattern_runs (
    run_id TEXT PRIMARY KEY, experiment TEXT NOT NULL, base_setup TEXT NOT NULL,
    experiment_text TEXT NOT NULL, model TEXT NOT NULL, metadata TEXT NOT NULL,
    started_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL DEFAULT 'running'
);
CREATE TABLE pattern_results (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES pattern_runs(run_id),
    case_name TEXT NOT NULL, pattern TEXT NOT NULL, setup TEXT NOT NULL,
    threads INTEGER NOT NULL, repeat INTEGER NOT NULL, status TEXT NOT NULL,
    ops_per_sec REAL, peak_rss_bytes INTEGER, final_rss_bytes INTEGER, live_bytes INTEGER,
    peak_live_bytes INTEGER, rss_per_live REAL, peak_rss_per_live REAL, data TEXT NOT NULL,
    UNIQUE (run_id, case_name, setup, threads, repeat)
);
"""

RUN_ID = "p20250101-120000-abcd"

MODEL: dict[str, Any] = {
    "name": "legacy",
    "base": "glibc",
    "repeats": 2,
    "setups": [
        {
            "name": "glibc",
            "allocator": "glibc",
            "allocator_version": "2.36",
            "allocator_library": "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "knobs": {},
            "options": {},
            "description": "",
        },
        {
            "name": "glibc-a1",
            "allocator": "glibc",
            "allocator_version": None,
            "allocator_library": None,
            "knobs": {"MALLOC_ARENA_MAX": "1"},
            "options": {"init": "calloc"},
            "description": "one arena",
        },
    ],
    "cases": [
        {
            "name": "oltp",
            "pattern": "oltp",
            "options": {"allocs": 5},
            "threads": [1],
            "setups": ["glibc", "glibc-a1"],
            "base": "glibc",
            "seconds": 0.5,
            "ops": None,
            "seed": 1,
        }
    ],
}

METADATA: dict[str, Any] = {
    "host": "db1",
    "cpus": 8,
    "kernel": "6.1.0",
    "glibc": "2.36",
    "python": "3.11.2",
    "driver": "/x/native/build/mbpatterns",
    "command": ["mallocbench", "patterns", "-p", "oltp"],
    "started": "2025-01-01 12:00:00 +0000",
}


def legacy_record(setup: str, repeat: int, ops: float | None, error: str | None = None) -> dict:
    """A result dict as runner.result_record wrote it, key for key and in its order."""
    driver = {} if ops is None else {"ops_per_sec": ops, "malloc_library": "libc.so.6"}
    record: dict[str, Any] = {
        "case": "oltp",
        "pattern": "oltp",
        "setup": setup,
        "threads": 1,
        "repeat": repeat,
        "status": "ok" if error is None else "crashed",
        "error": error,
        "allocator": "glibc",
        "allocator_library": driver.get("malloc_library"),
        "knobs": {"MALLOC_ARENA_MAX": "1"} if setup == "glibc-a1" else {},
        "options": {"allocs": 5},
        "command": ["/x/mbpatterns", "oltp", "--threads", "1"],
        "finished_at": 1735732800.5 + repeat,
    }
    metrics = {
        "ops_per_sec": ops,
        "peak_rss_bytes": None if ops is None else 3_000_000 + repeat,
        "final_rss_bytes": None if ops is None else 2_900_000,
        "live_bytes": None if ops is None else 600_000,
        "peak_live_bytes": None if ops is None else 650_000,
        "rss_per_live": None if ops is None else 4.5 + repeat / 10,
        "peak_rss_per_live": None if ops is None else 4.4,
        "baseline_rss_bytes": None if ops is None else 1_000_000,
        "peak_vsz_bytes": None if ops is None else 9_000_000,
    }
    record.update(metrics)
    record["driver"] = driver
    return record


RECORDS = [
    legacy_record("glibc", 0, 250_000.0),
    legacy_record("glibc-a1", 0, 240_000.0),
    legacy_record("glibc-a1", 1, None, error="killed by SIGSEGV: x"),
    legacy_record("glibc", 1, 260_000.0),
]


@pytest.fixture
def legacy_store(tmp_path: Path) -> Path:
    """A store written through raw sqlite with the dicts the old code stored."""
    path = tmp_path / "results.sqlite"
    Store(str(path)).close()  # the server runs' tables, which every results store has
    db = sqlite3.connect(path)
    with db:
        # and the pattern tables as the old code made them, not as the store makes them now
        db.executescript("DROP TABLE pattern_results; DROP TABLE pattern_runs;")
        db.executescript(LEGACY_SCHEMA)
        db.execute(
            "INSERT INTO pattern_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (RUN_ID, "legacy", "glibc", "# toml", json.dumps(MODEL), json.dumps(METADATA))
            + (1735732800.0, 1735732810.0, "finished"),
        )
        for r in RECORDS:
            metrics = [r[c] for c in RESULT_COLUMNS]
            db.execute(
                "INSERT INTO pattern_results (run_id, case_name, pattern, setup, threads,"
                " repeat, status, ops_per_sec, peak_rss_bytes, final_rss_bytes, live_bytes,"
                " peak_live_bytes, rss_per_live, peak_rss_per_live, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (RUN_ID, r["case"], r["pattern"], r["setup"], r["threads"], r["repeat"])
                + (r["status"], *metrics, json.dumps(r)),
            )
    db.close()
    return path


def test_a_store_written_as_dicts_loads_as_dataclasses(legacy_store: Path) -> None:
    run = load_pattern_run(legacy_store, None)
    assert isinstance(run, PatternRun)
    assert (run.run_id, run.status, run.experiment_text) == (RUN_ID, "finished", "# toml")
    assert (run.started_at, run.finished_at) == (1735732800.0, 1735732810.0)
    assert run.model.setups[1].knobs == {"MALLOC_ARENA_MAX": "1"}
    assert run.model.cases[0].threads == [1] and run.metadata.cpus == 8
    crashed = run.results[2]
    assert crashed.status == "crashed" and crashed.ops_per_sec is None and crashed.driver == {}
    assert [r.key for r in run.results][0] == ("oltp", "glibc", 1, 0)


def test_the_stored_json_shape_round_trips_exactly(legacy_store: Path) -> None:
    """to_dict() gives back what was stored, key order included: exports stay identical."""
    run = load_pattern_run(legacy_store, RUN_ID)
    document = run.to_dict()
    assert json.dumps(document["model"]) == json.dumps(MODEL)
    assert json.dumps(document["metadata"]) == json.dumps(METADATA)
    assert [json.dumps(r) for r in document["results"]] == [json.dumps(r) for r in RECORDS]
    assert list(document) == [
        "run_id",
        "experiment",
        "base_setup",
        "experiment_text",
        "model",
        "metadata",
        "status",
        "results",
    ]
    assert PatternRun.from_dict(document).to_dict() == document


def test_a_legacy_run_reports_and_exports(legacy_store: Path, tmp_path: Path) -> None:
    run = load_pattern_run(legacy_store, None)
    analysis = analyze_patterns(run)
    rows = analysis.rows
    assert [(r.setup, r.runs, r.failed) for r in rows] == [("glibc", 2, 0), ("glibc-a1", 1, 1)]
    assert rows[1].error == "killed by SIGSEGV: x"
    json_path, _, md_path = formats.write_pattern_reports(analysis, tmp_path / "out")
    exported = json.loads(json_path.read_text())
    assert exported["results"] == RECORDS and exported["model"] == MODEL
    text = md_path.read_text()
    assert "Run `p20250101-120000-abcd` on db1 (8 CPUs, kernel 6.1.0, glibc 2.36)" in text
    assert "| glibc-a1 | glibc | - | `MALLOC_ARENA_MAX=1` | `init=calloc` |" in text


def test_resume_reads_a_legacy_model(legacy_store: Path) -> None:
    """The stored model compares with the experiment key by key, as before."""
    store = open_store(legacy_store)
    try:
        latest = store.latest_pattern_run("legacy")
        assert latest == RUN_ID and store.load_pattern_run(latest).model.to_dict() == MODEL
    finally:
        store.close()
    doc = {"setups": {"glibc": {"allocator": "glibc"}}, "patterns": [{"pattern": "oltp"}]}
    experiment = pexp.from_dict(doc, "t")
    experiment.name, experiment.repeats = "legacy", 2
    with pytest.raises(MallocbenchError, match="the experiment's setups, cases changed"):
        runner.resume_point(experiment, legacy_store)


def test_a_driver_run_becomes_the_legacy_record_shape() -> None:
    doc = {"setups": {"glibc": {"allocator": "glibc"}}, "patterns": [{"pattern": "oltp"}]}
    planned = pexp.from_dict(doc, "t").plan()[0]
    data = {"ops_per_sec": 1.5, "rss_per_live": None, "malloc_library": "/lib/libc.so.6"}
    result = runner.result_record(planned, DriverRun("ok", data=data, command=["mb", "oltp"]))
    record = result.to_dict()
    assert list(record) == list(RECORDS[0])
    assert record["driver"] is data and record["allocator_library"] == "/lib/libc.so.6"
    assert record["ops_per_sec"] == 1.5 and record["peak_vsz_bytes"] is None
    assert PatternResult.from_dict(json.loads(json.dumps(record))) == result
    with pytest.raises(KeyError):
        result.metric("driver")
