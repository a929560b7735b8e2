"""What readers say of runs that are not whole: a results.json value of the wrong type
(one line naming the field), a run that did not finish (how much of it, how to go on),
and a replay whose disk fills under --out (what a replay can do, what it measured)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cli_runner import run_cli
from conftest import IntegrityFigures
from mallocbench.model.results import RunResult
from mallocbench.store import Store
from test_run_integrity import FIXTURE, fill, one_error_line, small_filesystem
from test_tune import tiny_trace

__all__ = ["tiny_trace"]  # a fixture, used by name


def spoiled(tmp_path: Path, where: tuple[str | int, ...], value: Any) -> Path:
    """The fixture's results.json with the value at `where` replaced."""
    data = json.loads(FIXTURE.read_text())
    holder = data
    for key in where[:-1]:
        holder = holder[key]
    holder[where[-1]] = value
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return path


WRONG = [
    (("cells", 0, "qps"), "fast", "cells[0].qps is 'fast', not a number or null"),
    (("cells", 1, "threads"), "8", "cells[1].threads is '8', not a whole number"),
    (("cells", 0, "metrics"), [1], "cells[0].metrics is [1], not an object"),
    (("cells", 0, "samples"), [{"t": "now"}], "cells[0].samples[0].t is 'now', not a number"),
    # a metric without a number: the report's mean of it was a TypeError
    (("cells", 0, "metrics"), {"stalled_s": None},
     "cells[0].metrics.stalled_s is None, not a number"),
    (("setups", 1, "knobs"), {"MALLOC_CONF": 5}, "setups[1].knobs.MALLOC_CONF is 5, not a string"),
    (("base_setup",), None, "base_setup is None, not a string"),
]  # fmt: skip
READERS = [("report", "{bad}"), ("compare", "{good}", "{bad}"), ("recommend", "{bad}")]


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r[0])
@pytest.mark.parametrize(("where", "value", "said"), WRONG, ids=lambda w: str(w)[:24])
def test_a_value_of_the_wrong_type_is_one_line_naming_the_field(
    tmp_path: Path,
    integrity_figures: IntegrityFigures,
    reader: tuple[str, ...],
    where: tuple[str | int, ...],
    value: Any,
    said: str,
) -> None:
    bad = spoiled(tmp_path, where, value)
    result = run_cli(*(arg.format(bad=bad, good=FIXTURE) for arg in reader))
    line = one_error_line(result, integrity_figures, 2)
    assert line.startswith(f"mallocbench: error: {bad}: {said}: correct that value"), line


def unfinished_store(out: Path, status: str, cells: int) -> RunResult:
    """The fixture's run with `cells` of its cells, left in `status` with nobody holding
    it: what a harness killed mid-run leaves ("running"), or one stopped ("interrupted")."""
    result = RunResult.from_dict(json.loads(FIXTURE.read_text()))
    planned = len(result.cells)
    result.cells = result.cells[:cells]
    result.metadata.experiment_file = "/work/small.toml"
    store = Store(out / "results.sqlite")
    try:
        store.save_run(result)
        store.set_status(result.run_id, status)
    finally:
        store.close()
    assert planned > cells
    return result


@pytest.mark.parametrize(("status", "said"), [("running", "died"), ("interrupted", "interrupted")])
def test_report_on_a_run_that_did_not_finish_says_how_far_it_got(
    tmp_path: Path, status: str, said: str
) -> None:
    result = unfinished_store(tmp_path, status, 3)
    planned = len(RunResult.from_dict(json.loads(FIXTURE.read_text())).cells)
    shown = run_cli("report", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert (
        f"run {result.run_id} did not finish ({said}): 3 of about {planned} cells measured; "
        "MISSING cells were not measured: continue with "
        f"`mallocbench run /work/small.toml --out {tmp_path} --resume`"
    ) in " ".join(shown.stderr.split())


def replays_committed(store: Path) -> bool:
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            return any('"runs": [{' in row[0] for row in db.execute("SELECT metadata FROM runs"))
        finally:
            db.close()
    except sqlite3.Error:
        return False  # not created yet


def test_a_full_disk_under_replay_out_says_what_a_replay_can_do(
    tiny_trace: Path, tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    with small_filesystem(tmp_path / "fs", "1M") as fs:
        filler = fill(fs)
        full = run_cli("replay", str(tiny_trace), "--timing", "none", "--out", str(fs / "a"))
        line = one_error_line(full, integrity_figures, 3)
        assert f"no space left for the results store {fs / 'a' / 'results.sqlite'}" in line
        assert "once the disk has room, run the missing replays with `mallocbench replay " in line
        assert "run --resume" not in line
        filler.unlink()
        # At 1/50 of the recorded pace each replay lasts about two seconds: the disk
        # fills once the first is in the store, under the second.
        out = fs / "b"
        replay = subprocess.Popen(
            [sys.executable, "-m", "mallocbench.cli", "replay", str(tiny_trace), "--repeats",
             "3", "--timing", "recorded", "--speed", "0.02", "--out", str(out)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not replays_committed(out / "results.sqlite") and time.monotonic() < deadline:
            time.sleep(0.05)
        fill(fs)
        stdout, stderr = replay.communicate(timeout=300)
        midway = subprocess.CompletedProcess(replay.args, replay.returncode, stdout, stderr)
        line = one_error_line(midway, integrity_figures, 3)
        assert "`mallocbench replay --resume replay-kp-" in line and "`: the " in line
        measured = int(line.split(": the ")[1].split()[0])
        assert measured >= 1 and f" {measured}/{measured} " in stdout  # printed, not lost
