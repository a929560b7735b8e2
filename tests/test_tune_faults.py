"""`tune` when its studies or its disk fail, and when a Ctrl-C cuts a trial short: one
line for a damaged or truncated tune.db (exit 2, as a damaged results store) or a full
--out (exit 3), every finished trial kept; a trial the signal cut short is no count of
--trials and is measured on --resume."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cli_runner import run_cli
from conftest import IntegrityFigures
from mallocbench.allocators.base import Allocator
from mallocbench.replay import trace as tracemod
from mallocbench.tune import search
from mallocbench.tune.evaluate import EvaluationFailed
from test_run_integrity import fill, one_error_line, small_filesystem
from test_tune import GLIBC, OBJECTIVES, SPACE, Synthetic, new_study, stored_settings, tiny_trace

__all__ = ["tiny_trace"]  # a fixture, used by name

QUICK = ["--allocators", "glibc", "--repeats", "2", "--timing", "none", "--seed", "3"]


@pytest.fixture(scope="module")
def tuned(tiny_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An --out holding a finished two-trial tune."""
    out = tmp_path_factory.mktemp("tuned") / "out"
    done = run_cli("tune", str(tiny_trace), *QUICK, "--trials", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def spoil(db: Path, how: str) -> None:
    data = db.read_bytes()
    if how == "truncated":
        db.write_bytes(data[: len(data) // 3])
    elif how == "damaged":  # the first page (the schema) kept, the rest noise
        db.write_bytes(data[:4096] + random.Random(46).randbytes(len(data) - 4096))
    else:
        db.write_bytes(random.Random(46).randbytes(len(data)))


@pytest.mark.parametrize("resume", [False, True], ids=["new", "resume"])
@pytest.mark.parametrize("how", ["damaged", "truncated", "noise"])
def test_a_damaged_tune_db_is_one_line(
    tiny_trace: Path,
    tuned: Path,
    tmp_path: Path,
    integrity_figures: IntegrityFigures,
    how: str,
    resume: bool,
) -> None:
    out = tmp_path / "out"
    shutil.copytree(tuned, out)
    spoil(out / "tune.db", how)
    again = ["--resume"] if resume else []
    result = run_cli("tune", str(tiny_trace), *QUICK, "--trials", "3", "--out", str(out), *again)
    # The results store's status and line (test_run_integrity): one fault, one answer.
    line = one_error_line(result, integrity_figures, 2)
    assert line.startswith(
        f"mallocbench: error: the tune's trial store {out / 'tune.db'} is damaged ("
    )
    assert line.endswith(
        "): restore it from a copy and --resume, or move it aside to start the tune again; "
        "the sqlite3 shell's .recover may save what is readable"
    )


def trials_in(out: Path) -> int:
    study = search.open_study(out, "glibc", OBJECTIVES, [], stored_settings(out))
    return len(search.finished_trials(study))


def test_a_full_out_is_one_line_and_keeps_every_trial(
    tiny_trace: Path, tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    trace = str(tiny_trace)
    # 1 MB: room for the studies and tune.json, not for tune.html (plotly.js, 4.8 MB).
    with small_filesystem(tmp_path / "fs", "1M") as fs:
        filler = fill(fs)
        full = run_cli("tune", trace, *QUICK, "--trials", "2", "--out", str(fs / "first"))
        line = one_error_line(full, integrity_figures, 3)
        assert f"no space left for the tune's studies {fs / 'first' / 'tune.db'}" in line
        filler.unlink()
        out = fs / "out"
        reports = run_cli("tune", trace, *QUICK, "--trials", "3", "--out", str(out))
        line = one_error_line(reports, integrity_figures, 3)
        assert f"cannot write into {out}: No space left on device" in line
        assert "--resume" in line and not list(out.glob(".*.tmp"))
        integrity_figures.add("cells lost", 3 - trials_in(out))
        assert trials_in(out) == 3
        # The disk fills up under the search itself: the next trial cannot be told.
        searching = subprocess.Popen(
            [sys.executable, "-m", "mallocbench.cli", "tune", trace, *QUICK, "--trials", "60",
             "--out", str(fs / "mid")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert searching.stderr is not None
        seen = [next(t for t in searching.stderr if "glibc trial 2 done" in t)]
        fill(fs)
        _, rest = searching.communicate(timeout=300)
        mid = subprocess.CompletedProcess(searching.args, searching.returncode, "", rest)
        line = one_error_line(mid, integrity_figures, 3)
        assert f"the tune's studies {fs / 'mid' / 'tune.db'} (" in line, seen


def replayer_of(pid: int) -> bool:
    """Whether the tune `pid` has a replay under way (an mbreplay child)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return any(Path(f"/proc/{c}/comm").read_text().strip() == "mbreplay" for c in children)


def test_a_ctrl_c_at_the_terminal_puts_the_cut_trial_back(
    tiny_trace: Path, tmp_path: Path, integrity_figures: IntegrityFigures
) -> None:
    out = tmp_path / "out"
    # A pace at which a replay lasts about two seconds: the trace's span is the program's
    # under the recording host's load (tens of ms alone, a second on a loaded CI host,
    # where a fixed 1/50 made each replay a minute and the test over five).
    span = float(tracemod.check(tiny_trace).data.get("duration_s") or 0.04)
    speed = f"{max(span, 0.001) / 2.0:.4g}"
    slow = ["--allocators", "glibc", "--repeats", "2", "--timing", "recorded", "--speed",
            speed, "--seed", "3", "--trials", "2", "--out", str(out)]  # fmt: skip
    command = [sys.executable, "-m", "mallocbench.cli", "tune", str(tiny_trace), *slow]
    # Its own session, as a shell's job: the terminal's Ctrl-C reaches the whole group.
    tune = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert tune.stderr is not None
    seen = [next(t for t in tune.stderr if "glibc trial 1 done" in t)]
    deadline = time.monotonic() + 60
    while not replayer_of(tune.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(tune.pid, signal.SIGINT)
    integrity_figures.add("faults injected")
    _, rest = tune.communicate(timeout=120)
    stderr = "".join(seen) + rest
    integrity_figures.check_output(stderr)
    assert tune.returncode == 130, stderr
    assert "the trial under way is kept if it ends, measured again by --resume if" in stderr
    assert "glibc trial 2 cut short by the stop: --resume measures it again" in stderr
    assert trials_in(out) == 1  # the default; the cut trial is no count
    resumed = run_cli("tune", str(tiny_trace), *slow, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    study = search.open_study(out, "glibc", OBJECTIVES, [], stored_settings(out))
    cut = [t for t in study.get_trials() if t.user_attrs.get(search.INTERRUPTED_ATTR)]
    assert len(cut) == 1 and cut[0].user_attrs["error"] == "killed by SIGINT"
    measured = search.observed(study, [], [])
    assert len(measured) == 2  # --trials 2: the default and the cut trial's point, again
    assert measured[1].setting == cut[0].user_attrs["setting"]


class CutAt(Synthetic):
    """A stop asked for during the `at`-th evaluation, whose replayer the signal killed."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.stopping = False

    def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        if self.calls + 1 == self.at:
            self.calls += 1
            self.stopping = True
            raise EvaluationFailed("killed by SIGINT")
        return super().__call__(allocator, setting)


def test_a_default_cut_short_is_the_resume_s_first_trial(tmp_path: Path) -> None:
    cut = CutAt(1)
    stop = search.Stop(4, None, lambda: cut.stopping)
    assert search.search(new_study(tmp_path), GLIBC, SPACE, OBJECTIVES, cut, stop) == 1
    resumed = new_study(tmp_path)
    search.search(resumed, GLIBC, SPACE, OBJECTIVES, Synthetic(), search.Stop(4, None))
    measured: list[Any] = search.observed(resumed, SPACE, [])
    # Without the default measured, no point could be judged against it.
    assert [t.default for t in measured] == [True, False, False, False]
    assert len(search.finished_trials(resumed)) == 4
