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


def test_missing_profiler_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(profile_mod.shutil, "which", lambda name: None)
    result = CliRunner().invoke(main, ["profile", "--tool", "heaptrack", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "install-deps.sh heaptrack" in result.stderr


def test_unknown_step_and_bad_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["profile", "--step", "nope", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown step 'nope'" in result.stderr
    result = CliRunner().invoke(main, ["profile", str(tmp_path / "missing.out")])
    assert result.exit_code == 2 and result.stderr.startswith("mallocbench: error: no file")
