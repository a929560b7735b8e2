"""Running mallocbench as a user would, shared by the command-line tests.

A fresh process with no standard input, as CI and scripts run it, and a wide terminal
so that one error line is one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SMALL_EXPERIMENT = """
name = "e"
engines = ["innodb"]
steps = ["point-query"]
threads = [1]
[dataset]
tables = 1
rows = 500
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
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
