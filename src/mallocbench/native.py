"""Find the native parts: the shim, the replayer, the pattern driver and their test helpers.

An installed package carries them prebuilt in `_native/` (the wheel build compiles them,
setup.py); a checkout has them in native/build, rebuilt with make when a source is newer.
An environment variable per part points at another build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from mallocbench.errors import MallocbenchError

PACKAGED = Path(__file__).resolve().parent / "_native"
SHIM_ENV = "MALLOCBENCH_RECORD_SHIM"
REPLAYER_ENV = "MALLOCBENCH_REPLAY_BIN"
SHIM = "libmbrecord.so"
REPLAYER = "mbreplay"
# Targets this process has made or found fresh: a part older than a source it does not
# use (make keeps it) looked stale on every call, and a replay ran make each time.
_MADE: set[str] = set()


def checkout_dir() -> Path | None:
    """The source tree's native/ folder, when running from a checkout."""
    candidate = Path(__file__).resolve().parents[2] / "native"
    return candidate if (candidate / "Makefile").is_file() else None


def _build(native: Path, target: str, needs: str) -> None:
    make = shutil.which("make")
    if make is None:
        raise MallocbenchError(f"building {target} needs make: apt-get install make")
    proc = subprocess.run(
        [make, "-s", "-C", str(native), f"build/{target}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise MallocbenchError(
            f"building {target} failed ({last[0]}): run `make -C {native}` to see why "
            f"(it needs {needs}: scripts/install-deps.sh installs it)"
        )


def _override(env: str) -> Path | None:
    value = os.environ.get(env)
    if not value:
        return None
    path = Path(value)
    if not path.is_file():
        raise MallocbenchError(f"{env}={value} is not a file")
    return path


def native_file(
    target: str, env: str, build: bool = True, needs: str = "a C compiler and libzstd-dev"
) -> Path:
    """The native part `target`: `env`'s override, else the installed package's copy, else
    the checkout's build (made first when stale, unless `build` is false)."""
    override = _override(env)
    if override is not None:
        return override
    packaged = PACKAGED / target
    if packaged.is_file():
        return packaged
    native = checkout_dir()
    if native is None:
        raise MallocbenchError(
            f"{target} is not in this installation: reinstall mallocbench from a wheel "
            f"(`make dist`), run `make native` in its source tree, or point {env} at it"
        )
    path = native / "build" / target
    if build and target not in _MADE:
        sources = [native / "Makefile", *native.glob("mb*.c"), *native.glob("*.h")]
        newest = max(p.stat().st_mtime for p in sources)
        if not path.is_file() or path.stat().st_mtime < newest:
            _build(native, target, needs)
        _MADE.add(target)
    if not path.is_file():
        raise MallocbenchError(f"{path} is missing: run `make native`")
    return path


def shim_path() -> Path:
    return native_file(SHIM, SHIM_ENV)


def replayer_path() -> Path:
    return native_file(REPLAYER, REPLAYER_ENV)
