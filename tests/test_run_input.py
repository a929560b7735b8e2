"""What a run's input may ask for, refused at once and in one line (issue 46).

Every count an experiment file or `--set` can set has a bound that the message names;
`--dry-run` refuses what the run would; click's own usage errors are one line too.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from cli_runner import run_cli, small_experiment
from mallocbench import allocators
from mallocbench.cluster import experiment_from_run
from mallocbench.dialect import MAX_NAME, MAX_REPEATS
from mallocbench.experiment import MAX_CELLS, load, plan, planned_cells
from mallocbench.results import RunResult
from test_input_validation import assert_refused


def with_repeats(directory: Path, repeats: int) -> Path:
    path = small_experiment(directory)
    path.write_text(f"repeats = {repeats}\n" + path.read_text())
    return path


def test_a_hundred_million_repeats_are_refused_at_once(
    tmp_path: Path, integrity_figures: Any
) -> None:
    path = with_repeats(tmp_path, 100000000)
    ways = (
        ("run", str(path), "--dry-run"),
        ("run", str(path), "--out", str(tmp_path / "o")),
        ("run", str(path), "--dry-run", "--set", "repeats=2", "--set", "repeats=100000000"),
    )
    for args in ways:
        began = time.monotonic()
        # Before the fix planning alone ran for minutes and grew without end.
        line = assert_refused(run_cli(*args, timeout=120), integrity_figures, "repeats")
        assert time.monotonic() - began < 60
        assert f"1-{MAX_REPEATS:,}" in line and "100000000" in line
    assert not (tmp_path / "o").exists()


def test_the_bound_itself_is_accepted(tmp_path: Path) -> None:
    path = with_repeats(tmp_path, MAX_REPEATS)
    assert load(path).repeats == MAX_REPEATS
    with pytest.raises(Exception, match=f"1-{MAX_REPEATS:,}"):
        load(path, [f"repeats={MAX_REPEATS + 1}"])


def test_cells_planned_are_bounded(tmp_path: Path, integrity_figures: Any) -> None:
    path = small_experiment(tmp_path)
    threads = "threads=[" + ",".join(str(t) for t in range(1, 102)) + "]"
    line = assert_refused(
        run_cli("run", str(path), "--dry-run", "--set", "repeats=1000", "--set", threads),
        integrity_figures,
        "101,000 cells",
        f"the {MAX_CELLS:,} one run may hold",
    )
    assert "fewer repeats" in line
    # Counted without building the plan, and the count is the plan's.
    fine = load(path, ["repeats=7", "threads=[1,2,4]", 'steps=["point"]'])
    assert planned_cells(fine) == sum(len(s.cells) for s in plan(fine)) == 7 * 3 * 9


def test_a_step_range_is_bounded(tmp_path: Path, integrity_figures: Any) -> None:
    path = small_experiment(tmp_path)
    for bad in ("0", "99999999999999999999"):
        assert_refused(
            run_cli("run", str(path), "--dry-run", "--set", f"steps=['point-query range={bad}']"),
            integrity_figures,
            f"range={bad} is out of range: give 1 to 1,000,000,000 rows",
        )


def test_a_long_setup_name_is_refused_before_any_load(
    tmp_path: Path, integrity_figures: Any
) -> None:
    long = "s" * 300
    path = small_experiment(tmp_path, setup=long)
    for args in (("--dry-run",), ("--out", str(tmp_path / "o"), "-q")):
        line = assert_refused(run_cli("run", str(path), *args), integrity_figures, "setup name")
        assert f"300 characters long: give at most {MAX_NAME}" in line
    assert not (tmp_path / "o").exists()  # nothing loaded, no server directory made
    assert load(small_experiment(tmp_path, setup="s" * MAX_NAME)).setups[0].name == "s" * MAX_NAME


@pytest.mark.parametrize(("where", "says"), [("my libs", "a space"), ("lib:x", "a colon")])
def test_an_allocator_path_ld_preload_cannot_carry(
    tmp_path: Path, integrity_figures: Any, where: str, says: str
) -> None:
    jemalloc = allocators.get("jemalloc", require_available=False)
    if not jemalloc.available or jemalloc.path is None:
        pytest.skip("jemalloc is not installed")
    library = tmp_path / where / "libjemalloc.so.2"
    library.parent.mkdir()
    shutil.copy(jemalloc.path, library)  # a real allocator: only its path is wrong
    path = small_experiment(tmp_path, str(library))
    for args in (("--dry-run",), ("--out", str(tmp_path / "o"), "-q")):
        assert_refused(
            run_cli("run", str(path), *args), integrity_figures, str(library), says, "LD_PRELOAD"
        )
    assert not (tmp_path / "o").exists()


def test_a_set_value_with_a_line_break_is_shown_escaped(
    tmp_path: Path, integrity_figures: Any
) -> None:
    path = small_experiment(tmp_path)
    for key in ("name", "server.config.sort_buffer_size", "setup.a.knobs.MALLOC_ARENA_MAX"):
        result = run_cli("run", str(path), "--dry-run", "--set", f"{key}=2\ninit_file=/x")
        line = assert_refused(result, integrity_figures, f"--set '{key}=2\\ninit_file=/x'")
        assert "init_file=/x" in line  # the whole value, on the one line


def test_an_escaped_set_is_rebuilt_from_the_stored_text(tmp_path: Path) -> None:
    """A value with a tab passes validation; its stored line must give it back."""
    path = small_experiment(tmp_path)
    experiment = load(path, ["description=a\tb", "durations.step=3"])
    assert "# --set 'description=a\\tb'\n# --set durations.step=3\n" in experiment.text
    stored = RunResult(
        run_id="r", experiment=experiment.name, base_setup="a", experiment_text=experiment.text
    )
    again = experiment_from_run(stored)
    assert again.text == experiment.text and again.duration_s == 3


@pytest.mark.parametrize(
    ("args", "says", "hint"),
    [
        (["--bogus"], "No such option '--bogus'", "(see mallocbench --help)"),
        (["rnu"], "No such command 'rnu'", "(see mallocbench --help)"),
        (["run"], "Missing argument 'EXPERIMENT_FILE'", "(see mallocbench run --help)"),
        (["run", "x.toml", "--outt", "o"], "'--out'", "(see mallocbench run --help)"),
        (
            ["run", "x.toml", "--max-repeats", "0"],
            "Invalid value for '--max-repeats': 0 is not in the range 2<=x<=1000",
            "(see mallocbench run --help)",
        ),
        (["store", "copy"], "Missing argument 'SRC'", "(see mallocbench store copy --help)"),
        (["cluster", "nope"], "No such command 'nope'", "(see mallocbench cluster --help)"),
    ],
)
def test_click_usage_errors_are_one_line(
    args: list[str], says: str, hint: str, integrity_figures: Any
) -> None:
    result = run_cli(*args)
    line = assert_refused(result, integrity_figures, says, hint)
    assert "Usage:" not in result.stdout + result.stderr and "Try " not in line
