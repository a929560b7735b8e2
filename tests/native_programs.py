"""The C programs under tests/native/, built for the test that records or replays them,
and a busy process to record."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mallocbench.native import shim_path
from mallocbench.replay import preload

SOURCES = Path(__file__).resolve().parent / "native"


def build(name: str, directory: Path) -> Path:
    """Compile tests/native/NAME.c into `directory`, warnings as errors (the product's C
    flags); the executable's path."""
    exe = directory / name
    subprocess.run(
        ["cc", "-O1", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", "-o", str(exe),
         str(SOURCES / f"{name}.c")],
        check=True,
    )  # fmt: skip
    return exe


def build_library(name: str, directory: Path) -> Path:
    """Compile tests/native/NAME.c into `directory` as a shared object (an allocator to
    preload), with the same flags; its path."""
    library = directory / f"lib{name}.so"
    subprocess.run(
        ["cc", "-O1", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o",
         str(library), str(SOURCES / f"{name}.c")],
        check=True,
    )  # fmt: skip
    return library


def busy_under_shim(ctl: Path) -> subprocess.Popen[bytes]:
    """A process that allocates without end, with the recording shim loaded (control
    file `ctl`), once the shim is mapped in it; the caller kills it."""
    env = dict(os.environ, LD_PRELOAD=str(shim_path()), MBRECORD_CONTROL=str(ctl))
    churn = "while True: [bytearray(64) for _ in range(1000)]"
    busy = subprocess.Popen([sys.executable, "-c", churn], env=env)
    deadline = time.monotonic() + 10
    while preload.shim_loaded(busy.pid) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return busy
