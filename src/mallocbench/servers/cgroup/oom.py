"""Telling an OOM kill from any other SIGKILL.

It needs two sources, because neither is enough alone: the cgroup's `oom_kill` counter
(v2 `memory.events`, v1 `memory.oom_control` on kernels >= 4.13) counts every kill in the
group, not just ours; the kernel log names the victim's pid but is readable only with
enough privilege.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mallocbench.servers.cgroup.hierarchy import memory_cgroup_of, oom_kill_count

_KMSG = "/dev/kmsg"
# The kernel never hands out a /dev/kmsg record longer than this (CONSOLE_EXT_LOG_MAX);
# a smaller read buffer makes read() fail with EINVAL.
_KMSG_RECORD_MAX = 8192
# The ring buffer bounds what there is to read; this bounds it again for a kernel booted
# with a huge log_buf_len, at the price of missing records beyond it.
_KMSG_MAX_RECORDS = 200_000


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
