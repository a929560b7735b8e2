"""What a private server of any family shares between its start and its stop: where its
state lives, its process, a start that stops what did not come up, the context manager
that always stops it, and what is left once it has."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self, TypeVar

from mallocbench.errors import MallocbenchError
from mallocbench.servers import runtime
from mallocbench.servers.access import ServerUser, copy_datadir
from mallocbench.servers.outcome import ServerExit


class Lifetime:
    """A private server's lifetime; a family's server fills in how it is prepared,
    started, checked and stopped."""

    proc: subprocess.Popen[bytes] | None = None

    def __init__(
        self,
        rundir: str | os.PathLike[str],
        user: ServerUser | None,
        runtime_dir: runtime.RuntimeDir | None,
    ) -> None:
        # A server resolves a relative datadir against its own directory, not ours.
        self.rundir = Path(rundir).absolute()
        self.user = user
        # What the server itself reads and writes: run as root, a directory of the
        # server's user in a runtime directory (servers/runtime.py); else the session's.
        self.statedir = self.rundir
        if user is not None:
            where = runtime_dir or self.runtime_default(user)
            self.statedir = where.state_dir(self.rundir)
        self.datadir = self.statedir / "data"

    def runtime_default(self, user: ServerUser) -> runtime.RuntimeDir:
        return runtime.process_default(user.uid, user.gid)

    def prepare_rundir(self) -> None:
        raise NotImplementedError

    def start(self, timeout: float = 120.0) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 120.0) -> ServerExit | None:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise MallocbenchError("the server is not running")
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def unwritable(self, exc: OSError) -> MallocbenchError:
        """The one line for a session directory the server's files cannot go into."""
        return MallocbenchError(
            f"cannot write the server directory {self.rundir}: {exc.strerror}; "
            "choose a writable --out directory"
        )

    def copy_datadir_from(self, golden: Path) -> None:
        self.prepare_rundir()
        copy_datadir(golden, self.datadir, self.user)

    def stopped_unless(self, *steps: Callable[[], None]) -> None:
        """Run the steps of a start after the process is up (waiting, checks); the first
        that raises stops the server, so no failed start leaves one running."""
        try:
            for step in steps:
                step()
        except BaseException:
            self.stop()
            raise

    def discard_state(self, keep_datadir: bool = False) -> None:
        runtime.discard_state(self.rundir, self.statedir, self.datadir, keep_datadir)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


S = TypeVar("S", bound=Lifetime)


@contextlib.contextmanager
def started(server: S) -> Iterator[S]:
    """`server` started, then stopped and its state removed on the way out."""
    try:
        server.start()
        yield server
    finally:
        server.stop()
        server.discard_state()


__all__ = ["Lifetime", "started"]
