"""What a running MariaDB/MySQL server accounts for of its own memory.

Read-only: only SELECT and SHOW statements are sent, over a connection memory/connect.py
opened.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

import pymysql

from mallocbench.memory.client import short_reason


def _rows(cur: pymysql.cursors.Cursor, sql: str) -> list[tuple[Any, ...]]:
    return _ask(cur, sql).rows


@dataclass
class _Answer:
    rows: list[tuple[Any, ...]]
    error: int | None = None  # the server's error code when it refused the statement
    message: str = ""


def _ask(cur: pymysql.cursors.Cursor, sql: str) -> _Answer:
    try:
        cur.execute(sql)
        return _Answer(list(cur.fetchall()))
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else -1
        return _Answer([], code, short_reason(exc))


def _int(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def version_tuple(version: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else (0, 0, 0)


def memory_used_includes_caches(version: str, flavor: str) -> bool:
    """Since 10.6.16 (and 10.11.6, 11.0.4, 11.1.3, 11.2.2) MariaDB's Memory_used counts the
    buffer pool, key cache and Aria page cache as reserved, whether touched or not."""
    if flavor != "mariadb":
        return False
    v = version_tuple(version)
    firsts = {(10, 6): 16, (10, 11): 6, (11, 0): 4, (11, 1): 3, (11, 2): 2}
    if v[:2] in firsts:
        return v[2] >= firsts[v[:2]]
    return v[:2] > (11, 2)


class GapCause(enum.StrEnum):
    """Why the server did not give a source; report/memory.py says it and the fix."""

    NO_MEMORY_USED = "no_memory_used"  # MariaDB without the status variable
    MYSQL_NO_MEMORY_USED = "mysql_no_memory_used"  # MySQL has none
    PROCESSLIST_UNREADABLE = "processlist_unreadable"  # detail: the server's refusal
    OTHER_SESSIONS_HIDDEN = "other_sessions_hidden"  # detail: the account, lacking PROCESS
    PFS_OFF = "pfs_off"
    PFS_DENIED = "pfs_denied"  # detail: the account
    PFS_UNREADABLE = "pfs_unreadable"  # detail: the server's refusal
    PFS_INSTRUMENTS_OFF = "pfs_instruments_off"
    INNODB_NEEDS_PROCESS = "innodb_needs_process"  # detail: the account
    ROCKSDB_NEEDS_PROCESS = "rocksdb_needs_process"  # detail: the account
    ROCKSDB_FAILED = "rocksdb_failed"  # detail: the server's refusal


@dataclass
class Gap:
    """A source of the account the server did not give, and why."""

    key: str  # memory_used, sessions, performance_schema, rocksdb, rocksdb_memtables, innodb
    cause: GapCause
    detail: str = ""  # the account to grant to, or the server's own error text


@dataclass
class Session:
    """One connection as information_schema.PROCESSLIST shows it (no query text)."""

    id: int
    user: str
    memory_used: int
    command: str
    state: str | None


@dataclass
class ServerMemory:
    """What the server knows about its own memory, and its memory settings."""

    version: str
    flavor: str
    variables: dict[str, str]
    status: dict[str, str]
    sessions: list[Session]
    pfs_enabled: bool
    pfs_total: int | None
    pfs_top: list[tuple[str, int]]
    rocksdb: dict[str, int] | None
    innodb_status: dict[str, int]
    gaps: list[Gap] = field(default_factory=list)
    # False when PROCESSLIST showed only this user's sessions (no PROCESS privilege).
    sessions_complete: bool = True
    account: str = ""

    def var(self, name: str) -> int | None:
        return _int(self.variables.get(name))

    def stat(self, name: str) -> int | None:
        return _int(self.status.get(name))

    def gap(self, key: str) -> Gap | None:
        return next((g for g in self.gaps if g.key == key), None)

    @property
    def memory_used_includes_caches(self) -> bool:
        return memory_used_includes_caches(self.version, self.flavor)


def _parse_rocksdb_memory(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip().isdigit():
            out[key.strip()] = int(value.strip())
    return out


def _parse_innodb_memory(text: str) -> dict[str, int]:
    out = {}
    for label, key in (
        ("Total large memory allocated", "total_large_memory"),
        ("Dictionary memory allocated", "dictionary_memory"),
    ):
        match = re.search(rf"{label}\s+(\d+)", text)
        if match:
            out[key] = int(match.group(1))
    return out


# Refusals for want of a privilege: database, table, column, and "needs PROCESS".
_DENIED = (1044, 1142, 1143, 1227)
_PFS_SQL = (
    "SELECT EVENT_NAME, CURRENT_NUMBER_OF_BYTES_USED FROM "
    "performance_schema.memory_summary_global_by_event_name "
    "WHERE CURRENT_NUMBER_OF_BYTES_USED > 0 "
    "ORDER BY CURRENT_NUMBER_OF_BYTES_USED DESC"
)
_PFS_INSTRUMENTS_SQL = (
    "SELECT COUNT(*) FROM performance_schema.setup_instruments WHERE NAME LIKE 'memory/%' "
    "AND NAME NOT LIKE 'memory/performance_schema/%' AND ENABLED = 'YES'"
)


def read_status(cur: pymysql.cursors.Cursor) -> dict[str, str]:
    """SHOW GLOBAL STATUS by name. A seam: tests wrap it to drop one variable of a real
    server's answer (MySQL's lack of Memory_used, say) while the rest stays real."""
    return {str(k): str(v) for k, v in _rows(cur, "SHOW GLOBAL STATUS")}


def _account(cur: pymysql.cursors.Cursor) -> str:
    rows = _rows(cur, "SELECT CURRENT_USER()")
    user, _, host = str(rows[0][0]).rpartition("@") if rows else ("", "", "")
    return f"'{user}'@'{host}'" if user else "the user"


def collect(conn: pymysql.Connection) -> ServerMemory:
    """Everything the server says about its memory; what it refuses becomes a Gap."""
    with conn.cursor() as cur:
        variables = {str(k).lower(): str(v) for k, v in _rows(cur, "SHOW GLOBAL VARIABLES")}
        status = read_status(cur)
        version = variables.get("version", "")
        flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
        account = _account(cur)
        gaps: list[Gap] = []
        if "Memory_used" not in status:
            gaps.append(_memory_used_gap(flavor))
        innodb = _ask(cur, "SHOW ENGINE INNODB STATUS")
        has_process = innodb.error != 1227
        sessions: list[Session] = []
        if flavor == "mariadb":
            sessions = _sessions(cur, has_process, account, gaps)
        pfs_enabled = variables.get("performance_schema", "OFF").upper() in ("ON", "1")
        pfs_total: int | None = None
        pfs_top: list[tuple[str, int]] = []
        if pfs_enabled:
            pfs_total, pfs_top = _performance_schema(cur, account, gaps, "Memory_used" in status)
        elif "Memory_used" not in status:
            gaps.append(Gap("performance_schema", GapCause.PFS_OFF))
        rocksdb = None
        if "rocksdb_block_cache_size" in variables:
            rocksdb = _rocksdb(cur, account, gaps)
        innodb_status = _parse_innodb_memory(str(innodb.rows[0][-1])) if innodb.rows else {}
        if innodb.error in _DENIED:
            gaps.append(Gap("innodb", GapCause.INNODB_NEEDS_PROCESS, account))
    return ServerMemory(
        version=version,
        flavor=flavor,
        variables=variables,
        status=status,
        sessions=sessions,
        pfs_enabled=pfs_enabled,
        pfs_total=pfs_total,
        pfs_top=pfs_top,
        rocksdb=rocksdb,
        innodb_status=innodb_status,
        gaps=gaps,
        sessions_complete=has_process and not any(g.key == "sessions" for g in gaps),
        account=account,
    )


def _memory_used_gap(flavor: str) -> Gap:
    mysql = flavor == "mysql"
    return Gap("memory_used", GapCause.MYSQL_NO_MEMORY_USED if mysql else GapCause.NO_MEMORY_USED)


def _sessions(
    cur: pymysql.cursors.Cursor, has_process: bool, account: str, gaps: list[Gap]
) -> list[Session]:
    answer = _ask(
        cur,
        "SELECT ID, USER, MEMORY_USED, COMMAND, STATE FROM "
        "information_schema.PROCESSLIST ORDER BY MEMORY_USED DESC",
    )
    if answer.error is not None:
        gaps.append(Gap("sessions", GapCause.PROCESSLIST_UNREADABLE, answer.message))
    elif not has_process:
        gaps.append(Gap("sessions", GapCause.OTHER_SESSIONS_HIDDEN, account))
    return [
        Session(
            id=int(row[0]), user=row[1], memory_used=int(row[2] or 0), command=row[3], state=row[4]
        )
        for row in answer.rows
    ]


def _performance_schema(
    cur: pymysql.cursors.Cursor, account: str, gaps: list[Gap], has_memory_used: bool
) -> tuple[int | None, list[tuple[str, int]]]:
    answer = _ask(cur, _PFS_SQL)
    if answer.error is not None:
        if answer.error in _DENIED:
            gaps.append(Gap("performance_schema", GapCause.PFS_DENIED, account))
        else:
            gaps.append(Gap("performance_schema", GapCause.PFS_UNREADABLE, answer.message))
        return None, []
    # MariaDB ships its memory instruments off, and needs none of them (Memory_used
    # counts the heap); without Memory_used, as on MySQL, they are the only account.
    instruments = [] if has_memory_used else _rows(cur, _PFS_INSTRUMENTS_SQL)
    if instruments and _int(instruments[0][0]) == 0:
        gaps.append(Gap("performance_schema_instruments", GapCause.PFS_INSTRUMENTS_OFF))
    total = sum(int(r[1]) for r in answer.rows)
    return total, [(str(r[0]), int(r[1])) for r in answer.rows[:10]]


def _rocksdb(cur: pymysql.cursors.Cursor, account: str, gaps: list[Gap]) -> dict[str, int]:
    out: dict[str, int] = {}
    status = _ask(cur, "SHOW ENGINE ROCKSDB STATUS")
    for row in status.rows:
        if row[0] == "MEMORY_STATS":
            out.update(_parse_rocksdb_memory(str(row[2])))
    stats = _ask(cur, "SELECT STAT_TYPE, VALUE FROM information_schema.ROCKSDB_DBSTATS")
    for name, value in stats.rows:
        if name == "DB_BLOCK_CACHE_USAGE":
            out["DB_BLOCK_CACHE_USAGE"] = int(value)
    if status.error is None:
        return out
    # With the block cache's size from ROCKSDB_DBSTATS, only the memtables are unknown.
    key = "rocksdb_memtables" if "DB_BLOCK_CACHE_USAGE" in out else "rocksdb"
    if status.error in _DENIED:
        gaps.append(Gap(key, GapCause.ROCKSDB_NEEDS_PROCESS, account))
    else:
        gaps.append(Gap(key, GapCause.ROCKSDB_FAILED, status.message))
    return out
