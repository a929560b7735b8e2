"""How a private server's start or life ends, whatever its family: the errors of a failed
start, how the process exited, its log's tail, and the record that lets a later run find
a server whose harness died."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError

# Written beside each running server; the next run in the same directory uses it to find
# and stop a server whose harness died (SIGKILL leaves no chance to clean up).
SERVER_RECORD = "server.json"


class ServerStartError(MallocbenchError):
    """The server did not become ready; the message carries the error log's last lines."""


class SettingNotTaken(ServerStartError):
    """The server started without a setting it was given (servers.taken): a failed
    setup, since measuring it would measure another setup under its name."""


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


@dataclass
class ServerExit:
    """How a server process ended."""

    returncode: int | None
    signal: str | None
    stopped_by_us: bool
    oom: bool
    log_tail: str

    @property
    def status(self) -> str:
        if self.stopped_by_us:
            return "ok"
        return "oom" if self.oom else "crashed"

    def describe(self) -> str:
        how = f"signal {self.signal}" if self.signal else f"exit code {self.returncode}"
        return f"server {'was OOM-killed' if self.oom else 'died'} ({how})"


def signal_name(returncode: int | None) -> str | None:
    """The signal a process ended by (Popen's negative return code), by name."""
    return signal.Signals(-returncode).name if returncode is not None and returncode < 0 else None


def process_start_time(pid: int) -> int | None:
    """Clock ticks since boot at which a live PID started (None once it has exited).

    The start time tells a reused PID from ours; a zombie counts as exited, since an
    orphaned server that stopped waits for init to reap it.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ")".
    fields = text.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def write_record(
    path: Path, pid: int, *, family: str, binary: str, rundir: Path, statedir: Path, socket: Path
) -> None:
    """The server's SERVER_RECORD: what a later run needs to find and stop it (servers.orphans)."""
    record = {
        "pid": pid,
        "start_time": process_start_time(pid),
        "harness_pid": os.getpid(),
        # How to stop it depends on the family (servers.orphans).
        "family": family,
        "binary": binary,
        "rundir": str(rundir),
        "statedir": str(statedir),
        "socket": str(socket),
    }
    path.write_text(json.dumps(record) + "\n")
    if statedir != rundir and statedir.is_dir():
        # A copy in the runtime directory, where a root-run harness's sweep finds the
        # servers a dead one left (servers.runtime): how to stop each is its family's.
        with contextlib.suppress(OSError):
            (statedir / path.name).write_text(json.dumps(record) + "\n")
