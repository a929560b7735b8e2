"""`record = true` in an experiment: each measured cell's server calls land in a trace in
the run directory, tied to the cell in results.json and the store, and replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_runner import run_cli, small_experiment
from mallocbench.errors import MallocbenchError
from mallocbench.patterns.experiment import make_setup
from mallocbench.replay import runner
from mallocbench.replay import trace as tracemod
from mallocbench.run.loading import from_dict
from mallocbench.store import open_store

BASE = {
    "engines": ["innodb"],
    "steps": ["point-query"],
    "threads": [1],
    "dataset": {"tables": 1, "rows": 1000, "cache": "32M"},
}


def test_record_is_a_setup_or_experiment_option() -> None:
    setups = [{"name": "a", "allocator": "glibc"}, {"name": "b", "allocator": "glibc"}]
    plain = from_dict({**BASE, "setup": setups})
    assert [s.record for s in plain.setups] == [False, False]
    every = from_dict(
        {**BASE, "record": True, "setup": [setups[0], {**setups[1], "record": False}]}
    )
    assert [s.record for s in every.setups] == [True, False]


def test_a_bad_record_value_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(MallocbenchError, match=r"setup a\.record = 'yes' is not true or false"):
        from_dict({**BASE, "setup": [{"name": "a", "allocator": "glibc", "record": "yes"}]})
    path = small_experiment(tmp_path)
    path.write_text("record = 1\n" + path.read_text())
    out = run_cli("run", str(path), "--dry-run")
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "e.toml:1: record = 1 is not true or false" in lines[0], out.stderr


@pytest.mark.server
def test_a_recording_setup_leaves_a_trace_per_cell_that_replays(tmp_path: Path) -> None:
    # jemalloc: the shim must sit in front of the setup's allocator, not replace it.
    path = small_experiment(tmp_path, allocator="jemalloc", setup="je", setup_extra="record = true")
    text = path.read_text().replace("step = 1", "step = 3")
    path.write_text(text.replace('name = "e"', 'name = "e"\nrepeats = 2'))
    out_dir = tmp_path / "out"
    done = run_cli("run", str(path), "--out", str(out_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    cells = json.loads((out_dir / "results.json").read_text())["cells"]
    assert len(cells) == 2 and all(c["status"] == "ok" for c in cells)
    traces = [c["trace"] for c in cells]
    assert len(set(traces)) == 2 and all(t.startswith("traces/") for t in traces), traces
    store = open_store(out_dir / "results.sqlite", readonly=True)
    try:
        stored = store.load_run(with_samples=False)
    finally:
        store.close()
    assert sorted(c.trace or "" for c in stored.cells) == sorted(traces)
    info = tracemod.check(out_dir / traces[0])
    d = info.data
    assert info.complete, info.status
    assert d["events"] > 1000 and d["threads"] >= 2, d
    assert d["info"]["allocator"] == "jemalloc" and "jemalloc" in d["info"]["malloc_library"]
    assert d["info"]["server_version"]  # the build's, for a later comparison's warning
    run = runner.run_once(
        make_setup("t", "glibc", "glibc"), out_dir / traces[0], "none", 1.0, 0, 300
    )
    assert run.status == "ok", run.error
    assert run.data["malloc_failures"] == 0 and run.data["peak_heap_rss"] > 0
    assert run.data["samples"][-1][2] == d["final_live"]
