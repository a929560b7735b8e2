"""Find (or, in a checkout, build) the shim and the replayer."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from mallocbench.errors import MallocbenchError

SHIM_ENV = "MALLOCBENCH_RECORD_SHIM"
REPLAYER_ENV = "MALLOCBENCH_REPLAY_BIN"
SHIM = "libmbrecord.so"
REPLAYER = "mbreplay"


def native_dir() -> Path | None:
    """The source tree's native/ folder, when running from a checkout."""
    candidate = Path(__file__).resolve().parents[3] / "native"
    return candidate if (candidate / "Makefile").is_file() else None


def _build(native: Path, target: str) -> None:
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
            "(it needs a C compiler and libzstd-dev: scripts/install-deps.sh installs both)"
        )


def path_of(target: str, env: str, build: bool = True) -> Path:
    """The built file `target` (rebuilt when its sources are newer), or `env`'s override."""
    override = os.environ.get(env)
    if override:
        path = Path(override)
        if not path.is_file():
            raise MallocbenchError(f"{env}={override} is not a file")
        return path
    native = native_dir()
    if native is None:
        raise MallocbenchError(
            f"{target} is not built: run `make native` in the mallocbench source tree, "
            f"or point {env} at it"
        )
    path = native / "build" / target
    sources = [native / "Makefile", *native.glob("mb*.c"), *native.glob("*.h")]
    newest = max(p.stat().st_mtime for p in sources)
    if build and (not path.is_file() or path.stat().st_mtime < newest):
        _build(native, target)
    if not path.is_file():
        raise MallocbenchError(f"{path} is missing: run `make native`")
    return path


def shim_path() -> Path:
    return path_of(SHIM, SHIM_ENV)


def replayer_path() -> Path:
    return path_of(REPLAYER, REPLAYER_ENV)
