"""Memory and cpu cgroups: where a process is charged, its OOM kills, and capped groups of
our own (a memory cap, or a CPU quota that hands a setup a known handicap).

Works on cgroup v2 (unified), on v1 with the controller mounted on its own hierarchy, and
on hybrid hosts (v1 controllers beside an unified mount that holds none of them): each
controller lives in exactly one hierarchy, and that is the one used.

Telling an OOM kill from any other SIGKILL needs two sources, because neither is enough
alone: the cgroup's `oom_kill` counter (v2 `memory.events`, v1 `memory.oom_control` on
kernels >= 4.13) counts every kill in the group, not just ours; the kernel log names
the victim's pid but is readable only with enough privilege.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from mallocbench.errors import MallocbenchError
from mallocbench.probes import process as proc_probe

_MOUNTINFO = Path("/proc/self/mountinfo")
_KMSG = "/dev/kmsg"
# The kernel never hands out a /dev/kmsg record longer than this (CONSOLE_EXT_LOG_MAX);
# a smaller read buffer makes read() fail with EINVAL.
_KMSG_RECORD_MAX = 8192
# The ring buffer bounds what there is to read; this bounds it again for a kernel booted
# with a huge log_buf_len, at the price of missing records beyond it.
_KMSG_MAX_RECORDS = 200_000
_V1_UNLIMITED = "-1"
_V2_UNLIMITED = "max"
_NAME_MAX = 64

# The CFS bandwidth period; 100 ms is the kernel's default, so quotas read like its own.
_CFS_PERIOD_US = 100_000
# The kernel refuses a quota under 1 ms per period.
_MIN_QUOTA_US = 1000
# A file that only a v1 cgroup of the controller has: tells a foreign directory apart.
_V1_MARKER = {"memory": "memory.limit_in_bytes", "cpu": "cpu.cfs_quota_us"}


def _no_cgroup_hint(controller: str) -> str:
    return (
        f"run as root on a host with the cgroup v1 {controller} controller or cgroup v2 "
        f"(with the {controller} controller enabled)"
    )


NO_CGROUP_HINT = _no_cgroup_hint("memory")


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


def _controllers(directory: Path) -> set[str]:
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
    return [m for m in mounts if m.version == 2 and controller in _controllers(m.mount_point)]


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


def _is_v2(directory: Path) -> bool:
    # Every v2 cgroup has cgroup.controllers; no v1 cgroup does.
    return (directory / "cgroup.controllers").exists()


def oom_kill_count(cgroup_dir: Path) -> int | None:
    """How many processes of this cgroup the OOM killer has killed; None when unreadable.

    v2 counts the group's descendants too, v1 only the group itself. v1 kernels before
    4.13 have no such counter, and give None.
    """
    name = "memory.events" if _is_v2(cgroup_dir) else "memory.oom_control"
    try:
        return parse_counters((cgroup_dir / name).read_text()).get("oom_kill")
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    return int(text) if text.isdigit() else None


# --- the kernel log ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KmsgRecord:
    facility: int
    seq: int
    usec: int  # since boot
    message: str


def parse_kmsg_record(text: str) -> KmsgRecord | None:
    """One /dev/kmsg record: `pri,seq,usec,flags[,...];message`, then continuation lines."""
    header, sep, rest = text.partition(";")
    if not sep:
        return None
    fields = header.split(",")
    if len(fields) < 3 or not all(f.isdigit() for f in fields[:3]):
        return None
    message = rest.split("\n", 1)[0]
    return KmsgRecord(int(fields[0]) >> 3, int(fields[1]), int(fields[2]), message)


# The lines oom_kill.c prints about its victim. "Killed process" ends the kill (global and
# memcg OOMs, every kernel since 2.6); the oom-kill summary line (4.19+) comes before the
# signal but is rate-limited; the reaper's line follows once the memory is freed.
_OOM_VICTIM = (
    re.compile(r"\bKilled process (\d+) \("),
    # task= holds the victim's command name, which may itself contain ",pid=": anchor on
    # the fields that follow it.
    re.compile(r"^oom-kill:.*,pid=(\d+),uid=\d+\s*$"),
    re.compile(r"\boom_reaper: reaped process (\d+) \("),
)


def oom_killed_pids(messages: Iterable[str]) -> set[int]:
    """The pids that kernel log messages name as OOM-killed."""
    pids: set[int] = set()
    for message in messages:
        for pattern in _OOM_VICTIM:
            match = pattern.search(message)
            if match:
                pids.add(int(match.group(1)))
    return pids


class KernelLog:
    """A non-blocking reader of /dev/kmsg that hands out each record once.

    Opened at the end, it sees only what is logged from then on, so a pid reused since
    an old OOM kill is never mistaken for the victim.
    """

    def __init__(self, fd: int):
        self._fd: int | None = fd

    @classmethod
    def open(cls, at_end: bool = True) -> KernelLog | None:
        """None when the log cannot be read (no /dev/kmsg, or dmesg_restrict without root)."""
        try:
            fd = os.open(_KMSG, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        if at_end:
            try:
                os.lseek(fd, 0, os.SEEK_END)
            except OSError:
                os.close(fd)
                return None
        return cls(fd)

    def read(self) -> list[KmsgRecord]:
        """The kernel's (not user space's) records logged since the last read."""
        records: list[KmsgRecord] = []
        if self._fd is None:
            return records
        for _ in range(_KMSG_MAX_RECORDS):
            try:
                raw = os.read(self._fd, _KMSG_RECORD_MAX)
            except BlockingIOError:
                break
            except OSError as exc:
                # EPIPE: the records up to here were overwritten; the next read resumes
                # at the oldest one left.
                if exc.errno == errno.EPIPE:
                    continue
                break
            if not raw:
                break
            record = parse_kmsg_record(raw.decode("utf-8", "replace"))
            # Only the kernel logs with facility 0: what user space (root included) writes
            # to /dev/kmsg is given another, so it cannot pose as an OOM kill.
            if record is not None and record.facility == 0:
                records.append(record)
        return records

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()


def kernel_log_oom_kills() -> set[int] | None:
    """Every pid the whole kernel log names as OOM-killed; None when it is unreadable.

    Pids get reused: for a process of ours, prefer an OomWatch, which reads only what
    was logged while it ran.
    """
    log = KernelLog.open(at_end=False)
    if log is None:
        return None
    try:
        return oom_killed_pids(r.message for r in log.read())
    finally:
        log.close()


# --- watching one process -----------------------------------------------------------------------


class OomWatch:
    """Tells, after a process has died, whether the OOM killer killed it.

    Start it right after the process is started: it records the process's memory cgroup
    and that cgroup's kill counter then, so the verdict works after the process is gone.
    """

    # The victim's "Killed process" line is printed just after the signal is sent; if
    # another process of the group did the killing, ours can die a moment before it.
    _LOG_GRACE = 0.2

    def __init__(
        self, pid: int, cgroup: Path | None, kills_at_start: int | None, log: KernelLog | None
    ):
        self.pid = pid
        self.cgroup = cgroup
        self.kills_at_start = kills_at_start
        self._log = log
        self._logged_pids: set[int] = set()
        self._verdict: bool | None = None

    @classmethod
    def start(cls, pid: int) -> OomWatch:
        cgroup = memory_cgroup_of(pid)
        kills = oom_kill_count(cgroup) if cgroup is not None else None
        return cls(pid, cgroup, kills, KernelLog.open(at_end=True))

    def counter_rose(self) -> bool | None:
        """Whether the cgroup's OOM kills went up since the start; None when unknown."""
        if self.cgroup is None or self.kills_at_start is None:
            return None
        now = oom_kill_count(self.cgroup)
        return None if now is None else now > self.kills_at_start

    def _log_names_pid(self) -> bool | None:
        if self._log is None:
            return None
        self._logged_pids |= oom_killed_pids(r.message for r in self._log.read())
        return self.pid in self._logged_pids

    def killed(self, returncode: int | None) -> bool:
        """True when the process died of SIGKILL at the OOM killer's hand.

        The first verdict on a SIGKILL is kept: later kills in a shared cgroup must not
        change how this process ended.
        """
        if self._verdict is not None:
            return self._verdict
        if returncode is None:
            return False
        if returncode != -signal.SIGKILL:
            self.close()
            return False
        named = self._log_names_pid()
        rose = self.counter_rose()
        if named is False and rose:
            time.sleep(self._LOG_GRACE)
            named = self._log_names_pid()
        if named is not None:
            # The log is readable: it alone names the victim. A counter that rose without
            # the log naming our pid counts another process of a shared cgroup.
            self._verdict = named
        else:
            # No readable log (not root, dmesg_restrict): the counter is all there is; in
            # a shared cgroup it may count someone else's kill.
            self._verdict = bool(rose)
        self.close()
        return self._verdict

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


# --- groups of our own -------------------------------------------------------------------------


def cgroup_name(name: str, pid: int | None = None) -> str:
    """`mallocbench-<name>-<pid>`: one path component, whatever `name` holds."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:_NAME_MAX] or "group"
    return f"mallocbench-{safe}-{os.getpid() if pid is None else pid}"


def _fix_hint(exc: OSError, controller: str = "memory") -> str:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return _no_cgroup_hint(controller)
    return f"check that the {controller} controller is enabled there"


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
        parent = _checked_parent(kind, parent)
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
                f"{_fix_hint(exc, kind)}"
            ) from None
        group = cls(path, 2 if _is_v2(parent) else 1)
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
                f"({exc.strerror}); {_fix_hint(exc, self.CONTROLLER)}"
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
        return [int(p) for p in _read_procs(self.path)]

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
        value = _read_int(self.path / name)
        # v1 shows "no limit" as the largest page-aligned 63-bit value.
        return None if value is None or value >= (1 << 62) else value

    def usage_bytes(self) -> int | None:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return _read_int(self.path / name)

    def peak_bytes(self) -> int | None:
        """The highest usage seen; None on v2 kernels before 5.19 (no memory.peak)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        return _read_int(self.path / name)

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
            fields = _read_text(self.path / "cpu.max").split()
        else:
            fields = [_read_text(self.path / f"cpu.cfs_{f}_us") for f in ("quota", "period")]
        # "max" (v2) and "-1" (v1) mean no quota.
        if len(fields) != 2 or not all(f.isdigit() for f in fields) or int(fields[1]) == 0:
            return None
        return int(fields[0]) / int(fields[1])

    def throttled(self) -> dict[str, float]:
        """Since the group was made: `nr_periods` in which members wanted CPU, `nr_throttled`
        of them in which the quota ran out, and `throttled_seconds` members were held back.

        Empty when cpu.stat cannot be read or lacks the counters.
        """
        counters = parse_counters(_read_text(self.path / "cpu.stat"))
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


def _default_parent(controller: str = "memory") -> Path:
    own = cgroup_of(controller, "self")
    if own is None:
        raise MallocbenchError(
            f"no {controller} cgroup controller found: {_no_cgroup_hint(controller)}"
        )
    if not _is_v2(own) or os.path.ismount(own):
        # v1 has no rule against processes beside child groups; a v2 root is exempt.
        return own
    return own.parent


def _checked_parent(controller: str, parent: Path | None) -> Path:
    """`parent` (None: the default one), made ready to hold a child group of `controller`."""
    if parent is None:
        parent = _default_parent(controller)
    if not parent.is_dir():
        raise MallocbenchError(
            f"{controller} cgroup {parent} does not exist: give an existing cgroup directory"
        )
    if _is_v2(parent):
        _delegate(parent, controller)
    elif not (parent / _V1_MARKER[controller]).exists():
        raise MallocbenchError(
            f"{parent} is not a {controller} cgroup: {_no_cgroup_hint(controller)}"
        )
    return parent


def capping_problem(parent: Path | None = None) -> str | None:
    """Why MemoryCgroup.create could not make a capped group here; None when it could.

    It writes nothing (a dry run may ask), so it judges by permissions what create would
    learn by trying; a kernel may still refuse what these checks let through.
    """
    return _group_problem("memory", parent)


def cpu_capping_problem(parent: Path | None = None) -> str | None:
    """Why CpuCgroup.create could not make a group with a quota here; None when it could.

    Writes nothing, like capping_problem.
    """
    return _group_problem("cpu", parent)


def _group_problem(controller: str, parent: Path | None) -> str | None:
    hint = _no_cgroup_hint(controller)
    try:
        parent = parent or _default_parent(controller)
    except MallocbenchError:
        return f"no {controller} cgroup controller is mounted: {hint}"
    if not parent.is_dir():
        return f"{controller} cgroup {parent} does not exist"
    if _is_v2(parent):
        if controller not in _controllers(parent):
            return (
                f"cgroup {parent} has no {controller} controller: enable it in its parent's "
                "cgroup.subtree_control"
            )
        control = parent / "cgroup.subtree_control"
        delegated = controller in _read_text(control).split()
        if not delegated:
            if not os.access(control, os.W_OK):
                return f"{control} is not writable: {hint}"
            if not os.path.ismount(parent) and _read_procs(parent):
                return (
                    f"cgroup {parent} holds processes, so cgroup v2 cannot delegate "
                    f"{controller} limits below it"
                )
    elif not (parent / _V1_MARKER[controller]).exists():
        return f"{parent} is not a {controller} cgroup: {hint}"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{controller} cgroup {parent} is not writable: {hint}"
    return None


def _read_text(path: Path) -> str:
    """The file's text, stripped; empty when it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _read_procs(directory: Path) -> list[str]:
    return _read_text(directory / "cgroup.procs").split()


def _delegate(parent: Path, controller: str) -> None:
    """v2: let children of `parent` have `controller` limits (its subtree_control gains it)."""
    if controller not in _controllers(parent):
        raise MallocbenchError(
            f"cgroup {parent} has no {controller} controller: enable it in its parent's "
            f"cgroup.subtree_control, or {_no_cgroup_hint(controller)}"
        )
    control = parent / "cgroup.subtree_control"
    try:
        if controller in control.read_text().split():
            return
        control.write_text(f"+{controller}")
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise MallocbenchError(
                f"cannot enable {controller} limits below cgroup {parent}: it holds processes, "
                f"and cgroup v2 delegates controllers only from groups without any; give a "
                f"parent cgroup without processes of its own"
            ) from None
        raise MallocbenchError(
            f"no writable {controller} cgroup: cannot enable {controller} in {control} "
            f"({exc.strerror}); {_fix_hint(exc, controller)}"
        ) from None


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
    value = _read_int(directory / name)
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
    version = 2 if _is_v2(directory) else 1
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
        stat = parse_counters(_read_text(directory / "memory.stat"))
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


# --- groups left by a harness that was killed ------------------------------------------------


_OWN_GROUP = re.compile(r"^mallocbench-.+-(\d+)$")


def abandoned_groups(parent: Path) -> list[Path]:
    """Groups below `parent` named by cgroup_name for a harness pid that no longer runs."""
    try:
        entries = sorted(parent.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = _OWN_GROUP.match(entry.name)
        # A live pid may be a harness still using its group, or a reused pid: either way
        # the group is left alone; only a group whose harness is gone is ours to remove.
        if match and entry.is_dir() and not proc_probe.alive(int(match.group(1))):
            found.append(entry)
    return found


def remove_abandoned_groups(parents: Iterable[Path] | None = None) -> list[Path]:
    """Remove the empty groups that harnesses killed before they could clean up left behind.

    A group whose processes still run (a server a run left behind, not yet stopped) is
    kept: rmdir refuses it, and moving its processes out would uncap them. The default
    parents are where MemoryCgroup.create and CpuCgroup.create put groups.
    """
    if parents is None:
        parents = []
        for controller in _V1_MARKER:
            with contextlib.suppress(MallocbenchError):
                parents.append(_default_parent(controller))
    removed = []
    for parent in dict.fromkeys(parents):
        for group in abandoned_groups(parent):
            if _read_procs(group):
                continue
            try:
                group.rmdir()
            except OSError:
                continue
            removed.append(group)
    return removed
