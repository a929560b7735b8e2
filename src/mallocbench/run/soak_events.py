"""Soak events as an experiment file states them: what each does and when, checked once.

Steady sysbench load is not how servers run out of memory: users report RSS stepping up
at a nightly dump, a physical backup, an ALTER, a burst of connections, and never coming
back. A soak's `[[soak.event]]` entries ask for such work on the soak's private server
while its load goes on, each at `at` seconds after the server's start or `every` so often
(the first `every` after the start, so the series holds RSS before it). soak.events runs
them.

Which actions a server runs is its family's (ServerFamily.soak_actions): MariaDB's are
ACTION_KEYS below, run by soak.events itself; PostgreSQL's (big sorts and hash joins
above work_mem, VACUUM, CREATE INDEX, pg_dump) by its own package. An action the
experiment's family does not run is refused by name when the file is read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.inputs.validation import Problems
from mallocbench.units import parse_duration, parse_size

DUMP, BACKUP, ALTER, OPTIMIZE, BIG_SORT, CONNECT_STORM, SQL = (
    "dump", "backup", "alter", "optimize", "big-sort", "connect-storm", "sql",
)  # fmt: skip
HASH_JOIN, VACUUM, CREATE_INDEX = "hash-join", "vacuum", "create-index"
# Every action some family runs (each family says which of them it does).
ACTIONS = (DUMP, BACKUP, ALTER, OPTIMIZE, BIG_SORT, CONNECT_STORM, SQL, HASH_JOIN, VACUUM,
           CREATE_INDEX)  # fmt: skip
EVENT_KEYS = (
    "action", "every", "at", "table", "sessions", "sort_buffer", "connections", "sql",
    "work_mem", "maintenance_work_mem", "settle",
)  # fmt: skip
# MariaDB's actions (the default family's, which soak.events runs itself) and the keys
# each takes beyond action/every/at: any other is refused, not ignored.
ACTION_KEYS: dict[str, tuple[str, ...]] = {
    DUMP: (),
    BACKUP: (),
    ALTER: ("table",),
    OPTIMIZE: ("table",),
    BIG_SORT: ("table", "sessions", "sort_buffer"),
    CONNECT_STORM: ("connections",),
    SQL: ("sql",),
}
DEFAULT_TABLE = "sbtest1"
DEFAULT_SESSIONS = 4
# Without a sort_buffer of its own, a big sort asks for the larger of the published
# per-query sort buffer that hurt glibc (see DESIGN.md) and the config's sort_buffer_size;
# the server clamps it to its maximum-sort_buffer_size, and the event records what it got.
DEFAULT_SORT_BUFFER = 32 << 20
DEFAULT_CONNECTIONS = 100
MAX_SESSIONS = 64
MAX_CONNECTIONS = 500  # well below the private servers' max_connections (1000)
MAX_SQL_CHARS = 4096
MIN_EVERY_S = 5.0

_TABLE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class SoakEvent:
    action: str
    every_s: float | None = None
    at_s: float | None = None
    table: str = DEFAULT_TABLE
    sessions: int = DEFAULT_SESSIONS
    sort_buffer: int | None = None  # None: see DEFAULT_SORT_BUFFER
    connections: int = DEFAULT_CONNECTIONS
    sql: str = ""
    work_mem: int | None = None  # None: the family's default
    maintenance_work_mem: int | None = None  # None: the server's own
    settle_s: float | None = None  # None: the family's default

    @property
    def params(self) -> dict[str, object]:
        """What a family's own forms of the event take (servers.family.SoakEvents.run)."""
        return {
            "table": self.table, "sessions": self.sessions, "sort_buffer": self.sort_buffer,
            "connections": self.connections, "sql": self.sql, "work_mem": self.work_mem,
            "maintenance_work_mem": self.maintenance_work_mem, "settle_s": self.settle_s,
        }  # fmt: skip

    @property
    def label(self) -> str:
        """The event's name in reports: the action, with what makes two of them differ."""
        if self.action in (ALTER, OPTIMIZE, VACUUM, CREATE_INDEX):
            return f"{self.action} {self.table}"
        if self.action == CONNECT_STORM:
            return f"{self.action} {self.connections}"
        if self.action in (BIG_SORT, HASH_JOIN):
            memory = self.sort_buffer or self.work_mem
            if memory:
                return f"{self.action} {self.sessions}x{memory >> 20}M"
            return f"{self.action} {self.sessions} sessions"
        if self.action == SQL:
            text = " ".join(self.sql.split())
            return f"sql {text[:40]}{'...' if len(text) > 40 else ''}"
        return self.action

    def due_times(self, horizon_s: float) -> list[float]:
        """Seconds after the server's start the event is due, before `horizon_s` (one due
        at the very end would be cut short by the server's stop)."""
        if self.at_s is not None:
            return [self.at_s] if self.at_s < horizon_s else []
        assert self.every_s is not None
        count = math.ceil(horizon_s / self.every_s) - 1
        return [self.every_s * (i + 1) for i in range(max(0, count))]


def _check_sql(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MallocbenchError('sql must be a statement in a string, e.g. sql = "SELECT 1"')
    if len(value) > MAX_SQL_CHARS:
        raise MallocbenchError(f"sql is {len(value)} characters long: give at most {MAX_SQL_CHARS}")
    if _CONTROL.search(value):
        raise MallocbenchError("sql holds a control character: write the statement as plain text")
    if ";" in value.strip().rstrip(";"):
        raise MallocbenchError(
            "sql holds more than one statement (a ';' inside): give one [[soak.event]] each"
        )
    return value.strip().rstrip(";").strip()


def _count(value: object, key: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise MallocbenchError(f"{key} = {value!r} must be a whole number from 1 to {most}")
    return value


def _table(value: object) -> str:
    if not isinstance(value, str) or not _TABLE.match(value):
        raise MallocbenchError(
            f"table = {value!r} is not a table name: give one of the dataset's, e.g. sbtest1"
        )
    return value


def _timing(
    problems: Problems, path: tuple[str | int, ...], raw: dict[str, Any]
) -> tuple[float | None, float | None]:
    if ("every" in raw) == ("at" in raw):
        problems.add(path, 'a [[soak.event]] needs one of every (e.g. "5m") or at (e.g. "2m")')
        return None, None
    if "at" in raw:
        return None, problems.check(path + ("at",), parse_duration, raw["at"], "at")
    every = problems.check(path + ("every",), parse_duration, raw["every"], "every")
    if every is not None and every < MIN_EVERY_S:
        problems.add(
            path + ("every",),
            f"every = {raw['every']!r} is too often: give at least {MIN_EVERY_S:g} s, e.g. 5m",
        )
        return None, None
    return every, None


def _unknown_action(action: object, kinds: Mapping[str, tuple[str, ...]], family: str) -> str:
    runs = ", ".join(kinds)
    if action in ACTIONS:
        return f"action = {action!r} is not an event a {family} server runs: use one of {runs}"
    return f"action = {action!r} is not an event: use one of {runs}"


def _one_event(
    problems: Problems,
    path: tuple[str | int, ...],
    raw: object,
    kinds: Mapping[str, tuple[str, ...]],
    family: str,
) -> SoakEvent | None:
    if not isinstance(raw, dict):
        problems.add(path, "write each event as a [[soak.event]] table")
        return None
    action = raw.get("action")
    if not isinstance(action, str) or action not in kinds:
        where = path + ("action",) if "action" in raw else path
        problems.add(where, _unknown_action(action, kinds, family))
        return None
    allowed = ("action", "every", "at", *kinds[action])
    problems.unknown_keys(path, raw, allowed, f"a {action} [[soak.event]]")
    every, at = _timing(problems, path, raw)
    values: dict[str, Any] = {}
    checks: dict[str, Callable[[object], Any]] = {
        "table": _table,
        "sessions": lambda v: _count(v, "sessions", MAX_SESSIONS),
        "connections": lambda v: _count(v, "connections", MAX_CONNECTIONS),
        "sort_buffer": lambda v: parse_size(v, "sort_buffer"),
        "work_mem": lambda v: parse_size(v, "work_mem"),
        "maintenance_work_mem": lambda v: parse_size(v, "maintenance_work_mem"),
        "settle": lambda v: parse_duration(v, "settle"),
        "sql": _check_sql,
    }
    for key in kinds[action]:
        if key in raw:
            field_name = "settle_s" if key == "settle" else key
            values[field_name] = problems.check(path + (key,), checks[key], raw[key])
    if action == SQL and "sql" not in raw:
        problems.add(path, 'a sql [[soak.event]] needs its statement: sql = "..."')
    if problems.failed(*path):
        return None
    return SoakEvent(action, every, at, **values)


def parse_events(
    problems: Problems,
    data: dict[str, Any],
    kinds: Mapping[str, tuple[str, ...]] | None = None,
    family: str = "mariadb",
) -> tuple[SoakEvent, ...]:
    """The `[[soak.event]]` entries of an experiment, each problem recorded at its place.

    `kinds`: the actions the experiment's family runs and the keys each takes (its
    ServerFamily.soak_actions); None: MariaDB's, ACTION_KEYS."""
    kinds = ACTION_KEYS if kinds is None else kinds
    soak = data.get("soak")
    if soak is None:
        return ()
    if not isinstance(soak, dict):
        problems.add(("soak",), "soak must be a table: write [[soak.event]] entries")
        return ()
    problems.unknown_keys(("soak",), soak, ("event",), "[soak]")
    raw = soak.get("event", [])
    if not isinstance(raw, list):
        problems.add(("soak", "event"), "write events as [[soak.event]] tables")
        return ()
    events = [
        _one_event(problems, ("soak", "event", i), item, kinds, family)
        for i, item in enumerate(raw)
    ]
    return tuple(e for e in events if e is not None)


__all__ = ["ACTIONS", "ACTION_KEYS", "EVENT_KEYS", "SoakEvent", "parse_events"]
