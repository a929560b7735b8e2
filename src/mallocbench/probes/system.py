"""Facts about the machine a run measured on, recorded with every run."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mallocbench import __version__
from mallocbench.allocators.base import glibc_version
from mallocbench.errors import MallocbenchError


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str | None:
    """The bracketed choice of /sys/kernel/mm/transparent_hugepage/enabled."""
    text = _read(str(THP_ENABLED))
    match = re.search(r"\[(\w+)\]", text or "")
    return match.group(1) if match else None


def process_thp_disabled(pid: int) -> bool | None:
    """True when prctl(PR_SET_THP_DISABLE) is in force for `pid` (THP_enabled: 0)."""
    match = re.search(r"^THP_enabled:\s*(\d)", _read(f"/proc/{pid}/status") or "", re.MULTILINE)
    return match.group(1) == "0" if match else None


@contextlib.contextmanager
def system_thp_mode(mode: str | None) -> Iterator[None]:
    """Set the system's THP mode for the duration, then put the previous one back.

    THP is a system-wide setting, so only modes that need it ("always", "madvise") come
    here; "never" is applied to the server alone with PR_SET_THP_DISABLE.
    """
    previous = thp_mode()
    if mode is None or mode == previous:
        yield
        return
    try:
        THP_ENABLED.write_text(mode)
    except OSError as exc:
        raise MallocbenchError(
            f"cannot set transparent huge pages to {mode!r}: {THP_ENABLED} is not writable "
            f"({exc.strerror or exc}); run as root outside a container, or drop thp from the setup"
        ) from exc
    try:
        yield
    finally:
        if previous is not None:
            with contextlib.suppress(OSError):
                THP_ENABLED.write_text(previous)


def cpu_model() -> str | None:
    text = _read("/proc/cpuinfo") or ""
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def memory_total_bytes() -> int | None:
    text = _read("/proc/meminfo") or ""
    match = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def sysbench_version() -> str | None:
    try:
        out = subprocess.run(
            ["sysbench", "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().removeprefix("sysbench ") or None


def host_metadata() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_bytes": memory_total_bytes(),
        "kernel": platform.release(),
        "os": _read("/etc/debian_version") and f"Debian {_read('/etc/debian_version')}",
        "glibc": glibc_version(),
        "thp": thp_mode(),
        "thp_defrag": (
            re.search(r"\[(\w+)\]", _read("/sys/kernel/mm/transparent_hugepage/defrag") or "")
            or [None, None]
        )[1],
        "python": platform.python_version(),
        "sysbench": sysbench_version(),
        "mallocbench": __version__,
    }
