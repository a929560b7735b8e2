"""Facts about the machine a run measured on, recorded with every run."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

from mallocbench import __version__
from mallocbench.allocators.base import glibc_version


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def thp_mode() -> str | None:
    """The bracketed choice of /sys/kernel/mm/transparent_hugepage/enabled."""
    text = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    match = re.search(r"\[(\w+)\]", text or "")
    return match.group(1) if match else None


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
