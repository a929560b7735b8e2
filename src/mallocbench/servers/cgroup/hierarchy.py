"""Reading the cgroup hierarchy: where a controller is mounted, which group a process is
in, a group's counters and files, and the memory limit the groups above a process set.

Works on cgroup v2 (unified), on v1 with the controller mounted on its own hierarchy, and
on hybrid hosts (v1 controllers beside an unified mount that holds none of them): each
controller lives in exactly one hierarchy, and that is the one used.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from pathlib import Path

_MOUNTINFO = Path("/proc/self/mountinfo")
# A file that only a v1 cgroup of the controller has: tells a foreign directory apart.
V1_MARKER = {"memory": "memory.limit_in_bytes", "cpu": "cpu.cfs_quota_us"}


def no_cgroup_hint(controller: str) -> str:
    return (
        f"run as root on a host with the cgroup v1 {controller} controller or cgroup v2 "
        f"(with the {controller} controller enabled)"
    )


NO_CGROUP_HINT = no_cgroup_hint("memory")


def fix_hint(exc: OSError, controller: str = "memory") -> str:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return no_cgroup_hint(controller)
    return f"check that the {controller} controller is enabled there"


# --- where a controller is mounted -------------------------------------------------------------


@dataclass(frozen=True)
class CgroupMount:
    """One mount of the hierarchy that holds a controller (memory unless told otherwise)."""

    version: int  # 1 or 2
    mount_point: Path
    # The hierarchy's path this mount shows (mountinfo's 4th field); not "/" when a
    # container bind-mounts only its own subtree.
    root: str

    def directory(self, cgroup_path: str) -> Path | None:
        """The directory of a cgroup (as /proc/PID/cgroup names it), None if not visible here."""
        root = self.root.rstrip("/")
        if cgroup_path != root and not cgroup_path.startswith(root + "/"):
            return None
        rel = cgroup_path[len(root) :].lstrip("/")
        return self.mount_point / rel if rel else self.mount_point


def _unescape_mountinfo(field: str) -> str:
    # Spaces, tabs, newlines and backslashes in paths are written as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str, controller: str = "memory") -> list[CgroupMount]:
    """The v1 mounts carrying `controller` and every cgroup2 mount, in order."""
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, super_options = tail[0], tail[2].split(",")
        root, mount_point = _unescape_mountinfo(fields[3]), _unescape_mountinfo(fields[4])
        if fstype == "cgroup" and controller in super_options:
            mounts.append(CgroupMount(1, Path(mount_point), root))
        elif fstype == "cgroup2":
            mounts.append(CgroupMount(2, Path(mount_point), root))
    return mounts


def controllers(directory: Path) -> set[str]:
    try:
        return set((directory / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def controller_mounts(controller: str) -> list[CgroupMount]:
    """Where `controller` can be reached; empty when it is not mounted at all.

    A v1 mount wins: on a hybrid host the unified mount exists too, but a controller
    cannot be bound to both, so there it does not list it.
    """
    try:
        mounts = parse_mountinfo(_MOUNTINFO.read_text(), controller)
    except OSError:
        return []
    v1 = [m for m in mounts if m.version == 1]
    if v1:
        return v1
    return [m for m in mounts if m.version == 2 and controller in controllers(m.mount_point)]


def memory_mounts() -> list[CgroupMount]:
    """Where the memory controller can be reached; empty when it is not mounted at all."""
    return controller_mounts("memory")


def memory_version() -> int | None:
    """1 or 2: which cgroup version the memory controller runs under; None without one."""
    mounts = memory_mounts()
    return mounts[0].version if mounts else None


# --- which cgroup a process is in ------------------------------------------------------------


def memory_cgroup_path(proc_cgroup: str, version: int) -> str | None:
    """The memory cgroup's path in a /proc/PID/cgroup text: v1's `memory` line, v2's `0::`."""
    return cgroup_path(proc_cgroup, version, "memory")


def cgroup_path(proc_cgroup: str, version: int, controller: str) -> str | None:
    """The path of `controller`'s cgroup in a /proc/PID/cgroup text (v2: the `0::` line)."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy_id, controllers, path = parts
        if version == 2 and hierarchy_id == "0" and controllers == "":
            return path
        if version == 1 and controller in controllers.split(","):
            return path
    return None


def memory_cgroup_of(pid: int | str = "self") -> Path | None:
    """The directory of the memory cgroup `pid` is in; None when it cannot be told."""
    return cgroup_of("memory", pid)


def cgroup_of(controller: str, pid: int | str = "self") -> Path | None:
    """The directory of `controller`'s cgroup that `pid` is in; None when it cannot be told."""
    mounts = controller_mounts(controller)
    if not mounts:
        return None
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    path = cgroup_path(text, mounts[0].version, controller)
    if path is None:
        return None
    # The most specific mount first: a container may see its subtree and the whole tree.
    for mount in sorted(mounts, key=lambda m: len(m.root), reverse=True):
        directory = mount.directory(path)
        if directory is not None and directory.is_dir():
            return directory
    return None


# --- counters ---------------------------------------------------------------------------------


def parse_counters(text: str) -> dict[str, int]:
    """`key value` lines, as in v2 memory.events, v1 memory.oom_control and cpu.stat."""
    counters: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counters[parts[0]] = int(parts[1])
    return counters


def is_v2(directory: Path) -> bool:
    # Every v2 cgroup has cgroup.controllers; no v1 cgroup does.
    return (directory / "cgroup.controllers").exists()


def oom_kill_count(cgroup_dir: Path) -> int | None:
    """How many processes of this cgroup the OOM killer has killed; None when unreadable.

    v2 counts the group's descendants too, v1 only the group itself. v1 kernels before
    4.13 have no such counter, and give None.
    """
    name = "memory.events" if is_v2(cgroup_dir) else "memory.oom_control"
    try:
        return parse_counters((cgroup_dir / name).read_text()).get("oom_kill")
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    return int(text) if text.isdigit() else None


def read_text(path: Path) -> str:
    """The file's text, stripped; empty when it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def read_procs(directory: Path) -> list[str]:
    return read_text(directory / "cgroup.procs").split()


# --- the limit a cgroup puts on a process ------------------------------------------------------


@dataclass(frozen=True)
class CgroupLimit:
    """The tightest memory limit over a cgroup and its ancestors, and where it is set."""

    bytes: int
    version: int
    directory: Path  # the group whose file sets it
    file: str  # memory.max, memory.limit_in_bytes or memory.stat's hierarchical_memory_limit


def _limit_in(directory: Path, version: int) -> tuple[int, str] | None:
    """The limit one group sets by itself; None for none ("max", v1's huge value) or unreadable."""
    name = "memory.max" if version == 2 else "memory.limit_in_bytes"
    value = read_int(directory / name)
    # v1 shows "no limit" as the largest page-aligned 63-bit value.
    if value is None or value >= (1 << 62):
        return None
    return value, name


def memory_limit_in(directory: Path, top: Path) -> CgroupLimit | None:
    """The tightest memory limit on `directory` and each ancestor up to `top` (its mount).

    Given a root path rather than finding one, so a fabricated tree can stand in for the
    cgroup file system. A child's limit above an ancestor's does not loosen it: the kernel
    charges each page to every group up the tree. v1 also tells, in memory.stat, the limit
    of ancestors a container cannot see (hierarchical_memory_limit).
    """
    version = 2 if is_v2(directory) else 1
    best: CgroupLimit | None = None
    current = directory
    while True:
        found = _limit_in(current, version)
        if found is not None and (best is None or found[0] < best.bytes):
            best = CgroupLimit(found[0], version, current, found[1])
        if current == top or current.parent == current or top not in current.parents:
            break
        current = current.parent
    if version == 1:
        stat = parse_counters(read_text(directory / "memory.stat"))
        hierarchical = stat.get("hierarchical_memory_limit", 1 << 62)
        if hierarchical < (1 << 62) and (best is None or hierarchical < best.bytes):
            best = CgroupLimit(hierarchical, 1, directory, "memory.stat hierarchical_memory_limit")
    return best


def memory_limit_of(pid: int | str) -> CgroupLimit | None:
    """The memory limit the cgroup of `pid` (v1 or v2) holds it to; None when there is none."""
    directory = memory_cgroup_of(pid)
    if directory is None:
        return None
    for mount in memory_mounts():
        if directory == mount.mount_point or mount.mount_point in directory.parents:
            return memory_limit_in(directory, mount.mount_point)
    return None
