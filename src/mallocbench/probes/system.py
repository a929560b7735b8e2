"""Facts about the machine a run measured on, recorded with every run."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mallocbench import __version__
from mallocbench.allocators.base import glibc_version
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import HostFacts


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


def host_facts() -> HostFacts:
    return HostFacts(
        name=socket.gethostname(),
        cpus=os.cpu_count(),
        cpu_model=cpu_model(),
        memory_bytes=memory_total_bytes(),
        kernel=platform.release(),
        os=_read("/etc/debian_version") and f"Debian {_read('/etc/debian_version')}",
        glibc=glibc_version(),
        thp=thp_mode(),
        thp_defrag=(
            re.search(r"\[(\w+)\]", _read("/sys/kernel/mm/transparent_hugepage/defrag") or "")
            or [None, None]
        )[1],
        python=platform.python_version(),
        sysbench=sysbench_version(),
        mallocbench=__version__,
    )


# The states of /proc/stat's "cpu" line, in order. guest and guest_nice are left out:
# the kernel already counts them in user and nice, and adding them would count twice.
CPU_STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# Not spent running this machine's processes: idle, waiting for I/O, or stolen (the
# hypervisor ran its other guests then).
_NOT_BUSY = ("idle", "iowait", "steal")


@dataclass(frozen=True)
class CpuSnapshot:
    """The machine's cumulative CPU time per state (jiffies) at one monotonic instant."""

    jiffies: dict[str, int]
    t: float  # time.monotonic()

    @property
    def total(self) -> int:
        return sum(self.jiffies.values())

    @property
    def busy(self) -> int:
        """Jiffies this machine's processes and kernel ran (user, system, irq...)."""
        return self.total - sum(self.jiffies[s] for s in _NOT_BUSY)


def cpu_snapshot() -> CpuSnapshot:
    """Read the aggregate "cpu" line of /proc/stat (all CPUs together)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = stat.readline().split()
    if not fields or fields[0] != "cpu":
        raise MallocbenchError("/proc/stat does not start with its cpu line: is /proc mounted?")
    values = [int(v) for v in fields[1 : 1 + len(CPU_STATES)]]
    # Kernels before 2.6.11 lack steal; a missing state was never spent.
    values += [0] * (len(CPU_STATES) - len(values))
    return CpuSnapshot(dict(zip(CPU_STATES, values, strict=True)), time.monotonic())


def load_avg_1m() -> float | None:
    text = _read("/proc/loadavg")
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


def _clamp(share: float) -> float:
    return min(1.0, max(0.0, share))


def interference(
    before: CpuSnapshot, after: CpuSnapshot, own_cpu_s: float, cpus: int | None = None
) -> dict[str, float]:
    """What else ran on the machine between two snapshots, as shares of its CPU time.

    `own_cpu_s` is the CPU time of what is being measured (the server and its client,
    from their own counters); everything else busy meanwhile competed with them:

    - other_cpu_share: (busy - own_cpu_s) / all CPU time, clamped to [0, 1] (the
      counters tick at different moments, so a quiet interval can come out a hair
      below 0);
    - steal_share: time the hypervisor gave to other guests, / all CPU time;
    - idle_share: time no CPU work was ready (idle and iowait), / all CPU time: in a
      turn whose server and clients could use every CPU, idle time means the work did
      not spread over them (bunched on fewer CPUs, or waiting on something else);
    - load_avg_1m: the kernel's 1-minute load average as it is now.

    All CPU time is the jiffies of every state, or `cpus` x the elapsed wall time when
    given (for a caller that counts only the CPUs its processes may use).
    """
    hz = os.sysconf("SC_CLK_TCK")
    steal_s = (after.jiffies["steal"] - before.jiffies["steal"]) / hz
    idle_s = sum(after.jiffies[s] - before.jiffies[s] for s in ("idle", "iowait")) / hz
    busy_s = (after.busy - before.busy) / hz
    capacity_s = cpus * (after.t - before.t) if cpus else (after.total - before.total) / hz
    result = {
        "other_cpu_share": _clamp((busy_s - own_cpu_s) / capacity_s) if capacity_s > 0 else 0.0,
        "steal_share": _clamp(steal_s / capacity_s) if capacity_s > 0 else 0.0,
        "idle_share": _clamp(idle_s / capacity_s) if capacity_s > 0 else 0.0,
    }
    load = load_avg_1m()
    if load is not None:
        result["load_avg_1m"] = load
    return result
