"""Copy the recording shim to a system path, where a hardened service can load it.

Debian's mariadb.service sets ProtectHome=true: a shim inside a home directory (a
checkout, or a pipx install under /root/.local) is invisible to the server it should
record. PREFIX/lib/mallocbench is outside every home and readable by all.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.native import shim_path

DEFAULT_PREFIX = Path("/usr/local")
# Where install-shim (or `make install`, or a distribution package) puts the shim, in the
# order a drop-in prefers them.
SYSTEM_PREFIXES = (DEFAULT_PREFIX, Path("/usr"))


def installed_shim(prefix: Path) -> Path:
    return prefix / "lib" / "mallocbench" / "libmbrecord.so"


def system_shim(prefixes: tuple[Path, ...] = SYSTEM_PREFIXES) -> Path | None:
    """The shim installed under a system prefix, which every unit can load; None if none."""
    return next((p for p in map(installed_shim, prefixes) if p.is_file()), None)


def install_shim(prefix: Path) -> Path:
    """Copy the shim to PREFIX/lib/mallocbench/ (world-readable); its new path."""
    source = shim_path()
    target = installed_shim(prefix)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.parent.chmod(0o755)
        # A copy beside the target renamed over it: a server mapping the old shim keeps
        # its pages, and no process ever loads a half-written file.
        shutil.copyfile(source, partial)
        partial.chmod(0o644)
        partial.replace(target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise MallocbenchError(
            f"cannot install the shim to {target}: {exc.strerror or exc}; run as root "
            "or give a --prefix you can write"
        ) from None
    return target
