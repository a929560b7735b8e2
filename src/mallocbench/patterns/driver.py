"""Find (or build) the native pattern driver and run it once under an allocator and knobs.

The driver reports which file its malloc() resolves to (`malloc_library`), so verifying
the allocator needs no race against a process that lives for a second: the same check
as the server pipeline, applied to what the process saw from inside.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mallocbench import allocators
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError
from mallocbench.native import native_file

PATTERNS = ("sortbuf", "blockcache", "oltp", "xthread")

# Driver options each pattern takes (TOML spelling: underscores), mirroring mbpatterns.c
# so a typo is reported with the key's name before anything runs.
PATTERN_OPTIONS: dict[str, tuple[str, ...]] = {
    "sortbuf": ("size", "init", "touch"),
    "blockcache": ("capacity", "min_size", "max_size", "keys", "pinned", "pin_ops", "shards"),
    "oltp": ("allocs", "min_size", "max_size", "long_lived", "long_rate"),
    "xthread": ("batch", "queue", "min_size", "max_size"),
}

BIN_ENV = "MALLOCBENCH_PATTERNS_BIN"
EXIT_USAGE = 2


def binary_path(build: bool = True) -> Path:
    """Path of mbpatterns; in a checkout, (re)build it with make when it is stale."""
    path = native_file("mbpatterns", BIN_ENV, build, needs="a C compiler")
    if not os.access(path, os.X_OK):
        raise MallocbenchError(f"the pattern driver {path} is not executable")
    return path


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def driver_args(
    pattern: str,
    options: dict[str, Any],
    threads: int,
    seconds: float | None,
    ops: int | None,
    seed: int,
) -> list[str]:
    args = [pattern, "--threads", str(threads), "--seed", str(seed)]
    if ops is not None:
        args += ["--ops", str(ops)]
    elif seconds is not None:
        args += ["--seconds", f"{seconds:g}"]
    for key, value in options.items():
        args += [flag(key), str(value)]
    return args


def clean_environment(allocator: Allocator, knobs: dict[str, str]) -> dict[str, str]:
    """The parent's environment minus every allocator knob and preload, plus this setup's.

    An inherited MALLOC_CONF or LD_PRELOAD would otherwise leak into every setup and
    measure something other than what the report names.
    """
    prefixes = tuple(p for a in allocators.builtin_allocators() for p in a.knob_prefixes)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith(prefixes)}
    preload = allocator.preload()
    if preload:
        env["LD_PRELOAD"] = preload
    env.update({k: str(v) for k, v in knobs.items()})
    return env


def check_malloc_library(allocator: Allocator, library: str | None) -> str:
    """Raise unless the driver's malloc() came from `allocator`; return the library."""
    lib = library or "unknown"
    if allocator.is_builtin:
        ok = os.path.basename(lib).startswith("libc.so")
    else:
        ok = allocator.is_mapped_path(lib)
    if not ok:
        raise MallocbenchError(
            f"allocator {allocator.name} was requested but the driver's malloc() came from "
            f"{lib}: the preload did not take effect, so nothing was measured"
        )
    return lib


@dataclass
class DriverRun:
    """One execution of the driver: the parsed JSON, or why there is none."""

    status: str  # ok, crashed (signal), failed (other error)
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    command: list[str] = field(default_factory=list)


def run_driver(
    allocator: Allocator,
    knobs: dict[str, str],
    args: list[str],
    timeout: float,
    binary: Path | None = None,
    verify: bool = True,
) -> DriverRun:
    """Run mbpatterns once. Bad options raise MallocbenchError (the driver's own line);
    a crash or an out-of-memory exit is a result, returned with status crashed/failed."""
    exe = binary or binary_path()
    command = [str(exe), *args]
    try:
        proc = subprocess.run(
            command,
            env=clean_environment(allocator, knobs),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return DriverRun("failed", error=f"timed out after {timeout:.0f} s", command=command)
    stderr = proc.stderr.strip()
    if proc.returncode == EXIT_USAGE:
        line = stderr.splitlines()[0] if stderr else "bad options"
        raise MallocbenchError(line.removeprefix("mbpatterns: error: "))
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return DriverRun("crashed", error=f"killed by {name}: {stderr[-300:]}", command=command)
    if proc.returncode != 0:
        return DriverRun(
            "failed", error=f"exit status {proc.returncode}: {stderr[-300:]}", command=command
        )
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        return DriverRun("failed", error=f"unreadable driver output: {exc}", command=command)
    if verify:
        check_malloc_library(allocator, data.get("malloc_library"))
    return DriverRun("ok", data=data, command=command)
