"""`mallocbench record -- COMMAND`: a program recorded from its first call, its trace at
--out whatever ends the window, and only the program itself recorded."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import native_programs
from mallocbench.patterns.experiment import make_setup
from mallocbench.replay import runner
from mallocbench.replay import trace as tracemod


def record(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Through files, not pipes: a program left running holds its copy of them, and a
    pipe would not close before the program does."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        code = subprocess.run(
            [sys.executable, "-m", "mallocbench.cli", "record", *args],
            stdout=out, stderr=err, check=False, timeout=60, cwd=cwd,
        ).returncode  # fmt: skip
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(args, code, out.read(), err.read())


@pytest.fixture(scope="module")
def growth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_programs.build("growth", tmp_path_factory.mktemp("growth"))


def program_calls(stdout: str) -> int:
    """The program's own count of its calls, from its JSON line among record's lines."""
    line = next(line for line in stdout.splitlines() if line.startswith("{"))
    return int(json.loads(line)["calls"])


def test_a_program_is_recorded_from_its_first_call_to_its_exit(
    growth: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sub" / "leak.mbt"
    result = record("--out", str(out), "--", str(growth), "leak", "0.5")
    assert result.returncode == 0, result.stderr
    assert f"{out}: " in result.stdout and "(the program's whole run)" in result.stdout
    info = tracemod.check(out)
    assert info.status.startswith("complete (process "), info.status
    assert " exited at " in info.status and info.cut_short() is None
    assert info.header["exe"] == str(growth)
    # Its every call, and the C library's own before main: nothing was missed at its start.
    assert info.data["calls_present"] >= program_calls(result.stdout) > 0
    assert info.data["snapshot_blocks"] < 50, info.data  # armed before main, not later
    assert [p.name for p in out.parent.iterdir()] == ["leak.mbt"]  # no working file left
    run = runner.run_once(make_setup("glibc", "glibc", "glibc"), out, "none", 1.0, 0, 60)
    assert run.status == "ok", run.error
    kept = program_calls(result.stdout) * 16384  # 16 KiB blocks it never frees
    assert (run.value("replay_peak_live") or 0) >= kept


def test_a_window_shorter_than_the_program_waits_for_it_unless_told_not_to(
    growth: Path, tmp_path: Path
) -> None:
    began = time.monotonic()
    result = record("--seconds", "0.5", "--out", str(tmp_path / "a.mbt"), "--",
                    str(growth), "leak", "2.5")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - began >= 2.5  # it waited for the program to end
    assert "waiting for the program" in result.stderr
    assert program_calls(result.stdout) > 0  # the program ran to its end
    status = tracemod.check(tmp_path / "a.mbt").status
    assert status.startswith("complete (disarmed)"), status

    began = time.monotonic()
    left = record("--seconds", "0.5", "--leave-running", "--out", str(tmp_path / "b.mbt"),
                  "--", str(growth), "leak", "4")  # fmt: skip
    assert left.returncode == 0, left.stderr
    assert time.monotonic() - began < 3.5
    assert "runs on, unrecorded" in left.stderr
    assert tracemod.check(tmp_path / "b.mbt").status.startswith("complete (disarmed)")


@pytest.mark.parametrize(
    ("wrapper", "recorded"),
    [
        (["env", "X=1"], "growth"),
        (["sh", "-c", 'cd / && exec "$0" leak 0.3'], "growth"),
        (["sh", "-c", '"$0" leak 0.3; true'], "sh"),
    ],  # fmt: skip
    ids=["exec-env", "exec-sh-elsewhere", "child-of-sh"],
)
def test_execs_are_followed_and_the_programs_a_command_starts_are_not_recorded(
    growth: Path, tmp_path: Path, wrapper: list[str], recorded: str
) -> None:
    """A program it starts inherits the shim's variables: armed too, it would write its
    calls into the same trace. An exec keeps the pid, and the recording follows it, to
    the --out given relative to where record ran, wherever the program has gone."""
    out = tmp_path / "t.mbt"
    args = [*wrapper, str(growth)] + (["leak", "0.3"] if wrapper[0] == "env" else [])
    result = record("--out", "t.mbt", "--", *args, cwd=tmp_path)
    assert program_calls(result.stdout) > 0  # the program ran, recorded or not
    header = out.read_bytes()[tracemod.STATUS_OFFSET + tracemod.STATUS_SIZE : 1024]
    exe = Path(header.split(b"exe=", 1)[1].split(b"\n", 1)[0].decode()).name
    if recorded == "growth":
        assert result.returncode == 0, result.stderr
        info = tracemod.check(out)
        assert info.cut_short() is None and info.status.startswith("complete"), info.status
        assert exe == "growth" and info.data["calls_present"] >= program_calls(result.stdout)
    else:
        # The shell alone: the program's calls went nowhere (its own trace would have
        # replaced this one). dash ends with _exit(), which no exit handler sees: the
        # shell's trace is cut at its last whole frame, here its header.
        assert exe != "growth"
        assert result.returncode == 3 and "(_exit)" in result.stderr, result.stderr
        assert tracemod.header_status(out).startswith("stopped: process "), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.mbt"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--", "no-such-program-here"], "cannot run 'no-such-program-here': no such program"),
        (["--pid", "1", "--", "true"], "give --pid PID or a command"),
        (["--leave-running", "--", "true"], "--leave-running needs --seconds"),
    ],  # fmt: skip
)
def test_bad_commands_get_one_line(args: list[str], says: str, tmp_path: Path) -> None:
    result = record("--out", str(tmp_path / "x.mbt"), *args)
    assert result.returncode == 2
    assert result.stderr.startswith("mallocbench: error: ") and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "x.mbt").exists()


def test_sigterm_keeps_the_trace_so_far_and_passes_the_signal_on(
    growth: Path, tmp_path: Path
) -> None:
    out = tmp_path / "t.mbt"
    with tempfile.TemporaryFile("w+") as err:
        recorder = subprocess.Popen(
            [sys.executable, "-m", "mallocbench.cli", "record", "--out", str(out), "--",
             str(growth), "leak", "30"],
            stdout=subprocess.DEVNULL, stderr=err, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            err.seek(0)
            if "recording " in err.read():
                break
            time.sleep(0.05)
        time.sleep(1.5)  # a frame a second: calls in the trace
        recorder.send_signal(signal.SIGTERM)
        code = recorder.wait(timeout=30)
        err.seek(0)
        said = err.read()
    assert code == 143, said
    assert "the trace up to the interruption" in said and "Traceback" not in said
    status = tracemod.header_status(out)
    assert status.startswith("complete (interrupted by SIGTERM at "), status
    assert tracemod.check(out).data["calls_present"] > 10
    # The program got the signal too: nothing of it is left running.
    leftover = subprocess.run(["pgrep", "-f", f"{growth} leak 30"], capture_output=True)
    assert leftover.returncode == 1, leftover.stdout


def test_a_static_program_that_ignores_the_shim_is_named_in_one_line(tmp_path: Path) -> None:
    source = tmp_path / "static.c"
    source.write_text("#include <stdlib.h>\nint main(void) { free(malloc(10)); return 0; }\n")
    exe = tmp_path / "static"
    built = subprocess.run(["cc", "-static", "-o", str(exe), str(source)], capture_output=True)
    if built.returncode != 0:
        pytest.skip(f"no static C library here: {built.stderr.decode()[-200:]}")
    result = record("--out", str(tmp_path / "s.mbt"), "--", str(exe))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"mallocbench: error: {exe}: it never loaded the ")
    assert "statically linked" in result.stderr and "it ran unrecorded" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["static", "static.c"]
