"""Bad input: one clear line naming the problem, a non-zero exit, never a traceback."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from cli_runner import run_cli, small_experiment


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("mallocbench: error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def experiment(
    tmp_path: Path, allocator: str = "glibc", extra: str = "", setup_extra: str = ""
) -> Path:
    return small_experiment(tmp_path, allocator, extra=extra, setup_extra=setup_extra)


def test_unknown_allocator(tmp_path: Path) -> None:
    result = run_cli("run", str(experiment(tmp_path, "hoard")), "--out", str(tmp_path / "o"))
    assert_one_line_error(result, "unknown allocator 'hoard'", "jemalloc")


def test_library_path_that_does_not_exist(tmp_path: Path) -> None:
    result = run_cli("run", str(experiment(tmp_path, "/opt/none/libx.so")), "--out", str(tmp_path))
    assert_one_line_error(result, "/opt/none/libx.so", "does not exist")


def test_invalid_toml(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("steps = [\n")
    assert_one_line_error(run_cli("run", str(path)), "not valid TOML")


def test_unknown_step(tmp_path: Path) -> None:
    path = experiment(tmp_path)
    path.write_text(path.read_text().replace('"point-query"', '"point-qurey"'))
    assert_one_line_error(run_cli("run", str(path)), "unknown step 'point-qurey'")


def test_unwritable_output_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_cli("run", str(experiment(tmp_path)), "--out", str(blocker / "out"))
    assert_one_line_error(result, "not writable", "--out")


@pytest.mark.server
def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = experiment(tmp_path, extra=f"[server]\nport = {port}")
        result = run_cli("run", str(path), "--out", str(tmp_path / "o"), "-q")
    assert_one_line_error(result, f"port {port} is in use")


@pytest.mark.server
def test_server_that_fails_to_start(tmp_path: Path) -> None:
    # A key the server knows with a value it cannot start with (an unknown key is
    # refused before the dataset load: tests/test_run_input.py).
    path = experiment(tmp_path, setup_extra='config = { innodb_data_file_path = "nonsense" }')
    result = run_cli("run", str(path), "--out", str(tmp_path / "o"), "-q")
    assert_one_line_error(result, "setup a", "did not start")
    assert "innodb_data_file_path=nonsense" in result.stderr  # the error log line that says why
    # Nothing was measured: no empty report dressed up as a result.
    assert "no cell was measured: no report written" in result.stdout + result.stderr
    assert "wrote" not in result.stdout + result.stderr
    assert not any((tmp_path / "o" / name).exists() for name in ("results.json", "report.md"))


def test_report_of_a_missing_directory(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("report", str(tmp_path / "nothing")), "does not exist")
