"""Servers left running by a harness that died (SIGKILL, a crash, a lost terminal).

Every private server writes a record (pid + the kernel's start time of that pid) into its
run directory and removes it when stopped. A record whose process still runs under the
same start time is an orphan once nobody holds the directory's lock: the caller holds
it. The start time tells our server from an unrelated process that reused the pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.servers.cgroup.parents import remove_abandoned_groups
from mallocbench.servers.outcome import SERVER_RECORD, process_start_time


@dataclass(frozen=True)
class Orphan:
    pid: int
    rundir: str
    harness_pid: int | None
    family: str = "mariadb"  # a record written before records named it is MariaDB's


def stop_signals(family: str, timeout: float) -> tuple[tuple[signal.Signals, float], ...]:
    """The signals that stop a server of `family`, each with how long it gets.

    A postmaster reads SIGTERM as a smart shutdown, which waits for every client to
    leave: one left connected by the dead harness's load would hold it for the whole
    timeout. SIGINT is its fast shutdown (sessions end, a checkpoint), SIGQUIT its
    immediate one (the data directory is disposable)."""
    if family == "postgresql":
        return ((signal.SIGINT, timeout * 0.8), (signal.SIGQUIT, timeout * 0.2), _LAST)
    return ((signal.SIGTERM, timeout), _LAST)


_LAST = (signal.SIGKILL, 10.0)


def _read(record: Path) -> dict[str, object] | None:
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def find_orphan(record: Path) -> Orphan | None:
    """The live server a record names, or None when that process is gone."""
    data = _read(record)
    if data is None:
        return None
    pid = int(data["pid"])  # type: ignore[call-overload]
    started = data.get("start_time")
    if started is None or process_start_time(pid) != started:
        return None
    harness = data.get("harness_pid")
    return Orphan(
        pid,
        str(data.get("rundir", record.parent)),
        harness if isinstance(harness, int) else None,
        str(data.get("family", "mariadb")),
    )


def _gone(orphan: Orphan, started: object) -> bool:
    return process_start_time(orphan.pid) != started


def stop_orphan(record: Path, timeout: float = 60.0) -> Orphan | None:
    """Stop the server a record names (the family's shutdown, then SIGKILL); None when
    none was running."""
    orphan = find_orphan(record)
    if orphan is not None:
        started = process_start_time(orphan.pid)
        for sig, wait in stop_signals(orphan.family, timeout):
            try:
                # Servers run in their own process group: it takes wrappers (taskset,
                # profilers) along with the server, and a postmaster's backends.
                os.killpg(orphan.pid, sig)
            except ProcessLookupError:
                break
            except PermissionError:
                try:
                    os.kill(orphan.pid, sig)
                except PermissionError:
                    raise MallocbenchError(
                        f"a server left by an earlier run still runs as PID {orphan.pid} "
                        f"({orphan.rundir}) and this user may not stop it: stop it with "
                        f"`sudo kill {orphan.pid}`, then run again"
                    ) from None
                except ProcessLookupError:
                    break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and not _gone(orphan, started):
                time.sleep(0.1)
            if _gone(orphan, started):
                break
        if not _gone(orphan, started):
            raise MallocbenchError(
                f"a server left by an earlier run (PID {orphan.pid}, {orphan.rundir}) did not "
                f"stop: kill it with `kill -9 {orphan.pid}`, then run again"
            )
    _remove_socket_dir(record)
    with contextlib.suppress(FileNotFoundError):
        record.unlink()
    return orphan


def _remove_socket_dir(record: Path) -> None:
    """The private temp dir a deep run directory's socket needed, if the record names one.

    Only a `mallocbench-*` directory directly in the temp dir is removed: the record is a
    file on disk, and nothing read from it may make us delete anything else.
    """
    data = _read(record)
    if data is None or not isinstance(data.get("socket"), str):
        return
    directory = Path(str(data["socket"])).parent
    if directory.parent == Path(tempfile.gettempdir()) and directory.name.startswith(
        "mallocbench-"
    ):
        shutil.rmtree(directory, ignore_errors=True)


def stop_orphans(servers_dir: Path) -> list[Orphan]:
    """Stop every server recorded under a run's servers/ directory; the ones that ran.

    Then the cgroups that killed harnesses left behind go too, now that the servers in
    them are stopped: nothing else would ever remove them.
    """
    stopped = []
    for record in sorted(servers_dir.glob(f"*/{SERVER_RECORD}")):
        orphan = stop_orphan(record)
        if orphan is not None:
            stopped.append(orphan)
    remove_abandoned_groups()
    return stopped
