"""Per-process probes from /proc: memory now and at peak, CPU, context switches, I/O."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Memory:
    rss_bytes: int
    vsz_bytes: int
    hwm_bytes: int  # peak RSS over the process's life, kept by the kernel
    peak_vsz_bytes: int


def alive(pid: int) -> bool:
    """The process runs (or is a zombie): it exists, whether or not we may signal it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _credentials(pid: int) -> tuple[int, set[int]] | None:
    """The file-system uid and every gid of a process (None once it is gone)."""
    fields: dict[str, list[int]] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("Uid", "Gid", "Groups"):
                    fields[key] = [int(v) for v in rest.split()]
    except OSError:
        return None
    if len(fields.get("Uid", ())) < 4 or len(fields.get("Gid", ())) < 4:
        return None
    return fields["Uid"][3], {fields["Gid"][3], *fields.get("Groups", [])}


def may_write(pid: int, directory: Path) -> bool:
    """Whether process `pid` may create a file in `directory` (as seen from here) by the
    mode bits: search on each directory above it, write and search on it. Root may."""
    creds = _credentials(pid)
    if creds is None:
        return False
    uid, gids = creds
    if uid == 0:
        return True
    path = directory.absolute()
    for part, need in [(p, 0o1) for p in reversed(path.parents)] + [(path, 0o3)]:
        try:
            st = os.stat(part)
        except OSError:
            return False
        shift = 6 if st.st_uid == uid else 3 if st.st_gid in gids else 0
        if (st.st_mode >> shift) & need != need:
            return False
    return True


def read_memory(pid: int) -> Memory | None:
    """VmRSS/VmSize/VmHWM/VmPeak of a process, or None once it is gone."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmSize", "VmHWM", "VmPeak"):
                    values[key] = int(rest.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    if "VmRSS" not in values:  # a zombie has no memory lines
        return None
    return Memory(values["VmRSS"], values["VmSize"], values["VmHWM"], values["VmPeak"])


@dataclass(frozen=True)
class Counters:
    """Cumulative counters of a process; per-operation costs are deltas of two readings."""

    user_s: float
    system_s: float
    voluntary_cs: int
    involuntary_cs: int
    read_bytes: int | None
    write_bytes: int | None
    read_syscalls: int | None


def read_counters(pid: int) -> Counters | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # The command name may contain spaces; fields resume after its closing paren.
            fields = stat.read().rsplit(")", 1)[1].split()
        user_s = int(fields[11]) / _CLK_TCK
        system_s = int(fields[12]) / _CLK_TCK
        voluntary = involuntary = 0
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("voluntary_ctxt_switches:"):
                    voluntary = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    involuntary = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None
    read_bytes = write_bytes = syscr = None
    try:
        with open(f"/proc/{pid}/io", encoding="ascii") as io:
            io_values = {k: int(v) for k, v in (line.split(": ") for line in io)}
        read_bytes = io_values.get("read_bytes")
        write_bytes = io_values.get("write_bytes")
        syscr = io_values.get("syscr")
    except (OSError, ValueError):
        pass
    return Counters(user_s, system_s, voluntary, involuntary, read_bytes, write_bytes, syscr)


def system_context_switches() -> int | None:
    """Context switches of the whole machine (the vmstat `cs` column, cumulative)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            for line in stat:
                if line.startswith("ctxt "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class PeakSampler:
    """Samples a process's RSS and VSZ several times a second in a background thread.

    The kernel's VmHWM gives the lifetime peak RSS; a cell needs the peak within its own
    window, and VSZ has no per-window peak at all, so both are sampled here.
    """

    def __init__(
        self,
        pid: int,
        interval_s: float = 0.25,
        charge: Callable[[], dict[str, float]] | None = None,
        reader: Callable[[int], Memory | None] | None = None,
    ) -> None:
        self.pid = pid
        # A server of several processes is read as one (its family's reading).
        self._read = reader or read_memory
        self.interval_s = interval_s
        self.peak_rss = 0
        self.peak_vsz = 0
        # The newest reading of a live process (time, memory, `charge()`), and whether it
        # was gone at a later one: a killed server's reading nearest its death, which the
        # per-second timeline can miss by up to a second, or miss entirely.
        self.last: tuple[float, Memory, dict[str, float]] | None = None
        self.outlived = False
        self._charge = charge
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peak-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> Memory | None:
        memory = self._read(self.pid)
        if memory is not None:
            self.peak_rss = max(self.peak_rss, memory.rss_bytes)
            self.peak_vsz = max(self.peak_vsz, memory.vsz_bytes)
            self.last = (time.time(), memory, self._charge() if self._charge else {})
        elif self.last is not None:
            self.outlived = True
        return memory

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
