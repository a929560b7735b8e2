"""`mallocbench profile`: a real private server under massif/heaptrack, and its errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mallocbench.cli import main
from mallocbench.memory import profile as profile_mod

# 600k rows of ~80 bytes: a ~48 MB sort buffer, above the start-up peak (~39 MB with
# a 1 MB key cache), so the heap peak is the sort and its site is filesort's buffer.
SORT_SQL = "SELECT seq, MD5(seq) m FROM mysql.seq_1_to_600000 ORDER BY m LIMIT 1 OFFSET 599999"


def _profile(tool: str, out: Path) -> dict:
    result = CliRunner().invoke(
        main,
        [
            "profile",
            "--tool",
            tool,
            "--out",
            str(out),
            "--sql",
            SORT_SQL,
            "--repeat",
            "1",
            "--connections",
            "1",
            "--set",
            "sort_buffer_size=64M",
            "--set",
            "key_buffer_size=1M",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.server
def test_massif_profile_names_the_sort_buffer(tmp_path: Path) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    data = _profile("massif", tmp_path)
    top = data["sites"][0]
    assert top["function"].startswith("Filesort_buffer::alloc_sort_buffer")
    assert any("filesort" in frame for frame in top["stack"])
    assert top["bytes"] == pytest.approx(48 * 10**6, rel=0.2)
    assert data["peak_bytes"] >= top["bytes"]
    # The file it wrote parses the same when given back.
    again = CliRunner().invoke(main, ["profile", str(tmp_path / "massif.out"), "--json"])
    assert json.loads(again.stdout)["sites"][0] == top


@pytest.mark.server
def test_heaptrack_profile_names_the_sort_buffer(tmp_path: Path) -> None:
    if not profile_mod.tool_available("heaptrack"):
        pytest.skip("heaptrack is not installed (bash scripts/install-deps.sh heaptrack)")
    data = _profile("heaptrack", tmp_path)
    functions = [s["function"] for s in data["sites"][:3]]
    assert any(f.startswith("Filesort_buffer::alloc_sort_buffer") for f in functions)


@pytest.mark.server
def test_catalogue_step_runs_through_sysbench(tmp_path: Path) -> None:
    # The step the compare pipeline runs, on its cached tables. read-only-order sorts
    # per query; filesort sizes its buffer by the table's rows (~1.1 KB a row, up to
    # sort_buffer_size), so 50k rows put it (~55 MB) well above the start-up peak
    # (~20 MB of ha_recover): the top site is then the sort buffer.
    if not profile_mod.tool_available("heaptrack"):
        pytest.skip("heaptrack is not installed (bash scripts/install-deps.sh heaptrack)")
    args = ["profile", "--tool", "heaptrack", "--out", str(tmp_path), "--json"]
    args += ["--step", "read-only-order range=1000", "--seconds", "2", "--rows", "50000"]
    args += ["--set", "sort_buffer_size=64M", "--set", "key_buffer_size=1M"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    assert "running step 'read-only-order range=1000' for 2s" in result.stderr
    top = json.loads(result.stdout)["sites"][0]
    assert top["function"].startswith("Filesort_buffer::alloc_sort_buffer")
    assert top["bytes"] > 40 * 10**6


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("read-only-order", "read-only-order range=1000"),
        ("range-covered-pk range=100", "range-covered-pk range=100"),
        ("Point-Query", "point-query range=100"),
        ("qr100", "qr100"),
        ("l.i0", "l.i0"),
    ],
)
def test_any_catalogue_step_is_accepted(label: str, expected: str) -> None:
    assert profile_mod.catalogue_step(label).label == expected


def test_missing_profiler_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(profile_mod.shutil, "which", lambda name: None)
    result = CliRunner().invoke(main, ["profile", "--tool", "heaptrack", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "install-deps.sh heaptrack" in result.stderr


def test_unknown_step_and_bad_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["profile", "--step", "nope", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown step 'nope'" in result.stderr
    assert "`mallocbench steps`" in result.stderr and result.stderr.count("\n") == 1
    result = CliRunner().invoke(main, ["profile", str(tmp_path / "missing.out")])
    assert result.exit_code == 2 and result.stderr.startswith("mallocbench: error: no file")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step", "point"], "'point' is a group: pick one of hot-points, point-query"),
        (["--step", "qr100 range=5"], "takes no range"),
        (["--step", "scan", "--sql", "SELECT 1"], "give --step or --sql, not both"),
        (["--sql", "SELECT 1", "--seconds", "5"], "--seconds applies to --step"),
        (["--sql", " ; "], "--sql has no statements"),
        (["--step", "scan", "--repeat", "3"], "--repeat applies to --sql"),
        (["--rows", "0"], "--rows must be at least 1"),
        (["--seconds", "0"], "--seconds must be above 0"),
        (["--cache", "lots"], "--cache = 'lots' is not a size"),
    ],
)
def test_step_options_that_do_not_fit_are_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["profile", "--out", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
