"""Cgroups of our own: a memory group (a cap) or a cpu group (a CPU quota that hands a
setup a known handicap), made before a server starts, joined between fork and exec, and
removed when it is done."""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Self

from mallocbench.errors import MallocbenchError
from mallocbench.servers.cgroup.hierarchy import (
    fix_hint,
    is_v2,
    oom_kill_count,
    parse_counters,
    read_int,
    read_procs,
    read_text,
)
from mallocbench.servers.cgroup.parents import checked_parent

_V1_UNLIMITED = "-1"
_V2_UNLIMITED = "max"
_NAME_MAX = 64

# The CFS bandwidth period; 100 ms is the kernel's default, so quotas read like its own.
_CFS_PERIOD_US = 100_000
# The kernel refuses a quota under 1 ms per period.
_MIN_QUOTA_US = 1000


# --- groups of our own -------------------------------------------------------------------------


def cgroup_name(name: str, pid: int | None = None) -> str:
    """`mallocbench-<name>-<pid>`: one path component, whatever `name` holds."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:_NAME_MAX] or "group"
    return f"mallocbench-{safe}-{os.getpid() if pid is None else pid}"


class _OwnCgroup:
    """A cgroup of one controller that mallocbench created: joined before exec, then removed."""

    CONTROLLER: ClassVar[str] = ""

    def __init__(self, path: Path, version: int):
        self.path = path
        self.version = version
        # Built here so that join_self, running between fork and exec, only opens and writes.
        self._procs_path = os.fsencode(path / "cgroup.procs")

    @classmethod
    def _make(
        cls, name: str, parent: Path | None, configure: Callable[[Self], None] | None
    ) -> Self:
        """A new group below `parent`, set up by `configure`; nothing is left if that fails."""
        kind = cls.CONTROLLER
        parent = checked_parent(kind, parent)
        path = parent / cgroup_name(name)
        try:
            path.mkdir()
        except FileExistsError:
            raise MallocbenchError(
                f"{kind} cgroup {path} already exists: remove it (rmdir) or use another name"
            ) from None
        except OSError as exc:
            raise MallocbenchError(
                f"no writable {kind} cgroup: cannot create {path} ({exc.strerror}); "
                f"{fix_hint(exc, kind)}"
            ) from None
        group = cls(path, 2 if is_v2(parent) else 1)
        if configure is not None:
            try:
                configure(group)
            except BaseException:
                group.remove()
                raise
        return group

    def _write(self, name: str, value: str) -> None:
        try:
            (self.path / name).write_text(value)
        except OSError as exc:
            raise MallocbenchError(
                f"cannot set {name}={value} in {self.CONTROLLER} cgroup {self.path} "
                f"({exc.strerror}); {fix_hint(exc, self.CONTROLLER)}"
            ) from None

    # --- members ---------------------------------------------------------------------------

    def join_self(self) -> None:
        """Move the calling process into the group: for a forked child, before exec.

        Nothing but open/write/close, so it is safe between fork and exec; "0" means the
        writer itself on both cgroup versions.
        """
        fd = os.open(self._procs_path, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def add(self, pid: int) -> None:
        """Move a running process in; what it has already used stays charged where it was."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise MallocbenchError(
                f"cannot move process {pid} into {self.CONTROLLER} cgroup {self.path} "
                f"({exc.strerror})"
            ) from None

    def pids(self) -> list[int]:
        return [int(p) for p in read_procs(self.path)]

    # --- removal -----------------------------------------------------------------------------

    def remove(self, timeout: float = 5.0) -> None:
        """Delete the group, waiting for exiting members to leave.

        Members still there after half the timeout are moved to the parent group rather
        than left behind in a group nobody will remove.
        """
        deadline = time.monotonic() + timeout
        moved = False
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise MallocbenchError(
                        f"cannot remove {self.CONTROLLER} cgroup {self.path} ({exc.strerror})"
                    ) from None
            now = time.monotonic()
            if not moved and now > deadline - timeout / 2:
                self._evict()
                moved = True
            if now > deadline:
                raise MallocbenchError(
                    f"{self.CONTROLLER} cgroup {self.path} still holds processes {self.pids()}: "
                    f"stop them, then rmdir {self.path}"
                )
            time.sleep(0.05)

    def _evict(self) -> None:
        parent_procs = self.path.parent / "cgroup.procs"
        for pid in self.pids():
            with contextlib.suppress(OSError):
                parent_procs.write_text(str(pid))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, v{self.version})"


class MemoryCgroup(_OwnCgroup):
    """A memory cgroup mallocbench created: optionally capped, removed when done."""

    CONTROLLER = "memory"

    @classmethod
    def create(
        cls, name: str, limit_bytes: int | None = None, parent: Path | None = None
    ) -> MemoryCgroup:
        """A new group below `parent`, capped at limit_bytes (None: accounted, not capped).

        The default parent is our own memory cgroup on v1. On v2 a group holding processes
        (ours does: we are in it) cannot give its children memory limits, so there the
        default is its parent, making the new group a sibling of ours.
        """
        if limit_bytes is None:
            return cls._make(name, parent, None)
        return cls._make(name, parent, lambda group: group.set_limit(limit_bytes))

    def set_limit(self, limit_bytes: int | None) -> None:
        """Cap the group's memory (None: no cap), with swap shut off so it cannot hide it."""
        if self.version == 2:
            self._write("memory.max", _V2_UNLIMITED if limit_bytes is None else str(limit_bytes))
            if limit_bytes is not None and (self.path / "memory.swap.max").exists():
                self._write("memory.swap.max", "0")
            return
        value = _V1_UNLIMITED if limit_bytes is None else str(limit_bytes)
        memsw = self.path / "memory.memsw.limit_in_bytes"
        current = self.limit_bytes()
        # memsw may never be below the memory limit: raise it first, lower it last.
        raising = limit_bytes is None or (current is not None and limit_bytes > current)
        if raising:
            self._write_memsw(memsw, value)
        self._write("memory.limit_in_bytes", value)
        if not raising:
            self._write_memsw(memsw, value)

    def _write_memsw(self, memsw: Path, value: str) -> None:
        # Only with swap accounting (swapaccount=1); without it there is nothing to cap.
        with contextlib.suppress(OSError):
            memsw.write_text(value)

    # --- figures ----------------------------------------------------------------------------

    def oom_kills(self) -> int | None:
        return oom_kill_count(self.path)

    def limit_bytes(self) -> int | None:
        """The cap; None when there is none (or it cannot be read)."""
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        value = read_int(self.path / name)
        # v1 shows "no limit" as the largest page-aligned 63-bit value.
        return None if value is None or value >= (1 << 62) else value

    def usage_bytes(self) -> int | None:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return read_int(self.path / name)

    def peak_bytes(self) -> int | None:
        """The highest usage seen; None on v2 kernels before 5.19 (no memory.peak)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        return read_int(self.path / name)

    def reset_peak(self) -> bool:
        """Restart peak_bytes from the current usage; False where the kernel cannot.

        Only v1 can: v2's memory.peak resets (6.12+) for the file descriptor that wrote
        it alone, so a later read through a new one still sees the lifetime peak.
        """
        if self.version == 2:
            return False
        try:
            (self.path / "memory.max_usage_in_bytes").write_text("0")
        except OSError:
            return False
        return True


class CpuCgroup(_OwnCgroup):
    """A cpu cgroup mallocbench created: its members share a CPU quota (CFS bandwidth)."""

    CONTROLLER = "cpu"

    @classmethod
    def create(cls, name: str, quota_cpus: float, parent: Path | None = None) -> CpuCgroup:
        """A new group below `parent` whose members get at most quota_cpus CPUs together.

        The quota counts CPUs: 0.95 is 95% of one CPU, 3.8 is 95% of four. The default
        parent is chosen as for MemoryCgroup.create.
        """
        _quota_us(quota_cpus)  # refused before anything is made
        return cls._make(name, parent, lambda group: group.set_quota(quota_cpus))

    def set_quota(self, quota_cpus: float | None) -> None:
        """Hold the group to quota_cpus CPUs in every period (None: no quota)."""
        quota = None if quota_cpus is None else str(_quota_us(quota_cpus))
        if self.version == 2:
            self._write("cpu.max", f"{quota or _V2_UNLIMITED} {_CFS_PERIOD_US}")
            return
        # Set the period too: the kernel's default could be changed, and the quota means
        # something only against the period it was computed for.
        self._write("cpu.cfs_period_us", str(_CFS_PERIOD_US))
        self._write("cpu.cfs_quota_us", quota or _V1_UNLIMITED)

    def quota_cpus(self) -> float | None:
        """The quota in CPUs; None when there is none (or it cannot be read)."""
        if self.version == 2:
            fields = read_text(self.path / "cpu.max").split()
        else:
            fields = [read_text(self.path / f"cpu.cfs_{f}_us") for f in ("quota", "period")]
        # "max" (v2) and "-1" (v1) mean no quota.
        if len(fields) != 2 or not all(f.isdigit() for f in fields) or int(fields[1]) == 0:
            return None
        return int(fields[0]) / int(fields[1])

    def throttled(self) -> dict[str, float]:
        """Since the group was made: `nr_periods` in which members wanted CPU, `nr_throttled`
        of them in which the quota ran out, and `throttled_seconds` members were held back.

        Empty when cpu.stat cannot be read or lacks the counters.
        """
        counters = parse_counters(read_text(self.path / "cpu.stat"))
        if "nr_periods" not in counters:
            return {}
        if self.version == 2:
            seconds = counters.get("throttled_usec", 0) / 1e6
        else:
            seconds = counters.get("throttled_time", 0) / 1e9
        return {
            "nr_periods": counters["nr_periods"],
            "nr_throttled": counters.get("nr_throttled", 0),
            "throttled_seconds": seconds,
        }


def _quota_us(quota_cpus: float) -> int:
    """The quota per period in microseconds; refuses what cannot be a CPU quota here."""
    if (
        isinstance(quota_cpus, bool)
        or not isinstance(quota_cpus, int | float)
        or not math.isfinite(quota_cpus)
        or quota_cpus <= 0
    ):
        raise MallocbenchError(
            f"CPU quota {quota_cpus!r} is not a positive number of CPUs: give e.g. 0.95 for "
            "95% of one CPU"
        )
    quota_us = round(quota_cpus * _CFS_PERIOD_US)
    if quota_us < _MIN_QUOTA_US:
        raise MallocbenchError(
            f"CPU quota {quota_cpus} is below the kernel's least, "
            f"{_MIN_QUOTA_US / _CFS_PERIOD_US} CPUs"
        )
    host = os.cpu_count() or 1
    if quota_cpus > host:
        # Most likely a percentage given where CPUs were meant.
        raise MallocbenchError(
            f"CPU quota {quota_cpus} is more than this host's {host} CPUs, so it would hold "
            "nothing back: give CPUs, not percent (0.95 for 95% of one CPU)"
        )
    return quota_us
