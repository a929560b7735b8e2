"""What every results store offers, whichever database holds it.

The runner, `report`, `compare`, `recommend`, `store copy` and the cluster dispatcher are
typed against `ResultsStore`, so a SQLite file and a shared PostgreSQL database are
interchangeable behind `open_store`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from mallocbench.errors import EnvironmentLost
from mallocbench.model.metadata import RunMetadata
from mallocbench.model.patterns import PatternKey, PatternResult, PatternRun
from mallocbench.model.results import Cell, RunResult, SessionInfo, SetupInfo

# The version of the store's tables this code writes and understands. A store written by a
# newer mallocbench is refused rather than misread; one without a version (written before
# versions were recorded) is version 1.
STORE_SCHEMA_VERSION = 1

URL_SCHEMES = ("postgresql://", "postgres://")
# The SQLite store's name in an output directory: a directory given as a store means it.
STORE_NAME = "results.sqlite"

CellKey = tuple[str, str, str, int, int]


def is_url(target: object) -> bool:
    """A PostgreSQL URL rather than a path to an SQLite file."""
    return isinstance(target, str) and target.lower().startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """`url` without its password (in the user part or the query): safe to print."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("://", 1)[0] + "://..."
    userinfo, at, hostport = parts.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}{at}{hostport}" if at else parts.netloc
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class SchemaTooNew(Exception):
    """Raised inside stores; turned into one MallocbenchError line by `schema_refusal`."""


def schema_refusal(label: str, version: int) -> str:
    return (
        f"the results store {label} has schema version {version}, newer than this "
        f"mallocbench knows ({STORE_SCHEMA_VERSION}): upgrade mallocbench to read or write it"
    )


RECOVER = "the sqlite3 shell's .recover (or pg_dump for PostgreSQL)"


def damaged_store(
    label: str,
    detail: object,
    what: str = "the results store",
    then: str = "",
    recover: str = RECOVER,
) -> str:
    """The one line for a store whose pages are damaged, whichever store (the results
    store's every reader, tune's trials): `then` is how its command goes on once the
    file is restored. A USAGE error: nothing was running that it aborted, and what
    fixes it is the user's (a copy of the file), not a --resume."""
    return (
        f"{what} {label} is damaged ({detail}): restore it from a copy{then}; {recover} "
        "may save what is readable"
    )


RUN_GOES_ON = "continue with `mallocbench run --resume`"


def store_disk_fault(label: str, detail: object, full: bool, then: str = RUN_GOES_ON) -> str:
    """The one line for a store whose disk filled up or failed under a read or a write;
    `then` is how the command that was writing goes on once there is room."""
    what = "no space left for" if full else "I/O error on"
    return (
        f"{what} the results store {label} ({detail}): free space on (or check) its "
        f"disk, then {then}; what was saved before is kept"
    )


class StoreDiskFault(EnvironmentLost):
    """A store's disk filled up or failed. The message tells a run how to go on; a
    command that goes on another way (a replay has no --resume) words its own line from
    the same facts."""

    def __init__(self, label: str, detail: object, full: bool) -> None:
        super().__init__(store_disk_fault(label, detail, full))
        self.label = label
        self.detail = detail
        self.full = full

    def going_on(self, then: str) -> EnvironmentLost:
        return EnvironmentLost(store_disk_fault(self.label, self.detail, self.full, then))


class ResultsStore(Protocol):
    """Runs, setups, sessions, cells and per-second samples; each cell its own commit.
    Pattern runs beside them, each run of the driver its own commit."""

    @property
    def label(self) -> str:
        """What messages name the store by: a path, or a URL without its password."""
        ...

    def describe(self) -> str: ...
    def schema_version(self) -> int: ...
    def close(self) -> None: ...

    # runs
    def create_run(self, result: RunResult) -> None: ...
    def save_run(
        self,
        result: RunResult,
        *,
        started_at: float | None = None,
        finished_at: float | None = None,
        status: str | None = None,
    ) -> None: ...
    def delete_run(self, run_id: str) -> None: ...
    def run_exists(self, run_id: str) -> bool: ...
    def update_metadata(self, run_id: str, metadata: RunMetadata) -> None: ...
    def set_status(self, run_id: str, status: str) -> None: ...
    def finish_run(self, run_id: str, status: str) -> None: ...
    def list_runs(self) -> list[dict[str, Any]]: ...
    def latest_run_id(self) -> str | None: ...

    # setups, sessions, cells
    def save_setup(self, run_id: str, setup: SetupInfo) -> None: ...
    def save_session(self, run_id: str, session: SessionInfo) -> None: ...
    def session_ids(self, run_id: str) -> set[str]: ...
    def save_cell(self, run_id: str, cell: Cell) -> None: ...
    def finished_cell_keys(self, run_id: str) -> set[CellKey]: ...
    def setups_with_status(self, run_id: str, statuses: tuple[str, ...]) -> set[tuple[str, str]]:
        """(setup, engine) pairs with a cell in one of `statuses`."""
        ...

    def max_session_value(self, run_id: str, session_id: str, kind: str) -> int | None:
        """The highest peak ("rss" or "vsz") of the session's cells, in bytes."""
        ...

    def load_run(self, run_id: str | None = None, with_samples: bool = True) -> RunResult: ...
    def load_run_header(self, run_id: str | None = None) -> RunResult:
        """The run's row alone: experiment, its text and metadata; no setups or cells."""
        ...

    # one writer per run id
    def lock_run(self, run_id: str) -> AbstractContextManager[object]:
        """Held while a run writes `run_id`; a second holder is refused with one line."""
        ...

    def live_status(self, run_id: str, status: str) -> str:
        """A stored status as it stands now: "running" only while someone holds the run."""
        ...

    # pattern runs
    def create_pattern_run(self, run: PatternRun) -> None: ...
    def save_pattern_result(self, run_id: str, result: PatternResult) -> None: ...
    def finish_pattern_run(self, run_id: str, status: str) -> None: ...
    def reopen_pattern_run(self, run_id: str) -> None: ...
    def finished_pattern_keys(self, run_id: str) -> set[PatternKey]: ...
    def latest_pattern_run(self, experiment: str | None = None) -> str | None: ...
    def list_pattern_runs(self) -> list[dict[str, Any]]: ...
    def load_pattern_run(self, run_id: str | None = None) -> PatternRun: ...
    def save_pattern_run(self, run: PatternRun) -> None: ...
    def delete_pattern_run(self, run_id: str) -> None: ...
    def pattern_run_exists(self, run_id: str) -> bool: ...
