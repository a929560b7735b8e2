"""Reading input files with a bound, and writing output files so a failure leaves nothing.

A full disk or a failing one is the environment, not the user's input: it is reported as
EnvironmentLost (exit 3) naming the file, and a partial file never stays behind under
its real name or a temporary one (a left-over partial keeps a full disk full). What is
kept between runs (golden datadirs, calibrations, a build's known options) lives under
cache_root().
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from mallocbench.errors import EnvironmentLost, MallocbenchError

# Errors that say the disk, not the path or its permissions, is at fault.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})


def is_disk_fault(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """`text` into `path` through a temporary name beside it: `path` is either the old
    file or the whole new one, and the temporary file is removed when writing fails.

    `mode` is set before the rename, so no reader ever sees the file with the umask's
    mode (a reader running as another user, such as the recording shim, would be refused).
    """
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(text, encoding="utf-8")
        if mode is not None:
            partial.chmod(mode)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def disk_fault(exc: OSError, what: str) -> EnvironmentLost:
    """One line for a full or failing disk under `what` (e.g. "the reports in out/")."""
    where = f" ({exc.filename})" if exc.filename else ""
    return EnvironmentLost(
        f"cannot write {what}: {exc.strerror}{where}: free space on that filesystem or "
        "write elsewhere; nothing measured was lost"
    )


def format_size(limit: int) -> str:
    return f"{limit // 1024**2} MiB" if limit >= 1024**2 else f"{limit // 1024} KiB"


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of `path`, refused past `limit`: a device such as /dev/zero, or a huge
    file given by mistake, ends with one line instead of eating memory."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise MallocbenchError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise MallocbenchError(f"{what} {path} is a directory: give a file") from None
    except OSError as exc:
        raise MallocbenchError(f"cannot read {what} {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise MallocbenchError(
            f"{what} {path} is larger than {format_size(limit)}, the limit for one: check "
            "the path names the file you meant"
        )
    return data


def cache_root() -> Path:
    explicit = os.environ.get("MALLOCBENCH_CACHE")
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0 and not os.environ.get("XDG_CACHE_HOME"):
        # One cache for all of root's checkouts, beside the runtime directories
        # (servers/runtime.py), so a session's copy usually stays on one file system.
        # The server's user never enters it: loads run in a runtime directory and root
        # copies the result in and out.
        return Path("/var/cache/mallocbench")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "mallocbench"
