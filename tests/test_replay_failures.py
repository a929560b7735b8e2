"""Replays that fail, against the real replayer: an allocator that aborts mid-trace makes
every replay under it die of SIGABRT. Some failed replays are a run with failed cells
(named, the others' results kept, exit 0); all of them failed is no result, an abort."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import native_programs
from mallocbench import exitcodes
from test_tune import record_tiny_trace


@pytest.fixture(scope="module")
def aborting(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The known pattern's trace, and an allocator that aborts on its 2001st call."""
    workdir = tmp_path_factory.mktemp("aborting")
    return record_tiny_trace(workdir), native_programs.build_library("aborting_alloc", workdir)


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", "replay", *args, "--timing", "none"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


def test_a_replay_whose_every_replay_crashed_is_an_abort(
    aborting: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, library = aborting
    out = tmp_path / "out"
    proc = replay(str(trace), "--allocators", str(library), "--repeats", "2", "--out", str(out))
    assert proc.returncode == exitcodes.ABORTED, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mallocbench: error")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(
        "mallocbench: error: every replay failed (2 of 2), nothing was measured: "
        "aborting_alloc: killed by SIGABRT"
    ), errors
    assert str(out) in errors[0] and "Traceback" not in proc.stderr
    # The failures themselves are kept: the report names each, with where it died.
    report = (out / "report.md").read_text()
    assert "aborting_alloc: 2 of 2 replays failed, 2 killed by a signal" in report


def test_replays_that_crashed_beside_good_ones_are_named_and_the_rest_kept(
    aborting: tuple[Path, Path], tmp_path: Path
) -> None:
    trace, library = aborting
    out = tmp_path / "out"
    proc = replay(
        str(trace), "--allocators", f"glibc,{library}", "--repeats", "1", "--out", str(out)
    )
    assert proc.returncode == exitcodes.OK, proc.stderr
    named = "aborting_alloc: 1 of 1 replays failed, 1 killed by a signal"
    assert named in proc.stdout and "mallocbench: error" not in proc.stderr
    assert named in (out / "report.md").read_text()
    runs = json.loads((out / "results.json").read_text())["metadata"]["replay"]["runs"]
    statuses = sorted((r["setup"], r["status"]) for r in runs)
    assert statuses == [("aborting_alloc", "crashed"), ("glibc", "ok")]
