"""What may make one server start differ from the next: read once per session.

Per-start effects of 15-25% between unpinned servers on a small host set the floor of a
verdict, and their cause is not known. These are the candidates, kept with the session
(results.SessionInfo.start) so a later analysis can test which explain the per-start
level: how long the start took, how much of the datadir the page cache already held,
the server's transparent huge pages and the system's THP mode, and at the end, which
CPUs its busiest threads last ran on. None of it is caused by the allocator alone, but
AnonHugePages partly is: a covariate must be chosen with that in mind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from mallocbench.probes.system import thp_mode

# Threads whose CPU is recorded: the busiest few carry the load on a small host.
BUSIEST_THREADS = 4
FINCORE_TIMEOUT_S = 10.0


def _anon_huge_bytes(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("AnonHugePages:"):
            return float(line.split()[1]) * 1024
    return None


def page_cache_share(directory: Path) -> float | None:
    """Share of the directory's bytes in the page cache (util-linux fincore); None
    when fincore is missing or fails."""
    fincore = shutil.which("fincore")
    files = [str(p) for p in directory.rglob("*") if p.is_file()] if directory.is_dir() else []
    if fincore is None or not files:
        return None
    try:
        done = subprocess.run(
            [fincore, "--bytes", "--noheadings", "--raw", "-o", "RES,SIZE", *files],
            capture_output=True,
            text=True,
            timeout=FINCORE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    resident = size = 0
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            resident += int(parts[0])
            size += int(parts[1])
    return resident / size if size else None


def at_start(pid: int, datadir: Path, startup_s: float) -> dict[str, float | str]:
    """The candidates once the server answered, before its cache is warmed."""
    found: dict[str, float | str] = {"startup_s": round(startup_s, 3)}
    huge = _anon_huge_bytes(pid)
    if huge is not None:
        found["anon_huge_bytes"] = huge
    mode = thp_mode()
    if mode is not None:
        found["thp_system"] = mode
    cached = page_cache_share(datadir)
    if cached is not None:
        found["datadir_cached_share"] = round(cached, 4)
    return found


def busiest_cpus(pid: int, count: int = BUSIEST_THREADS) -> list[int]:
    """The CPUs the `count` threads with the most CPU time last ran on (busiest first)."""
    threads = []
    try:
        names = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in names:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces) start at index 2.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 36:
            threads.append((int(fields[11]) + int(fields[12]), int(fields[36])))
    threads.sort(reverse=True)
    return [cpu for _, cpu in threads[:count]]


def at_end(pid: int, found: dict[str, float | str]) -> None:
    """Add what only the end of a session shows: where its busiest threads ran."""
    cpus = busiest_cpus(pid)
    if cpus:
        found["busiest_cpus"] = ",".join(str(c) for c in cpus)
        found["busiest_on_cpu0_share"] = round(cpus.count(0) / len(cpus), 3)
    huge = _anon_huge_bytes(pid)
    if huge is not None:
        found["anon_huge_bytes_end"] = huge


__all__ = ["at_end", "at_start", "busiest_cpus", "page_cache_share"]
