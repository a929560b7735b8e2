"""Running mallocbench as a user would, shared by the command-line tests.

A fresh process with no standard input, as CI and scripts run it, and a wide terminal
so that one error line is one line.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

SMALL_EXPERIMENT = """
name = "e"
engines = ["innodb"]
steps = ["point-query"]
threads = [1]
[dataset]
tables = 1
rows = 2000
cache = "32M"
[durations]
warmup = 0
step = 1
{extra}
[[setup]]
name = "{setup}"
allocator = "{allocator}"
{setup_extra}
"""


def small_experiment(
    directory: Path,
    allocator: str = "glibc",
    extra: str = "",
    setup_extra: str = "",
    setup: str = "a",
) -> Path:
    """A one-setup, one-step experiment file; `extra` and `setup_extra` add TOML lines."""
    path = directory / "e.toml"
    path.write_text(
        SMALL_EXPERIMENT.format(
            allocator=allocator, extra=extra, setup_extra=setup_extra, setup=setup
        )
    )
    return path


def run_cli(
    *args: str,
    timeout: float = 600,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    whole_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m mallocbench.cli ARGS` in a process of its own, its output captured.

    `env` adds to the test's environment; `whole_env` is all the run gets. The process
    is forked from a server that did the imports once (cli_zygote.py);
    MALLOCBENCH_TEST_FRESH_PYTHON=1 starts a new interpreter for each run instead.
    """
    command = [sys.executable, "-m", "mallocbench.cli", *args]
    full_env = (
        whole_env if whole_env is not None else {**os.environ, "COLUMNS": "200", **(env or {})}
    )
    zygote = None if os.environ.get("MALLOCBENCH_TEST_FRESH_PYTHON") == "1" else _zygote()
    if zygote is None:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=full_env,
        )
    return zygote.run(command, timeout, str(cwd or os.getcwd()), full_env)


class _Zygote:
    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="mb-zygote-")
        self.path = os.path.join(self.directory, "socket")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_zygote.py")), self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the CLI zygote did not start: {line!r}")
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # its signal to end
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.directory, ignore_errors=True)

    def run(
        self, command: list[str], timeout: float, cwd: str, env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        request = json.dumps({"args": command[3:], "cwd": cwd, "env": env}).encode()
        with (
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
            open(os.devnull, "rb") as devnull,
            socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn,
        ):
            conn.connect(self.path)
            socket.send_fds(conn, [request], [devnull.fileno(), out.fileno(), err.fileno()])
            pid = json.loads(conn.recv(4096))["pid"]
            conn.settimeout(timeout)
            try:
                answer = conn.recv(4096)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # as subprocess.run's timeout does
                raise subprocess.TimeoutExpired(command, timeout) from None
            # No answer: the run was killed (by a signal, as a returncode says it).
            code = json.loads(answer)["code"] if answer else -signal.SIGKILL
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(command, code, _text(out.read()), _text(err.read()))


def _text(data: bytes) -> str:
    # As subprocess.run(text=True) decodes, with universal newlines.
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


_ZYGOTE: list[_Zygote] = []


def _zygote() -> _Zygote | None:
    if not _ZYGOTE:
        _ZYGOTE.append(_Zygote())
    return _ZYGOTE[0]
