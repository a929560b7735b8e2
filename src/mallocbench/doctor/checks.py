"""What this host has for mallocbench, and what each missing piece keeps from running.

Every check only looks (nothing is built, started or written), so `doctor` is safe on a
production database host before the shim is installed there.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from mallocbench import allocators
from mallocbench.errors import MallocbenchError


@dataclass(frozen=True)
class Check:
    """One piece: found or not, what was found (or how to get it), what it is needed for."""

    name: str
    found: bool
    detail: str
    blocks: str  # what cannot run without it
    optional: bool = False

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _server() -> Check:
    from mallocbench.servers.mariadb import find_build

    blocks = "run, soak, calibrate, profile and the tutorials (a private server each)"
    try:
        build = find_build()
    except MallocbenchError as exc:
        return Check("server build", False, str(exc), blocks)
    return Check("server build", True, f"{build.label} ({build.mysqld})", blocks)


def _sysbench() -> Check:
    from mallocbench.probes.system import sysbench_version

    binary = shutil.which("sysbench")
    blocks = "run, soak and calibrate (their load is sysbench's)"
    if binary is None:
        return Check("sysbench", False, "not on PATH: apt-get install sysbench", blocks)
    return Check("sysbench", True, f"{sysbench_version() or 'unknown version'} ({binary})", blocks)


def _allocators() -> list[Check]:
    return [
        Check(
            f"allocator {a.name}",
            a.available,
            f"{a.version or 'unknown version'} ({a.path})" if a.available else a.install_hint(),
            f"every setup with allocator = {a.name!r}",
        )
        for a in allocators.builtin_allocators()
    ]


def _native(name: str, find: Callable[[], Path], blocks: str) -> Check:
    try:
        return Check(name, True, str(find()), blocks)
    except MallocbenchError as exc:
        return Check(name, False, str(exc), blocks)


def _natives() -> list[Check]:
    from mallocbench.native import REPLAYER, REPLAYER_ENV, SHIM, SHIM_ENV, native_file
    from mallocbench.patterns.driver import binary_path

    checks = [
        _native("recording shim", lambda: native_file(SHIM, SHIM_ENV, build=False), "record"),
        _native(
            "replayer",
            lambda: native_file(REPLAYER, REPLAYER_ENV, build=False),
            "replay and tune",
        ),
        _native("pattern driver", lambda: binary_path(build=False), "patterns"),
    ]
    checks.append(_system_shim())
    return checks


def _system_shim() -> Check:
    from mallocbench.deploy.install import DEFAULT_PREFIX, installed_shim

    path = installed_shim(DEFAULT_PREFIX)
    blocks = (
        "recording a server whose unit hides home directories (ProtectHome=true): "
        "`mallocbench install-shim` puts one where it can read it"
    )
    if path.is_file():
        return Check("shim for system services", True, str(path), blocks, optional=True)
    return Check("shim for system services", False, f"none at {path}", blocks, optional=True)


def _cgroups() -> list[Check]:
    from mallocbench.servers.cgroup.hierarchy import memory_version
    from mallocbench.servers.cgroup.parents import capping_problem, cpu_capping_problem

    version = memory_version()
    mode = f"cgroup v{version}" if version else "no memory cgroup controller mounted"
    memory = capping_problem()
    cpu = cpu_capping_problem()
    return [
        Check(
            "memory cgroup",
            memory is None,
            f"{mode}; " + (memory or "capped groups can be made"),
            "setup.memory_limit (a memory cap) and OOM as a soak's outcome",
        ),
        Check(
            "cpu cgroup",
            cpu is None,
            cpu or "quota groups can be made",
            "setup.cpu_quota (a CPU handicap)",
        ),
    ]


def _privileges() -> list[Check]:
    root = os.geteuid() == 0
    return [
        Check(
            "root",
            root,
            "running as root" if root else f"running as uid {os.geteuid()}",
            "memory caps, CPU quotas, and `memory`/`record` on a server another user runs",
            optional=True,
        ),
        Check(
            "kernel log",
            os.access("/dev/kmsg", os.R_OK),
            "/dev/kmsg is readable" if os.access("/dev/kmsg", os.R_OK) else
            "/dev/kmsg is not readable (needs root or CAP_SYSLOG)",
            "naming which process an OOM kill took (the cgroup counter still counts it)",
            optional=True,
        ),
    ]  # fmt: skip


def _chromium() -> Check:
    found = shutil.which("chromium") or shutil.which("chromium-headless-shell")
    return Check(
        "chromium",
        found is not None,
        found or "not on PATH: apt-get install chromium",
        "headless checks and screenshots of the HTML report (tests, docs)",
        optional=True,
    )


def checks() -> list[Check]:
    return [
        _server(),
        _sysbench(),
        *_allocators(),
        *_natives(),
        *_cgroups(),
        *_privileges(),
        _chromium(),
    ]
