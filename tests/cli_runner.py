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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The setups most run tests compare: the base and jemalloc.
GLIBC_AND_JE = (("glibc", "glibc"), ("je", "jemalloc"))


def experiment_text(
    name: str = "e",
    *,
    base: str | None = None,
    engines: str | None = '["innodb"]',
    steps: str = '["point-query"]',
    threads: int = 1,
    top: str = "",
    server: str = "",
    cache: str = "32M",
    warmup: str = "0",
    step: float | str | None = 1,
    extra: str | None = None,
    setups: Sequence[tuple[str, str]] = (("a", "glibc"),),
    setup_extra: str | None = None,
) -> str:
    """The tiny experiment the run tests share: one table of 2,000 rows, no warmup, short
    steps. `top` adds top-level lines, `server` the [server] table's, `extra` lines after
    [durations] (more of it, or further tables); `setups` are (name, allocator) pairs,
    `setup_extra` lines of the last one. engines=None leaves the family's default, step=None
    the steps their own length."""
    lines = ["", f'name = "{name}"']
    lines += [f'base = "{base}"'] if base is not None else []
    lines += [f"engines = {engines}"] if engines is not None else []
    lines += [f"steps = {steps}", f"threads = [{threads}]"]
    lines += [top] if top else []
    lines += ["[server]", server] if server else []
    lines += ["[dataset]", "tables = 1", "rows = 2000", f'cache = "{cache}"']
    lines += ["[durations]", f"warmup = {warmup}"]
    lines += [f"step = {step}"] if step is not None else []
    lines += [extra] if extra is not None else []
    for setup, allocator in setups:
        lines += ["[[setup]]", f'name = "{setup}"', f'allocator = "{allocator}"']
    lines += [setup_extra] if setup_extra is not None else []
    return "\n".join([*lines, ""])


def small_experiment(
    directory: Path,
    allocator: str = "glibc",
    *,
    setup: str = "a",
    file: str = "e.toml",
    **shape: Any,
) -> Path:
    """experiment_text(**shape) in DIRECTORY/FILE; one setup, SETUP of ALLOCATOR, unless
    `setups` names them."""
    path = directory / file
    defaults = {"setups": ((setup, allocator),), "extra": "", "setup_extra": ""}
    path.write_text(experiment_text(**{**defaults, **shape}))
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
