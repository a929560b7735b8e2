"""The C programs under tests/native/, built for the test that records or replays them."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
