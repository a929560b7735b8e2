"""The shim and the replayer, found by mallocbench.native."""

from __future__ import annotations

from pathlib import Path

from mallocbench.native import native_file

SHIM_ENV = "MALLOCBENCH_RECORD_SHIM"
REPLAYER_ENV = "MALLOCBENCH_REPLAY_BIN"
SHIM = "libmbrecord.so"
REPLAYER = "mbreplay"


def shim_path() -> Path:
    return native_file(SHIM, SHIM_ENV)


def replayer_path() -> Path:
    return native_file(REPLAYER, REPLAYER_ENV)
