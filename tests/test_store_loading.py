"""One loader for `report` and `compare`: directories, stores and results.json files."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mallocbench.cli import main
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import RunResult
from mallocbench.store import Store, load_result, store_target

FIXTURE = Path(__file__).parent / "fixtures" / "results-small.json"


def _run(run_id: str) -> RunResult:
    run = RunResult.from_dict(json.loads(FIXTURE.read_text()))
    run.run_id = run_id
    return run


def _save(store_path: Path, *runs: RunResult) -> None:
    store = Store(store_path)
    try:
        for run in runs:
            store.save_run(run)
    finally:
        store.close()


@pytest.fixture()
def out_dir(tmp_path: Path) -> Path:
    """An output directory after two runs: the store holds both, results.json the second."""
    first, second = _run("first"), _run("second")
    _save(tmp_path / "results.sqlite", first, second)
    # A results.json that differs from the store, so the test can tell which was read.
    json_only = copy.deepcopy(second)
    json_only.run_id = "from-json"
    (tmp_path / "results.json").write_text(json.dumps(json_only.to_dict()))
    return tmp_path


def test_a_directory_with_both_is_read_from_its_store(out_dir: Path) -> None:
    assert load_result(out_dir).run_id == "second"  # the latest run in the store
    assert load_result(out_dir, "first").run_id == "first"
    assert load_result(out_dir / "results.json").run_id == "from-json"
    assert load_result(out_dir / "results.sqlite", "first").run_id == "first"


def test_samples_can_be_left_out(out_dir: Path) -> None:
    with_samples = load_result(out_dir)
    assert any(c.samples for c in with_samples.cells)
    assert not any(c.samples for c in load_result(out_dir, with_samples=False).cells)


def test_a_directory_with_only_results_json(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(_run("only").to_dict()))
    assert load_result(tmp_path).run_id == "only"
    assert load_result(tmp_path, "only").run_id == "only"
    with pytest.raises(MallocbenchError, match="holds run 'only', not 'other'"):
        load_result(tmp_path, "other")


def test_a_store_can_have_any_name(tmp_path: Path) -> None:
    _save(tmp_path / "runs.db", _run("x"))
    assert load_result(tmp_path / "runs.db").run_id == "x"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "nothing", "does not exist"),
        (lambda p: p, "holds no results.sqlite or results.json"),
        (lambda p: _write(p / "x.json", "{not json"), "neither a results store nor"),
        (lambda p: _write(p / "x.sqlite", "garbage"), "neither a results store nor"),
        (lambda p: _write(p / "x.json", '{"cells": []}'), "neither a results store nor"),
    ],
)
def test_bad_sources_are_one_clear_error(tmp_path: Path, make: object, message: str) -> None:
    source = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(MallocbenchError, match=message) as caught:
        load_result(source)
    assert "\n" not in str(caught.value)


def test_unknown_run_id_in_a_store(out_dir: Path) -> None:
    with pytest.raises(MallocbenchError, match="no run 'third'.*latest: first, second"):
        load_result(out_dir, "third")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------- through the CLI


def test_report_and_compare_use_the_same_loader(out_dir: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["report", str(out_dir), "--run", "first", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["run_id"] == "first"
    out = runner.invoke(main, ["compare", "--store", str(out_dir), "first", "second",
                               "--format", "json"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert (json.loads(out.stdout)["a"], json.loads(out.stdout)["b"]) == ("first", "second")
    out = runner.invoke(main, ["compare", str(out_dir / "results.json"), str(out_dir),
                               "--format", "json"])  # fmt: skip
    assert json.loads(out.stdout)["a"] == "from-json" and json.loads(out.stdout)["b"] == "second"


def test_report_min_effect_option(out_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(
        main, ["report", str(out_dir), "--format", "relative-json", "--min-effect", "5%"]
    )
    assert out.exit_code == 0, out.output
    cells = json.loads(out.stdout)["cells"]
    assert cells and all(c["min_effect"] == pytest.approx(0.05) for c in cells)
    assert {"low", "high", "verdict"} <= set(cells[0])
    # Cells within 5% of the base are "same"; none is "significant" then.
    assert all(c["verdict"] == "same" for c in cells if c["relative"] and
               abs(c["relative"] - 1) < 0.05)  # fmt: skip
    written = tmp_path / "written"
    out = runner.invoke(main, ["report", str(out_dir), "--out", str(written), "--min-effect",
                               "0.05", "--format", "markdown"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "whole interval within ±5%" in (written / "report.md").read_text()
    assert "whole interval within ±5%" in (written / "report.html").read_text()
    out = runner.invoke(main, ["report", str(out_dir), "--min-effect", "five"])
    assert out.exit_code == 2
    assert out.stderr.startswith("mallocbench: error: --min-effect = 'five' is not a fraction")
    assert out.stderr.count("\n") == 1


def test_every_command_names_a_store_the_same_way(out_dir: Path, tmp_path: Path) -> None:
    url = "postgresql://bench@db-host:5432/mallocbench"
    assert store_target(url) == url  # a Path would fold the // of the URL
    assert store_target(out_dir) == out_dir / "results.sqlite"
    assert store_target(out_dir / "other.sqlite") == out_dir / "other.sqlite"
    with pytest.raises(MallocbenchError, match=r"no results store at .*nowhere"):
        store_target(tmp_path / "nowhere", must_exist=True)
    runner = CliRunner()
    listed = runner.invoke(main, ["runs", str(out_dir)])
    info = runner.invoke(main, ["store", "info", str(out_dir)])
    assert listed.exit_code == 0 and info.exit_code == 0, listed.output + info.output
    assert "first" in listed.output and "second" in listed.output
    assert "2 run(s)" in info.output
    missing = runner.invoke(main, ["runs", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no results store at" in missing.output
